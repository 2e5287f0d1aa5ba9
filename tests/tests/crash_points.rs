//! Crashes on purpose at the points that matter (`shoal_proto::crash_points`):
//! a server armed with a crash point aborts there, exactly as if killed by
//! SIGKILL at that instant. After a restart, everything acknowledged is
//! there with its bytes, the unacknowledged change is not, no entry names a
//! missing object, and `fsck --repair` reclaims what the crash orphaned.

use bytes::Bytes;
use shoal_client::{Client, FileKind};
use shoal_proto::crash_points as cp;
use shoal_proto::handle::{server_of, Handle};
use shoal_tests::{dir_on, pattern, repair_to_zero, settled_fsck, Cluster};

/// Calls to a crashed server fail at once instead of waiting for it: each
/// test here looks at what the crash left before starting it again.
const SOFT: &str = "restart_wait_ms=0";
/// The commit path's crash points in the mode where every change is synced
/// before its reply (with `replay`, a group flush could take them instead;
/// its own crash point is tested in tests/tests/replay.rs).
const SYNCED: &str = "sync=full";

/// Creates `n` files of `len` bytes named `{prefix}{i}` in `dir`, each
/// fsynced: acknowledged, durable data.
async fn durable_files(client: &Client, dir: Handle, prefix: &str, n: u64, len: usize) {
    for i in 0..n {
        let h = client
            .create(dir, &format!("{prefix}{i}"), 0o644)
            .await
            .unwrap()
            .handle;
        client
            .write(h, 0, Bytes::from(pattern(i, len)))
            .await
            .unwrap();
        client.fsync(h).await.unwrap();
    }
}

async fn check_files(client: &Client, dir: Handle, prefix: &str, n: u64, len: usize) {
    for i in 0..n {
        let name = format!("{prefix}{i}");
        let (h, kind) = client
            .lookup(dir, &name)
            .await
            .unwrap_or_else(|e| panic!("acknowledged {name} is missing: {e}"));
        assert_eq!(kind, FileKind::File);
        let data = client.read(h, 0, len + 1).await.unwrap();
        assert!(data[..] == pattern(i, len)[..], "bytes of {name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_applied_but_not_synced_is_gone_and_nothing_else_is() {
    // Nothing else may sync the armed server between the create's apply and
    // its crash point, or the create is durable with it ("lost" survived,
    // once in CI for each): no pool refill (no precreate), and no data
    // flush in the test's time (its tick every `data_flush_ms`).
    let mut cluster = Cluster::builder()
        .servers(4)
        .set(SOFT)
        .set(SYNCED)
        .set("precreate=false")
        .set("data_flush_ms=60000")
        .start();
    let client = cluster.client();
    let dir = dir_on(&client, 1, "d").await;
    durable_files(&client, dir, "before", 5, 3000).await;

    cluster.arm(1, cp::COMMIT_AFTER_APPLY);
    let lost = client.create(dir, "lost", 0o644).await;
    assert!(lost.is_err(), "the create was never acknowledged");
    cluster.restart_after_crash(1);

    let fresh = cluster.uncached_client();
    check_files(&fresh, dir, "before", 5, 3000).await;
    assert_eq!(
        fresh.lookup(dir, "lost").await.unwrap_err().errno,
        shoal_client::Errno::ENOENT,
        "an unacknowledged create did not survive"
    );
    settled_fsck(&fresh).await;
    repair_to_zero(&fresh).await;
    durable_files(&fresh, dir, "after", 3, 100).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_while_the_metadata_log_turns_replays_both_files() {
    let mut cluster = Cluster::builder().servers(2).set(SOFT).start();
    let client = cluster.client();
    let dir = dir_on(&client, 1, "d").await;
    cluster.arm(1, cp::LOG_TURNED);
    // Inline data passes through the log: write until it turns (the log
    // file is at most 16 MiB) and the server dies there.
    let mut written = 0;
    for i in 0..2000u64 {
        let name = format!("f{i}");
        let done = async {
            let h = client.create(dir, &name, 0o644).await?.handle;
            client.write(h, 0, Bytes::from(pattern(i, 60_000))).await?;
            client.fsync(h).await
        };
        if done.await.is_err() {
            break;
        }
        written = i + 1;
    }
    assert!(written < 2000, "the log never turned");
    cluster.restart_after_crash(1);
    let fresh = cluster.uncached_client();
    check_files(&fresh, dir, "f", written, 60_000).await;
    settled_fsck(&fresh).await;
    repair_to_zero(&fresh).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_during_a_precreate_refill_leaves_orphans_that_fsck_reclaims() {
    // Small pools, and every file striped at create: creates on server 2
    // soon take its pools under their low mark and start a refill.
    let mut cluster = Cluster::builder()
        .servers(3)
        .set(SOFT)
        .set("stuffing=false")
        .set("precreate_low_mark=4")
        .set("precreate_batch=8")
        .start();
    let client = cluster.client();
    client.ping_all().await.unwrap();
    cluster.wait_for_pools(&client).await;
    let dir = dir_on(&client, 2, "d").await;
    cluster.arm(2, cp::REFILL_AFTER_CREATE);
    // Creates go on until the refill's crash takes server 2 down.
    for i in 0..64 {
        if client.create(dir, &format!("f{i}"), 0o644).await.is_err() {
            break;
        }
    }
    cluster.restart_after_crash(2);

    let fresh = cluster.uncached_client();
    let found = settled_fsck(&fresh).await;
    assert!(
        found
            .orphans
            .iter()
            .any(|(h, kind)| *kind == shoal_proto::ObjectKind::Datafile && server_of(*h) != 2),
        "the batch created for server 2's pool is orphaned on a peer: {found:?}"
    );
    repair_to_zero(&fresh).await;
    // The pools still work: files created on server 2 stripe over all.
    let h = fresh.create(dir, "big", 0o644).await.unwrap().handle;
    let data = pattern(7, 3 << 20);
    fresh.write(h, 0, Bytes::from(data.clone())).await.unwrap();
    assert!(fresh.read(h, 0, 4 << 20).await.unwrap() == data[..]);
    assert_eq!(fresh.layout(h).await.unwrap().datafiles.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_during_an_unstuff_keeps_the_first_strip_and_orphans_only_new_datafiles() {
    let strip = 65536;
    let mut cluster = Cluster::builder()
        .servers(4)
        .set(SOFT)
        .set("precreate=false")
        .set(&format!("strip_size={strip}"))
        .start();
    let client = cluster.client();
    let dir = dir_on(&client, 0, "d").await;
    let h = client.create(dir, "f", 0o644).await.unwrap().handle;
    let first = pattern(1, 1000);
    client
        .write(h, 0, Bytes::from(first.clone()))
        .await
        .unwrap();
    client.fsync(h).await.unwrap();

    cluster.arm(0, cp::UNSTUFF_AFTER_CREATE);
    // A small write is buffered (the gathering path): its send, which needs
    // the unstuff, fails at the fsync that reports it.
    let past = async {
        client
            .write(h, strip as u64 * 2, Bytes::from(pattern(2, 5000)))
            .await?;
        client.fsync(h).await
    }
    .await;
    assert!(past.is_err(), "the unstuff never completed");
    cluster.restart_after_crash(0);

    let fresh = cluster.uncached_client();
    let layout = fresh.layout(h).await.unwrap();
    assert_eq!(layout.datafiles.len(), 1, "still stuffed");
    assert!(fresh.read(h, 0, 10_000).await.unwrap() == first[..]);
    let found = settled_fsck(&fresh).await;
    assert!(
        !found.orphans.is_empty(),
        "the datafiles made for the unstuff are orphans: {found:?}"
    );
    repair_to_zero(&fresh).await;
    // And the file can grow past its first strip now.
    let more = pattern(3, 5000);
    fresh
        .write(h, strip as u64 * 2, Bytes::from(more.clone()))
        .await
        .unwrap();
    let got = fresh.read(h, strip as u64 * 2, 5000).await.unwrap();
    assert!(got[..] == more[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_whose_entry_was_made_but_not_answered_keeps_its_file() {
    // No precreate: nothing but the link's entry changes the armed server.
    let mut cluster = Cluster::builder()
        .servers(2)
        .set(SOFT)
        .set(SYNCED)
        .set("precreate=false")
        .start();
    let client = cluster.client();
    let home = dir_on(&client, 0, "home").await;
    let other = dir_on(&client, 1, "other").await;
    let h = client.create(home, "f", 0o644).await.unwrap().handle;
    let data = pattern(4, 3000);
    client.write(h, 0, Bytes::from(data.clone())).await.unwrap();
    client.fsync(h).await.unwrap();
    // The new entry is made durable on server 1, which dies before it
    // answers: the link fails, and may or may not have been applied.
    cluster.arm(1, cp::COMMIT_BEFORE_REPLY);
    assert!(client.link(h, other, "second").await.is_err());
    cluster.restart_after_crash(1);
    // The entry stands, so the file's first name going must not take the
    // file with it.
    let fresh = cluster.uncached_client();
    fresh.unlink(home, "f").await.unwrap();
    let (second, _) = fresh.lookup(other, "second").await.unwrap();
    assert_eq!(second, h);
    assert!(fresh.read(h, 0, 5000).await.unwrap() == data[..]);
    // What is left is a count one too high, which fsck sets right.
    settled_fsck(&fresh).await;
    repair_to_zero(&fresh).await;
}
