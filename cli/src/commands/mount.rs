//! `shoal mount CLUSTER.toml DIR`: mounts through FUSE. By default it returns
//! once the mount is live, leaving a background process serving it; with
//! `--foreground` it serves until unmounted.

use std::path::PathBuf;
use std::time::Duration;

use shoal_client::{mounts, Client};
use shoal_proto::cluster::ClusterConfig;
use shoal_proto::error::{Result, ShoalError};

use crate::local_cluster;
use crate::target::runtime;

#[derive(clap::Args)]
pub struct MountArgs {
    /// The cluster file.
    pub cluster: PathBuf,
    /// Where to mount.
    pub mountpoint: PathBuf,
    /// Serve in this process until unmounted.
    #[arg(long)]
    pub foreground: bool,
    /// Let other users than the one mounting use the mount.
    #[arg(long)]
    pub allow_other: bool,
    /// Log file of the background process (default: DIR's name under /tmp).
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// A client-side setting for this mount only, KEY=VALUE (repeatable):
    /// write_threshold, gather_buffer, gather_delay_ms, gather_on_server,
    /// write_behind, stream_reads, fuse_io_uring, cache_ttl_ms, cache_entries,
    /// known_names, readdir_batch, max_inflight or restart_wait_ms.
    #[arg(short = 'o', value_name = "KEY=VALUE")]
    pub option: Vec<String>,
    /// Answer Prometheus scrapes (GET /metrics: the counters of `shoal
    /// stats --mount`) on this address, e.g. 127.0.0.1:9480.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,
}

/// Settings a mount may choose for itself: the ones only its client uses.
const MOUNT_SETTINGS: [&str; 13] = [
    "write_threshold",
    "gather_buffer",
    "gather_delay_ms",
    "gather_on_server",
    "write_behind",
    "stream_reads",
    "fuse_io_uring",
    "cache_ttl_ms",
    "cache_entries",
    "known_names",
    "readdir_batch",
    "max_inflight",
    "restart_wait_ms",
];

/// The cluster's settings with this mount's `-o` options applied.
fn with_mount_options(mut config: ClusterConfig, options: &[String]) -> Result<ClusterConfig> {
    for o in options.iter().flat_map(|o| o.split(',')) {
        let key = o.split_once('=').map_or(o, |(k, _)| k);
        if !MOUNT_SETTINGS.contains(&key) {
            return Err(ShoalError::invalid(format!(
                "mount option {o:?}: a mount may set {}",
                MOUNT_SETTINGS.join(", ")
            )));
        }
        config.settings.set(o)?;
    }
    Ok(config)
}

pub fn run(args: MountArgs) -> Result<()> {
    let cluster_file = std::fs::canonicalize(&args.cluster).map_err(|e| {
        ShoalError::from(e).context(format!("cluster file {}", args.cluster.display()))
    })?;
    let config = with_mount_options(ClusterConfig::load(&cluster_file)?, &args.option)?;
    let dir = std::fs::canonicalize(&args.mountpoint).map_err(|e| {
        ShoalError::from(e).context(format!("mount point {}", args.mountpoint.display()))
    })?;
    if !dir.is_dir() {
        return Err(ShoalError::invalid(format!(
            "mount point {} is not a directory",
            dir.display()
        )));
    }
    if mounts::is_mounted(&dir) {
        return Err(ShoalError::invalid(format!(
            "{} is already a Shoal mount",
            dir.display()
        )));
    }
    if !args.foreground {
        return mount_in_background(&args, &cluster_file, &dir);
    }
    let rt = runtime()?;
    let client = Client::new(config.clone());
    rt.block_on(client.ping_all())?;
    let opts = shoal_fuse::MountOptions {
        fsname: cluster_file.to_string_lossy().into_owned(),
        allow_other: args.allow_other || config.settings.allow_other,
        ttl: Duration::from_millis(config.settings.cache_ttl_ms),
        metrics_addr: args.metrics,
    };
    // This node's credential broker, for users' programs under libshoal
    // (a mount that cannot start one still serves its own users).
    let broker = match crate::commands::agent::start(rt.handle(), &config) {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!("no credential broker: {e}");
            None
        }
    };
    let served = shoal_fuse::mount(client, rt.handle().clone(), &dir, &opts);
    drop(broker);
    // Idle connection tasks would otherwise hold the exit for seconds.
    rt.shutdown_timeout(Duration::from_millis(100));
    served
}

fn mount_in_background(
    args: &MountArgs,
    cluster_file: &std::path::Path,
    dir: &std::path::Path,
) -> Result<()> {
    let log = args.log.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!(
            "shoal-mount-{}.log",
            dir.to_string_lossy().trim_matches('/').replace('/', "_")
        ))
    });
    let cluster = cluster_file.to_string_lossy().into_owned();
    let mountpoint = dir.to_string_lossy().into_owned();
    let mut argv = vec!["mount", "--foreground", &cluster, &mountpoint];
    if args.allow_other {
        argv.push("--allow-other");
    }
    for o in &args.option {
        argv.extend(["-o", o]);
    }
    let metrics = args.metrics.map(|a| a.to_string());
    if let Some(addr) = &metrics {
        argv.extend(["--metrics", addr]);
    }
    let pid = local_cluster::spawn_shoal(&argv, &log)?.id();
    let done = local_cluster::wait_until(Duration::from_secs(30), || {
        mounts::is_mounted(dir) || !local_cluster::is_ours(pid, &cluster)
    });
    if !done || !mounts::is_mounted(dir) {
        return Err(ShoalError::io(format!(
            "mount on {} failed; {} ends with:\n{}",
            dir.display(),
            log.display(),
            local_cluster::tail(&log, 10)
        )));
    }
    println!(
        "mounted on {} (process {pid}, log {}); unmount with: fusermount3 -u {}",
        dir.display(),
        log.display(),
        dir.display()
    );
    Ok(())
}
