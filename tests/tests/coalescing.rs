//! Commit coalescing ([Carns 2009], section III.C), counted by the servers: under
//! concurrent creates the modifying requests share KV syncs, a lone sequential
//! client still pays one sync per modifying request (low-latency mode), with
//! `coalescing=false` every modifying request syncs for itself, and nothing
//! acknowledged is lost when the servers are killed.
//!
//! Modifying requests are counted generically (every operation for which
//! `Op::modifies_metadata` holds), whatever messages a create takes. The
//! clusters run with `sync = "full"`, the mode coalescing serves (with
//! `replay` changes are flushed in groups anyway).

use futures::StreamExt;
use shoal_client::Client;
use shoal_proto::handle::ROOT;
use shoal_proto::Op;
use shoal_tests::{entry_names, Cluster};

/// Concurrent clients, files per client, creates in flight per client.
const CLIENTS: usize = 4;
const FILES: usize = 150;
const IN_FLIGHT: usize = 8;

/// What the servers counted, summed over all of them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Counts {
    /// KV syncs performed (`Stats::kv_syncs`).
    kv_syncs: u64,
    /// Modifying requests received.
    modifying: u64,
    /// Syncs reported by those requests (the one that synced counts 1).
    modifying_syncs: u64,
}

fn is_modifying(name: &str) -> bool {
    Op::ALL
        .iter()
        .any(|op| op.modifies_metadata() && op.name() == name)
}

async fn counts(cluster: &Cluster, client: &Client) -> Counts {
    let mut c = Counts::default();
    for s in cluster.server_ids() {
        let stats = client.server_stats(s).await.expect("stats");
        c.kv_syncs += stats.kv_syncs;
        for op in stats.ops.iter().filter(|o| is_modifying(&o.op)) {
            c.modifying += op.requests;
            c.modifying_syncs += op.syncs;
        }
    }
    c
}

/// Per server and modifying operation: (requests, syncs).
async fn per_op(cluster: &Cluster, client: &Client) -> Vec<(u32, String, u64, u64)> {
    let mut out = Vec::new();
    for s in cluster.server_ids() {
        let stats = client.server_stats(s).await.expect("stats");
        for op in stats.ops.into_iter().filter(|o| is_modifying(&o.op)) {
            out.push((s, op.op, op.requests, op.syncs));
        }
    }
    out
}

fn delta(before: Counts, after: Counts) -> Counts {
    Counts {
        kv_syncs: after.kv_syncs - before.kv_syncs,
        modifying: after.modifying - before.modifying,
        modifying_syncs: after.modifying_syncs - before.modifying_syncs,
    }
}

/// `CLIENTS` clients, each with its own connections, create `FILES` files
/// each in their own directory, `IN_FLIGHT` at a time. Returns the directory
/// names and the counts of the creates alone.
async fn concurrent_creates(cluster: &Cluster) -> (Vec<String>, Counts) {
    let admin = cluster.client();
    let mut dirs = Vec::new();
    for c in 0..CLIENTS {
        let name = format!("client{c}");
        admin.mkdir(ROOT, &name, 0o755).await.unwrap();
        dirs.push(name);
    }
    let before = counts(cluster, &admin).await;
    let tasks: Vec<_> = dirs
        .iter()
        .map(|name| {
            let client = cluster.client();
            let name = name.clone();
            tokio::spawn(async move {
                let (dir, _) = client.resolve(&format!("/{name}")).await.unwrap();
                futures::stream::iter(0..FILES)
                    .map(|i| {
                        let client = client.clone();
                        async move { client.create(dir, &format!("f{i:04}"), 0o644).await }
                    })
                    .buffer_unordered(IN_FLIGHT)
                    .for_each(|r| async move {
                        r.expect("create");
                    })
                    .await;
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let after = counts(cluster, &admin).await;
    (dirs, delta(before, after))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_creates_share_syncs() {
    let cluster = Cluster::builder().servers(4).set("sync=full").start();
    assert!(cluster.config().settings.coalescing, "on by default");
    let (_, c) = concurrent_creates(&cluster).await;
    assert!(
        c.modifying >= (CLIENTS * FILES) as u64,
        "a create is at least one modifying request (one with colocate): {c:?}"
    );
    let ratio = c.kv_syncs as f64 / c.modifying as f64;
    assert!(
        ratio < 0.5,
        "coalescing: {} syncs for {} modifying requests ({ratio:.3}) {c:?}",
        c.kv_syncs,
        c.modifying
    );
    assert!(c.modifying_syncs <= c.kv_syncs, "{c:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequential_client_syncs_once_per_modifying_request() {
    // Precreate off: its pool refills are server-to-server modifying
    // requests sent in the background, i.e. a second, concurrent client of
    // the servers, which coalescing would rightly let share syncs.
    // Delegations off: under one, the client answers the creates itself
    // and sends them many to a message, which is not what this counts.
    let cluster = Cluster::builder()
        .servers(4)
        .set("sync=full")
        .set("precreate=false")
        .set("dir_delegations=false")
        .start();
    assert!(cluster.config().settings.coalescing);
    let client = cluster.client();
    let dir = client.mkdir(ROOT, "seq", 0o755).await.unwrap().handle;
    let before = counts(&cluster, &client).await;
    for i in 0..60 {
        client
            .create(dir, &format!("f{i:03}"), 0o644)
            .await
            .unwrap();
    }
    let c = delta(before, counts(&cluster, &client).await);
    assert!(c.modifying >= 60, "{c:?}");
    assert_eq!(
        c.kv_syncs, c.modifying,
        "low-latency mode: one sync per modifying request (ratio 1.0) {c:?}"
    );
    assert_eq!(c.modifying_syncs, c.modifying, "{c:?}");
    for (s, op, requests, syncs) in per_op(&cluster, &client).await {
        assert_eq!(syncs, requests, "server {s} {op}: one sync per request");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_coalescing_every_modifying_request_syncs() {
    // Precreate off: a pool refill still in flight when the counts are read
    // has been counted as a modifying request and not yet as a sync (seen
    // once in CI: 606 syncs for 607 requests).
    let cluster = Cluster::builder()
        .servers(4)
        .set("sync=full")
        .set("coalescing=false")
        .set("precreate=false")
        .start();
    let (_, c) = concurrent_creates(&cluster).await;
    assert!(c.modifying >= (CLIENTS * FILES) as u64, "{c:?}");
    assert_eq!(
        c.modifying_syncs, c.modifying,
        "coalescing off: one sync per modifying request (ratio 1.0) {c:?}"
    );
    assert!(c.kv_syncs >= c.modifying, "{c:?}");
    let client = cluster.client();
    for (s, op, requests, syncs) in per_op(&cluster, &client).await {
        assert_eq!(syncs, requests, "server {s} {op}: one sync per request");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn coalesced_creates_survive_kill_9() {
    let mut cluster = Cluster::builder().servers(4).set("sync=full").start();
    let (dirs, c) = concurrent_creates(&cluster).await;
    assert!(
        c.kv_syncs < c.modifying,
        "the creates did share syncs: {c:?}"
    );
    // Every create above was acknowledged: crash every server at once.
    for id in cluster.server_ids() {
        cluster.kill(id);
    }
    for id in cluster.server_ids() {
        cluster.start_server(id);
    }
    let client = cluster.client();
    for name in &dirs {
        let (dir, _) = client.resolve(&format!("/{name}")).await.unwrap();
        let names = entry_names(&client, dir).await;
        let want: Vec<String> = (0..FILES).map(|i| format!("f{i:04}")).collect();
        assert_eq!(names, want, "entries of /{name} after kill -9");
        // Each file's objects survived too (getattr reads the metafile and
        // the sizes of its datafiles).
        futures::stream::iter(want)
            .map(|f| {
                let client = client.clone();
                let name = name.clone();
                async move {
                    let (h, _) = client.resolve(&format!("/{name}/{f}")).await.unwrap();
                    let attr = client.getattr(h).await.unwrap();
                    assert_eq!((attr.size, attr.mode & 0o777), (0, 0o644), "/{name}/{f}");
                }
            })
            .buffer_unordered(8)
            .collect::<Vec<()>>()
            .await;
    }
}
