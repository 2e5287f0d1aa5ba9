//! How a command finds its cluster and turns a user's path into a Shoal path:
//! with `--config`, paths are Shoal paths (`/dir/file`, or `shoal:/dir/file`);
//! without it, a path under a live Shoal mount names both the cluster and the
//! file, and the command talks to the servers directly (not through FUSE).

use std::path::{Path, PathBuf};

use shoal_client::{mounts, Client};
use shoal_proto::cluster::ClusterConfig;
use shoal_proto::error::{Result, ShoalError};

/// Prefix that marks a Shoal path where a local path could also stand (cp).
pub const SHOAL_PREFIX: &str = "shoal:";

/// Where Shoal paths come from: a cluster file, or a path under a live mount.
#[derive(clap::Args, Clone, Debug)]
pub struct ConfigArg {
    /// Cluster file; paths are then Shoal paths such as /dir/file. Without it,
    /// paths must lie under a live Shoal mount.
    #[arg(long, short = 'c', global = true)]
    pub config: Option<PathBuf>,
}

pub fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

/// The cluster file and Shoal path that `path` names.
pub fn locate(cfg: &ConfigArg, path: &str) -> Result<(PathBuf, String)> {
    if let Some(config) = &cfg.config {
        let shoal = path.strip_prefix(SHOAL_PREFIX).unwrap_or(path);
        if !shoal.starts_with('/') {
            return Err(ShoalError::invalid(format!(
                "{path}: with --config, give a Shoal path starting with '/'"
            )));
        }
        return Ok((config.clone(), shoal.to_string()));
    }
    if path.starts_with(SHOAL_PREFIX) {
        return Err(ShoalError::invalid(format!(
            "{path}: a shoal: path needs --config CLUSTER.toml"
        )));
    }
    let (mount, shoal) = mounts::containing(Path::new(path)).ok_or_else(|| {
        ShoalError::invalid(format!(
            "{path} is not under a Shoal mount; give --config CLUSTER.toml and a Shoal path"
        ))
    })?;
    Ok((mount.cluster_file, shoal))
}

/// How long a command waits for a server it cannot reach before it says
/// so: a person at a prompt is better served by "server 2 at ... is
/// unreachable" in seconds than by the cluster's minute-long wait for a
/// restart, which suits programs (the mount and libshoal keep it).
const COMMAND_RESTART_WAIT_MS: u32 = 5_000;

/// A client for `config`, checked to reach every server.
pub async fn connect(config: &Path) -> Result<Client> {
    let mut cluster = ClusterConfig::load(config)?;
    let wait = &mut cluster.settings.restart_wait_ms;
    *wait = (*wait).min(COMMAND_RESTART_WAIT_MS);
    let client = Client::new(cluster);
    client.ping_all().await?;
    Ok(client)
}

/// Locates every path, requires them to be on one cluster, and connects.
pub async fn open(cfg: &ConfigArg, paths: &[String]) -> Result<(Client, Vec<String>)> {
    let mut config: Option<PathBuf> = None;
    let mut shoal_paths = Vec::new();
    for p in paths {
        let (c, s) = locate(cfg, p)?;
        if config.as_ref().is_some_and(|prev| prev != &c) {
            return Err(ShoalError::invalid("paths are on different Shoal clusters"));
        }
        config = Some(c);
        shoal_paths.push(s);
    }
    let config = match config {
        Some(c) => c,
        None => cfg.config.clone().ok_or_else(|| {
            ShoalError::invalid("give --config CLUSTER.toml or a path under a mount")
        })?,
    };
    Ok((connect(&config).await?, shoal_paths))
}
