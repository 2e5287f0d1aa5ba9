//! `shoal up`: a local cluster of N servers on free loopback ports, optionally
//! mounted, in the foreground until Ctrl-C or detached with `--detach`.
//! Running it again on the same data directory brings back the same file system.

use std::path::PathBuf;
use std::time::Duration;

use shoal_client::mounts;
use shoal_proto::cluster::Settings;
use shoal_proto::error::{Result, ShoalError};

use crate::local_cluster::{self, LocalCluster, MountState};
use crate::target::runtime;

/// How long servers and the mount get to come up.
const START_TIMEOUT: Duration = Duration::from_secs(30);

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
    let config = cluster.cluster_config(args.servers, &sets, args.metrics)?;
    let mut state = local_cluster::State::default();
    for s in &config.servers {
        let id = s.id.to_string();
        let pid = local_cluster::spawn_shoal(
            &["server", "--config", &marker, "--id", &id],
            &cluster.log_file(&format!("server-{id}")),
        )?;
        state.servers.push((s.id, pid));
        cluster.save_state(&state)?;
    }
    if let Err(e) = wait_for_servers(&cluster, &file, &state) {
        super::down::stop(&cluster);
        return Err(e);
    }
    let mount_metrics = match (&args.mount, args.metrics) {
        (Some(_), true) => Some(shoal_net::ports::free_loopback_addr()?),
        _ => None,
    };
    if let Some(dir) = &args.mount {
        if let Err(e) = mount(&cluster, &marker, dir, mount_metrics, &mut state) {
            super::down::stop(&cluster);
            return Err(e);
        }
    }
    println!(
        "Shoal is up: {} servers, cluster file {}{}",
        config.num_servers(),
        file.display(),
        args.mount
            .as_ref()
            .map(|m| format!(", mounted on {}", m.display()))
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

fn wait_for_servers(
    cluster: &LocalCluster,
    file: &std::path::Path,
    state: &local_cluster::State,
) -> Result<()> {
    let rt = runtime()?;
    let deadline = std::time::Instant::now() + START_TIMEOUT;
    loop {
        let marker = file.to_string_lossy();
        for (id, pid) in &state.servers {
            if !local_cluster::is_ours(*pid, &marker) {
                let log = cluster.log_file(&format!("server-{id}"));
                return Err(ShoalError::io(format!(
                    "server {id} exited; its log ({}) ends with:\n{}",
                    log.display(),
                    local_cluster::tail(&log, 10)
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

fn mount(
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
    let pid = local_cluster::spawn_shoal(&argv, &log)?;
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
