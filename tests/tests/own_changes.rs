//! A client's own changes outdate answers it asked for before them: a reply
//! read by a server before this client's write of a file reached it, and
//! cached after the write, must never put back the size from before the
//! write (`client/src/consistency/leases.rs`; the writer then listed its own file as
//! empty for a whole lease).
//!
//! The interleaving is forced with a pause point (its own test binary:
//! failpoints are process-wide).

use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use shoal_proto::crash_points::CREATE_FILES_BEFORE_CACHING;
use shoal_proto::fail;
use shoal_tests::{delegated_dir, pattern, Cluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_made_while_its_create_is_answered_is_never_hidden_by_that_answer() {
    // Unsent creates go only when something makes them (a fence, an fsync).
    let cluster = Cluster::builder()
        .servers(2)
        // Creates answered by the client under a delegation.
        .delegating()
        .set("delegated_flush_ms=60000")
        .start();
    let c = cluster.client();
    let dir = delegated_dir(&c, "d").await;
    let f = c.create(dir, "f", 0o644).await.unwrap().handle;
    assert!(c.holds_delegation(dir), "f was answered here");

    // The reply to the unsent create stops before it is cached, and says so.
    let (reached, at_pause) = mpsc::channel::<()>();
    let (release, released) = mpsc::channel::<()>();
    let (reached, released) = (Mutex::new(reached), Mutex::new(released));
    fail::cfg_callback(CREATE_FILES_BEFORE_CACHING, move || {
        reached.lock().unwrap().send(()).unwrap();
        released.lock().unwrap().recv().unwrap();
    })
    .unwrap();
    // The directory's fsync sends the unsent create.
    let fenced = tokio::spawn({
        let c = c.clone();
        async move { c.fsync(dir).await }
    });
    tokio::task::spawn_blocking(move || at_pause.recv_timeout(Duration::from_secs(30)))
        .await
        .unwrap()
        .expect("the unsent create's reply reached the pause point");

    // Meanwhile the file is written here (its layout came with the reply):
    // buffered, its size known to this client.
    let data = pattern(3, 5000);
    c.write(f, 0, Bytes::from(data.clone())).await.unwrap();
    assert_eq!(c.getattr(f).await.unwrap().size, 5000);

    // The reply, read before the write, is cached now; then the write goes.
    release.send(()).unwrap();
    fail::remove(CREATE_FILES_BEFORE_CACHING);
    fenced.await.unwrap().unwrap();
    c.flush(f).await.unwrap();

    assert_eq!(
        c.getattr(f).await.unwrap().size,
        5000,
        "the writer's own file keeps its size"
    );
    let listed = c.readdir_plus_all(dir).await.unwrap();
    let (_, attr) = listed.iter().find(|(e, _)| e.name == "f").unwrap();
    assert_eq!(attr.size, 5000, "and so does its listing");
    assert_eq!(c.read(f, 0, 10_000).await.unwrap(), data);
}
