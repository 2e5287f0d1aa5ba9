//! The gathering path of the write threshold [Hildebrand 2006]: small writes
//! are buffered by the client and sent as a few large writes, invisibly to its
//! own callers, visibly to others at close (flush) or fsync, and a send that
//! fails reaches the application at fsync or close.

use bytes::Bytes;
use shoal_proto::handle::ROOT;
use shoal_tests::{pattern, Cluster};

/// Calls to a killed server fail at once instead of waiting for it to come
/// back: for the tests of how a failed send is reported.
const SOFT: &str = "restart_wait_ms=0";

/// Writes to the servers counted by `requests` (every server's "write").
async fn writes_sent(cluster: &Cluster, client: &shoal_client::Client) -> u64 {
    cluster.requests_of(client, "write").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_sequential_writes_become_a_few_sends_and_the_writer_sees_them_at_once() {
    // No send for age: only a read, a full buffer or the fsync sends.
    let cluster = Cluster::builder()
        .servers(4)
        .set("gather_delay_ms=60000")
        .start();
    let client = cluster.client();
    let other = cluster.uncached_client();
    let h = client.create(ROOT, "log", 0o644).await.unwrap().handle;
    let before = writes_sent(&cluster, &client).await;
    let data = pattern(3, 20_000 * 16);
    for (i, piece) in data.chunks(16).enumerate() {
        let n = client
            .write(h, i as u64 * 16, Bytes::copy_from_slice(piece))
            .await
            .unwrap();
        assert_eq!(n, 16);
    }
    assert_eq!(
        client.getattr(h).await.unwrap().size,
        data.len() as u64,
        "the writer's size counts what it keeps"
    );
    client.forget(h);
    assert_eq!(
        client.getattr(h).await.unwrap().size,
        data.len() as u64,
        "and so does a size fetched from the servers"
    );
    // A read of buffered bytes sends them first.
    let back = client.read(h, 100, 1000).await.unwrap();
    assert!(back == data[100..1100]);
    client.fsync(h).await.unwrap();
    let sent = writes_sent(&cluster, &client).await - before;
    assert!(
        sent <= 2,
        "20,000 writes of 16 bytes cost {sent} write messages"
    );
    let paths = client.write_paths();
    assert_eq!(paths.gathered_writes, 20_000);
    assert_eq!(paths.direct_writes, 0);
    let seen = other.read(h, 0, data.len()).await.unwrap();
    assert!(seen == data[..], "another client after the fsync");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_write_sends_the_buffered_bytes_it_overlaps_first() {
    let cluster = Cluster::builder().servers(2).start();
    let client = cluster.client();
    let other = cluster.uncached_client();
    let h = client.create(ROOT, "mix", 0o644).await.unwrap().handle;
    client
        .write(h, 10, Bytes::from(vec![1u8; 100]))
        .await
        .unwrap();
    // Over the buffered bytes: the newer, direct write (over the default
    // 128 KiB threshold) must win.
    let large = 256 << 10;
    client
        .write(h, 0, Bytes::from(vec![2u8; large]))
        .await
        .unwrap();
    client
        .write(h, 5, Bytes::from(vec![3u8; 10]))
        .await
        .unwrap();
    client.flush(h).await.unwrap();
    let got = other.read(h, 0, large).await.unwrap();
    let mut want = vec![2u8; large];
    want[5..15].fill(3);
    assert!(got == want[..], "the last write of each byte wins");
    let paths = client.write_paths();
    assert_eq!((paths.gathered_writes, paths.direct_writes), (2, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_write_elsewhere_leaves_the_buffered_bytes_buffered() {
    // No send for age: only a large write over them or the fsync sends.
    let cluster = Cluster::builder()
        .servers(2)
        .set("gather_delay_ms=60000")
        .start();
    let client = cluster.client();
    let h = client.create(ROOT, "mixed", 0o644).await.unwrap().handle;
    let small = pattern(7, 1600);
    for (i, piece) in small.chunks(16).enumerate() {
        client
            .write(h, i as u64 * 16, Bytes::copy_from_slice(piece))
            .await
            .unwrap();
    }
    let large = pattern(8, 1 << 20);
    client
        .write(h, 4 << 20, Bytes::from(large.clone()))
        .await
        .unwrap();
    assert_eq!(
        client.write_paths().gathered_sends,
        0,
        "a direct write of another range sent the buffered bytes"
    );
    client.fsync(h).await.unwrap();
    assert_eq!(client.write_paths().gathered_sends, 1);
    let other = cluster.uncached_client();
    assert!(other.read(h, 0, small.len()).await.unwrap() == small[..]);
    assert!(other.read(h, 4 << 20, large.len()).await.unwrap() == large[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_clients_writing_disjoint_pieces_of_one_file_lose_nothing() {
    let cluster = Cluster::builder().servers(4).start();
    let clients: Vec<_> = (0..10).map(|_| cluster.uncached_client()).collect();
    let h = clients[0]
        .create(ROOT, "shared", 0o644)
        .await
        .unwrap()
        .handle;
    const PIECE: usize = 1000;
    futures::future::join_all(clients.iter().enumerate().map(|(k, c)| async move {
        // Interleaved: client k writes every tenth piece.
        for i in (k..400).step_by(10) {
            let piece = pattern(i as u64, PIECE);
            c.write(h, (i * PIECE) as u64, Bytes::from(piece))
                .await
                .unwrap();
        }
        c.fsync(h).await.unwrap();
    }))
    .await;
    let reader = cluster.uncached_client();
    let got = reader.read(h, 0, 400 * PIECE).await.unwrap();
    for i in 0..400 {
        assert!(
            got[i * PIECE..(i + 1) * PIECE] == pattern(i as u64, PIECE)[..],
            "piece {i}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_that_fails_is_reported_at_fsync_once() {
    let mut cluster = Cluster::builder().servers(2).set(SOFT).start();
    let client = cluster.client();
    let h = client.create(ROOT, "f", 0o644).await.unwrap().handle;
    let holder = client.layout(h).await.unwrap().datafiles[0];
    client
        .write(h, 0, Bytes::from_static(b"data"))
        .await
        .unwrap();
    cluster.kill(shoal_proto::handle::server_of(holder.0));
    let e = client.fsync(h).await.unwrap_err();
    assert!(e.errno.0 > 0, "an errno for the application: {e}");
}

#[test]
fn sixteen_byte_appends_through_the_mount_are_not_a_message_each() {
    // No send for age: the count does not depend on how fast this runs.
    let mut cluster = Cluster::builder()
        .servers(4)
        .set("gather_delay_ms=60000")
        .start();
    let mnt = cluster.mount();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = cluster.client();
    let before = rt.block_on(writes_sent(&cluster, &client));
    // The writer is a process of its own (dd, 16 bytes a write, O_APPEND,
    // fsync at the end): this test process's other threads fork and exec,
    // and each exec closes a copy of any descriptor open here, which makes
    // the kernel send a flush (close) of the file.
    let source = cluster.dir().join("records");
    let records: String = (0..5000u32).map(|i| format!("record {i:08}\n")).collect();
    std::fs::write(&source, &records).unwrap();
    let path = mnt.join("appends");
    let dd = std::process::Command::new("dd")
        .arg(format!("if={}", source.display()))
        .arg(format!("of={}", path.display()))
        .args(["bs=16", "oflag=append", "conv=notrunc,fsync", "status=none"])
        .status()
        .unwrap();
    assert!(dd.success());
    let sent = rt.block_on(writes_sent(&cluster, &client)) - before;
    assert!(
        sent <= 2,
        "5,000 appends through the mount sent {sent} writes"
    );
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.len(), 5000 * 16);
    assert!(text.ends_with("record 00004999\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_of_a_buffered_write_past_a_stuffed_files_first_strip() {
    let cluster = Cluster::builder().servers(4).start();
    let client = cluster.client();
    let h = client.create(ROOT, "g", 0o644).await.unwrap().handle;
    client
        .write(h, 5 << 20, Bytes::from_static(b"abc"))
        .await
        .unwrap();
    // Below the buffered bytes, not touching them (the kernel reads pages so):
    // zeros, not the end of the file.
    let below = client.read(h, (5 << 20) - 8192, 4096).await.unwrap();
    assert_eq!(below.len(), 4096);
    let got = client.read(h, (5 << 20) - 7, 10).await.unwrap();
    assert_eq!(&got[..], b"\0\0\0\0\0\0\0abc");
}

#[test]
fn a_files_threshold_is_an_xattr_of_the_client() {
    let mut cluster = Cluster::builder().servers(2).start();
    let mnt = cluster.mount();
    let f = mnt.join("f");
    std::fs::write(&f, b"x").unwrap();
    let xattr = |args: &[&str]| {
        let out = std::process::Command::new(args[0])
            .args(&args[1..])
            .arg(&f)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let name = shoal_client::THRESHOLD_XATTR;
    let (ok, shown) = xattr(&["getfattr", "--only-values", "-n", name]);
    assert!(ok);
    assert_eq!(shown, (128 << 10).to_string(), "the cluster's");
    assert!(xattr(&["setfattr", "-n", name, "-v", "4K"]).0);
    assert_eq!(xattr(&["getfattr", "--only-values", "-n", name]).1, "4096");
    assert!(!xattr(&["setfattr", "-n", name, "-v", "lots"]).0, "refused");
    assert!(xattr(&["setfattr", "-x", name]).0);
    assert_eq!(
        xattr(&["getfattr", "--only-values", "-n", name]).1,
        (128 << 10).to_string()
    );
}

/// A server holding strips of a file is killed in the middle of a stream of
/// small writes and restarted; the stream goes on, then fsync. Whatever the
/// moment, the fsync either succeeds with every byte on the servers or
/// fails with EIO: never a success over a hole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_during_a_stream_of_small_writes_means_eio_or_all_data() {
    let mut cluster = Cluster::builder()
        .servers(3)
        // Killed servers keep what they acknowledged (not `sync=none`).
        .durable()
        .set(SOFT)
        .set("strip_size=65536")
        .set("gather_delay_ms=1")
        // The round whose victim comes back after the failed fsync leaves
        // its client's changes unreplayed: the restarted server waits this
        // long for them before it serves the next round.
        .set("recovery_window_ms=2000")
        .start();
    const RECORD: usize = 64;
    const RECORDS: usize = 12_000; // 768 KB: every server holds strips
    let (mut complete, mut failed) = (0, 0);
    // (victim, record at which it is killed, record at which it is back:
    // RECORDS for after the fsync). Whether a round whose victim is back
    // before the fsync ends complete or failed depends on when the buffered
    // writes were sent; a round whose victim is still down at the fsync
    // fails whatever the timing; the last round kills it after the stream
    // was fsync'ed.
    let rounds = [
        (0u32, 3000, 6000),
        (1, 4000, 6000),
        (2, 5000, 6000),
        (1, 8000, 9000),
        (0, 2000, RECORDS),
        (2, RECORDS, RECORDS),
    ];
    for (round, &(victim, kill_at, back_at)) in rounds.iter().enumerate() {
        let client = cluster.client();
        let h = client
            .create(ROOT, &format!("stream{round}"), 0o644)
            .await
            .unwrap()
            .handle;
        let data = pattern(round as u64, RECORD * RECORDS);
        for (i, record) in data.chunks(RECORD).enumerate() {
            if i == kill_at {
                cluster.kill(victim);
            }
            if i == back_at {
                cluster.start_server(victim);
            }
            // A buffered write never fails; a send that does is fsync's to report.
            client
                .write(h, (i * RECORD) as u64, Bytes::copy_from_slice(record))
                .await
                .unwrap_or_else(|e| panic!("round {round}, record {i}: {e}"));
        }
        if kill_at == RECORDS {
            client.fsync(h).await.unwrap();
            cluster.kill(victim);
            cluster.start_server(victim);
        }
        let synced = client.fsync(h).await;
        if back_at == RECORDS && kill_at < RECORDS {
            cluster.start_server(victim);
        }
        match synced {
            Ok(()) => {
                let fresh = cluster.uncached_client();
                let got = fresh.read(h, 0, data.len()).await.unwrap();
                assert!(
                    got == data[..],
                    "round {round}: fsync succeeded over lost data"
                );
                complete += 1;
            }
            Err(e) => {
                assert_eq!(e.errno, shoal_client::Errno::EIO, "round {round}: {e}");
                failed += 1;
            }
        }
    }
    assert!(
        complete >= 1 && failed >= 1,
        "{complete} complete, {failed} failed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_keeps_what_this_idle_client_finds_cheaper_to_keep() {
    let cluster = Cluster::builder()
        .servers(2)
        .set("write_threshold=auto")
        .set("write_behind=8388608")
        .start();
    let client = cluster.client();
    let h = client.create(ROOT, "f", 0o644).await.unwrap().handle;
    for i in 0..64u64 {
        client
            .write(h, i * 8192, Bytes::from(vec![i as u8; 8192]))
            .await
            .unwrap();
    }
    client.fsync(h).await.unwrap();
    // Idle, sends of buffered writes cost no more a byte than direct writes:
    // everything is buffered that the direct path would send slower (larger
    // direct writes go behind the writer).
    assert_eq!(client.write_threshold(h), shoal_client::AUTO_BUFFERS_UNDER);
    assert_eq!(client.write_paths().gathered_writes, 64);
    let got = cluster
        .uncached_client()
        .read(h, 0, 64 * 8192)
        .await
        .unwrap();
    assert!(got
        .chunks(8192)
        .enumerate()
        .all(|(i, c)| c.iter().all(|b| *b == i as u8)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_sends_random_large_writes_behind_the_writer_instead_of_keeping_them() {
    let cluster = Cluster::builder()
        .servers(2)
        .set("write_threshold=auto")
        .set("write_behind=8388608")
        .start();
    let client = cluster.client();
    let h = client.create(ROOT, "random", 0o644).await.unwrap().handle;
    // 64 KiB records under AUTO_BUFFERS_UNDER, from the end of the file down:
    // none continues what came before, so keeping one would join nothing.
    let record = 64 << 10;
    for i in (0..16u64).rev() {
        client
            .write(h, i * 2 * record as u64, Bytes::from(vec![i as u8; record]))
            .await
            .unwrap();
    }
    client.fsync(h).await.unwrap();
    let paths = client.write_paths();
    assert_eq!(
        (paths.direct_writes, paths.gathered_writes),
        (16, 0),
        "random 64 KiB writes with write-behind on"
    );
    let got = cluster
        .uncached_client()
        .read(h, 0, 32 * record)
        .await
        .unwrap();
    for (i, r) in got.chunks(record).enumerate() {
        let want = if i % 2 == 0 { (i / 2) as u8 } else { 0 };
        assert!(r.iter().all(|b| *b == want), "record {i}");
    }
}

/// A directory's `write_threshold` hint goes into the layout of each file made
/// there (and its subdirectories' files), on every create path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_hint_sets_its_new_files_threshold() {
    for baseline in [false, true] {
        let cluster = Cluster::builder().servers(3).baseline_if(baseline).start();
        let client = cluster.client();
        let d = client.mkdir(ROOT, "d", 0o755).await.unwrap().handle;
        client
            .set_hint(d, shoal_proto::hints::Hint::WriteThreshold, "4K")
            .await
            .unwrap();
        let sub = client.mkdir(d, "sub", 0o755).await.unwrap().handle;
        let e = client
            .set_hint(d, shoal_proto::hints::Hint::WriteThreshold, "lots")
            .await
            .unwrap_err();
        assert!(e.message.contains("write_threshold"), "{e}");
        for dir in [d, sub] {
            let h = client.create(dir, "f", 0o644).await.unwrap().handle;
            let fresh = cluster.uncached_client();
            fresh.getattr(h).await.unwrap();
            assert_eq!(fresh.write_threshold(h), 4096, "baseline {baseline}");
            // 8 KiB is over it: direct; 1 KiB under it: buffered.
            fresh.write(h, 0, Bytes::from(vec![1; 8192])).await.unwrap();
            fresh
                .write(h, 8192, Bytes::from(vec![2; 1024]))
                .await
                .unwrap();
            let paths = fresh.write_paths();
            assert_eq!((paths.direct_writes, paths.gathered_writes), (1, 1));
            fresh.fsync(h).await.unwrap();
            assert_eq!(client.read(h, 8192, 2048).await.unwrap(), vec![2; 1024]);
        }
        let plain = client.create(ROOT, "plain", 0o644).await.unwrap().handle;
        assert_eq!(client.write_threshold(plain), 128 << 10, "the cluster's");
    }
}

/// A send that failed before the program's end (here, before a read) is
/// reported when everything is flushed at the end (exit, unmount,
/// shoal_disconnect), even though nothing is buffered any more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flush_all_reports_a_send_that_failed_earlier() {
    let mut cluster = Cluster::builder().servers(2).set(SOFT).start();
    let client = cluster.client();
    let h = client.create(ROOT, "f", 0o644).await.unwrap().handle;
    let holder = client.layout(h).await.unwrap().datafiles[0].1;
    client
        .write(h, 0, Bytes::from_static(b"data"))
        .await
        .unwrap();
    cluster.kill(holder);
    // The read sends the buffered bytes first; that send fails.
    let _ = client.read(h, 0, 4).await;
    let e = client.flush_all().await.unwrap_err();
    assert_eq!(e.errno, shoal_client::Errno::EIO, "{e}");
    assert!(client.flush_all().await.is_ok(), "reported once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_write_is_buffered_while_the_files_server_is_down_even_past_a_stale_layout() {
    let mut cluster = Cluster::builder()
        .servers(2)
        .set(SOFT)
        .set("strip_size=65536")
        .set("gather_delay_ms=60000")
        .start();
    let client = cluster.client();
    let h = client.create(ROOT, "f", 0o644).await.unwrap().handle;
    client
        .write(h, 0, Bytes::from_static(b"head"))
        .await
        .unwrap();
    // The stuffed layout the create brought ages past the attribute TTL.
    let ttl = cluster.config().settings.cache_ttl_ms;
    tokio::time::sleep(std::time::Duration::from_millis(ttl + 50)).await;
    cluster.kill(shoal_proto::handle::server_of(h));
    // Past the first strip, buffered: the send is what needs the server.
    client
        .write(h, 70_000, Bytes::from_static(b"tail"))
        .await
        .expect("a buffered write asks no server");
    let e = client.fsync(h).await.unwrap_err();
    assert_eq!(e.errno, shoal_client::Errno::EIO, "{e}");
}
