//! The kubelet's cgroup root: one path in every cgroup hierarchy, under
//! the test process's own memory cgroup, so the node's pods count against
//! the test's memory, removed with the node.

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use crate::Error;

const MOUNT: &str = "/sys/fs/cgroup";

/// The cgroup root and the folders made for it.
#[derive(Default)]
pub struct Tree {
    root: String,
    hierarchies: Vec<PathBuf>,
    /// Folders that did not exist before, in the order they were made.
    made: Vec<PathBuf>,
}

impl Tree {
    /// Makes `<own memory cgroup>/<name>` in every hierarchy (the
    /// kubelet refuses a cgroup root that does not exist); a cpuset folder
    /// gets its parent's CPUs and memory nodes, without which no task can
    /// join it.
    pub fn create(name: &str) -> Result<Tree, Error> {
        // A host with cgroup v2 alone has its root here; the harness knows
        // the v1 (and hybrid) layout of the machines it runs on only.
        if Path::new(MOUNT).join("cgroup.controllers").exists() {
            return Err(Error::Command {
                command: format!("the cgroup layout under {MOUNT}"),
                stderr: "cgroup v2 only: realnode lays out the kubelet's cgroups for cgroup v1 and hybrid hosts".into(),
            });
        }
        let own = std::fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| Error::Io("/proc/self/cgroup".into(), e))?;
        let base = own
            .lines()
            .find_map(|l| l.split_once(":memory:").map(|(_, path)| path.to_string()))
            .unwrap_or_else(|| "/".into());
        let root = format!("{}/{name}", base.trim_end_matches('/'));
        let mut tree = Tree {
            root,
            hierarchies: hierarchies()?,
            made: Vec::new(),
        };
        // Left over by a killed run that held the same name.
        tree.remove_subtrees();
        for hierarchy in tree.hierarchies.clone() {
            let mut path = hierarchy.clone();
            for part in tree.root.split('/').filter(|p| !p.is_empty()) {
                let parent = path.clone();
                path.push(part);
                if path.exists() {
                    continue;
                }
                std::fs::create_dir(&path).map_err(|e| Error::Io(path.display().to_string(), e))?;
                tree.made.push(path.clone());
                if hierarchy.ends_with("cpuset") {
                    for file in ["cpuset.cpus", "cpuset.mems"] {
                        let value = std::fs::read_to_string(parent.join(file))
                            .map_err(|e| Error::Io(parent.join(file).display().to_string(), e))?;
                        std::fs::write(path.join(file), value.trim())
                            .map_err(|e| Error::Io(path.join(file).display().to_string(), e))?;
                    }
                }
            }
        }
        Ok(tree)
    }

    /// The kubelet's `cgroupRoot`.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// Removes what the kubelet made under the root, then the folders made
    /// for it; the node's processes must be gone.
    pub fn remove(&mut self) {
        self.remove_subtrees();
        while let Some(path) = self.made.pop() {
            let _ = std::fs::remove_dir(&path);
        }
    }

    /// The root's folders still there (after [`Tree::remove`]: none).
    pub fn remaining(&self) -> Vec<String> {
        if self.root.is_empty() {
            return Vec::new();
        }
        self.hierarchies
            .iter()
            .map(|h| h.join(self.root.trim_start_matches('/')))
            .filter(|p| p.exists())
            .map(|p| format!("the cgroup {}", p.display()))
            .collect()
    }

    fn remove_subtrees(&self) {
        if self.root.is_empty() {
            return;
        }
        for hierarchy in &self.hierarchies {
            let top = hierarchy.join(self.root.trim_start_matches('/'));
            if top.exists() {
                remove_tree(&top);
            }
        }
    }
}

/// Every cgroup hierarchy mounted under /sys/fs/cgroup: the v1 ones the
/// kubelet's cgroupfs driver uses, and on a hybrid host v2's `unified`,
/// where runc makes the containers' cgroups too.
fn hierarchies() -> Result<Vec<PathBuf>, Error> {
    let entries = std::fs::read_dir(MOUNT).map_err(|e| Error::Io(MOUNT.into(), e))?;
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("cgroup.procs").exists())
        .filter(|p| !p.is_symlink())
        .collect();
    found.sort();
    Ok(found)
}

/// Removes a cgroup folder and everything under it, deepest first; a
/// folder whose tasks are still exiting is retried for a few seconds.
fn remove_tree(path: &Path) {
    if let Ok(entries) = std::fs::read_dir(path) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&entry.path());
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::fs::remove_dir(path).is_err() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
}
