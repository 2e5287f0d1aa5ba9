//! A server restart is not seen by applications: a call to a server that is
//! down waits for it (up to `restart_wait_ms`) and goes through once it is
//! back; with `restart_wait_ms = 0` it fails at once (NFS's soft mount).

use std::time::Duration;

use bytes::Bytes;
use shoal_client::Errno;
use shoal_proto::handle::{server_of, ROOT};
use shoal_tests::Cluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_to_a_down_server_wait_for_it_and_go_through() {
    let mut cluster = Cluster::builder().servers(2).start();
    let client = cluster.client();
    let h = client.create(ROOT, "waited", 0o644).await.unwrap().handle;
    client
        .write(h, 0, Bytes::from_static(b"before"))
        .await
        .unwrap();
    client.fsync(h).await.unwrap();
    // The root directory's server (and the file's) goes down.
    let victim = server_of(ROOT);
    assert_eq!(server_of(h), victim, "the file lives beside its directory");
    cluster.kill(victim);
    let c = client.clone();
    let calls = tokio::spawn(async move {
        let made = c.mkdir(ROOT, "made while down", 0o755).await?;
        let read = c.read(h, 0, 6).await?;
        c.write(h, 6, Bytes::from_static(b" after")).await?;
        c.fsync(h).await?;
        Ok::<_, shoal_client::ShoalError>((made.handle, read))
    });
    // Down for a second: the calls wait (nothing can have answered them).
    std::thread::sleep(Duration::from_secs(1));
    assert!(!calls.is_finished(), "a call to a down server came back");
    cluster.start_server(victim);
    let (dir, read) = calls.await.unwrap().expect("every call went through");
    assert_eq!(&read[..], b"before");
    let fresh = cluster.client();
    assert_eq!(fresh.lookup(ROOT, "made while down").await.unwrap().0, dir);
    assert_eq!(&fresh.read(h, 0, 100).await.unwrap()[..], b"before after");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_whose_server_died_under_it_is_sent_again_to_the_new_one() {
    let mut cluster = Cluster::builder().servers(2).start();
    let client = cluster.client();
    let h = client.create(ROOT, "f", 0o644).await.unwrap().handle;
    client
        .write(h, 0, Bytes::from_static(b"data"))
        .await
        .unwrap();
    client.fsync(h).await.unwrap();
    // The client's connection is to the old process: the first read on it
    // finds it broken, and goes again once the server is back.
    cluster.kill(server_of(h));
    cluster.start_server(server_of(h));
    client.forget(h);
    assert_eq!(&client.read(h, 0, 4).await.unwrap()[..], b"data");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_restart_wait_ms_0_a_down_server_fails_the_call_at_once() {
    let mut cluster = Cluster::builder()
        .servers(2)
        .set("restart_wait_ms=0")
        .start();
    let client = cluster.client();
    cluster.kill(server_of(ROOT));
    let e = client.mkdir(ROOT, "d", 0o755).await.unwrap_err();
    assert_eq!(e.errno, Errno::EHOSTUNREACH, "{e}");
}
