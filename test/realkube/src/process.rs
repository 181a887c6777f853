//! A child process with its output in a log file, killed on drop.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
};

use crate::Error;

pub struct Supervised {
    pub name: String,
    child: Child,
    log: PathBuf,
}

impl Supervised {
    pub fn spawn(name: &str, bin: &Path, args: &[String], dir: &Path) -> Result<Self, Error> {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).map_err(|e| Error::Io(log.clone(), e))?;
        let err = file.try_clone().map_err(|e| Error::Io(log.clone(), e))?;
        let child = Command::new(bin)
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .spawn()
            .map_err(|e| Error::Io(bin.to_path_buf(), e))?;
        Ok(Supervised {
            name: name.to_string(),
            child,
            log,
        })
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process has ended.
    pub fn exited(&self) -> bool {
        // `try_wait` needs `&mut`; the kernel tells a running or zombie pid apart.
        !Path::new(&format!("/proc/{}", self.child.id())).exists()
            || std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))
                .map(|s| s.split_whitespace().nth(2) == Some("Z"))
                .unwrap_or(true)
    }

    /// The last `lines` lines of its output.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.stop();
    }
}
