//! What `shoal up` starts and how it waits for it: servers that answer, a
//! mount that is live, or the first of them to exit, with its output.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use shoal_client::mounts;
use shoal_proto::cluster::ClusterConfig;
use shoal_proto::error::{Result, ShoalError};

use crate::local_cluster::{self, LocalCluster, MountState};
use crate::target::runtime;

/// How long servers and the mount get to come up.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A process `up` started and waits on: what it is, for its errors.
pub struct Started {
    pub what: String,
    pub child: Child,
    pub log: PathBuf,
}

/// What `up` brought up, for its report.
pub struct Up {
    pub config: ClusterConfig,
    /// Where it is mounted, if it is.
    pub mounted: Option<String>,
    pub mount_metrics: Option<SocketAddr>,
}

/// Waits until every server answers, failing as soon as one has exited
/// (a launcher too: its exit status and the end of its output).
pub fn wait_for_servers(file: &Path, servers: &mut [Started]) -> Result<()> {
    let rt = runtime()?;
    let deadline = std::time::Instant::now() + START_TIMEOUT;
    loop {
        for s in servers.iter_mut() {
            if let Ok(Some(status)) = s.child.try_wait() {
                return Err(ShoalError::io(format!(
                    "{} exited ({status}); its output ({}) ends with:\n{}",
                    s.what,
                    s.log.display(),
                    local_cluster::tail(&s.log, 10)
                )));
            }
        }
        match rt.block_on(crate::target::connect(file)) {
            Ok(_) => return Ok(()),
            Err(e) if std::time::Instant::now() >= deadline => {
                return Err(e.context("servers did not come up in time"))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Mounts on `dir` here, in a process of its own (recorded in `state`),
/// and waits until the mount is live.
pub fn mount(
    cluster: &LocalCluster,
    marker: &str,
    dir: &Path,
    metrics: Option<SocketAddr>,
    state: &mut local_cluster::State,
) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let dir = std::fs::canonicalize(dir)?;
    if mounts::is_mounted(&dir) {
        return Err(ShoalError::invalid(format!(
            "{} is already a Shoal mount",
            dir.display()
        )));
    }
    let mount_dir = dir.to_string_lossy().into_owned();
    let log = cluster.log_file("mount");
    let mut argv = vec!["mount", "--foreground", marker, &mount_dir];
    let metrics = metrics.map(|a| a.to_string());
    if let Some(addr) = &metrics {
        argv.extend(["--metrics", addr]);
    }
    let pid = local_cluster::spawn_shoal(&argv, &log)?.id();
    state.mount = Some(MountState {
        dir: dir.clone(),
        pid,
    });
    cluster.save_state(state)?;
    let live = local_cluster::wait_until(START_TIMEOUT, || {
        mounts::is_mounted(&dir) || !local_cluster::is_ours(pid, marker)
    });
    if !live || !mounts::is_mounted(&dir) {
        return Err(ShoalError::io(format!(
            "mounting on {} failed; {} ends with:\n{}",
            dir.display(),
            log.display(),
            local_cluster::tail(&log, 10)
        )));
    }
    Ok(())
}
