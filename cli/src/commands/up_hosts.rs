//! `shoal up --hosts FILE --launcher CMD`: a cluster for one job on the
//! job's own hosts (as BeeOND does for BeeGFS): one server per listed host,
//! each started through the launcher (`LAUNCHER HOST shoal server ...`,
//! which runs as long as the server does), the cluster file written under
//! --data for every host to read there, and mounts on the client hosts
//! `--mount-on` names, through the launcher too. What it started, and the
//! launcher, go into the state file for `shoal down`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use shoal_proto::cluster::{ClusterConfig, ServerEntry, Settings};
use shoal_proto::error::{Result, ShoalError};

use super::starting::{self, wait_for_servers, Started, Up, START_TIMEOUT};
use crate::host_list::{self, ServerHost};
use crate::launcher::Launcher;
use crate::local_cluster::{self, HostMount, LocalCluster, State};

/// `shoal up`'s options for a cluster on other hosts.
#[derive(clap::Args)]
pub struct HostsArgs {
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

/// The servers' port where the hosts file gives none.
const DEFAULT_PORT: u16 = 7070;

/// A server's metrics port, from its own: 9470 for 7070, as
/// docs/operations.md suggests.
const METRICS_PORT_OFFSET: u16 = 2400;

/// The servers on `args.hosts`' hosts and, with `mount`, the mounts on
/// `--mount-on`'s (or here, without it).
pub fn start(
    args: &HostsArgs,
    cluster: &LocalCluster,
    sets: &[String],
    metrics: bool,
    mount: Option<&Path>,
) -> Result<Up> {
    let (Some(hosts_file), Some(launcher)) = (&args.hosts, &args.launcher) else {
        return Err(ShoalError::invalid("--hosts needs --launcher"));
    };
    let launcher = Launcher::parse(launcher)?;
    let hosts = host_list::read(hosts_file, args.port.unwrap_or(DEFAULT_PORT))?;
    // Paths every host is given: relative ones would be taken from each
    // command's own directory there (ssh's is the home directory).
    let server_data = args
        .server_data
        .as_deref()
        .map(std::path::absolute)
        .transpose()?;
    let config = write_config(server_data.as_deref(), metrics, cluster, &hosts, sets)?;
    let exe = std::env::current_exe()?.to_string_lossy().into_owned();
    let file = cluster.cluster_file().to_string_lossy().into_owned();
    let mut state = State {
        launcher: Some(launcher.words().to_vec()),
        ..State::default()
    };
    let mut servers = Vec::new();
    for (n, h) in (0u32..).zip(&hosts) {
        let id = n.to_string();
        let argv = [exe.as_str(), "server", "--config", &file, "--id", &id];
        let log = cluster.log_file(&format!("server-{id}"));
        let child = launcher.spawn(&h.host, &argv, &log)?;
        state.servers.push((n, child.id()));
        cluster.save_state(&state)?;
        servers.push(Started {
            what: format!(
                "server {id} on {}, started by `{}`,",
                h.host,
                launcher.describe(&h.host, &argv)
            ),
            child,
            log,
        });
    }
    wait_for_servers(&cluster.cluster_file(), &mut servers)?;
    let mounted = match mount {
        Some(dir) if !args.mount_on.is_empty() => {
            let dir = std::path::absolute(dir)?;
            let dir = dir.to_string_lossy();
            for host in &args.mount_on {
                mount_on(cluster, &launcher, host, &exe, &file, &dir, &mut state)?;
            }
            Some(format!("{dir} on {}", args.mount_on.join(", ")))
        }
        Some(dir) => {
            starting::mount(cluster, &file, dir, None, &mut state)?;
            Some(dir.display().to_string())
        }
        None => None,
    };
    Ok(Up {
        config,
        mounted,
        mount_metrics: None,
    })
}

/// The cluster file for `hosts`, written under --data: a new one, or the
/// one a former `up` there wrote (its settings and secret kept, so the same
/// servers' data is the same file system) with the servers' addresses
/// changed to those of today's hosts.
fn write_config(
    server_data: Option<&Path>,
    metrics: bool,
    cluster: &LocalCluster,
    hosts: &[ServerHost],
    sets: &[String],
) -> Result<ClusterConfig> {
    let path = cluster.cluster_file();
    let (settings, secret_file) = if path.exists() {
        let old = ClusterConfig::read(&path)?;
        if old.num_servers() as usize != hosts.len() {
            return Err(ShoalError::invalid(format!(
                "{} holds a cluster of {} servers, not {} (the hosts file's); use another --data directory",
                cluster.dir.display(),
                old.num_servers(),
                hosts.len()
            )));
        }
        (old.settings, old.secret_file)
    } else {
        (Settings::default(), Some(cluster.secret_file()?))
    };
    let data = server_data.unwrap_or(&cluster.dir);
    let mut config = ClusterConfig {
        secret_file,
        broker_socket: None,
        loaded_from: None,
        settings,
        servers: Vec::new(),
    };
    for (id, h) in (0..).zip(hosts) {
        let metrics_addr = metrics.then(|| metrics_addr(h)).transpose()?;
        config.servers.push(ServerEntry {
            id,
            addr: h.addr,
            data: data.join(format!("server-{id}")),
            metrics_addr,
        });
    }
    for s in sets {
        config.settings.set(s)?;
    }
    config.validate()?;
    config.save(&path)?;
    Ok(config)
}

fn metrics_addr(h: &ServerHost) -> Result<SocketAddr> {
    let port = h
        .addr
        .port()
        .checked_add(METRICS_PORT_OFFSET)
        .ok_or_else(|| {
            ShoalError::invalid(format!(
                "{}: port {} leaves no metrics port (+{METRICS_PORT_OFFSET})",
                h.host,
                h.addr.port()
            ))
        })?;
    Ok(SocketAddr::new(h.addr.ip(), port))
}

/// Mounts `file`'s cluster on `dir` of `host` through the launcher (`exe`
/// is `shoal`), recorded in `state`, and waits until the host sees the
/// mount (`mountpoint -q` there).
fn mount_on(
    cluster: &LocalCluster,
    launcher: &Launcher,
    host: &str,
    exe: &str,
    file: &str,
    dir: &str,
    state: &mut State,
) -> Result<()> {
    launcher.run(host, &["mkdir", "-p", dir])?;
    let argv = [exe, "mount", "--foreground", file, dir];
    let log = cluster.log_file(&format!("mount-{host}"));
    let mut child = launcher.spawn(host, &argv, &log)?;
    state.host_mounts.push(HostMount {
        host: host.to_string(),
        dir: dir.into(),
        pid: child.id(),
    });
    cluster.save_state(state)?;
    let deadline = std::time::Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(ShoalError::io(format!(
                "the mount on {host}, started by `{}`, exited ({status}); its output ({}) ends with:\n{}",
                launcher.describe(host, &argv),
                log.display(),
                local_cluster::tail(&log, 10)
            )));
        }
        match launcher.run(host, &["mountpoint", "-q", dir]) {
            Ok(()) => return Ok(()),
            Err(e) if std::time::Instant::now() >= deadline => {
                return Err(e.context(format!("the mount on {host} did not come up in time")))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}
