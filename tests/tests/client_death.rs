//! Client death: a client process killed in the middle of creates, renames
//! and removes leaves no entry naming a missing object, and `fsck --repair`
//! reclaims what it orphaned. The client is this test executable run again
//! as a worker (`worker_loop`), so it is a real separate process that dies
//! with SIGKILL or at a crash point.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shoal_client::Client;
use shoal_proto::crash_points as cp;
use shoal_proto::handle::ROOT;
use shoal_tests::{repair_to_zero, settled_fsck, Cluster};

/// Set in a worker's environment: the cluster file it works on.
const WORKER_CLUSTER: &str = "SHOAL_TEST_WORKER_CLUSTER";
/// Set in a worker's environment: the directory it works in (it uses its
/// subdirectories `a` and `b`).
const WORKER_DIR: &str = "SHOAL_TEST_WORKER_DIR";
/// Set in a worker's environment instead of `WORKER_DIR`: one move to make,
/// `FROM TO` (two paths).
const WORKER_MOVE: &str = "SHOAL_TEST_WORKER_MOVE";
/// Set in a worker's environment instead of `WORKER_DIR`: one hard link to
/// make, `EXISTING NEW` (two paths).
const WORKER_LINK: &str = "SHOAL_TEST_WORKER_LINK";

/// The worker: creates, renames (within a directory and to another),
/// hard-links, renames linked files and removes files until it is killed (or
/// a crash point kills it); or makes one move or one link. Does nothing in a
/// normal test run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_loop() {
    let Ok(config) = std::env::var(WORKER_CLUSTER) else {
        return;
    };
    // Crash points armed by the parent, for this process's life.
    let _crash_points = shoal_proto::fail::FailScenario::setup();
    let config = shoal_proto::cluster::ClusterConfig::load(std::path::Path::new(&config)).unwrap();
    let client = Client::new(config);
    if let Ok(paths) = std::env::var(WORKER_MOVE) {
        let (from, to) = paths.split_once(' ').unwrap();
        let (fd, fname) = client.resolve_parent(from).await.unwrap();
        let (td, tname) = client.resolve_parent(to).await.unwrap();
        client.rename(fd, fname, td, tname, false).await.unwrap();
        return;
    }
    if let Ok(paths) = std::env::var(WORKER_LINK) {
        let (existing, new) = paths.split_once(' ').unwrap();
        let (h, _) = client.resolve(existing).await.unwrap();
        let (td, tname) = client.resolve_parent(new).await.unwrap();
        client.link(h, td, tname).await.unwrap();
        return;
    }
    let dir = std::env::var(WORKER_DIR).unwrap();
    let (a, _) = client.resolve(&format!("{dir}/a")).await.unwrap();
    let (b, _) = client.resolve(&format!("{dir}/b")).await.unwrap();
    let me = std::process::id();
    let mut rng = StdRng::seed_from_u64(me as u64);
    for i in 0u64.. {
        let name = format!("f{me}-{i}");
        if client.create(a, &name, 0o644).await.is_err() {
            continue;
        }
        let _ = match rng.random_range(0..8) {
            0 | 1 => {
                client
                    .rename(a, &name, a, &format!("r{me}-{i}"), false)
                    .await
            }
            2 | 3 => {
                client
                    .rename(a, &name, b, &format!("m{me}-{i}"), false)
                    .await
            }
            4 => client.unlink(a, &name).await,
            5 => {
                // A second name in the other directory, then the first name
                // moved there too: a rename of a linked file.
                let linked = match client.lookup(a, &name).await {
                    Ok((h, _)) => client.link(h, b, &format!("l{me}-{i}")).await,
                    Err(e) => Err(e),
                };
                match linked {
                    Ok(_) => {
                        client
                            .rename(a, &name, b, &format!("n{me}-{i}"), false)
                            .await
                    }
                    Err(e) => Err(e),
                }
            }
            6 => {
                // A linked file losing one name, then the other.
                let linked = match client.lookup(a, &name).await {
                    Ok((h, _)) => client.link(h, a, &format!("k{me}-{i}")).await,
                    Err(e) => Err(e),
                };
                match linked {
                    Ok(_) => client.unlink(a, &name).await,
                    Err(e) => Err(e),
                }
            }
            _ => Ok(()),
        };
    }
}

/// Starts a worker process on `cluster`'s directory `dir`, with crash points.
fn worker(cluster: &Cluster, dir: &str, failpoints: &[String]) -> Child {
    worker_with(cluster, (WORKER_DIR, dir), failpoints)
}

/// Starts a worker process with one job (`WORKER_DIR` or `WORKER_MOVE`).
fn worker_with(cluster: &Cluster, job: (&str, &str), failpoints: &[String]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "worker_loop", "--nocapture", "--test-threads=1"])
        .env(WORKER_CLUSTER, cluster.config_path())
        .env(job.0, job.1)
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
    work_dirs(&client).await;
    let mut rng = StdRng::seed_from_u64(0xdead);
    for _ in 0..6 {
        let mut w = worker(&cluster, "/w", &[]);
        tokio::time::sleep(Duration::from_millis(rng.random_range(300..900))).await;
        sigkill(&mut w);
    }
    let listed = entries_resolve(&client, "/w/a").await + entries_resolve(&client, "/w/b").await;
    assert!(listed > 0, "the workers got some work done");
    let found = settled_fsck(&client).await;
    eprintln!(
        "client death: {listed} entries, fsck found {} orphans and {} leftover entries of moves",
        found.orphans.len(),
        found.leftover_entries.len()
    );
    repair_to_zero(&client).await;
    assert_eq!(
        entries_resolve(&client, "/w/a").await + entries_resolve(&client, "/w/b").await,
        listed - found.leftover_entries.len(),
        "repair removed no true name"
    );
}

/// The worker's directories: /w/a and /w/b.
async fn work_dirs(client: &Client) {
    let w = client.mkdir(ROOT, "w", 0o755).await.unwrap().handle;
    client.mkdir(w, "a", 0o755).await.unwrap();
    client.mkdir(w, "b", 0o755).await.unwrap();
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
/// client's) leaves orphans (or a link count too high) and never a
/// dangling entry.
async fn dies_at(point: &str) {
    let cluster = Cluster::builder().servers(4).baseline().start();
    let client = cluster.uncached_client();
    work_dirs(&client).await;
    let before = client
        .fsck(false, Duration::ZERO)
        .await
        .unwrap()
        .orphans
        .len();
    let mut w = worker(&cluster, "/w", &[format!("{point}=return")]);
    let status = wait_bounded(&mut w);
    assert!(!status.success(), "the worker died at {point}");
    entries_resolve(&client, "/w/a").await;
    let found = settled_fsck(&client).await;
    // An unlink of one of two names leaves a count too high instead.
    assert!(
        found.orphans.len() > before || !found.wrong_counts.is_empty(),
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

/// A worker process moves /a/x to /b/x and dies at crash point `point`.
fn move_dying_at(cluster: &Cluster, point: &str) {
    let mut w = worker_with(
        cluster,
        (WORKER_MOVE, "/a/x /b/x"),
        &[format!("{point}=return")],
    );
    assert!(
        !wait_bounded(&mut w).success(),
        "the worker died at {point}"
    );
}

/// A client dying in the middle of a move to another directory leaves the
/// object named twice. A directory's `parent` says which name is true:
/// removing the leftover name keeps the directory, and fsck finds exactly
/// that leftover. A file has both names counted: two true names (a hard
/// link), and fsck finds nothing wrong.
async fn dies_moving(point: &str, new_name_is_true: bool, directory: bool) {
    let cluster = Cluster::builder().servers(4).start();
    let client = cluster.uncached_client();
    let a = client.mkdir(ROOT, "a", 0o755).await.unwrap().handle;
    let b = client.mkdir(ROOT, "b", 0o755).await.unwrap().handle;
    let data = shoal_tests::pattern(9, 100_000);
    let h = if directory {
        let d = client.mkdir(a, "x", 0o755).await.unwrap().handle;
        let f = client.create(d, "inside", 0o644).await.unwrap().handle;
        client.write(f, 0, Bytes::from(data.clone())).await.unwrap();
        client.fsync(f).await.unwrap();
        d
    } else {
        let f = client.create(a, "x", 0o644).await.unwrap().handle;
        client.write(f, 0, Bytes::from(data.clone())).await.unwrap();
        client.fsync(f).await.unwrap();
        f
    };
    move_dying_at(&cluster, point);

    // Both names lead to the object.
    assert_eq!(client.lookup(a, "x").await.unwrap().0, h);
    assert_eq!(client.lookup(b, "x").await.unwrap().0, h);
    let (true_dir, leftover_dir) = if new_name_is_true { (b, a) } else { (a, b) };
    let found = settled_fsck(&client).await;
    if !directory {
        assert_eq!(found.problems(), 0, "two true names: {found:?}");
        assert_eq!(client.getattr(h).await.unwrap().nlink, 2);
        client.unlink(leftover_dir, "x").await.unwrap();
        assert!(client.read(h, 0, 200_000).await.unwrap() == data[..]);
        assert_eq!(client.getattr(h).await.unwrap().nlink, 1);
        assert_eq!(client.lookup(true_dir, "x").await.unwrap().0, h);
        let after = client.fsck(false, Duration::ZERO).await.unwrap();
        assert_eq!(after.problems(), 0, "{after:?}");
        return;
    }
    assert_eq!(
        found.leftover_entries,
        vec![(leftover_dir, "x".to_string(), h)],
        "{found:?}"
    );
    // rmdir through the leftover name sees the directory as it is: not
    // empty. fsck --repair drops the leftover; the tree stays whole.
    let e = client.rmdir(leftover_dir, "x").await.unwrap_err();
    assert_eq!(e.errno, shoal_client::Errno::ENOTEMPTY);
    repair_to_zero(&client).await;
    let inside = client.lookup(h, "inside").await.unwrap().0;
    assert!(client.read(inside, 0, 200_000).await.unwrap() == data[..]);
    assert_eq!(
        client.lookup(leftover_dir, "x").await.unwrap_err().errno,
        shoal_client::Errno::ENOENT
    );
    assert_eq!(client.lookup(true_dir, "x").await.unwrap().0, h);
    let after = client.fsck(false, Duration::ZERO).await.unwrap();
    assert_eq!(after.problems(), 0, "{after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_dying_in_the_middle_of_a_file_move_leaves_two_true_names() {
    dies_moving(cp::MOVE_AFTER_LINK, true, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_moved_to_its_new_entry_only_lives_on_under_its_old_name() {
    dies_moving(cp::MOVE_AFTER_LINK, false, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_moved_halfway_lives_on_under_its_true_name() {
    dies_moving(cp::MOVE_AFTER_PARENT, true, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmdir_through_the_leftover_name_of_an_empty_directory_keeps_it() {
    let cluster = Cluster::builder().servers(4).start();
    let client = cluster.uncached_client();
    // Objects are counted: no pool refill may be in flight at the fsck (a
    // batch being made shows as orphans until its pool records it).
    cluster.wait_for_pools(&client).await;
    let a = client.mkdir(ROOT, "a", 0o755).await.unwrap().handle;
    let b = client.mkdir(ROOT, "b", 0o755).await.unwrap().handle;
    let x = client.mkdir(a, "x", 0o755).await.unwrap().handle;
    let point = cp::MOVE_AFTER_PARENT;
    move_dying_at(&cluster, point);
    client.rmdir(a, "x").await.unwrap();
    assert_eq!(client.lookup(b, "x").await.unwrap().0, x);
    // Not left marked for removal: it takes new entries.
    client.create(x, "new", 0o644).await.unwrap();
    let after = client.fsck(false, Duration::ZERO).await.unwrap();
    assert_eq!(after.problems(), 0, "{after:?}");
}

/// A client dying between counting a hard link and adding its entry leaves
/// the file with one name and a count of two: fsck finds the count, repair
/// sets it, and then removing the one name removes the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_dying_in_the_middle_of_a_link_leaves_a_count_fsck_repairs() {
    let cluster = Cluster::builder().servers(4).start();
    let client = cluster.uncached_client();
    let a = client.mkdir(ROOT, "a", 0o755).await.unwrap().handle;
    client.mkdir(ROOT, "b", 0o755).await.unwrap();
    let f = client.create(a, "x", 0o644).await.unwrap().handle;
    let mut w = worker_with(
        &cluster,
        (WORKER_LINK, "/a/x /b/y"),
        &[format!("{}=return", cp::LINK_BEFORE_ENTRY)],
    );
    assert!(!wait_bounded(&mut w).success(), "the worker died linking");
    let found = settled_fsck(&client).await;
    assert_eq!(found.wrong_counts, vec![(f, 1, 2)], "{found:?}");
    repair_to_zero(&client).await;
    assert_eq!(client.getattr(f).await.unwrap().nlink, 1);
    client.unlink(a, "x").await.unwrap();
    let after = client.fsck(false, Duration::ZERO).await.unwrap();
    assert_eq!(
        after.problems(),
        0,
        "the file went with its one name: {after:?}"
    );
    assert_eq!(after.orphans, vec![]);
}
