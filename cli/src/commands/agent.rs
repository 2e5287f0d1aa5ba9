//! `shoal agent CLUSTER.toml`: a client node's credential broker without a
//! mount (`shoal_net::broker`), so that programs under libshoal run by users
//! who cannot read the cluster secret reach the servers as themselves. A
//! mount serves the same broker ([`start`]), so a node with one needs no
//! agent.

use std::path::{Path, PathBuf};
use std::time::Duration;

use shoal_proto::cluster::ClusterConfig;
use shoal_proto::credential::CredentialKey;
use shoal_proto::error::{Errno, Result, ShoalError};

use crate::target::runtime;

/// A broker listening; its socket goes when this is dropped.
pub struct Broker {
    socket: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// Starts `config`'s broker on `rt`: Ok(None) for a cluster without a
/// secret (nothing to prove), or when another broker of the cluster already
/// listens on this node.
pub fn start(rt: &tokio::runtime::Handle, config: &ClusterConfig) -> Result<Option<Broker>> {
    let (Some(secret), Some(socket)) = (config.secret()?, config.broker_socket()) else {
        return Ok(None);
    };
    let listener = {
        let _in_rt = rt.enter();
        match shoal_net::broker::bind(&socket) {
            Ok(l) => l,
            Err(e) if e.errno == Errno::EBUSY => {
                tracing::info!("{}: this node has a broker already", e.message);
                return Ok(None);
            }
            Err(e) => return Err(e),
        }
    };
    let lifetime = Duration::from_secs(config.settings.credential_ttl_s as u64);
    let task = rt.spawn(shoal_net::broker::serve(
        listener,
        CredentialKey::derive(&secret),
        lifetime,
    ));
    Ok(Some(Broker { socket, task }))
}

/// Serves until SIGINT or SIGTERM.
pub fn run(cluster: &Path) -> Result<()> {
    let config = ClusterConfig::load(cluster)?;
    if config.secret_file.is_none() {
        return Err(ShoalError::invalid(format!(
            "cluster file {}: no secret_file, so nothing for a broker to prove",
            cluster.display()
        )));
    }
    let rt = runtime()?;
    let Some(broker) = start(rt.handle(), &config)? else {
        return Err(ShoalError::new(
            Errno::EBUSY,
            format!(
                "a broker of this cluster already listens at {}",
                config.broker_socket().unwrap_or_default().display()
            ),
        ));
    };
    println!("credential broker listening at {}", broker.socket.display());
    rt.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        Ok::<_, std::io::Error>(())
    })?;
    drop(broker);
    Ok(())
}
