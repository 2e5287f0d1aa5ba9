//! Crash suite (CI form): while 4 workers create, write (with fsync), rename,
//! hard-link, move linked files to another directory and remove files, a
//! server chosen at random is killed with SIGKILL every 1–3 s and
//! restarted. Two workers are native clients; two are processes working
//! through one FUSE mount of the cluster with ordinary system calls, as
//! programs do (`src/bin/crash_worker.rs`). Afterwards every operation
//! acknowledged as durable is present with its bytes and size, through the
//! mount the workers wrote through (right away: its caches lived through
//! the restarts and the writes), through a fresh native client and through
//! a second mount; no directory entry names a missing object, and fsck
//! reports the orphans a crash may leave and `--repair` reclaims them,
//! leaving zero. The workers and their models: `shoal_tests::crash_work`.
//!
//! `SHOAL_CRASH_SECS` runs the chaos longer (default 15 s);
//! `SHOAL_CRASH_SEED` picks another random sequence.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shoal_client::Client;
use shoal_proto::handle::ROOT;
use shoal_tests::crash_work::{dir_name, made_by, worker, Dirs, Layout, Model, SIDES};
use shoal_tests::{pattern, repair_to_zero, settled_fsck, Cluster, SharedMount};

/// How long the workers work while servers crash, unless `SHOAL_CRASH_SECS`.
const CHAOS_SECS: u64 = 15;
/// The random sequence (kills, file sizes, operations), unless `SHOAL_CRASH_SEED`.
const SEED: u64 = 0x5eed_c4a5;
const WORKERS: u64 = 4;
/// Workers below this number use their own native client, in this process;
/// the others are processes working through the cluster's mount.
const NATIVE_WORKERS: u64 = 2;
/// How long a killed server stays down.
const DOWN: Duration = Duration::from_millis(200);

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Starts worker `w`'s process on the mount `mnt`.
fn mount_worker(mnt: &std::path::Path, w: u64, secs: u64, seed: u64, layout: Layout) -> Child {
    Command::new(env!("CARGO_BIN_EXE_crash_worker"))
        .arg(mnt)
        .args([w, secs, seed].map(|n| n.to_string()))
        .args((layout == Layout::Shared).then_some("shared"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn crash_worker")
}

/// The model a mount worker's process printed, once it is done.
async fn mount_worker_model(w: u64, child: Child) -> Result<Model, String> {
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .expect("wait for crash_worker")
        .expect("crash_worker's output");
    if !out.status.success() {
        return Err(format!("mount worker {w} exited with {}", out.status));
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("mount worker {w}'s model: {e}"))
}

/// Checks every worker's directories, as `views` reach them (one [`Dirs`] a
/// worker), against its model; `layouts` names the layout of a file whose
/// bytes differ. Returns how many acknowledged files were read.
async fn verify(views: &[Dirs], models: &[Model], stage: &str, layouts: &Client) -> usize {
    let mut checked = 0;
    for (w, (fs, m)) in views.iter().zip(models).enumerate() {
        let read = |name: &str| {
            let name = name.to_owned();
            async move {
                fs.read(&name)
                    .await
                    .unwrap_or_else(|e| panic!("{stage}: read {name}: {e}"))
            }
        };
        for (name, (seed, len)) in &m.files {
            let found = read(name)
                .await
                .unwrap_or_else(|| panic!("{stage}: acknowledged {name} is missing"));
            assert_eq!(
                found.size, *len as u64,
                "{stage}: size of acknowledged {name}"
            );
            assert_eq!(
                found.data.len(),
                *len,
                "{stage}: bytes read of acknowledged {name}"
            );
            let want = pattern(*seed, *len);
            if found.data != want {
                let at = found.data.iter().zip(&want).position(|(a, b)| a != b);
                panic!(
                    "{stage}: bytes of acknowledged {name} ({len} bytes) differ from byte {} \
                     (handle {:#x}, layout {:?})",
                    at.unwrap_or(0),
                    found.handle,
                    layouts.layout(found.handle).await
                );
            }
            checked += 1;
        }
        for name in &m.gone {
            assert!(
                read(name).await.is_none(),
                "{stage}: {name} was removed or renamed away (acknowledged) but exists"
            );
        }
        for (name, content) in &m.maybe {
            let found = read(name).await;
            if let (Some(found), Some((seed, len))) = (found, content) {
                assert!(
                    found.data == pattern(*seed, *len),
                    "{stage}: {name} (interrupted unlink/rename of an acknowledged file) \
                     exists with other bytes ({} of {len})",
                    found.data.len()
                );
            }
        }
        for (from, to) in &m.either_or_both {
            let a = read(from).await.is_some();
            let b = read(to).await.is_some();
            assert!(
                a || b,
                "{stage}: interrupted move {from} -> {to}: the file is under neither name (lost)"
            );
        }
        for (from, to) in &m.either {
            let a = read(from).await.is_some();
            let b = read(to).await.is_some();
            assert!(
                a ^ b,
                "{stage}: interrupted rename {from} -> {to}: exists under {}",
                match (a, b) {
                    (false, false) => "neither name (lost)",
                    _ => "both names",
                }
            );
        }
        // No entry names a missing object, and no entry appears from nowhere.
        for (side, prefix) in SIDES.iter().enumerate() {
            let entries = fs
                .list(side)
                .await
                .unwrap_or_else(|e| panic!("{stage}: list {prefix}: {e}"));
            // A shared directory lists every worker's: this one's are checked.
            for entry in entries.into_iter().filter(|e| made_by(e, w as u64)) {
                let name = format!("{prefix}/{entry}");
                assert!(
                    m.files.contains_key(&name) || m.maybe.contains_key(&name),
                    "{stage}: unexpected entry {name}"
                );
                // Acknowledged files were read above.
                assert!(
                    m.files.contains_key(&name) || read(&name).await.is_some(),
                    "{stage}: listed entry {name} does not resolve"
                );
            }
        }
    }
    checked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_work_survives_random_sigkills_and_fsck_reclaims_the_rest() {
    chaos("full", Layout::Own).await;
}

/// The same with replayed commits: changes are answered before they are
/// durable, and a killed server gets the ones it lost back from the clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_replayed_commits_acknowledged_work_survives_random_sigkills() {
    chaos("replay", Layout::Own).await;
}

/// Every worker in the same two directories, which split over the servers
/// (past 64 entries) while servers are killed, splits included.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn in_directories_that_split_acknowledged_work_survives_random_sigkills() {
    chaos("replay", Layout::Shared).await;
}

async fn chaos(sync: &str, layout: Layout) {
    let secs = env_u64("SHOAL_CRASH_SECS", CHAOS_SECS);
    let seed = env_u64("SHOAL_CRASH_SEED", SEED);
    eprintln!("crash: sync = {sync}, {layout:?} directories, {secs} s of chaos, seed {seed:#x}");
    // With `replay`, group flushes 100 ms apart (not 5): more kills find
    // changes answered and not yet flushed, which their clients replay.
    let mut cluster = Cluster::builder()
        .servers(4)
        .set("strip_size=65536")
        .set(&format!("sync={sync}"))
        .set("replay_flush_ms=100")
        .set("split_entries=64")
        .start();
    let setup = cluster.client();
    let dirs: std::collections::BTreeSet<String> = (0..WORKERS)
        .flat_map(|w| SIDES.map(|side| dir_name(w, side, layout)))
        .collect();
    for name in &dirs {
        setup.mkdir(ROOT, name, 0o755).await.unwrap();
    }
    let mnt = cluster.mount();
    let started = Instant::now();
    let until = started + Duration::from_secs(secs);
    // Each native worker has a client of its own, as a process would; the
    // others are processes of their own. Not tasks of this process: it
    // spawns the servers, and a process spawned while its parent's threads
    // wait in calls into a FUSE mount can hang in its first page faults
    // (kernel 6.18), which no user's server start meets.
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            if w < NATIVE_WORKERS {
                let client = cluster.client();
                tokio::spawn(async move {
                    let dirs = Dirs::native(&client, w, layout).await;
                    worker(dirs, w, until, seed).await
                })
            } else {
                let child = mount_worker(&mnt, w, secs, seed, layout);
                tokio::spawn(mount_worker_model(w, child))
            }
        })
        .collect();

    // Chaos, on this task (the kit's calls block; the native workers run
    // on the runtime's threads).
    let mut rng = StdRng::seed_from_u64(seed);
    let ids = cluster.server_ids();
    let mut kills = 0u64;
    // Changes replayed by every start of every server (each start counts
    // its own: read before it is killed, and at the end).
    let observer = cluster.uncached_client();
    let mut replayed = 0;
    loop {
        let pause = Duration::from_millis(rng.random_range(1000..3000));
        if Instant::now() + pause >= until {
            break;
        }
        tokio::time::sleep(pause).await;
        for id in &ids {
            assert!(
                cluster.is_running(*id),
                "server {id} exited on its own: {}",
                cluster.read_log(&format!("server-{id}"))
            );
        }
        let victim = ids[rng.random_range(0..ids.len())];
        replayed += observer.server_stats(victim).await.unwrap().replayed;
        cluster.kill(victim);
        kills += 1;
        tokio::time::sleep(DOWN).await;
        cluster.start_server(victim);
    }

    let mut models = Vec::new();
    for (w, h) in workers.into_iter().enumerate() {
        match h.await.expect("worker task") {
            Ok(m) => models.push(m),
            Err(hang) => panic!("worker {w}: {hang}"),
        }
    }
    for id in &ids {
        if !cluster.is_running(*id) {
            cluster.start_server(*id);
        }
    }
    let acked: u64 = models.iter().map(|m| m.acked).sum();
    let native = &models[..NATIVE_WORKERS as usize];
    let acked_native: u64 = native.iter().map(|m| m.acked).sum();
    let failed: u64 = models.iter().map(|m| m.failed).sum();
    let mut errors = BTreeMap::new();
    for m in &models {
        for (k, v) in &m.errors {
            *errors.entry(k.clone()).or_insert(0u64) += v;
        }
    }
    eprintln!(
        "crash: {:.1} s, {kills} kills, {acked} operations acknowledged \
         ({acked_native} by native clients, {} through the mount), \
         {failed} interrupted {errors:?}, {} files expected",
        started.elapsed().as_secs_f64(),
        acked - acked_native,
        models.iter().map(|m| m.files.len()).sum::<usize>()
    );
    assert!(kills > 0, "the chaos killed no server");
    for m in &models {
        assert!(
            m.acked > 0,
            "no operation through {} was acknowledged",
            m.via
        );
    }
    // Every server is back within DOWN, far inside restart_wait_ms: a
    // restart reaches no caller, through a client or through the mount.
    assert_eq!(failed, 0, "operations failed to callers: {errors:?}");

    let client = cluster.uncached_client();
    for id in &ids {
        replayed += client.server_stats(*id).await.unwrap().replayed;
    }
    eprintln!("crash: the servers' starts replayed {replayed} kept changes of their clients");
    // First through the mount the workers wrote through, right away: what
    // its caches (and the kernel's) held across the restarts must be what
    // those workers wrote. Then through a fresh client, and a fresh mount.
    let writers_mount: Vec<Dirs> = (0..WORKERS).map(|w| Dirs::mount(&mnt, w, layout)).collect();
    let mut fresh = Vec::new();
    for w in 0..WORKERS {
        fresh.push(Dirs::native(&client, w, layout).await);
    }
    let second = SharedMount::new(&cluster);
    let second_mount: Vec<Dirs> = (0..WORKERS)
        .map(|w| Dirs::mount(&second.path(), w, layout))
        .collect();
    let stage = "after the crashes, through";
    let views = [
        ("the writers' mount", &writers_mount),
        ("a fresh native client", &fresh),
        ("a second mount", &second_mount),
    ];
    for (via, view) in views {
        let checked = verify(view, &models, &format!("{stage} {via}"), &client).await;
        eprintln!("crash: verified {checked} acknowledged files through {via}");
    }
    drop(second);

    // fsck may find orphans, never a dangling entry; --repair leaves zero.
    let found = settled_fsck(&client).await;
    eprintln!(
        "crash: fsck found {} orphan objects, {} stale marks, {} orphan files \
         ({} objects, {} entries scanned)",
        found.orphans.len(),
        found.stale_marks.len(),
        found.orphan_files.len(),
        found.objects,
        found.entries
    );
    repair_to_zero(&client).await;

    verify(&fresh, &models, "after fsck --repair", &client).await;
    // Creates still work (the pools were not damaged by the repair).
    for (w, fs) in fresh.iter().enumerate() {
        let data = pattern(w as u64, 100_000);
        // Its own name, in a directory the workers may share.
        let name = format!("a/z{w}-after-repair");
        let file = fs.create(&name).await.unwrap();
        let written = fs.write(&file, Bytes::from(data.clone())).await.unwrap();
        assert_eq!(written, data.len());
        fs.fsync(file).await.unwrap();
        let found = fs.read(&name).await.unwrap().expect("created");
        assert!(found.data == data, "after-repair in worker {w}'s directory");
    }
}
