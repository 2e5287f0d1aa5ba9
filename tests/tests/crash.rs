//! Crash suite (CI form): while 4 clients create, write (with fsync), rename,
//! hard-link, move linked files to another directory and remove files, a
//! server chosen at random is killed with SIGKILL every 1–3 s and restarted. Afterwards every operation acknowledged as durable is
//! present with its bytes, no directory entry names a missing object, and
//! fsck reports the orphans a crash may leave and `--repair` reclaims them,
//! leaving zero.
//!
//! `SHOAL_CRASH_SECS` runs the chaos longer (default 15 s);
//! `SHOAL_CRASH_SEED` picks another random sequence.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shoal_client::{Client, Errno, FileKind, ShoalError};
use shoal_proto::handle::{Handle, ROOT};
use shoal_tests::{pattern, repair_to_zero, settled_fsck, Cluster};

/// How long the clients work while servers crash, unless `SHOAL_CRASH_SECS`.
const CHAOS_SECS: u64 = 15;
/// The random sequence (kills, file sizes, operations), unless `SHOAL_CRASH_SEED`.
const SEED: u64 = 0x5eed_c4a5;
const WORKERS: u64 = 4;
/// Any single operation taking longer than this is a hang: the test fails.
const OP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a killed server stays down.
const DOWN: Duration = Duration::from_millis(200);
/// How long a worker waits after an operation failed.
const BACKOFF: Duration = Duration::from_millis(20);
/// Largest file written: past the first 64 KiB strip and past `inline_max`.
const MAX_LEN: usize = 200 << 10;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What one worker's acknowledged operations say must (not) exist in its
/// two directories. Names are `a/NAME` or `b/NAME`.
#[derive(Default, Debug)]
struct Model {
    /// Files whose create, write and fsync (and any rename or link) all
    /// succeeded: name → (seed, len).
    files: BTreeMap<String, (u64, usize)>,
    /// Names whose unlink or rename-away was acknowledged.
    gone: BTreeSet<String>,
    /// Names an interrupted operation leaves ambiguous; `Some` when, if the
    /// name exists, its bytes are known (an acknowledged file whose unlink or
    /// rename failed).
    maybe: BTreeMap<String, Option<(u64, usize)>>,
    /// Interrupted renames of acknowledged files within a directory: the
    /// file is under exactly one of the two names.
    either: Vec<(String, String)>,
    /// Interrupted moves of acknowledged files to the other directory: the
    /// file is under one of the two names, or both (never neither).
    either_or_both: Vec<(String, String)>,
    acked: u64,
    failed: u64,
    errors: BTreeMap<String, u64>,
}

impl Model {
    /// Records an interrupted operation and backs off a little, so a worker
    /// does not spin while a server is down.
    async fn fail(&mut self, what: &str, e: &ShoalError) {
        self.failed += 1;
        let kind = format!("{what}: errno {}", e.errno.0);
        if !self.errors.contains_key(&kind) {
            eprintln!("crash: first {kind}: {}", e.message);
        }
        *self.errors.entry(kind).or_default() += 1;
        tokio::time::sleep(BACKOFF).await;
    }
}

/// Runs `f` with the hang bound; a timeout aborts the worker with a message.
async fn bounded<T>(
    what: String,
    f: impl Future<Output = Result<T, ShoalError>>,
) -> Result<Result<T, ShoalError>, String> {
    tokio::time::timeout(OP_TIMEOUT, f)
        .await
        .map_err(|_| format!("{what} hung for more than {OP_TIMEOUT:?}"))
}

/// A worker's two directories: `a` and `b`.
type Dirs = [Handle; 2];

/// The directory and entry name of a model name (`a/NAME` or `b/NAME`).
fn place<'n>(dirs: &Dirs, name: &'n str) -> (Handle, &'n str) {
    match name.split_once('/') {
        Some(("a", n)) => (dirs[0], n),
        Some(("b", n)) => (dirs[1], n),
        _ => panic!("model name {name:?} is not a/NAME or b/NAME"),
    }
}

async fn worker(
    client: Client,
    id: u64,
    dirs: Dirs,
    until: Instant,
    seed: u64,
) -> Result<Model, String> {
    let mut rng = StdRng::seed_from_u64(seed ^ (id << 32));
    let mut m = Model::default();
    let mut i = 0u64;
    let dir = dirs[0];
    while Instant::now() < until {
        i += 1;
        let short = format!("f{id}-{i}");
        let name = format!("a/{short}");
        let fseed = id * 1_000_000 + i;
        let len = match rng.random_range(0..4) {
            0 => 0,
            1 => rng.random_range(1..4096),
            2 => rng.random_range(4096..(64 << 10)),
            _ => rng.random_range((64 << 10)..MAX_LEN),
        };
        let h = match bounded(format!("create {name}"), client.create(dir, &short, 0o644)).await? {
            Ok(a) => a.handle,
            Err(e) => {
                m.fail("create", &e).await;
                m.maybe.insert(name, None);
                continue;
            }
        };
        if len > 0 {
            let data = Bytes::from(pattern(fseed, len));
            match bounded(format!("write {name}"), client.write(h, 0, data)).await? {
                Ok(n) if n == len => {}
                Ok(n) => return Err(format!("write {name}: {n} of {len} bytes acknowledged")),
                Err(e) => {
                    m.fail("write", &e).await;
                    m.maybe.insert(name, None);
                    continue;
                }
            }
        }
        if let Err(e) = bounded(format!("fsync {name}"), client.fsync(h)).await? {
            m.fail("fsync", &e).await;
            m.maybe.insert(name, None);
            continue;
        }
        m.acked += 1;
        m.files.insert(name.clone(), (fseed, len));

        let mut name = name;
        if rng.random_bool(0.3) {
            let to = format!("a/r{id}-{i}");
            let content = m.files.remove(&name).unwrap();
            match bounded(
                format!("rename {name}"),
                client.rename(dir, place(&dirs, &name).1, dir, place(&dirs, &to).1, false),
            )
            .await?
            {
                Ok(()) => {
                    m.acked += 1;
                    m.gone.insert(name);
                    m.files.insert(to.clone(), content);
                    name = to;
                }
                Err(e) => {
                    m.fail("rename", &e).await;
                    m.maybe.insert(name.clone(), Some(content));
                    m.maybe.insert(to.clone(), Some(content));
                    m.either.push((name, to));
                    continue;
                }
            }
        }
        if rng.random_bool(0.3) {
            link_and_move(&client, &dirs, &mut m, &mut rng, id, i, &name).await?;
        }
        if rng.random_bool(0.3) && !m.files.is_empty() {
            let k = rng.random_range(0..m.files.len());
            let victim = m.files.keys().nth(k).unwrap().clone();
            let content = m.files.remove(&victim).unwrap();
            let (vdir, vname) = place(&dirs, &victim);
            match bounded(format!("unlink {victim}"), client.unlink(vdir, vname)).await? {
                Ok(()) => {
                    m.acked += 1;
                    m.gone.insert(victim);
                }
                Err(e) => {
                    m.fail("unlink", &e).await;
                    m.maybe.insert(victim, Some(content));
                }
            }
        }
    }
    Ok(m)
}

/// Gives the acknowledged file `name` a second name in the other directory
/// (a hard link), and now and then moves that name back to the first
/// directory under a third (a rename of a linked file across directories).
async fn link_and_move(
    client: &Client,
    dirs: &Dirs,
    m: &mut Model,
    rng: &mut StdRng,
    id: u64,
    i: u64,
    name: &str,
) -> Result<(), String> {
    let content = m.files[name];
    let (h, _) = match bounded(format!("lookup {name}"), async {
        let (d, n) = place(dirs, name);
        client.lookup(d, n).await
    })
    .await?
    {
        Ok(found) => found,
        Err(e) => {
            m.fail("lookup", &e).await;
            return Ok(());
        }
    };
    let linked = format!("b/l{id}-{i}");
    let (ld, ln) = place(dirs, &linked);
    match bounded(format!("link {name} {linked}"), client.link(h, ld, ln)).await? {
        Ok(_) => {
            m.acked += 1;
            m.files.insert(linked.clone(), content);
        }
        Err(e) => {
            m.fail("link", &e).await;
            m.maybe.insert(linked, Some(content));
            return Ok(());
        }
    }
    if rng.random_bool(0.5) {
        let to = format!("a/m{id}-{i}");
        let (td, tn) = place(dirs, &to);
        m.files.remove(&linked);
        match bounded(
            format!("rename {linked} {to}"),
            client.rename(ld, ln, td, tn, false),
        )
        .await?
        {
            Ok(()) => {
                m.acked += 1;
                m.gone.insert(linked);
                m.files.insert(to, content);
            }
            Err(e) => {
                m.fail("move", &e).await;
                m.maybe.insert(linked.clone(), Some(content));
                m.maybe.insert(to.clone(), Some(content));
                m.either_or_both.push((linked, to));
            }
        }
    }
    Ok(())
}

/// Reads `name` (`a/NAME` or `b/NAME`) whole; `None` if it does not exist.
async fn read_name(client: &Client, dirs: &Dirs, name: &str) -> Option<Vec<u8>> {
    let (dir, name) = place(dirs, name);
    match client.lookup(dir, name).await {
        Ok((h, kind)) => {
            assert_eq!(kind, FileKind::File, "{name} is a regular file");
            let data = client
                .read(h, 0, MAX_LEN + 1)
                .await
                .unwrap_or_else(|e| panic!("read {name} (entry exists): {e}"));
            Some(data.to_vec())
        }
        Err(e) if e.errno == Errno::ENOENT => None,
        Err(e) => panic!("lookup {name}: {e}"),
    }
}

/// Checks every worker directory against its model.
async fn verify(client: &Client, dirs: &[Dirs], models: &[Model], stage: &str) {
    for (dirs, m) in dirs.iter().zip(models) {
        for (name, (seed, len)) in &m.files {
            let data = read_name(client, dirs, name)
                .await
                .unwrap_or_else(|| panic!("{stage}: acknowledged {name} is missing"));
            assert_eq!(data.len(), *len, "{stage}: length of acknowledged {name}");
            let want = pattern(*seed, *len);
            if data != want {
                let at = data
                    .iter()
                    .zip(&want)
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                let (d, n) = place(dirs, name);
                let (h, _) = client.lookup(d, n).await.unwrap();
                panic!(
                    "{stage}: bytes of acknowledged {name} ({len} bytes) differ from byte {at} \
                     (handle {h:#x}, layout {:?})",
                    client.layout(h).await
                );
            }
        }
        for name in &m.gone {
            assert!(
                read_name(client, dirs, name).await.is_none(),
                "{stage}: {name} was removed or renamed away (acknowledged) but exists"
            );
        }
        for (name, content) in &m.maybe {
            let data = read_name(client, dirs, name).await;
            if let (Some(data), Some((seed, len))) = (data, content) {
                assert!(
                    data == pattern(*seed, *len),
                    "{stage}: {name} (interrupted unlink/rename of an acknowledged file) \
                     exists with other bytes ({} of {len})",
                    data.len()
                );
            }
        }
        for (from, to) in &m.either_or_both {
            let a = read_name(client, dirs, from).await.is_some();
            let b = read_name(client, dirs, to).await.is_some();
            assert!(
                a || b,
                "{stage}: interrupted move {from} -> {to}: the file is under neither name (lost)"
            );
        }
        for (from, to) in &m.either {
            let a = read_name(client, dirs, from).await.is_some();
            let b = read_name(client, dirs, to).await.is_some();
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
        for (prefix, dir) in ["a", "b"].iter().zip(dirs) {
            let entries = client.readdir_all(*dir).await.expect("readdir");
            for e in entries {
                let name = format!("{prefix}/{}", e.name);
                assert!(
                    m.files.contains_key(&name) || m.maybe.contains_key(&name),
                    "{stage}: unexpected entry {name}"
                );
                // Acknowledged files were read above.
                assert!(
                    m.files.contains_key(&name) || read_name(client, dirs, &name).await.is_some(),
                    "{stage}: listed entry {name} does not resolve"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_work_survives_random_sigkills_and_fsck_reclaims_the_rest() {
    chaos("full").await;
}

/// The same with replayed commits: changes are answered before they are
/// durable, and a killed server gets the ones it lost back from the clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_replayed_commits_acknowledged_work_survives_random_sigkills() {
    chaos("replay").await;
}

async fn chaos(sync: &str) {
    let secs = env_u64("SHOAL_CRASH_SECS", CHAOS_SECS);
    let seed = env_u64("SHOAL_CRASH_SEED", SEED);
    eprintln!("crash: sync = {sync}, {secs} s of chaos, seed {seed:#x}");
    // With `replay`, group flushes 100 ms apart (not 5): more kills find
    // changes answered and not yet flushed, which their clients replay.
    let mut cluster = Cluster::builder()
        .servers(4)
        .set("strip_size=65536")
        .set(&format!("sync={sync}"))
        .set("replay_flush_ms=100")
        .start();
    let setup = cluster.client();
    let mut dirs: Vec<Dirs> = Vec::new();
    for w in 0..WORKERS {
        let mut pair = [0; 2];
        for (d, side) in pair.iter_mut().zip(["a", "b"]) {
            *d = setup
                .mkdir(ROOT, &format!("w{w}{side}"), 0o755)
                .await
                .unwrap()
                .handle;
        }
        dirs.push(pair);
    }

    let started = Instant::now();
    let until = started + Duration::from_secs(secs);
    let workers: Vec<_> = dirs
        .iter()
        .enumerate()
        .map(|(w, dir)| tokio::spawn(worker(cluster.client(), w as u64, *dir, until, seed)))
        .collect();

    // Chaos, on this task (the kit's calls block; the workers run on the
    // runtime's threads).
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
    let failed: u64 = models.iter().map(|m| m.failed).sum();
    let mut errors = BTreeMap::new();
    for m in &models {
        for (k, v) in &m.errors {
            *errors.entry(k.clone()).or_insert(0u64) += v;
        }
    }
    eprintln!(
        "crash: {:.1} s, {kills} kills, {acked} operations acknowledged, \
         {failed} interrupted {errors:?}, {} files expected",
        started.elapsed().as_secs_f64(),
        models.iter().map(|m| m.files.len()).sum::<usize>()
    );
    assert!(kills > 0, "the chaos killed no server");
    assert!(acked > 0, "no operation was acknowledged");
    // Every server is back within DOWN, far inside restart_wait_ms: a
    // restart reaches no caller.
    assert_eq!(failed, 0, "operations failed to callers: {errors:?}");

    let client = cluster.uncached_client();
    for id in &ids {
        replayed += client.server_stats(*id).await.unwrap().replayed;
    }
    eprintln!("crash: the servers' starts replayed {replayed} changes their clients kept");
    verify(&client, &dirs, &models, "after the crashes").await;

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

    verify(&client, &dirs, &models, "after fsck --repair").await;
    // Creates still work (the pools were not damaged by the repair).
    for (w, [dir, _]) in dirs.iter().enumerate() {
        let h = client
            .create(*dir, "after-repair", 0o644)
            .await
            .unwrap()
            .handle;
        let data = pattern(w as u64, 100_000);
        client.write(h, 0, Bytes::from(data.clone())).await.unwrap();
        client.fsync(h).await.unwrap();
        assert!(client.read(h, 0, 200_000).await.unwrap() == data[..]);
    }
}
