//! `shoal up`: a local cluster of N servers on free loopback ports, optionally
//! mounted, in the foreground until Ctrl-C or detached with `--detach`; or,
//! with `--hosts`, one server on each listed host (`up_hosts`). Running it
//! again on the same data directory brings back the same file system.

use std::path::PathBuf;

use shoal_proto::cluster::Settings;
use shoal_proto::error::{Result, ShoalError};

use super::starting::{self, Started, Up};
use crate::local_cluster::{self, LocalCluster};
use crate::target::runtime;

#[derive(clap::Args)]
pub struct UpArgs {
    /// Number of servers (default 4 for a new cluster).
    #[arg(long)]
    pub servers: Option<u32>,
    /// Directory for the cluster file, server data, logs and state.
    #[arg(long)]
    pub data: PathBuf,
    /// Also mount the file system here.
    #[arg(long)]
    pub mount: Option<PathBuf>,
    /// Return once the cluster answers (and the mount is live).
    #[arg(long)]
    pub detach: bool,
    /// Change a cluster setting, e.g. --set strip_size=65536 (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Turn every switch off (the five small-file techniques and colocate)
    /// and make every change durable before its reply (`sync = "full"`): the
    /// baseline protocol of [Carns 2009]; `--set` still applies after it.
    #[arg(long)]
    pub baseline: bool,
    /// Let every user of this machine use the mount (the cluster file's
    /// `allow_other`, so later `shoal mount`s of the cluster do too), as a
    /// multi-user node needs; permissions are checked as on a local disk.
    #[arg(long)]
    pub allow_other: bool,
    /// Every server serves /metrics to Prometheus, each on a free loopback
    /// port written into the cluster file as its `metrics_addr` (kept by
    /// later `up`s), and so does the mount, on one of its own.
    #[arg(long)]
    pub metrics: bool,
    #[command(flatten)]
    pub on_hosts: super::up_hosts::HostsArgs,
}

pub fn run(args: UpArgs) -> Result<()> {
    let cluster = LocalCluster::new(&args.data)?;
    let state = cluster.load_state();
    let file = cluster.cluster_file();
    let marker = file.to_string_lossy().into_owned();
    if state
        .servers
        .iter()
        .any(|(_, pid)| local_cluster::is_ours(*pid, &marker))
    {
        return Err(ShoalError::invalid(format!(
            "a cluster is already running from {}; stop it with: shoal down --data {}",
            cluster.dir.display(),
            cluster.dir.display()
        )));
    }
    let mut sets: Vec<String> = Vec::new();
    if args.baseline {
        sets.extend(Settings::switches().map(|t| format!("{t}=false")));
    }
    if args.allow_other {
        sets.push("allow_other=true".to_string());
    }
    sets.extend(args.set.iter().cloned());
    let up = if args.on_hosts.hosts.is_some() {
        let mount = args.mount.as_deref();
        super::up_hosts::start(&args.on_hosts, &cluster, &sets, args.metrics, mount)
    } else {
        start_local(&args, &cluster, &sets)
    };
    let Up {
        config,
        mounted,
        mount_metrics,
    } = up.inspect_err(|_| super::down::stop(&cluster))?;
    println!(
        "Shoal is up: {} servers, cluster file {}{}",
        config.num_servers(),
        file.display(),
        mounted
            .map(|m| format!(", mounted on {m}"))
            .unwrap_or_default()
    );
    let scraped: Vec<String> = config
        .servers
        .iter()
        .filter_map(|s| Some(format!("server {} at {}", s.id, s.metrics_addr?)))
        .chain(mount_metrics.map(|a| format!("the mount at {a}")))
        .collect();
    if !scraped.is_empty() {
        println!("Metrics (GET /metrics): {}", scraped.join(", "));
    }
    for sentence in shoal_proto::durability::durability(&config.settings, None) {
        print!("{}", super::config::wrap(&sentence, "  "));
    }
    if args.detach {
        println!("Stop it with: shoal down --data {}", cluster.dir.display());
        return Ok(());
    }
    println!("Press Ctrl-C to stop.");
    runtime()?.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        Ok::<(), ShoalError>(())
    })?;
    super::down::stop(&cluster);
    println!("Shoal is down.");
    Ok(())
}

/// The servers on free loopback ports, and the mount here if asked.
fn start_local(args: &UpArgs, cluster: &LocalCluster, sets: &[String]) -> Result<Up> {
    let config = cluster.cluster_config(args.servers, sets, args.metrics)?;
    let marker = cluster.cluster_file().to_string_lossy().into_owned();
    let mut state = local_cluster::State::default();
    let mut servers = Vec::new();
    for s in &config.servers {
        let id = s.id.to_string();
        let log = cluster.log_file(&format!("server-{id}"));
        let child =
            local_cluster::spawn_shoal(&["server", "--config", &marker, "--id", &id], &log)?;
        state.servers.push((s.id, child.id()));
        cluster.save_state(&state)?;
        servers.push(Started {
            what: format!("server {id}"),
            child,
            log,
        });
    }
    starting::wait_for_servers(&cluster.cluster_file(), &mut servers)?;
    let mount_metrics = match (&args.mount, args.metrics) {
        (Some(_), true) => Some(shoal_net::ports::free_loopback_addr()?),
        _ => None,
    };
    if let Some(dir) = &args.mount {
        starting::mount(cluster, &marker, dir, mount_metrics, &mut state)?;
    }
    Ok(Up {
        config,
        mounted: args.mount.as_ref().map(|m| m.display().to_string()),
        mount_metrics,
    })
}
