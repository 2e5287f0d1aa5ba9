//! `shoal down --data DIR`: unmount, then stop the servers that `shoal up`
//! started from DIR, and nothing else: on other hosts, the launchers it
//! started them through (their process groups), and each client host's
//! mount, unmounted there through the launcher.

use std::path::Path;
use std::time::Duration;

use shoal_client::mounts;
use shoal_proto::error::{Result, ShoalError};

use crate::launcher::Launcher;
use crate::local_cluster::{self, LocalCluster};

/// Time a process gets to stop after SIGTERM before SIGKILL.
const GRACE: Duration = Duration::from_secs(10);

pub fn run(data: &Path) -> Result<()> {
    if !data.join("cluster.toml").exists() {
        return Err(ShoalError::not_found(format!(
            "{} (no cluster.toml: not a directory shoal up created)",
            data.display()
        )));
    }
    let cluster = LocalCluster::new(data)?;
    stop(&cluster);
    println!("Shoal is down ({}).", cluster.dir.display());
    Ok(())
}

/// Stops everything recorded in the state file, mounts first.
pub fn stop(cluster: &LocalCluster) {
    let state = cluster.load_state();
    let marker = cluster.cluster_file().to_string_lossy().into_owned();
    if let Some(words) = &state.launcher {
        let launcher = Launcher::from_words(words.clone());
        for m in &state.host_mounts {
            // Unmounted on its host, the mount ends on its own, and its
            // launcher with it; SIGTERM alone would leave the mount dead.
            let dir = m.dir.to_string_lossy();
            match launcher.run(&m.host, &["fusermount3", "-u", &dir]) {
                Ok(()) => {
                    local_cluster::wait_until(GRACE, || !local_cluster::is_ours(m.pid, &marker));
                }
                Err(e) => eprintln!("shoal: {e}"),
            }
            local_cluster::stop_process(m.pid, &marker, GRACE);
        }
    }
    if let Some(m) = &state.mount {
        if mounts::is_mounted(&m.dir) {
            if let Err(e) = local_cluster::unmount(&m.dir) {
                eprintln!("shoal: {e}");
            }
        }
        local_cluster::stop_process(m.pid, &marker, GRACE);
    }
    for (_, pid) in &state.servers {
        local_cluster::stop_process(*pid, &marker, GRACE);
    }
    cluster.clear_state();
}
