//! The node's namespaces and the host-side plumbing: the init that holds
//! them, the slot (address range) a node takes, commands on the host.

use std::{
    fs::File,
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use crate::{Error, config};

/// Starts `unshare` with a new mount, network and PID namespace; its child,
/// the namespaces' init, masks the host's state folders and waits. Returns
/// `unshare` and the init's process id once the masks are in place.
pub fn start_namespaces(dir: &Path, files: &config::Files) -> Result<(Child, u32), Error> {
    let ready = dir.join("namespaces.ready");
    let script = format!(
        "set -e
mount --make-rprivate /
for d in /run /var/lib /var/log; do mount -t tmpfs -o mode=0755 tmpfs \"$d\"; done
mount --bind {hosts} /etc/hosts
ip link set lo up
touch {ready}
exec sleep infinity",
        hosts = files.hosts.display(),
        ready = ready.display(),
    );
    let log = dir.join("namespaces.log");
    let out = File::create(&log).map_err(|e| Error::Io(log.display().to_string(), e))?;
    let holder = Command::new("unshare")
        .args([
            "--mount",
            "--net",
            "--pid",
            "--fork",
            "--mount-proc",
            "--kill-child",
        ])
        .args(["sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(
            out.try_clone()
                .map_err(|e| Error::Io(log.display().to_string(), e))?,
        )
        .stderr(out)
        .spawn()
        .map_err(|e| Error::Io("unshare".into(), e))?;
    let deadline = Instant::now() + Duration::from_secs(20);
    let children = format!("/proc/{0}/task/{0}/children", holder.id());
    while Instant::now() < deadline {
        let init = std::fs::read_to_string(&children)
            .ok()
            .and_then(|c| c.split_whitespace().next()?.parse::<u32>().ok());
        if let Some(init) = init
            && ready.exists()
        {
            return Ok((holder, init));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(Error::NotReady {
        what: "the node's namespaces".into(),
        secs: 20,
        log: std::fs::read_to_string(&log).unwrap_or_default(),
    })
}

/// The first of 64 slots (198.18.N.0/24) that no test process holds, and
/// its lock: a file lock, so nodes of other test processes take other
/// slots, and a killed process lets go of its slot.
pub fn free_slot() -> Result<(u8, File), Error> {
    (0..64u8)
        .find_map(|slot| {
            let path = std::env::temp_dir().join(format!("hcp-ingress-realnode-{slot}.lock"));
            let file = File::create(path).ok()?;
            file.try_lock().ok().map(|()| (slot, file))
        })
        .ok_or_else(|| Error::NotReady {
            what: "a free slot of 198.18.0.0/18 for the node".into(),
            secs: 0,
            log: String::new(),
        })
}

pub fn host_command(args: &[&str]) -> Result<(), Error> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| Error::Io(args.join(" "), e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(Error::Command {
            command: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

/// Whether process `pid` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                != Some("Z")
        })
        .unwrap_or(false)
}
