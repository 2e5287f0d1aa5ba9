//! Hosts in network namespaces for cluster tests (`scripts/hosts`): server
//! hosts s0.. and client hosts c0.., each with its own address on a switch
//! of its own, so that a cluster runs off loopback as on several machines.
//! Made when a test's cluster is built `on_hosts`, removed when it drops.
//!
//! A host shares the machine's files and processes; only its network is
//! its own. Programs run there through `nsenter --net` ([`Hosts::command`]),
//! and a test's own code runs there on a thread that entered the host's
//! network namespace ([`Hosts::on`]): the sockets it opens belong to the
//! host.

use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// The script that makes and removes hosts.
fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/hosts")
}

pub struct Hosts {
    name: String,
}

impl Hosts {
    /// `servers` server hosts and `clients` client hosts, under a name no
    /// other test (of this process or another) uses.
    pub fn up(servers: u32, clients: u32) -> Hosts {
        static MADE: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "shoalt{}x{}",
            std::process::id(),
            MADE.fetch_add(1, Ordering::Relaxed)
        );
        let hosts = Hosts { name };
        let out = Command::new(script())
            .args([
                "up",
                &hosts.name,
                &servers.to_string(),
                &clients.to_string(),
            ])
            .output()
            .expect("run scripts/hosts");
        assert!(
            out.status.success(),
            "scripts/hosts up {}: {}",
            hosts.name,
            String::from_utf8_lossy(&out.stderr)
        );
        hosts
    }

    /// Server host `i`'s address (as `scripts/hosts` gives it).
    pub fn server_addr(i: u32) -> Ipv4Addr {
        Ipv4Addr::new(10, 77, 0, 10 + u8::try_from(i).expect("a server host"))
    }

    /// A command that runs a command on a host, as ssh does (the host's
    /// name or address, then words for sh): for mpirun's `plm_rsh_agent`.
    pub fn launcher(&self) -> String {
        format!("{} ssh {}", script().display(), self.name)
    }

    /// Client host `j`'s address.
    pub fn client_addr(j: u32) -> Ipv4Addr {
        Ipv4Addr::new(10, 77, 0, 100 + u8::try_from(j).expect("a client host"))
    }

    /// The network namespace of host `host` (`s0`, `c1`, ...).
    fn netns(&self, host: &str) -> PathBuf {
        PathBuf::from(format!("/run/netns/{}-{host}", self.name))
    }

    /// `program` to run on `host`.
    pub fn command(&self, host: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net={}", self.netns(host).display()))
            .arg(program);
        cmd
    }

    /// Runs `f` on `host`: on a thread of its own in the host's network
    /// namespace, so every socket `f` opens is the host's.
    pub fn on<T: Send>(&self, host: &str, f: impl FnOnce() -> T + Send) -> T {
        let ns = std::fs::File::open(self.netns(host))
            .unwrap_or_else(|e| panic!("{}: {e}", self.netns(host).display()));
        std::thread::scope(|scope| {
            scope
                .spawn(move || {
                    // SAFETY: setns of this thread alone, to a namespace
                    // file we hold open.
                    let r = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
                    assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
                    f()
                })
                .join()
                .expect("the host's thread")
        })
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        let _ = Command::new(script()).args(["down", &self.name]).status();
    }
}
