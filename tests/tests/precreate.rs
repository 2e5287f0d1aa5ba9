//! Precreate ([Carns 2009], section III.A): every server keeps pools of datafiles
//! created ahead on the other servers, so a create is one augmented request
//! plus the directory entry (2 messages instead of n+3). Pools persist in each
//! server's KV store: a restart (clean or kill -9) neither loses an
//! acknowledged file nor hands a datafile out twice.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal_client::{Client, Errno};
use shoal_proto::handle::ROOT;
use shoal_tests::{pattern, Cluster};

/// Every datafile handle of every file in `files`, asserting none repeats.
async fn all_datafiles(client: &Client, files: &[u64]) -> BTreeSet<u64> {
    let mut seen = BTreeSet::new();
    for f in files {
        for (d, _) in client.layout(*f).await.unwrap().datafiles {
            assert!(seen.insert(d), "datafile {d:#x} is used by two files");
        }
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn precreate_only_create_is_2_messages_stat_n_plus_1() {
    let cluster = Cluster::builder()
        .servers(4)
        .baseline()
        .set("precreate=true")
        .start();
    let client = cluster.uncached_client();
    client.ping_all().await.unwrap();
    cluster.wait_for_pools(&client).await;
    let n = 4;

    let (attr, create) = cluster
        .messages_during(&client, client.create(ROOT, "f", 0o640))
        .await;
    let attr = attr.unwrap();
    assert_eq!(create, 2, "create = augmented create + entry");
    assert_eq!((attr.mode, attr.size), (0o640, 0));
    let h = attr.handle;

    let (got, stat) = cluster.messages_during(&client, client.getattr(h)).await;
    assert_eq!(got.unwrap().size, 0);
    assert_eq!(stat, n + 1, "stat without stuffing");

    // The file is striped over every server from the start.
    let layout = client.layout(h).await.unwrap();
    let servers: BTreeSet<u32> = layout.datafiles.iter().map(|(_, s)| *s).collect();
    assert_eq!(servers, BTreeSet::from([0, 1, 2, 3]));
    assert_eq!(layout.strip_size, 1 << 20);
    let data = pattern(1, (3 << 20) + 123);
    client.write(h, 0, Bytes::from(data.clone())).await.unwrap();
    assert_eq!(client.read(h, 0, data.len() + 10).await.unwrap(), data);
    assert_eq!(client.getattr(h).await.unwrap().size, data.len() as u64);

    // EEXIST: the objects made for the refused name are removed again (its
    // n-1 remote datafiles were counted already, in the pools).
    let before = client.statfs().await.unwrap().objects;
    let err = client.create(ROOT, "f", 0o644).await.unwrap_err();
    assert_eq!(err.errno, Errno::EEXIST);
    let before = before - (n - 1);
    assert_eq!(client.statfs().await.unwrap().objects, before, "no orphans");

    let (removed, remove) = cluster
        .messages_during(&client, client.unlink(ROOT, "f"))
        .await;
    removed.unwrap();
    assert_eq!(remove, n + 2, "remove: entry, metafile, n datafiles");
    assert_eq!(
        client.statfs().await.unwrap().objects,
        before - (n + 1),
        "the file's objects are gone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_refill_pools_in_the_background_and_never_reuse_a_datafile() {
    // A tiny pool: creates drain it below the low mark again and again.
    let cluster = Cluster::builder()
        .servers(3)
        .baseline()
        .set("precreate=true")
        .set("precreate_low_mark=3")
        .set("precreate_batch=8")
        .start();
    let client = cluster.client();
    client.ping_all().await.unwrap();
    let files: Vec<u64> = futures::future::try_join_all((0..60).map(|i| {
        let c = client.clone();
        async move { c.create(ROOT, &format!("f{i}"), 0o644).await }
    }))
    .await
    .unwrap()
    .into_iter()
    .map(|a| a.handle)
    .collect();
    let seen = all_datafiles(&client, &files).await;
    assert_eq!(seen.len(), 60 * 3);
    let batches: u64 = cluster.requests_of(&client, "create_datafiles").await;
    assert!(
        batches >= 60 * 2 / 8,
        "each server needed refills from both peers: {batches}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_persist_across_a_clean_restart() {
    let mut cluster = Cluster::builder()
        .servers(4)
        .baseline()
        .set("precreate=true")
        .start();
    let client = cluster.client();
    client.ping_all().await.unwrap();
    cluster.wait_for_pools(&client).await;
    let mut files = Vec::new();
    for i in 0..20 {
        files.push(
            client
                .create(ROOT, &format!("a{i}"), 0o644)
                .await
                .unwrap()
                .handle,
        );
    }
    for id in cluster.server_ids() {
        cluster.terminate(id);
    }
    for id in cluster.server_ids() {
        cluster.start_server(id);
    }
    let client = cluster.client();
    client.ping_all().await.unwrap();
    for i in 0..20 {
        files.push(
            client
                .create(ROOT, &format!("b{i}"), 0o644)
                .await
                .unwrap()
                .handle,
        );
    }
    // Give a (wrong) refill time to show up in the counters.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let batches: u64 = cluster.requests_of(&client, "create_datafiles").await;
    assert_eq!(
        batches, 0,
        "the pools came back from the store, full enough"
    );
    assert_eq!(all_datafiles(&client, &files).await.len(), 40 * 4);
    for (i, f) in files.iter().enumerate() {
        let data = pattern(i as u64, (2 << 20) + i);
        client
            .write(*f, 0, Bytes::from(data.clone()))
            .await
            .unwrap();
        assert_eq!(client.read(*f, 0, data.len()).await.unwrap(), data);
    }
}

/// Strip size of the crash tests: small, so unstuffing is cheap to trigger.
const STRIP: u64 = 65536;

/// Creates files from 4 workers (each file also written past its first
/// strip, which unstuffs it when stuffing is on), kills every server with
/// SIGKILL mid-way, restarts, and checks that every acknowledged file is
/// there with its bytes and that no datafile serves two files.
async fn kill_9_during_creates(mut cluster: Cluster) {
    let client = cluster.client();
    client.ping_all().await.unwrap();
    cluster.wait_for_pools(&client).await;
    let dir = client.mkdir(ROOT, "d", 0o755).await.unwrap().handle;
    let tail = |h: u64| Bytes::from(pattern(h, 100));

    let acked: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let c = client.clone();
            let acked = acked.clone();
            tokio::spawn(async move {
                for i in 0.. {
                    let name = format!("w{w}-{i}");
                    let made = tokio::time::timeout(Duration::from_secs(20), async {
                        let h = c.create(dir, &name, 0o644).await?.handle;
                        c.write(h, 2 * STRIP, tail(h)).await?;
                        c.fsync(h).await?;
                        Ok::<u64, shoal_client::ShoalError>(h)
                    })
                    .await;
                    match made {
                        Ok(Ok(h)) => acked.lock().unwrap().push((name, h)),
                        _ => return,
                    }
                }
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(20);
    while acked.lock().unwrap().len() < 60 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for id in cluster.server_ids() {
        cluster.kill(id);
    }
    for w in workers {
        w.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() >= 60,
        "only {} creates before the crash",
        acked.len()
    );

    for id in cluster.server_ids() {
        cluster.start_server(id);
    }
    let client = cluster.client();
    client.ping_all().await.unwrap();
    let mut files = Vec::new();
    for (name, h) in &acked {
        let (found, _) = client.lookup(dir, name).await.unwrap();
        assert_eq!(found, *h, "{name} survived");
        let mut want = vec![0u8; 2 * STRIP as usize];
        want.extend_from_slice(&tail(*h));
        assert_eq!(client.read(*h, 0, want.len() + 1).await.unwrap(), want);
        files.push(found);
    }
    // New files after the crash still work and take fresh datafiles.
    for i in 0..20 {
        let h = client
            .create(dir, &format!("after{i}"), 0o644)
            .await
            .unwrap()
            .handle;
        let data = pattern(i, 3 * STRIP as usize + 5);
        client.write(h, 0, Bytes::from(data.clone())).await.unwrap();
        assert_eq!(client.read(h, 0, data.len() + 1).await.unwrap(), data);
        files.push(h);
    }
    assert_eq!(all_datafiles(&client, &files).await.len(), files.len() * 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_creates_loses_nothing_acknowledged() {
    let cluster = Cluster::builder()
        .servers(4)
        .baseline()
        .set("precreate=true")
        .set(&format!("strip_size={STRIP}"))
        .start();
    kill_9_during_creates(cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_creates_and_unstuffs_loses_nothing_acknowledged() {
    let cluster = Cluster::builder()
        .servers(4)
        .set(&format!("strip_size={STRIP}"))
        .start();
    kill_9_during_creates(cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_pool_whose_peer_is_down_fails_cleanly() {
    // Pools of one that are never refilled in the background (low mark 0):
    // each create fills its pool itself.
    let mut cluster = Cluster::builder()
        .servers(2)
        .baseline()
        .set("precreate=true")
        .set("precreate_low_mark=0")
        .set("precreate_batch=1")
        // A call to the down server fails at once rather than waiting.
        .set("restart_wait_ms=0")
        .start();
    let client = cluster.uncached_client();
    // Up for good (a server killed while it creates its store cannot reopen it).
    client.ping_all().await.unwrap();
    cluster.kill(1);
    let started = Instant::now();
    // Creates placed on server 1 fail at once (it is down); those on server 0
    // need server 1's pool, which cannot fill: a clear error, in bounded time.
    let mut errors = Vec::new();
    for i in 0..2 {
        if let Err(e) = client.create(ROOT, &format!("f{i}"), 0o644).await {
            errors.push(e);
        }
    }
    assert!(started.elapsed() < Duration::from_secs(30), "bounded wait");
    assert_eq!(errors.len(), 2, "both creates fail: {errors:?}");
    assert!(
        errors
            .iter()
            .any(|e| e.message.contains("precreate pool for server 1")),
        "the error names the pool and the peer: {errors:?}"
    );
    cluster.start_server(1);
    let client = cluster.client();
    client.ping_all().await.unwrap();
    for i in 0..4 {
        let h = client
            .create(ROOT, &format!("g{i}"), 0o644)
            .await
            .unwrap()
            .handle;
        assert_eq!(client.layout(h).await.unwrap().datafiles.len(), 2);
    }
}
