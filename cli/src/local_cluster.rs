//! A local cluster as `shoal up` leaves it in its data directory:
//! `cluster.toml` (the cluster file), `secret` (the cluster secret, mode
//! 0600, named by the cluster file), `server-N/` (each server's data),
//! `logs/` (each process's output) and `state.json` (the PIDs `up` started and
//! the mount point; for a cluster on other hosts, the launcher and the
//! client hosts' mounts too), which is all `shoal down` needs to stop
//! exactly those.

use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use shoal_net::ports::free_loopback_addr;
use shoal_proto::auth::Secret;
use shoal_proto::cluster::{ClusterConfig, ServerEntry, Settings};
use shoal_proto::error::{Result, ShoalError};

#[derive(Default, Serialize, Deserialize)]
pub struct State {
    /// (server id, pid)
    pub servers: Vec<(u32, u32)>,
    pub mount: Option<MountState>,
    /// The launcher `up --hosts` started the servers through (its words):
    /// `servers` then holds the launchers' PIDs, as `down` stops them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher: Option<Vec<String>>,
    /// Mounts `up --mount-on` made on client hosts through the launcher.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub host_mounts: Vec<HostMount>,
}

#[derive(Serialize, Deserialize)]
pub struct HostMount {
    pub host: String,
    pub dir: PathBuf,
    /// The launcher's PID, here.
    pub pid: u32,
}

#[derive(Serialize, Deserialize)]
pub struct MountState {
    pub dir: PathBuf,
    pub pid: u32,
}

pub struct LocalCluster {
    pub dir: PathBuf,
}

impl LocalCluster {
    pub fn new(dir: &Path) -> Result<LocalCluster> {
        std::fs::create_dir_all(dir.join("logs"))
            .map_err(|e| ShoalError::from(e).context(format!("creating {}", dir.display())))?;
        let dir = std::fs::canonicalize(dir)?;
        Ok(LocalCluster { dir })
    }

    pub fn cluster_file(&self) -> PathBuf {
        self.dir.join("cluster.toml")
    }

    pub fn log_file(&self, name: &str) -> PathBuf {
        self.dir.join("logs").join(format!("{name}.log"))
    }

    fn state_file(&self) -> PathBuf {
        self.dir.join("state.json")
    }

    pub fn load_state(&self) -> State {
        std::fs::read_to_string(self.state_file())
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or_default()
    }

    pub fn save_state(&self, state: &State) -> Result<()> {
        let text = serde_json::to_string_pretty(state).unwrap_or_default();
        Ok(std::fs::write(self.state_file(), text)?)
    }

    pub fn clear_state(&self) {
        let _ = std::fs::remove_file(self.state_file());
    }

    /// The cluster secret's file, made on first use.
    pub fn secret_file(&self) -> Result<PathBuf> {
        let secret_file = self.dir.join("secret");
        if !secret_file.exists() {
            Secret::create_file(&secret_file)?;
        }
        Ok(secret_file)
    }

    /// The cluster file, created with `servers` servers on free loopback ports
    /// if there is none yet. Servers whose port is now taken, or shared with
    /// another server, get a new one; so do their metrics addresses, and
    /// with `metrics` every server without one gets one.
    pub fn cluster_config(
        &self,
        servers: Option<u32>,
        sets: &[String],
        metrics: bool,
    ) -> Result<ClusterConfig> {
        let path = self.cluster_file();
        let mut config = if path.exists() {
            let c = ClusterConfig::read(&path)?;
            if let Some(n) = servers.filter(|n| *n != c.num_servers()) {
                return Err(ShoalError::invalid(format!(
                    "{} holds a cluster of {} servers, not {n}; use another --data directory",
                    self.dir.display(),
                    c.num_servers()
                )));
            }
            c
        } else {
            let n = servers.unwrap_or(4);
            if n == 0 {
                return Err(ShoalError::invalid("--servers must be at least 1"));
            }
            ClusterConfig {
                secret_file: Some(self.secret_file()?),
                broker_socket: None,
                loaded_from: None,
                settings: Settings::default(),
                servers: (0..n)
                    .map(|id| ServerEntry {
                        id,
                        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
                        data: self.dir.join(format!("server-{id}")),
                        metrics_addr: None,
                    })
                    .collect(),
            }
        };
        for s in sets {
            config.settings.set(s)?;
        }
        // A port not chosen yet, taken now, or another server's (a file
        // written before ports were handed out distinct) gets a new one.
        let mut ports = std::collections::BTreeSet::new();
        let mut repair = |addr: &mut SocketAddr| -> Result<()> {
            let port = addr.port();
            if port == 0 || ports.contains(&port) || TcpListener::bind(*addr).is_err() {
                *addr = free_loopback_addr()?;
            }
            ports.insert(addr.port());
            Ok(())
        };
        for s in &mut config.servers {
            repair(&mut s.addr)?;
        }
        for s in &mut config.servers {
            if metrics && s.metrics_addr.is_none() {
                s.metrics_addr = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
            }
            if let Some(addr) = s.metrics_addr.as_mut() {
                repair(addr)?;
            }
        }
        config.validate()?;
        config.save(&path)?;
        Ok(config)
    }
}

/// Starts `shoal ARGS...` in its own session, output to `log` ([`spawn`]).
pub fn spawn_shoal(args: &[&str], log: &Path) -> Result<Child> {
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.args(args);
    spawn(cmd, log)
}

/// Starts `cmd` in a session (and process group) of its own, so a
/// terminal's Ctrl-C reaches only `up`, which then stops things in order,
/// and `down` stops the whole group; output to `log`.
pub fn spawn(mut cmd: Command, log: &Path) -> Result<Child> {
    let out = std::fs::File::create(log).map_err(|e| ShoalError::from(e).context(log.display()))?;
    let err = out.try_clone()?;
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    // SAFETY: setsid is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    Ok(cmd.spawn()?)
}

/// Whether `pid` is still a `shoal` process started with `marker` on its
/// command line (guards against a recycled PID).
pub fn is_ours(pid: u32, marker: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|c| {
            let line = String::from_utf8_lossy(&c).replace('\0', " ");
            line.contains("shoal") && line.contains(marker) && !is_zombie(pid)
        })
        .unwrap_or(false)
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z'))
        })
        .unwrap_or(true)
}

/// Sends SIGTERM to the process group `pid` leads if it leads one
/// ([`spawn`] makes one: a launcher's own children go with it), waits up
/// to `grace` for the group (else `pid`) to end, then SIGKILL. Reaps the
/// child if it is ours.
pub fn stop_process(pid: u32, marker: &str, grace: Duration) {
    if !is_ours(pid, marker) {
        return;
    }
    // SAFETY: plain syscalls on a PID we verified we started.
    let leads_group = unsafe { libc::getpgid(pid as i32) } == pid as i32;
    let target = if leads_group {
        -(pid as i32)
    } else {
        pid as i32
    };
    // A launcher may end at once while what it runs (a server shutting
    // down cleanly) is still there: wait for every member.
    let running = || {
        if leads_group {
            group_alive(pid)
        } else {
            is_ours(pid, marker)
        }
    };
    // SAFETY: as above.
    unsafe { libc::kill(target, libc::SIGTERM) };
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        reap(pid);
        if !running() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: as above.
    unsafe { libc::kill(target, libc::SIGKILL) };
    reap(pid);
}

/// Whether a process of group `pgid` runs (zombies do not).
fn group_alive(pgid: u32) -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return false;
    };
    procs.flatten().any(|p| {
        let stat = std::fs::read_to_string(p.path().join("stat")).unwrap_or_default();
        // After the command's ")": state, ppid, pgrp.
        let fields: Vec<&str> = stat.rsplit_once(')').map_or(Vec::new(), |(_, rest)| {
            rest.split_whitespace().take(3).collect()
        });
        matches!(fields[..], [state, _, group] if state != "Z" && group == pgid.to_string())
    })
}

fn reap(pid: u32) {
    let mut status = 0;
    // SAFETY: WNOHANG on one PID; harmless if it is not our child.
    unsafe { libc::waitpid(pid as i32, &mut status, libc::WNOHANG) };
}

/// Polls `check` every 20 ms until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Unmounts a FUSE mount point (lazily if it is busy).
pub fn unmount(dir: &Path) -> Result<()> {
    let run = |args: &[&str]| {
        Command::new("fusermount3")
            .args(args)
            .arg(dir)
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    if run(&["-u"]) || run(&["-uz"]) {
        Ok(())
    } else {
        Err(ShoalError::io(format!(
            "could not unmount {}",
            dir.display()
        )))
    }
}

/// The last lines of a log file, for error messages.
pub fn tail(log: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
