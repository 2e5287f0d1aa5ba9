//! The deployment kit's systemd units (`deploy/systemd`) on three server
//! hosts and two client hosts (network namespaces, `shoal_tests::hosts`):
//! each host gets its own `/etc/shoal` (a directory of the test's: the
//! cluster file, the secret copied beside it, and `shoal.env` naming the
//! cluster file as an `EnvironmentFile=`), and runs the units' own
//! `ExecStart=` lines, read by `shoal_tests::units` with the instance
//! substituted: `shoal-server@K` on server host sK, `shoal-mount@` (the
//! mount point escaped by `systemd-escape --path`) on each client host.
//! A file written through one client host's mount is read through the
//! other's; the mount unit's `ExecStop=` unmounts and its process ends
//! cleanly, and so do the servers on SIGTERM, as systemd stops them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use shoal_client::mounts;
use shoal_proto::auth::Secret;
use shoal_proto::cluster::{ClusterConfig, ServerEntry};
use shoal_tests::hosts::Hosts;
use shoal_tests::units::Unit;
use shoal_tests::{base_settings, eventually, pattern, shoal_bin};

/// Where a unit's `shoal` is installed; the test runs this workspace's.
const INSTALLED_SHOAL: &str = "/usr/local/bin/shoal";

/// What the test started: stopped (and mounts cleared) even if it fails.
#[derive(Default)]
struct Started {
    children: Vec<Child>,
    mounts: Vec<PathBuf>,
}

impl Drop for Started {
    fn drop(&mut self) {
        for dir in self.mounts.iter().filter(|d| mounts::is_mounted(d)) {
            let _ = Command::new("fusermount3").arg("-uz").arg(dir).status();
        }
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `words` (a unit's command line) run on `host`, output to `log`.
fn run_on(hosts: &Hosts, host: &str, words: &[String], log: &Path) -> Child {
    let program = match words[0].as_str() {
        INSTALLED_SHOAL => shoal_bin(),
        other => PathBuf::from(other),
    };
    let out = std::fs::File::create(log).unwrap();
    hosts
        .command(host, program)
        .args(&words[1..])
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| panic!("{words:?} on {host}: {e}"))
}

/// Host `host`'s `/etc/shoal`: the cluster file, the secret beside it (as
/// an operator copies both to every machine) and `shoal.env`.
fn etc_shoal(top: &Path, host: &str, config: &ClusterConfig, secret: &Path) -> PathBuf {
    let etc = top.join(format!("etc-{host}"));
    std::fs::create_dir(&etc).unwrap();
    std::fs::copy(secret, etc.join("secret")).unwrap();
    config.save(&etc.join("cluster.toml")).unwrap();
    let env = etc.join("shoal.env");
    std::fs::write(
        &env,
        format!(
            "# as /etc/shoal/shoal.env\nSHOAL_CLUSTER={}/cluster.toml\n",
            etc.display()
        ),
    )
    .unwrap();
    env
}

/// `dir` as systemd names a unit instance for it.
fn escaped_path(dir: &Path) -> String {
    let out = Command::new("systemd-escape")
        .arg("--path")
        .arg(dir)
        .output()
        .expect("systemd-escape");
    assert!(
        out.status.success(),
        "systemd-escape --path {}",
        dir.display()
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn log_of(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Waits up to 30 s for `child` to exit and returns whether it exited 0.
fn exits_cleanly(child: &mut Child) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return status.success();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn the_units_command_lines_serve_a_file_from_one_client_host_to_another() {
    let hosts = Hosts::up(3, 2);
    let top = tempfile::tempdir().unwrap();
    let secret = top.path().join("secret");
    Secret::create_file(&secret).unwrap();
    let config = ClusterConfig {
        // Relative: read beside each host's own cluster file.
        secret_file: Some(PathBuf::from("secret")),
        broker_socket: None,
        loaded_from: None,
        settings: base_settings(),
        servers: (0..3)
            .map(|id| ServerEntry {
                id,
                addr: (Hosts::server_addr(id), 7070).into(),
                // One machine's disk here: a directory per server.
                data: top.path().join(format!("data-s{id}")),
                metrics_addr: None,
            })
            .collect(),
    };
    let mut started = Started::default();

    let mut servers = Vec::new();
    for id in 0..3u32 {
        let host = format!("s{id}");
        let mut unit = Unit::read("shoal-server@.service");
        unit.environment_file(&etc_shoal(top.path(), &host, &config, &secret));
        let words = unit.command("ExecStart", &id.to_string());
        let log = top.path().join(format!("server-{id}.log"));
        servers.push(started.children.len());
        started.children.push(run_on(&hosts, &host, &words, &log));
        let addr = config.servers[id as usize].addr;
        eventually(&format!("server {id} listens: {}", log_of(&log)), || {
            hosts.on(&host, || std::net::TcpStream::connect(addr).is_ok())
        });
    }

    let mut mount_points = Vec::new();
    for j in 0..2u32 {
        let host = format!("c{j}");
        let dir = top.path().join(format!("mnt-{host}"));
        std::fs::create_dir(&dir).unwrap();
        let mut unit = Unit::read("shoal-mount@.service");
        unit.environment_file(&etc_shoal(top.path(), &host, &config, &secret));
        let instance = escaped_path(&dir);
        let words = unit.command("ExecStart", &instance);
        let log = top.path().join(format!("mount-{host}.log"));
        started.mounts.push(dir.clone());
        started.children.push(run_on(&hosts, &host, &words, &log));
        eventually(&format!("{host} mounts: {}", log_of(&log)), || {
            mounts::is_mounted(&dir)
        });
        mount_points.push((host, unit, instance, dir));
    }

    let (a, b) = (&mount_points[0].3, &mount_points[1].3);
    std::fs::create_dir(a.join("from-c0")).unwrap();
    std::fs::write(a.join("from-c0/data"), pattern(7, 300_000)).unwrap();
    assert_eq!(
        std::fs::read(b.join("from-c0/data")).unwrap(),
        pattern(7, 300_000),
        "read on c1 what c0 wrote"
    );

    // As systemd stops them: a mount by its ExecStop=, then the servers.
    let mounts_started = servers.len();
    for (k, (host, unit, instance, dir)) in mount_points.iter().enumerate() {
        let stop = unit.command("ExecStop", instance);
        let log = top.path().join(format!("stop-{host}.log"));
        let status = run_on(&hosts, host, &stop, &log).wait().unwrap();
        assert!(status.success(), "{stop:?} on {host}: {}", log_of(&log));
        assert!(!mounts::is_mounted(dir), "{} still mounted", dir.display());
        let child = &mut started.children[mounts_started + k];
        assert!(
            exits_cleanly(child),
            "the mount on {host} did not end cleanly once unmounted"
        );
    }
    for (id, index) in servers.into_iter().enumerate() {
        let child = &mut started.children[index];
        // SAFETY: a PID of a child this test started and has not reaped.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        assert!(
            exits_cleanly(child),
            "server {id} did not stop cleanly on SIGTERM: {}",
            log_of(&top.path().join(format!("server-{id}.log")))
        );
    }
}
