//! `shoal down --data DIR`: unmount, then stop the servers that `shoal up`
//! started from DIR, and nothing else.

use std::path::Path;
use std::time::Duration;

use shoal_client::mounts;
use shoal_proto::error::{Result, ShoalError};

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

/// Stops everything recorded in the state file, mount first.
pub fn stop(cluster: &LocalCluster) {
    let state = cluster.load_state();
    let marker = cluster.cluster_file().to_string_lossy().into_owned();
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
