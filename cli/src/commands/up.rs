//! `shoal up`: a local cluster of N servers on free loopback ports, optionally
//! mounted, in the foreground until Ctrl-C or detached with `--detach`; or,
//! with `--hosts`, one server on each listed host (`up_hosts`). Running it
//! again on the same data directory brings back the same file system.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use shoal_client::mounts;
use shoal_proto::cluster::{ClusterConfig, Settings};
use shoal_proto::error::{Result, ShoalError};

use crate::local_cluster::{self, LocalCluster, MountState};
use crate::target::runtime;

/// How long servers and the mount get to come up.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

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
    /// Start one server on each host FILE lists, through --launcher: a
    /// cluster for one job on its own hosts. A line is `HOST [ADDR]`
    /// (ADDR: an IP address, with or without :PORT; absent, HOST's address
    /// as this machine resolves it); `#` comments. --data must be the same
    /// path on every host (a shared file system): servers and mounts read
    /// the cluster file there. With --metrics each server serves /metrics
    /// on its address, at its port + 2400 (9470 for 7070).
    #[arg(
        long,
        value_name = "FILE",
        requires = "launcher",
        conflicts_with = "servers"
    )]
    pub hosts: Option<PathBuf>,
    /// With --hosts: the command that runs a command on a host, given the
    /// host's name then the command's words, e.g. `ssh` or
    /// `srun --nodes=1 --ntasks=1 --overlap -w`. It must run as long as the
    /// command does and end it when signalled (`shoal down`).
    #[arg(long, value_name = "CMD", requires = "hosts")]
    pub launcher: Option<String>,
    /// With --hosts: the servers' port where the hosts file gives none
    /// [default: 7070].
    #[arg(long, requires = "hosts")]
    pub port: Option<u16>,
    /// With --hosts: where each server keeps its data on its host, as
    /// server-N under this directory (a local disk: /tmp, $TMPDIR)
    /// [default: under --data].
    #[arg(long, value_name = "DIR", requires = "hosts")]
    pub server_data: Option<PathBuf>,
    /// With --hosts: mount on these client hosts (comma-separated), through
    /// the launcher, on --mount's path, rather than here.
    #[arg(long, value_name = "HOSTS", value_delimiter = ',', requires_all = ["hosts", "mount"])]
    pub mount_on: Vec<String>,
}

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
    let up = match (&args.hosts, &args.launcher) {
        (Some(hosts), Some(launcher)) => {
            super::up_hosts::start(&args, &cluster, hosts, launcher, &sets)
        }
        _ => start_local(&args, &cluster, &sets),
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
    wait_for_servers(&cluster.cluster_file(), &mut servers)?;
    let mount_metrics = match (&args.mount, args.metrics) {
        (Some(_), true) => Some(shoal_net::ports::free_loopback_addr()?),
        _ => None,
    };
    if let Some(dir) = &args.mount {
        mount(cluster, &marker, dir, mount_metrics, &mut state)?;
    }
    Ok(Up {
        config,
        mounted: args.mount.as_ref().map(|m| m.display().to_string()),
        mount_metrics,
    })
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

pub fn mount(
    cluster: &LocalCluster,
    marker: &str,
    dir: &std::path::Path,
    metrics: Option<std::net::SocketAddr>,
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
