//! Write-behind on the direct path: large writes return while they are on
//! their way, invisibly to the writer (its reads, sizes, truncates and
//! rewrites see every byte in order), and a write that failed reaches the
//! application at fsync or close, never as a silent hole.

use bytes::Bytes;
use shoal_client::Errno;
use shoal_proto::handle::{server_of, ROOT};
use shoal_tests::{pattern, Cluster};

const MIB: usize = 1 << 20;

/// Write-behind on, as `bench/results/changes.md` measured it.
const ON: &str = "write_behind=8388608";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_writes_in_flight_are_seen_by_their_writer_and_by_others_after_fsync() {
    let cluster = Cluster::builder().servers(4).set(ON).start();
    let client = cluster.client();
    let other = cluster.uncached_client();
    let h = client.create(ROOT, "big", 0o644).await.unwrap().handle;
    let data = pattern(1, 24 * MIB);
    for (i, piece) in data.chunks(MIB).enumerate() {
        client
            .write(h, (i * MIB) as u64, Bytes::copy_from_slice(piece))
            .await
            .unwrap();
    }
    assert_eq!(
        client.getattr(h).await.unwrap().size,
        data.len() as u64,
        "the writer's size counts its writes in flight"
    );
    client.forget(h);
    assert_eq!(
        client.getattr(h).await.unwrap().size,
        data.len() as u64,
        "and so does a size fetched from the servers"
    );
    let back = client.read(h, 5 * MIB as u64, 3 * MIB).await.unwrap();
    assert!(
        back == data[5 * MIB..8 * MIB],
        "the writer reads its writes"
    );
    // Rewrites of ranges possibly still in flight land in order.
    let newer = pattern(2, 2 * MIB);
    for round in 0..4 {
        let bytes = if round % 2 == 0 { &data } else { &newer };
        for (i, piece) in bytes[..2 * MIB].chunks(MIB / 4).enumerate() {
            client
                .write(h, (i * MIB / 4) as u64, Bytes::copy_from_slice(piece))
                .await
                .unwrap();
        }
    }
    client.fsync(h).await.unwrap();
    let paths = client.write_paths();
    assert_eq!(paths.direct_writes, 24 + 4 * 8, "every write went direct");
    let seen = other.read(h, 0, data.len()).await.unwrap();
    assert!(seen[..2 * MIB] == newer[..], "the last rewrite wins");
    assert!(
        seen[2 * MIB..] == data[2 * MIB..],
        "another client after the fsync"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncate_and_a_time_set_come_after_the_writes_in_flight() {
    let cluster = Cluster::builder().servers(2).set(ON).start();
    let client = cluster.client();
    let h = client.create(ROOT, "cut", 0o644).await.unwrap().handle;
    let data = pattern(3, 8 * MIB);
    for (i, piece) in data.chunks(MIB).enumerate() {
        client
            .write(h, (i * MIB) as u64, Bytes::copy_from_slice(piece))
            .await
            .unwrap();
    }
    client.truncate(h, MIB as u64 + 7).await.unwrap();
    let set = shoal_client::SetAttr {
        mtime: Some(shoal_client::SetTime::At(1_000_000_000)),
        ..Default::default()
    };
    client.setattr(h, &set).await.unwrap();
    client.fsync(h).await.unwrap();
    let fresh = cluster.uncached_client();
    let attr = fresh.getattr(h).await.unwrap();
    assert_eq!(
        attr.size,
        MIB as u64 + 7,
        "no write landed past the truncate"
    );
    assert_eq!(
        attr.mtime_ns, 1_000_000_000,
        "nor moved the time set after it"
    );
    let got = fresh.read(h, 0, 2 * MIB).await.unwrap();
    assert!(got == data[..MIB + 7]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_that_fails_in_flight_is_reported_at_fsync() {
    // Calls to a killed server fail at once instead of waiting for it.
    let mut cluster = Cluster::builder()
        .servers(2)
        .set("restart_wait_ms=0")
        .set(ON)
        .start();
    let client = cluster.client();
    let h = client.create(ROOT, "lost", 0o644).await.unwrap().handle;
    // Two strips, one per server: the second server's goes nowhere.
    client
        .write(h, 0, Bytes::from(pattern(4, 2 * MIB)))
        .await
        .unwrap();
    client.fsync(h).await.unwrap();
    let second = client.layout(h).await.unwrap().datafiles[1].0;
    cluster.kill(server_of(second));
    let mut failed_at_write = 0;
    for i in 0..8u64 {
        // Behind the writer: a failure comes at fsync; once one is known,
        // the file's writes are waited for and may fail themselves.
        if client
            .write(h, i * MIB as u64, Bytes::from(pattern(i, MIB)))
            .await
            .is_err()
        {
            failed_at_write += 1;
        }
    }
    // Writes 1, 3, 5 and 7 go to the killed server; the first of them
    // cannot know yet.
    assert!(
        failed_at_write < 4,
        "a write to the killed server returned before its reply"
    );
    let e = client.fsync(h).await.unwrap_err();
    assert!(e.errno.0 > 0, "an errno for the application: {e}");
    assert_ne!(e.errno, Errno::ENOENT, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_write_behind_every_write_waits_for_its_reply() {
    let mut cluster = Cluster::builder()
        .servers(2)
        .set("restart_wait_ms=0")
        .set("write_behind=0")
        .start();
    let client = cluster.client();
    let h = client.create(ROOT, "waited", 0o644).await.unwrap().handle;
    client
        .write(h, 0, Bytes::from(pattern(5, 2 * MIB)))
        .await
        .unwrap();
    let second = client.layout(h).await.unwrap().datafiles[1].0;
    cluster.kill(server_of(second));
    let e = client
        .write(h, MIB as u64, Bytes::from(pattern(6, MIB)))
        .await
        .unwrap_err();
    assert!(e.errno.0 > 0, "the write itself fails: {e}");
}
