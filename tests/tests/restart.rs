//! Restart: after SIGTERM, and after kill -9 of every server, a restart finds
//! every acknowledged file and directory and every byte that was fsync'ed.

use bytes::Bytes;
use shoal_client::{Client, FileKind};
use shoal_proto::handle::ROOT;
use shoal_tests::{entry_names, Cluster};

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A 2-server cluster whose clients send every write straight to the
/// servers (the gathering path keeps its own copy, by its own rules).
fn writing_direct() -> Cluster {
    Cluster::builder()
        .servers(2)
        // Its tests kill servers holding files made a moment before.
        .durable()
        .set("write_threshold=0")
        .start()
}

/// Creates a tree with small (inline) and striped (file-backed) data, fsync'ed.
async fn populate(client: &Client) {
    let d = client.mkdir(ROOT, "dir", 0o750).await.unwrap().handle;
    let sub = client.mkdir(d, "sub", 0o755).await.unwrap().handle;
    for (i, len) in [0usize, 100, 8192, 70_000, 3 << 20].iter().enumerate() {
        let f = client
            .create(sub, &format!("f{i}"), 0o640)
            .await
            .unwrap()
            .handle;
        client
            .write(f, 0, Bytes::from(pattern(i as u8, *len)))
            .await
            .unwrap();
        client.fsync(f).await.unwrap();
    }
    client.symlink(d, "link", "sub/f1").await.unwrap();
}

async fn verify(client: &Client) {
    let (d, kind) = client.resolve("/dir").await.unwrap();
    assert_eq!(kind, FileKind::Directory);
    assert_eq!(client.getattr(d).await.unwrap().mode, 0o750);
    let names = entry_names(client, d).await;
    assert_eq!(names, vec!["link", "sub"]);
    for (i, len) in [0usize, 100, 8192, 70_000, 3 << 20].iter().enumerate() {
        let (f, _) = client.resolve(&format!("/dir/sub/f{i}")).await.unwrap();
        let attr = client.getattr(f).await.unwrap();
        assert_eq!(attr.size, *len as u64, "size of f{i}");
        assert_eq!(attr.mode, 0o640);
        let data = client.read(f, 0, len + 10).await.unwrap();
        assert!(data[..] == pattern(i as u8, *len)[..], "bytes of f{i}");
    }
    let (l, _) = client.resolve("/dir/link").await.unwrap();
    assert_eq!(client.readlink(l).await.unwrap(), "sub/f1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_acknowledged_survives_sigterm_and_sigkill() {
    let mut cluster = Cluster::builder()
        .servers(4)
        .set("strip_size=65536")
        .start();
    populate(&cluster.client()).await;
    verify(&cluster.client()).await;

    for id in cluster.server_ids() {
        cluster.terminate(id);
    }
    for id in cluster.server_ids() {
        cluster.start_server(id);
    }
    verify(&cluster.client()).await;

    // Work done after the restart must survive a crash too.
    let client = cluster.client();
    let f = client.create(ROOT, "after", 0o644).await.unwrap().handle;
    client
        .write(f, 0, Bytes::from_static(b"durable"))
        .await
        .unwrap();
    client.fsync(f).await.unwrap();
    for id in cluster.server_ids() {
        cluster.kill(id);
    }
    for id in cluster.server_ids() {
        cluster.start_server(id);
    }
    let client = cluster.client();
    verify(&client).await;
    let (f, _) = client.resolve("/after").await.unwrap();
    assert_eq!(&client.read(f, 0, 100).await.unwrap()[..], b"durable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reconnects_after_a_server_restarts() {
    let mut cluster = Cluster::builder().servers(2).start();
    let client = cluster.client();
    let f = client.create(ROOT, "x", 0o644).await.unwrap().handle;
    cluster.terminate(1);
    cluster.start_server(1);
    client
        .write(f, 0, Bytes::from_static(b"hello"))
        .await
        .unwrap();
    assert_eq!(&client.read(f, 0, 5).await.unwrap()[..], b"hello");
}

/// The NFS write-verifier rule: a write is acknowledged before it is
/// durable, so if its server restarts before the fsync, the data may be
/// gone. The client keeps what it sent until the fsync finds it durable and
/// sends it again to the new process: the fsync succeeds and every byte is
/// there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsync_after_the_server_restarted_sends_the_unsynced_writes_again() {
    let mut cluster = writing_direct();
    let client = cluster.client();
    let f = client.create(ROOT, "f", 0o644).await.unwrap().handle;
    let server = shoal_proto::handle::server_of(f);
    client
        .write(f, 0, Bytes::from(pattern(1, 5000)))
        .await
        .unwrap();
    client.truncate(f, 4000).await.unwrap();
    client
        .write(f, 3000, Bytes::from(pattern(2, 500)))
        .await
        .unwrap();
    cluster.kill(server);
    cluster.start_server(server);
    client.fsync(f).await.unwrap();
    cluster.kill(server);
    cluster.start_server(server);
    let mut want = pattern(1, 4000);
    want[3000..3500].copy_from_slice(&pattern(2, 500));
    let data = cluster.uncached_client().read(f, 0, 10_000).await.unwrap();
    assert!(data[..] == want[..], "{} bytes back", data.len());
}

/// A program that never fsyncs loses nothing to a restart either: the next
/// time the client hears from the restarted server (here, writing another
/// file there), it sends that server its resend copies of what it wrote there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsynced_writes_go_again_when_the_client_next_hears_from_the_server() {
    let mut cluster = writing_direct();
    let client = cluster.client();
    // Both small files' bytes live with their metafiles, beside ROOT.
    let a = client.create(ROOT, "a", 0o644).await.unwrap().handle;
    let b = client.create(ROOT, "b", 0o644).await.unwrap().handle;
    let server = shoal_proto::handle::server_of(ROOT);
    client
        .write(a, 0, Bytes::from(pattern(3, 5000)))
        .await
        .unwrap();
    cluster.kill(server);
    cluster.start_server(server);
    client
        .write(b, 0, Bytes::from(pattern(4, 100)))
        .await
        .unwrap();
    let writes = cluster.requests(&client).await[&(server, "write".to_string())];
    assert_eq!(writes, 2, "b's write, and a's sent again");
    let fresh = cluster.uncached_client();
    assert!(fresh.read(a, 0, 10_000).await.unwrap()[..] == pattern(3, 5000)[..]);
    client
        .fsync(a)
        .await
        .expect("a is durable under the new verifier");
}

/// Past the client's bound on resend copies (`MAX_RESEND_BYTES`), the oldest
/// file's copy goes: a restart before that file's fsync makes the fsync
/// fail with EIO (reported once), never succeed over lost data; a later
/// file's copy is still sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsync_of_a_file_whose_copy_was_dropped_fails_instead_of_lying() {
    let mut cluster = writing_direct();
    let client = cluster.client();
    let half = shoal_client::MAX_RESEND_BYTES / 2 + (1 << 20);
    let mut files = Vec::new();
    for (i, name) in ["old", "new"].iter().enumerate() {
        let f = client.create(ROOT, name, 0o644).await.unwrap().handle;
        for at in (0..half).step_by(1 << 20) {
            let piece = pattern(i as u8 + at as u8, 1 << 20);
            client
                .write(f, at as u64, Bytes::from(piece))
                .await
                .unwrap();
        }
        files.push(f);
    }
    // Every server holds strips of both files.
    for id in cluster.server_ids() {
        cluster.kill(id);
        cluster.start_server(id);
    }
    let e = client.fsync(files[0]).await.unwrap_err();
    assert_eq!(e.errno, shoal_client::Errno::EIO, "{e}");
    client.fsync(files[0]).await.expect("reported once");
    client.fsync(files[1]).await.expect("its copy went again");
    let fresh = cluster.uncached_client();
    for at in (0..half).step_by(1 << 20) {
        let got = fresh.read(files[1], at as u64, 1 << 20).await.unwrap();
        assert!(got[..] == pattern(1 + at as u8, 1 << 20)[..], "at {at}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_never_fsynced_survives_a_kill_a_few_seconds_later() {
    let mut cluster = Cluster::builder().servers(2).start();
    let client = cluster.client();
    let f = client.create(ROOT, "unsynced", 0o644).await.unwrap().handle;
    // Nothing else changes the servers' metadata from here (a refill would
    // sync the store, and the data with it).
    cluster.wait_for_pools(&client).await;
    // Small: held in the server's store, where only a sync makes it durable.
    let data = pattern(7, 5000);
    client.write(f, 0, Bytes::from(data.clone())).await.unwrap();
    client.flush(f).await.unwrap();
    // No fsync, no other change to that server; well past its data flush.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let server = shoal_proto::handle::server_of(f);
    cluster.kill(server);
    cluster.start_server(server);
    let got = cluster.client().read(f, 0, data.len()).await.unwrap();
    assert!(
        got[..] == data[..],
        "{} bytes back of {}",
        got.len(),
        data.len()
    );
}
