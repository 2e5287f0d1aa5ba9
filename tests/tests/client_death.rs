//! Client death: a client process killed in the middle of creates, renames
//! and removes leaves no entry naming a missing object, and `fsck --repair`
//! reclaims what it orphaned. The client is this test executable run again
//! as a worker (`worker_loop`), so it is a real separate process that dies
//! with SIGKILL or at a crash point.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shoal_client::Client;
use shoal_proto::crash_points as cp;
use shoal_proto::handle::ROOT;
use shoal_tests::{repair_to_zero, settled_fsck, Cluster};

/// Set in a worker's environment: the cluster file it works on.
const WORKER_CLUSTER: &str = "SHOAL_TEST_WORKER_CLUSTER";
/// Set in a worker's environment: the directory it works in.
const WORKER_DIR: &str = "SHOAL_TEST_WORKER_DIR";

/// The worker: creates, renames and removes files in its directory until it
/// is killed (or a crash point kills it). Does nothing in a normal test run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_loop() {
    let (Ok(config), Ok(dir)) = (std::env::var(WORKER_CLUSTER), std::env::var(WORKER_DIR)) else {
        return;
    };
    // Crash points armed by the parent, for this process's life.
    let _crash_points = shoal_proto::fail::FailScenario::setup();
    let config = shoal_proto::cluster::ClusterConfig::load(std::path::Path::new(&config)).unwrap();
    let client = Client::new(config);
    let (dir, _) = client.resolve(&dir).await.unwrap();
    let mut rng = StdRng::seed_from_u64(std::process::id() as u64);
    for i in 0u64.. {
        let name = format!("f{}-{i}", std::process::id());
        if client.create(dir, &name, 0o644).await.is_err() {
            continue;
        }
        if rng.random_bool(0.5) {
            let _ = client
                .rename(
                    dir,
                    &name,
                    dir,
                    &format!("r{}-{i}", std::process::id()),
                    false,
                )
                .await;
        } else if rng.random_bool(0.5) {
            let _ = client.unlink(dir, &name).await;
        }
    }
}

/// Starts a worker process on `cluster`'s directory `dir`, with crash points.
fn worker(cluster: &Cluster, dir: &str, failpoints: &[String]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "worker_loop", "--nocapture", "--test-threads=1"])
        .env(WORKER_CLUSTER, cluster.config_path())
        .env(WORKER_DIR, dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if !failpoints.is_empty() {
        cmd.env("FAILPOINTS", failpoints.join(";"));
    }
    cmd.spawn().expect("spawn worker")
}

/// Waits for a worker that must die by itself; kills it (and fails) if it
/// is still alive after a generous bound.
fn wait_bounded(child: &mut Child) -> std::process::ExitStatus {
    for _ in 0..3000 {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    sigkill(child);
    panic!("the worker did not die at its crash point");
}

fn sigkill(child: &mut Child) {
    // SAFETY: a PID of a child this test started and has not reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let _ = child.wait();
}

/// Every entry of `dir` resolves to an object that can be read.
async fn entries_resolve(client: &Client, dir: &str) -> usize {
    let (d, _) = client.resolve(dir).await.unwrap();
    let entries = client.readdir_all(d).await.unwrap();
    for e in &entries {
        client
            .getattr(e.handle)
            .await
            .unwrap_or_else(|err| panic!("entry {} names nothing: {err}", e.name));
    }
    entries.len()
}

async fn random_kills(baseline: bool) {
    let mut builder = Cluster::builder().servers(4);
    if baseline {
        builder = builder.baseline();
    }
    let cluster = builder.start();
    let client = cluster.uncached_client();
    client.mkdir(ROOT, "w", 0o755).await.unwrap();
    let mut rng = StdRng::seed_from_u64(0xdead);
    for _ in 0..6 {
        let mut w = worker(&cluster, "/w", &[]);
        tokio::time::sleep(Duration::from_millis(rng.random_range(300..900))).await;
        sigkill(&mut w);
    }
    let listed = entries_resolve(&client, "/w").await;
    assert!(listed > 0, "the workers got some work done");
    let found = settled_fsck(&client).await;
    eprintln!(
        "client death: {listed} entries, fsck found {} orphans",
        found.orphans.len()
    );
    repair_to_zero(&client).await;
    assert_eq!(
        entries_resolve(&client, "/w").await,
        listed,
        "repair removed nothing named"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_killed_at_random_leave_no_dangling_entry_baseline_protocol() {
    random_kills(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_killed_at_random_leave_no_dangling_entry_all_on() {
    random_kills(false).await;
}

/// A client dying at `point` (baseline protocol: every step is the
/// client's) leaves orphans and never a dangling entry.
async fn dies_at(point: &str) {
    let cluster = Cluster::builder().servers(4).baseline().start();
    let client = cluster.uncached_client();
    client.mkdir(ROOT, "w", 0o755).await.unwrap();
    let before = client
        .fsck(false, Duration::ZERO)
        .await
        .unwrap()
        .orphans
        .len();
    let mut w = worker(&cluster, "/w", &[format!("{point}=return")]);
    let status = wait_bounded(&mut w);
    assert!(!status.success(), "the worker died at {point}");
    entries_resolve(&client, "/w").await;
    let found = settled_fsck(&client).await;
    assert!(
        found.orphans.len() > before,
        "dying at {point} orphans objects: {found:?}"
    );
    repair_to_zero(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_dying_between_objects_and_entry_leaves_only_orphans() {
    dies_at(cp::CREATE_BEFORE_ENTRY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_dying_between_entry_and_objects_leaves_only_orphans() {
    dies_at(cp::UNLINK_AFTER_ENTRY).await;
}
