//! The test kit: `Cluster::builder().servers(4).set("k=v").start()` starts real
//! `shoal server` processes on free loopback ports (`shoal_net::ports`) in a
//! temporary directory, mounts the file system when asked, and stops and
//! removes everything on drop.
//!
//! It runs the `shoal` binary of this workspace's target directory (built by
//! `cargo build -p shoal-cli` before the tests; `scripts/test` does that), or
//! the one named by `SHOAL_BIN`.
//!
//! `SHOAL_TEST_SETTINGS` (e.g. `sync=full,dir_delegations=false`) gives every
//! cluster the kit starts other defaults: its comma-separated `key=value`
//! settings apply over `Settings::default()` and under what a test sets
//! itself ([`Builder::set`], [`Builder::baseline`]), so a test about one
//! mode keeps it. A malformed value fails every test that starts a cluster,
//! naming the variable. `scripts/test-matrix` runs the cluster tests under
//! each `sync` mode with directory delegations on and off this way.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use shoal_client::Client;
use shoal_proto::auth::Secret;
use shoal_proto::cluster::{ClusterConfig, ServerEntry, Settings, SyncMode};
use shoal_proto::handle::{server_of, Handle, ROOT};

pub mod churn;
pub mod crash_work;
pub mod hosts;
pub mod lock_agent;
pub mod page_cache;
pub mod units;

/// The environment variable with the kit's own defaults (module doc).
pub const SETTINGS_ENV: &str = "SHOAL_TEST_SETTINGS";

/// The settings every kit cluster starts from: the defaults, with those of
/// `SHOAL_TEST_SETTINGS` applied (comma-separated `key=value`, as `shoal up
/// --set` takes them; blank entries are skipped). Panics, naming the
/// variable, on a malformed value.
pub fn base_settings() -> Settings {
    let assignments = std::env::var(SETTINGS_ENV).unwrap_or_default();
    settings_from(&assignments).unwrap_or_else(|e| panic!("{SETTINGS_ENV}={assignments:?}: {e}"))
}

/// `Settings::default()` with each of the comma-separated `key=value`
/// settings of `assignments` applied in order.
fn settings_from(assignments: &str) -> Result<Settings, String> {
    let mut settings = Settings::default();
    for kv in assignments
        .split(',')
        .map(str::trim)
        .filter(|kv| !kv.is_empty())
    {
        settings.set(kv).map_err(|e| e.message)?;
    }
    Ok(settings)
}

/// How long a server or mount gets to come up.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The kernel stacks of process `pid`'s threads (root may read them): what
/// a process that does not start waits for.
fn kernel_stacks(pid: u32) -> String {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return format!("process {pid} is gone");
    };
    let mut stacks = String::new();
    for task in tasks.flatten() {
        let stack = std::fs::read_to_string(task.path().join("stack"))
            .unwrap_or_else(|e| format!("(unreadable: {e})\n"));
        stacks += &format!("thread {}:\n{stack}", task.file_name().to_string_lossy());
    }
    stacks
}

/// Waits, bounded (30 s), until `seen` holds, failing with `what` if it never
/// does: for what a process does a moment after it answers (a mount's rings
/// and readahead window come after its mount point; a mount learns of a
/// server's restart as it runs again). Never a statement about speed.
pub fn eventually(what: &str, seen: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !seen() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The `shoal` binary under test.
pub fn shoal_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("SHOAL_BIN") {
        return PathBuf::from(p);
    }
    // Test executables live in target/<profile>/deps/.
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target dir");
    let bin = profile_dir.join("shoal");
    assert!(
        bin.exists(),
        "{} not found: build it first (cargo build -p shoal-cli) or set SHOAL_BIN",
        bin.display()
    );
    bin
}

/// `shoal stats --mount MNT [extra]`, asserted to succeed: its stdout.
pub fn mount_stats(mnt: &Path, extra: &[&str]) -> String {
    let out = Command::new("timeout")
        .arg("60")
        .arg(shoal_bin())
        .args(["stats", "--mount"])
        .arg(mnt)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "shoal stats --mount failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The rows of a `shoal stats --mount` table: op -> (count, mean_us,
/// p99_us).
pub fn mount_stat_rows(table: &str) -> BTreeMap<String, (u64, f64, f64)> {
    let mut lines = table.lines();
    assert!(
        lines.next().unwrap().starts_with("# shoal mount"),
        "{table}"
    );
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["op", "count", "mean_us", "p99_us"], "{table}");
    lines
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 4, "{table}");
            let row = (
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
                f[3].parse().unwrap(),
            );
            (f[0].to_string(), row)
        })
        .collect()
}

pub struct Builder {
    servers: u32,
    /// Client hosts, if the servers run on hosts of their own (`hosts`).
    client_hosts: Option<u32>,
    sets: Vec<String>,
    durable: bool,
    delegating: bool,
    data_dirs: BTreeMap<u32, PathBuf>,
    metrics: bool,
}

impl Builder {
    pub fn servers(mut self, n: u32) -> Self {
        self.servers = n;
        self
    }

    /// Each server on a host of its own, and `clients` client hosts, in
    /// network namespaces (`hosts`): servers bound to their host's address,
    /// mounts on client hosts ([`Cluster::host_mount`]).
    pub fn on_hosts(mut self, clients: u32) -> Self {
        self.client_hosts = Some(clients);
        self
    }

    /// Every switch off and every change durable before its reply
    /// ([Carns 2009]'s baseline protocol, as `Settings::baseline`).
    pub fn baseline(mut self) -> Self {
        for t in Settings::switches() {
            self.sets.push(format!("{t}=false"));
        }
        self.sets.push("sync=full".into());
        self
    }

    /// [`Builder::baseline`] when `on`, else every technique stays on: for
    /// tests that run on both.
    pub fn baseline_if(self, on: bool) -> Self {
        if on {
            self.baseline()
        } else {
            self
        }
    }

    /// For a test that kills servers and expects every acknowledged change
    /// back: a `sync` that keeps them (`replay`, or `full`), whatever
    /// `SHOAL_TEST_SETTINGS` says. With `sync = "none"` (scratch) a server
    /// killed loses its last `data_flush_ms` of changes, so the cluster gets
    /// the default, `replay`, instead.
    pub fn durable(mut self) -> Self {
        self.durable = true;
        self
    }

    /// For a test of directory delegations: `dir_delegations = true`, and a
    /// `sync` that grants them (`replay` or `none`), whatever
    /// `SHOAL_TEST_SETTINGS` says: with `sync = "full"` the cluster gets the
    /// default, `replay`, instead.
    pub fn delegating(mut self) -> Self {
        self.sets.push("dir_delegations=true".into());
        self.delegating = true;
        self
    }

    /// Puts server `id`'s data directory at `path` instead of under the
    /// cluster's temporary directory (e.g. on a small tmpfs). The caller
    /// owns `path` and removes it.
    pub fn data_dir(mut self, id: u32, path: impl Into<PathBuf>) -> Self {
        self.data_dirs.insert(id, path.into());
        self
    }

    /// Every server serves `/metrics` to Prometheus, on a free loopback
    /// port of its own (its `metrics_addr` in [`Cluster::config`]).
    pub fn metrics(mut self) -> Self {
        self.metrics = true;
        self
    }

    /// A cluster setting, as `shoal up --set` takes it; over any of
    /// `SHOAL_TEST_SETTINGS` (module doc).
    pub fn set(mut self, kv: &str) -> Self {
        self.sets.push(kv.to_string());
        self
    }

    pub fn start(self) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("shoal-test-")
            .tempdir()
            .expect("tempdir");
        let mut settings = base_settings();
        for s in &self.sets {
            settings.set(s).expect("valid setting");
        }
        if self.durable && settings.sync == SyncMode::None {
            settings.sync = SyncMode::Replay;
        }
        if self.delegating && settings.sync == SyncMode::Full {
            settings.sync = SyncMode::Replay;
        }
        // Every kit cluster is authenticated, like one `shoal up` makes.
        let secret_file = dir.path().join("secret");
        Secret::create_file(&secret_file).expect("write secret file");
        let hosts = self
            .client_hosts
            .map(|clients| hosts::Hosts::up(self.servers, clients));
        // On hosts of their own every server listens on one port, as on
        // machines of their own.
        let addr = |id: u32| match hosts {
            Some(_) => std::net::SocketAddr::from((hosts::Hosts::server_addr(id), 7070)),
            None => shoal_net::ports::free_loopback_addr().expect("a free port"),
        };
        let config = ClusterConfig {
            secret_file: Some(secret_file),
            broker_socket: None,
            loaded_from: None,
            settings,
            servers: (0..self.servers)
                .map(|id| ServerEntry {
                    id,
                    addr: addr(id),
                    data: self
                        .data_dirs
                        .get(&id)
                        .cloned()
                        .unwrap_or_else(|| dir.path().join(format!("server-{id}"))),
                    metrics_addr: self
                        .metrics
                        .then(|| shoal_net::ports::free_loopback_addr().expect("a free port")),
                })
                .collect(),
        };
        let config_path = dir.path().join("cluster.toml");
        config.save(&config_path).expect("write cluster file");
        // As `ClusterConfig::load` gives it: this names the broker socket.
        let config = ClusterConfig {
            loaded_from: Some(std::fs::canonicalize(&config_path).expect("cluster file")),
            ..config
        };
        let mut cluster = Cluster {
            dir,
            config_path,
            config,
            servers: BTreeMap::new(),
            mount: None,
            host_mounts: BTreeMap::new(),
            hosts,
        };
        for id in 0..self.servers {
            cluster.start_server(id);
        }
        cluster
    }
}

pub struct Cluster {
    dir: tempfile::TempDir,
    config_path: PathBuf,
    config: ClusterConfig,
    servers: BTreeMap<u32, Child>,
    mount: Option<(PathBuf, Child)>,
    /// Mounts on client hosts, by host number.
    host_mounts: BTreeMap<u32, (PathBuf, Child)>,
    /// Dropped after the servers and mounts stop (fields drop after
    /// `Drop::drop`).
    hosts: Option<hosts::Hosts>,
}

impl Cluster {
    pub fn builder() -> Builder {
        Builder {
            servers: 4,
            client_hosts: None,
            sets: Vec::new(),
            durable: false,
            delegating: false,
            data_dirs: BTreeMap::new(),
            metrics: false,
        }
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A new client process-equivalent (own connections and caches).
    pub fn client(&self) -> Client {
        Client::new(self.config.clone())
    }

    /// A client whose name and attribute caches are off, so every operation
    /// shows its full message cost.
    pub fn uncached_client(&self) -> Client {
        let mut config = self.config.clone();
        config.settings.cache_ttl_ms = 0;
        Client::new(config)
    }

    fn log(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.log"))
    }

    /// Starts server `id` and waits until it accepts connections.
    pub fn start_server(&mut self, id: u32) {
        self.start_server_with(id, &[]);
    }

    /// Starts server `id` with crash points armed (`FAILPOINTS` entries such
    /// as `"commit-after-apply=return"`, see `shoal_proto::crash_points`)
    /// and waits until it accepts connections.
    pub fn start_server_with(&mut self, id: u32, failpoints: &[&str]) {
        let log = std::fs::File::create(self.log(&format!("server-{id}"))).unwrap();
        let mut cmd = match &self.hosts {
            Some(hosts) => hosts.command(&format!("s{id}"), shoal_bin()),
            None => Command::new(shoal_bin()),
        };
        if !failpoints.is_empty() {
            cmd.env("FAILPOINTS", failpoints.join(";"));
        }
        let child = cmd
            .args(["server", "--config"])
            .arg(&self.config_path)
            .args(["--id", &id.to_string()])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawn shoal server");
        self.servers.insert(id, child);
        let addr = self.config.servers[id as usize].addr;
        let deadline = Instant::now() + START_TIMEOUT;
        let listening = || match &self.hosts {
            // From the server's own host: nothing routes from here.
            Some(hosts) => hosts.on(&format!("s{id}"), || {
                std::net::TcpStream::connect(addr).is_ok()
            }),
            None => std::net::TcpStream::connect(addr).is_ok(),
        };
        while !listening() {
            let child = self.servers.get_mut(&id).unwrap();
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "server {id} exited with {status}: {}",
                    self.read_log(&format!("server-{id}"))
                );
            }
            assert!(
                Instant::now() < deadline,
                "server {id} did not start; where its threads wait in the kernel:\n{}\nits log:\n{}",
                kernel_stacks(child.id()),
                self.read_log(&format!("server-{id}"))
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops every server, changes a cluster setting (as [`Builder::set`]
    /// takes it) in the cluster file and starts them again: for settings
    /// the servers read when they start. Clients made before keep the old
    /// settings; make new ones.
    pub fn restart_with(&mut self, kv: &str) {
        for id in self.server_ids() {
            self.terminate(id);
        }
        self.config.settings.set(kv).expect("valid setting");
        self.config
            .save(&self.config_path)
            .expect("write cluster file");
        for id in self.server_ids() {
            self.start_server(id);
        }
    }

    /// Waits (up to the start timeout) for server `id` to exit on its own,
    /// as a crash point makes it, and forgets it. False if it did not.
    pub fn wait_for_exit(&mut self, id: u32) -> bool {
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            let child = self
                .servers
                .get_mut(&id)
                .expect("server started by the kit");
            if let Ok(Some(_)) = child.try_wait() {
                self.servers.remove(&id);
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Restarts server `id` with the crash point `point` armed (it fires
    /// once: the server aborts there, as if SIGKILLed at that instant).
    pub fn arm(&mut self, id: u32, point: &str) {
        self.terminate(id);
        self.start_server_with(id, &[&format!("{point}=1*return")]);
    }

    /// Waits for server `id` to have crashed at its armed point and starts
    /// it again, plain.
    pub fn restart_after_crash(&mut self, id: u32) {
        assert!(self.wait_for_exit(id), "server {id} did not crash");
        self.start_server(id);
    }

    pub fn read_log(&self, name: &str) -> String {
        std::fs::read_to_string(self.log(name)).unwrap_or_default()
    }

    fn signal(&mut self, id: u32, sig: i32) {
        if let Some(mut child) = self.servers.remove(&id) {
            // SAFETY: a PID of a child this kit started and has not reaped.
            unsafe { libc::kill(child.id() as i32, sig) };
            let _ = child.wait();
        }
    }

    /// Stops server `id` with SIGTERM (clean shutdown).
    pub fn terminate(&mut self, id: u32) {
        self.signal(id, libc::SIGTERM);
    }

    /// Kills server `id` with SIGKILL (a crash).
    pub fn kill(&mut self, id: u32) {
        self.signal(id, libc::SIGKILL);
    }

    /// Stops server `id` with SIGSTOP (it holds its connections and answers
    /// nothing) or, with `false`, lets it run again (SIGCONT).
    pub fn pause(&self, id: u32, paused: bool) {
        let child = self.servers.get(&id).expect("a server this kit started");
        let sig = if paused { libc::SIGSTOP } else { libc::SIGCONT };
        // SAFETY: a PID of a child this kit started and has not reaped.
        unsafe { libc::kill(child.id() as i32, sig) };
    }

    /// Whether server `id` was started by this kit and its process has not
    /// exited (a crash shows here as false).
    pub fn is_running(&mut self, id: u32) -> bool {
        self.servers
            .get_mut(&id)
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    pub fn server_ids(&self) -> Vec<u32> {
        (0..self.config.num_servers()).collect()
    }

    /// Mounts the cluster through FUSE and returns the mount point.
    pub fn mount(&mut self) -> PathBuf {
        self.mount_with(&[])
    }

    /// [`mount`](Self::mount), with `args` to `shoal mount` too (those of
    /// the first call that mounts).
    pub fn mount_with(&mut self, args: &[&str]) -> PathBuf {
        if let Some((dir, _)) = &self.mount {
            return dir.clone();
        }
        let dir = self.dir.path().join("mnt");
        std::fs::create_dir_all(&dir).unwrap();
        let child = start_mount(&self.config_path, &dir, &self.log("mount"), args);
        self.mount = Some((dir.clone(), child));
        dir
    }

    /// The hosts the cluster runs on, if built [`on_hosts`](Builder::on_hosts).
    pub fn hosts(&self) -> &hosts::Hosts {
        self.hosts.as_ref().expect("a cluster built on_hosts")
    }

    /// Client host `j`'s own copy of the cluster file, as each machine has
    /// its own (its mount's credential broker is named after it).
    pub fn host_config_path(&self, j: u32) -> PathBuf {
        self.dir.path().join(format!("cluster-c{j}.toml"))
    }

    /// Mounts the cluster on client host `j` (with `--allow-other`, for
    /// that host's users, through its own cluster file) and returns the
    /// mount point: a path of the whole machine, served by a mount process
    /// whose connections are the host's.
    pub fn host_mount(&mut self, j: u32) -> PathBuf {
        if let Some((dir, _)) = self.host_mounts.get(&j) {
            return dir.clone();
        }
        let config = self.host_config_path(j);
        std::fs::copy(&self.config_path, &config).expect("copy the cluster file");
        let dir = self.dir.path().join(format!("mnt-c{j}"));
        std::fs::create_dir_all(&dir).unwrap();
        let log = self.log(&format!("mount-c{j}"));
        let cmd = self.hosts().command(&format!("c{j}"), shoal_bin());
        let child = start_mount_with(cmd, &config, &dir, &log, &["--allow-other"]);
        self.host_mounts.insert(j, (dir.clone(), child));
        dir
    }

    /// The process id of client host `j`'s mount (for tests that kill it).
    pub fn host_mount_pid(&self, j: u32) -> u32 {
        self.host_mounts[&j].1.id()
    }

    /// The process id of the mount [`mount`](Self::mount) started.
    pub fn mount_pid(&self) -> Option<u32> {
        self.mount.as_ref().map(|(_, child)| child.id())
    }

    /// Unmounts (if mounted) and waits for the mount process to end; the
    /// client hosts' mounts too.
    pub fn unmount(&mut self) {
        if let Some((dir, child)) = self.mount.take() {
            stop_mount(&dir, child);
        }
        for (_, (dir, child)) in std::mem::take(&mut self.host_mounts) {
            stop_mount(&dir, child);
        }
    }

    /// Requests each server has received, per operation, not counting the
    /// `stats` requests that read them, nor `recover`: with `sync =
    /// "replay"` the first request on every new connection, its set-up
    /// (once per client and server), not part of an operation's cost; nor
    /// `delegate_dir`, a client's ask for a directory's delegation, sent in
    /// the background after a create (once per directory), which may land
    /// in whatever window a test counts next.
    pub async fn requests(&self, client: &Client) -> BTreeMap<(u32, String), u64> {
        const NOT_COUNTED: [&str; 3] = ["stats", "recover", "delegate_dir"];
        let mut out = BTreeMap::new();
        for s in self.server_ids() {
            let stats = client.server_stats(s).await.expect("stats");
            let counted = stats
                .ops
                .into_iter()
                .filter(|o| !NOT_COUNTED.contains(&o.op.as_str()));
            for op in counted {
                out.insert((s, op.op), op.requests);
            }
        }
        out
    }

    /// Requests of operation `op` (its name, as `shoal stats` shows it)
    /// every server received from anyone (see [`requests`](Self::requests)).
    pub async fn requests_of(&self, client: &Client, op: &str) -> u64 {
        let requests = self.requests(client).await;
        let of_op = requests.iter().filter(|((_, o), _)| o == op);
        of_op.map(|(_, n)| *n).sum()
    }

    /// Two clients, each connected to every server, once the servers'
    /// precreate pools are full (see [`wait_for_pools`](Self::wait_for_pools)).
    pub async fn two_clients(&self) -> (Client, Client) {
        let a = self.client();
        let b = self.client();
        a.ping_all().await.unwrap();
        b.ping_all().await.unwrap();
        self.wait_for_pools(&a).await;
        (a, b)
    }

    /// Waits until every server has asked each other server for one batch of
    /// precreated datafiles (the pools fill at start), so that no refill runs
    /// while a test counts messages.
    pub async fn wait_for_pools(&self, client: &Client) {
        let n = self.config.num_servers() as u64;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let batches: u64 = self
                .requests(client)
                .await
                .iter()
                .filter(|((_, op), _)| op == "create_datafiles")
                .map(|(_, c)| *c)
                .sum();
            if batches >= n * (n - 1) {
                break;
            }
            assert!(Instant::now() < deadline, "pools did not fill: {batches}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Let the last replies be recorded (a create would wait for them anyway).
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    /// Total requests the servers received while `f` ran.
    pub async fn messages_during<F, T>(&self, client: &Client, f: F) -> (T, u64)
    where
        F: std::future::Future<Output = T>,
    {
        let before: u64 = self.requests(client).await.values().sum();
        let out = f.await;
        let after: u64 = self.requests(client).await.values().sum();
        (out, after - before)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let sockets = self.broker_sockets();
        self.unmount();
        for id in self.server_ids() {
            self.kill(id);
        }
        for socket in sockets {
            remove_if_stale(&socket);
        }
    }
}

impl Cluster {
    /// Where the brokers of this cluster's mounts listen (one per cluster
    /// file: the kit's, and each client host's).
    fn broker_sockets(&self) -> Vec<PathBuf> {
        let hosts = self.host_mounts.keys().map(|j| self.host_config_path(*j));
        std::iter::once(self.config_path.clone())
            .chain(hosts)
            .filter_map(|path| {
                let config = ClusterConfig {
                    loaded_from: std::fs::canonicalize(&path).ok(),
                    ..self.config.clone()
                };
                config.broker_socket()
            })
            .collect()
    }
}

/// Removes the Unix socket `path` if nothing listens on it any more: a
/// mount killed by a test leaves its broker's socket behind, in /run/shoal.
fn remove_if_stale(path: &Path) {
    if path.exists() && std::os::unix::net::UnixStream::connect(path).is_err() {
        let _ = std::fs::remove_file(path);
    }
}

/// A second mount of a cluster, with `--allow-other` (the kit's own mount
/// is without it, so other users cannot use it at all), on a mount point
/// every user can reach: for tests that act as other users. Unmounted on
/// drop.
pub struct SharedMount {
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl SharedMount {
    pub fn new(cluster: &Cluster) -> SharedMount {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("shoal-fuse-shared-")
            .tempdir()
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let log = dir.path().join("mount.log");
        let child = start_mount(cluster.config_path(), &mnt, &log, &["--allow-other"]);
        SharedMount {
            dir,
            child: Some(child),
        }
    }

    /// The mount point.
    pub fn path(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }

    /// The mount process's id (for tests that stop it).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("mounted").id()
    }
}

impl Drop for SharedMount {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            stop_mount(&self.path(), child);
        }
    }
}

/// Runs `shoal mount --foreground` of the cluster file `config` on `dir`
/// (with `args` too), logging to `log`, and waits until the mount is live;
/// panics with the log if it ends or does not come up in time.
fn start_mount(config: &Path, dir: &Path, log: &Path, args: &[&str]) -> Child {
    start_mount_with(Command::new(shoal_bin()), config, dir, log, args)
}

/// [`start_mount`], `shoal` run as `shoal` is (e.g. on a host).
fn start_mount_with(
    mut shoal: Command,
    config: &Path,
    dir: &Path,
    log: &Path,
    args: &[&str],
) -> Child {
    let out = std::fs::File::create(log).unwrap();
    let mut child = shoal
        .args(["mount", "--foreground"])
        .args(args)
        .arg(config)
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .expect("spawn shoal mount");
    let deadline = Instant::now() + START_TIMEOUT;
    while !is_mounted(dir) {
        let log = || std::fs::read_to_string(log).unwrap_or_default();
        if let Ok(Some(status)) = child.try_wait() {
            panic!("shoal mount exited with {status}: {}", log());
        }
        assert!(
            Instant::now() < deadline,
            "mount did not come up: {}",
            log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// Unmounts `dir` (lazily if it is busy) and waits for its mount process
/// `child` to end, killing it if it does not.
fn stop_mount(dir: &Path, mut child: Child) {
    let _ = Command::new("timeout")
        .args(["30", "fusermount3", "-u"])
        .arg(dir)
        .status();
    if is_mounted(dir) {
        let _ = Command::new("timeout")
            .args(["30", "fusermount3", "-uz"])
            .arg(dir)
            .status();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Runs `call` against server `id` armed to die once a change is durable
/// and before its reply; starts the server again once it died, and
/// returns what the call returned. Checks that the new process answered
/// one request from its reply cache.
pub async fn across_a_crash<T: Send + 'static>(
    cluster: &mut Cluster,
    client: &Client,
    id: u32,
    call: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    cluster.arm(id, shoal_proto::crash_points::COMMIT_BEFORE_REPLY);
    let call = tokio::spawn(call);
    // Blocks this thread only; the call runs on the other worker.
    cluster.restart_after_crash(id);
    let out = call.await.unwrap();
    let stats = client.server_stats(id).await.unwrap();
    assert_eq!(stats.cached_replies, 1, "answered from the reply cache");
    out
}

/// The names in directory `dir`, sorted.
pub async fn entry_names(client: &Client, dir: Handle) -> Vec<String> {
    let mut names: Vec<String> = client
        .readdir_all(dir)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    // Listings come in the names' hash order (server/src/keys.rs).
    names.sort_unstable();
    names
}

/// A directory whose entries (and, with colocate, whose files' metafiles)
/// live on server `id`.
pub async fn dir_on(client: &Client, id: u32, name: &str) -> Handle {
    for i in 0..64 {
        let h = client
            .mkdir(ROOT, &format!("{name}-{i}"), 0o755)
            .await
            .unwrap()
            .handle;
        if server_of(h) == id {
            return h;
        }
    }
    panic!("no directory landed on server {id}");
}

/// Runs fsck (no repair) until two reports in a row agree, and returns that
/// one. Restarted servers refill their precreate pools in the background, and
/// a datafile made for a pool but not yet recorded in it looks orphaned for
/// a moment; a settled report does not race a refill. Panics if an entry
/// names a missing object (a crash must never leave that).
pub async fn settled_fsck(client: &Client) -> shoal_client::fsck::FsckReport {
    let mut previous = None;
    for _ in 0..50 {
        let r = client.fsck(false, Duration::ZERO).await.expect("fsck");
        assert!(
            r.dangling.is_empty(),
            "an entry names a missing object: {:?}",
            r.dangling
        );
        let key = (
            r.orphans.clone(),
            r.stale_marks.clone(),
            r.orphan_files.clone(),
        );
        if previous.as_ref() == Some(&key) {
            return r;
        }
        previous = Some(key);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    panic!("fsck reports never settled")
}

/// `fsck --repair`, then fsck until it reports nothing (repairs of pool
/// refills in flight may need a moment); panics if it never does.
pub async fn repair_to_zero(client: &Client) {
    let repaired = client
        .fsck(true, Duration::ZERO)
        .await
        .expect("fsck --repair");
    assert!(repaired.dangling.is_empty(), "{repaired:?}");
    for _ in 0..50 {
        let r = client.fsck(false, Duration::ZERO).await.expect("fsck");
        if r.problems() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!(
        "fsck after --repair still reports problems: {:?}",
        client.fsck(false, Duration::ZERO).await
    );
}

/// A new directory `name` under the root whose delegation `c` holds (its
/// first create goes to the server and asks for it): `c` answers creates
/// there itself from then on.
pub async fn delegated_dir(c: &Client, name: &str) -> Handle {
    let dir = c.mkdir(ROOT, name, 0o755).await.unwrap().handle;
    c.create(dir, "first", 0o644).await.unwrap();
    granted_delegation(c, dir).await;
    dir
}

/// Waits (10 s at most) until `c` holds `dir`'s delegation, asked for in
/// the background after a create there.
pub async fn granted_delegation(c: &Client, dir: Handle) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !c.holds_delegation(dir) {
        assert!(Instant::now() < deadline, "no delegation of {dir:#x}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Deterministic test bytes: `len` bytes that differ for each `seed`.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (i.wrapping_mul(131).wrapping_add(seed * 7) % 251) as u8)
        .collect()
}

fn is_mounted(dir: &Path) -> bool {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    std::fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| {
            let mut f = l.split(' ');
            let _ = f.next();
            f.next() == Some(&*dir.to_string_lossy()) && f.next() == Some("fuse.shoal")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_settings_apply_in_order_over_the_defaults() {
        assert_eq!(settings_from("").unwrap(), Settings::default());
        assert_eq!(settings_from(" , ").unwrap(), Settings::default());
        let s = settings_from("sync=full, dir_delegations=false,").unwrap();
        assert_eq!(s.sync, SyncMode::Full);
        assert!(!s.dir_delegations);
        assert_eq!(
            settings_from("sync=none,sync=replay").unwrap().sync,
            SyncMode::Replay
        );
    }

    #[test]
    fn malformed_test_settings_are_refused_with_what_is_wrong() {
        let e = settings_from("sync=full;dir_delegations=false").unwrap_err();
        assert!(e.contains("sync"), "{e}");
        assert!(settings_from("sync").unwrap_err().contains("not key=value"));
        assert!(settings_from("no_such=1")
            .unwrap_err()
            .contains("unknown setting"));
        assert!(settings_from("sync=sometimes")
            .unwrap_err()
            .contains("sync"));
    }
}
