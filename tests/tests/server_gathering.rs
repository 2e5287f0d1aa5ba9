//! Server write gathering [Hildebrand 2006]: scattered small writes of many
//! clients, merged by the file's gathering server into a few large writes
//! to the servers holding the strips; what a restart of the gathering
//! server or of a strip's server does to them (the clients send their
//! copies again: nothing is lost, and fsync succeeds).

use bytes::Bytes;
use shoal_client::{Client, Errno};
use shoal_proto::handle::{server_of, ROOT};
use shoal_proto::msg::GatherCommitRequest;
use shoal_proto::{extents, ops, Cred};
use shoal_tests::{pattern, Cluster};

const PIECE: usize = 1000;
const CLIENTS: usize = 10;
const PIECES: usize = 400;

/// Writes every piece of the shared file, client `k` every tenth from `k`:
/// scattered, so each client's buffered bytes are many extents.
async fn write_interleaved(clients: &[Client], h: u64) {
    futures::future::join_all(clients.iter().enumerate().map(|(k, c)| async move {
        for i in (k..PIECES).step_by(CLIENTS) {
            c.write(h, (i * PIECE) as u64, Bytes::from(pattern(i as u64, PIECE)))
                .await
                .unwrap();
        }
    }))
    .await;
}

async fn assert_whole(cluster: &Cluster, h: u64) {
    let got = cluster
        .uncached_client()
        .read(h, 0, PIECES * PIECE)
        .await
        .unwrap();
    assert_eq!(got.len(), PIECES * PIECE);
    for i in 0..PIECES {
        assert!(
            got[i * PIECE..(i + 1) * PIECE] == pattern(i as u64, PIECE)[..],
            "piece {i}"
        );
    }
}

/// Clients that send what they keep of a file each time it reaches 4 KiB
/// (five pieces or more: always scattered, so always to the gathering
/// server), to a cluster whose servers hold gathered bytes for a minute:
/// nothing is sent or written out by time, only by size or when a test
/// says.
fn eager_senders(cluster: &Cluster) -> Vec<Client> {
    (0..CLIENTS)
        .map(|_| {
            let mut config = cluster.config().clone();
            config.settings.gather_buffer = 4096;
            config.settings.cache_ttl_ms = 0;
            Client::new(config)
        })
        .collect()
}

/// `servers` with 64 KiB strips, holding gathered bytes for a minute.
fn holding_gathered_bytes(servers: u32) -> Cluster {
    Cluster::builder()
        .servers(servers)
        // Its tests kill servers holding files made a moment before.
        .durable()
        .set("strip_size=65536")
        .set("gather_delay_ms=60000")
        .start()
}

/// A cluster of `servers` with 64 KiB strips whose servers hold gathered
/// bytes until a commit, ten eager senders, and the shared file `shared`,
/// every piece of which they have written, most sent (none committed).
async fn written_and_sent(servers: u32) -> (Cluster, Vec<Client>, u64) {
    let cluster = holding_gathered_bytes(servers);
    let clients = eager_senders(&cluster);
    let h = clients[0]
        .create(ROOT, "shared", 0o644)
        .await
        .unwrap()
        .handle;
    write_interleaved(&clients, h).await;
    (cluster, clients, h)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_clients_scattered_writes_reach_the_strips_as_a_few_large_writes() {
    let (cluster, clients, h) = written_and_sent(4).await;
    let writes = || async {
        let c = &clients[0];
        cluster.requests_of(c, "write").await + cluster.requests_of(c, "write_extents").await
    };
    // Nothing reached the strips' servers yet (creating the file did not
    // write either).
    assert_eq!(writes().await, 0);
    // One client's fsync writes out what every client sent: one message to
    // each other server holding strips (400 KB over 64 KiB strips).
    clients[0].fsync(h).await.unwrap();
    let written = writes().await;
    assert!(
        written <= 3,
        "{PIECES} pieces of {CLIENTS} clients reached the strips as {written} writes"
    );
    for c in &clients {
        c.fsync(h).await.unwrap();
        assert!(c.write_paths().gathered_sends >= 1);
    }
    // How many depends on how far each client's background sends took its
    // buffer: at least one each.
    let gathers = cluster.requests_of(&clients[0], "gather_write").await;
    assert!(gathers >= CLIENTS as u64, "{gathers} gather_writes");
    assert_whole(&cluster, h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_gathering_server_gets_the_clients_copies_again() {
    let (mut cluster, clients, h) = written_and_sent(3).await;
    // Everything sent sits in the gathering server's memory: it dies.
    let gatherer = server_of(h);
    cluster.kill(gatherer);
    cluster.start_server(gatherer);
    for c in &clients {
        c.fsync(h).await.unwrap();
    }
    let fresh = cluster.client();
    let resent = cluster.requests_of(&fresh, "gather_write").await;
    assert!(
        resent >= CLIENTS as u64,
        "each client sent its copy to the new server ({resent} gather_writes)"
    );
    assert_whole(&cluster, h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strip_server_restarted_before_the_commit_gets_the_bytes_again() {
    let (mut cluster, clients, h) = written_and_sent(3).await;
    // A read by a writer has the gathering server write everything out,
    // not durably; then a server holding strips (not the gathering one)
    // loses what it was not made to sync.
    clients[0].read(h, 0, 10).await.unwrap();
    let victim = (server_of(h) + 1) % 3;
    cluster.kill(victim);
    cluster.start_server(victim);
    for c in &clients {
        c.fsync(h).await.unwrap();
    }
    assert_whole(&cluster, h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_writes_before_gathered_ones_survive_a_restart_of_their_server() {
    let mut cluster = holding_gathered_bytes(3);
    let c = eager_senders(&cluster).remove(0);
    let h = c.create(ROOT, "mixed", 0o644).await.unwrap().handle;
    // A large write goes direct to every server (not yet durable); then
    // scattered small ones fill the buffer and go to the gathering server,
    // which drops the client's copy of the direct bytes: they must be made
    // durable first.
    let big = pattern(1, 3 << 16);
    c.write(h, 0, Bytes::from(big.clone())).await.unwrap();
    for i in 0..5u64 {
        c.write(h, (4 << 16) + i * 2000, Bytes::from(pattern(i, PIECE)))
            .await
            .unwrap();
    }
    // A read sends them and has them written out, not durably.
    c.read(h, 4 << 16, 10).await.unwrap();
    assert!(c.write_paths().gathered_sends >= 1);
    let victim = (server_of(h) + 1) % 3;
    cluster.kill(victim);
    cluster.start_server(victim);
    c.fsync(h).await.unwrap();
    let got = cluster
        .uncached_client()
        .read(h, 0, big.len())
        .await
        .unwrap();
    assert!(got == big[..], "the direct bytes after the restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gathering_server_refuses_strangers_and_malformed_extents() {
    let cluster = Cluster::builder().servers(2).start();
    let root = cluster.client();
    let h = root.create(ROOT, "mine", 0o644).await.unwrap().handle;
    let set = shoal_client::SetAttr {
        uid: Some(1000),
        gid: Some(1000),
        ..Default::default()
    };
    root.setattr(h, &set).await.unwrap();
    let (q, payload) = extents::to_request(h, [(0u64, &b"ab"[..]), (10, &b"cd"[..])].into_iter());
    let stranger = cluster.client().with_cred(Cred::new(2000, 2000));
    let e = stranger
        .call_with_payload::<ops::GatherWrite>(server_of(h), &q, payload.clone())
        .await
        .unwrap_err();
    assert_eq!(e.errno, Errno::EACCES, "{e}");
    let commit = GatherCommitRequest {
        handle: h,
        durable: true,
    };
    let e = stranger
        .call::<ops::GatherCommit>(server_of(h), &commit)
        .await
        .unwrap_err();
    assert_eq!(e.errno, Errno::EACCES, "{e}");
    let owner = cluster.client().with_cred(Cred::new(1000, 1000));
    let short = payload.slice(..3);
    let e = owner
        .call_with_payload::<ops::GatherWrite>(server_of(h), &q, short)
        .await
        .unwrap_err();
    assert_eq!(e.errno, Errno::EINVAL, "{e}");
    // The owner's well-formed one is taken, and the server still serves.
    owner
        .call_with_payload::<ops::GatherWrite>(server_of(h), &q, payload)
        .await
        .unwrap();
    owner
        .call::<ops::GatherCommit>(server_of(h), &commit)
        .await
        .unwrap();
    let got = root.read(h, 0, 12).await.unwrap();
    assert_eq!(&got[..], b"ab\0\0\0\0\0\0\0\0cd");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newer_bytes_sent_direct_are_not_overwritten_by_older_gathered_ones() {
    let (cluster, clients, h) = written_and_sent(2).await;
    let c = &clients[0];
    // Client 0's pieces (0, 10, 20, ...) sit at the gathering server. New
    // bytes over piece 0: buffered as one extent, sent there too at the fsync
    // (it holds this client's earlier ones); then a large direct write over
    // piece 10.
    c.write(h, 0, Bytes::from(vec![0xaa; PIECE])).await.unwrap();
    c.fsync(h).await.unwrap();
    // Over the default write threshold (128 KiB): direct.
    let big = vec![0xbb; 256 << 10];
    c.write(h, (10 * PIECE) as u64, Bytes::from(big.clone()))
        .await
        .unwrap();
    for other in &clients {
        other.fsync(h).await.unwrap();
    }
    let reader = cluster.uncached_client();
    let got = reader.read(h, 0, PIECE).await.unwrap();
    assert!(got.iter().all(|b| *b == 0xaa), "the newer bytes at 0");
    let got = reader
        .read(h, (10 * PIECE) as u64, big.len())
        .await
        .unwrap();
    assert!(got == big[..], "the newer direct write over piece 10");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gathering_server_killed_in_a_stream_of_scattered_writes_loses_nothing() {
    // The client sends every 4 KiB it keeps; the gathering server holds
    // what it gets until the fsync: the kill takes whatever was sent
    // before it.
    let mut cluster = holding_gathered_bytes(3);
    let client = eager_senders(&cluster).remove(0);
    let h = client.create(ROOT, "stream", 0o644).await.unwrap().handle;
    const RECORD: usize = 64;
    const RECORDS: usize = 12_000; // 768 KB over every server's strips
    let data = pattern(9, RECORD * RECORDS);
    let done = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // Records in a scattered order (a step prime to their count), so what
    // the client keeps is many extents: they go to the gathering server.
    let writer = {
        let (c, data, done) = (client.clone(), data.clone(), done.clone());
        tokio::spawn(async move {
            for i in 0..RECORDS {
                let r = (i * 7919) % RECORDS;
                let record = Bytes::copy_from_slice(&data[r * RECORD..(r + 1) * RECORD]);
                c.write(h, (r * RECORD) as u64, record).await?;
                done.store(i + 1, std::sync::atomic::Ordering::Relaxed);
            }
            c.fsync(h).await
        })
    };
    while done.load(std::sync::atomic::Ordering::Relaxed) < RECORDS / 3 {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    cluster.kill(server_of(h));
    std::thread::sleep(std::time::Duration::from_millis(500));
    cluster.start_server(server_of(h));
    writer
        .await
        .unwrap()
        .expect("the restart is waited for and every copy sent again");
    let got = cluster
        .uncached_client()
        .read(h, 0, data.len())
        .await
        .unwrap();
    assert!(got == data[..], "every record after the fsync");
}
