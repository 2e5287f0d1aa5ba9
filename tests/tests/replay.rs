//! Replayed commits (`sync = "replay"`, server/src/recovery.rs): a server
//! answers changes before they are durable and its clients keep them until
//! it says they are. A server killed just before its group flush loses the
//! changes it answered since the last one; once it is back, its clients
//! replay them, in order, before it serves anything new: every change a
//! caller was told succeeded is there, none is there twice, the handles
//! callers hold still name the same objects, and fsck finds nothing wrong.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shoal_client::Errno;
use shoal_proto::crash_points::GROUP_FLUSH;
use shoal_proto::Handle;
use shoal_tests::{dir_on, entry_names, settled_fsck, Cluster};

/// Group flushes this far apart: an armed server's first one comes long
/// after a test's first change there (which is synced before its reply; a
/// flush racing that sync would fire the crash point on it instead). 3 s
/// was not long enough under a loaded CI run: the restart, the client's
/// reconnection and that first create took longer, the server died at the
/// first create, and the client waited a minute for it. (That also
/// happened with 8 s, 1 run in 4 here, while the server's first flush
/// came at its start, whenever its loop first ran: now it comes one
/// period after.)
const FLUSHES_APART: &str = "replay_flush_ms=8000";

/// Two servers with replayed commits, server 1 armed to die at its first
/// group flush, and a client in its table with a directory `d` there
/// holding `first`.
async fn armed_with_a_client_in_its_table() -> (Cluster, shoal_client::Client, Handle) {
    let mut cluster = Cluster::builder()
        .servers(2)
        .set("sync=replay")
        .set(FLUSHES_APART)
        .set("precreate=false")
        // A delegation's handle reservation syncs the store, which would
        // make the changes these tests keep unflushed durable.
        .set("dir_delegations=false")
        .start();
    let client = cluster.client();
    let dir = dir_on(&client, 1, "d").await;
    // Arming restarts the server cleanly (an empty client table); then a
    // change of this client enters it (its first change there, made
    // durable before its reply).
    cluster.arm(1, GROUP_FLUSH);
    client.create(dir, "first", 0o644).await.unwrap();
    (cluster, client, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_answered_before_a_crash_are_replayed_in_order() {
    // The changes of the test pile up unflushed until the armed server
    // dies at its flush.
    let (mut cluster, client, dir) = armed_with_a_client_in_its_table().await;
    // Creates, renames of some and unlinks of others, until the server is
    // back and a few more went through; what each call was told is recorded.
    let told: Arc<Mutex<BTreeMap<String, Handle>>> = Arc::default();
    let back = Arc::new(tokio::sync::Notify::new());
    let work = {
        let (c, told, back) = (client.clone(), told.clone(), back.clone());
        tokio::spawn(async move {
            let mut after_restart = None;
            for i in 0u32.. {
                let name = format!("f{i}");
                let made = c.create(dir, &name, 0o644).await.expect("create");
                told.lock().unwrap().insert(name.clone(), made.handle);
                if i % 3 == 1 {
                    let to = format!("r{i}");
                    c.rename(dir, &name, dir, &to, false).await.expect("rename");
                    let mut t = told.lock().unwrap();
                    t.remove(&name);
                    t.insert(to, made.handle);
                } else if i % 3 == 2 {
                    c.unlink(dir, &name).await.expect("unlink");
                    told.lock().unwrap().remove(&name);
                }
                if after_restart.is_none()
                    && tokio::time::timeout(Duration::ZERO, back.notified())
                        .await
                        .is_ok()
                {
                    after_restart = Some(i);
                }
                if after_restart.is_some_and(|a| i >= a + 20) {
                    return;
                }
            }
            unreachable!()
        })
    };
    // Blocks this thread only; the work runs on the other worker.
    cluster.restart_after_crash(1);
    back.notify_one();
    work.await.unwrap();

    let stats = client.server_stats(1).await.unwrap();
    assert!(stats.replayed > 0, "the restarted server replayed changes");
    assert_eq!(
        stats.replays_failed,
        0,
        "every replay did what its first copy did: {}",
        cluster.read_log("server-1")
    );

    // What every call was told, seen by a client that caches nothing.
    let fresh = cluster.uncached_client();
    let told = told.lock().unwrap().clone();
    let mut expected: Vec<String> = told.keys().cloned().collect();
    expected.push("first".into());
    expected.sort();
    assert_eq!(entry_names(&fresh, dir).await, expected);
    for (name, handle) in &told {
        assert_eq!(
            fresh.lookup(dir, name).await.unwrap().0,
            *handle,
            "{name} names the object its create returned"
        );
    }
    let gone = fresh.lookup(dir, "f2").await.unwrap_err();
    assert_eq!(gone.errno, Errno::ENOENT, "an unlink replayed stays done");
    // Nothing applied twice, nothing dangling; new objects get new handles.
    let report = settled_fsck(&fresh).await;
    assert_eq!(report.problems(), 0, "{report:?}");
    let newer = fresh.create(dir, "after", 0o644).await.unwrap();
    assert!(told.values().all(|h| *h != newer.handle));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_client_hands_its_changes_back_as_soon_as_its_server_restarts() {
    let (mut cluster, idle, dir) = armed_with_a_client_in_its_table().await;
    // Answered before it is durable; then this client makes no other call.
    let kept = idle.create(dir, "kept", 0o644).await.unwrap();
    cluster.restart_after_crash(1);
    // Another client is served once the restarted server has the idle
    // one's change back, which that client sends without being asked (had
    // it waited for its next call, the server would have given up on it
    // after its recovery window, and the create would be lost).
    let other = cluster.uncached_client();
    assert_eq!(other.lookup(dir, "kept").await.unwrap().0, kept.handle);
    let stats = other.server_stats(1).await.unwrap();
    assert!(
        stats.replayed >= 1,
        "the restarted server replayed the change"
    );
    assert_eq!(stats.replays_failed, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_leaves_its_next_start_no_clients_to_wait_for() {
    let mut cluster = Cluster::builder()
        .servers(2)
        .set("sync=replay")
        .set("recovery_window_ms=30000")
        // No group flush before the stop: the clients stay in the table.
        .set("replay_flush_ms=60000")
        .start();
    // One client makes changes and goes away; another stays.
    let gone = cluster.client();
    let dir = dir_on(&gone, 1, "d").await;
    for i in 0..20 {
        gone.create(dir, &format!("f{i}"), 0o644).await.unwrap();
    }
    drop(gone);
    let stays = cluster.client();
    stays.create(dir, "mine", 0o644).await.unwrap();
    stays.create(dir, "kept", 0o644).await.unwrap();
    cluster.terminate(1);
    cluster.start_server(1);
    // Nobody holds a change the store lacks: the server serves at once
    // (never waiting for the client that went away), with everything, and
    // the changes the staying client hands back are not taken for lost.
    let fresh = cluster.uncached_client();
    assert_eq!(entry_names(&fresh, dir).await.len(), 22);
    assert!(stays.lookup(dir, "kept").await.is_ok());
    let log = cluster.read_log("server-1");
    assert!(
        !log.contains("did not come back") && !log.contains("lost"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_its_restarted_server_waits_for_comes_back_though_it_keeps_nothing() {
    let mut cluster = Cluster::builder()
        .servers(2)
        .set("sync=replay")
        .set("replay_flush_ms=50")
        .set("recovery_window_ms=60000")
        // No reply-cache expiry, whose flushes would retire the client.
        .set("data_flush_ms=60000")
        .start();
    let quiet = cluster.client();
    let dir = dir_on(&quiet, 1, "d").await;
    quiet.create(dir, "a", 0o644).await.unwrap();
    // A group flush makes the create durable and a later reply says so:
    // the client keeps nothing. The server, with no change since, still
    // has it in its table (a flush that takes it out waits for changes to
    // make durable).
    tokio::time::sleep(Duration::from_millis(500)).await;
    quiet.server_stats(1).await.unwrap();
    // The quiet client comes back on its own, so the restarted server
    // serves others at once instead of waiting out its recovery window.
    // The new start has the client in its table too (nothing has been
    // flushed since it started), and says so to it: a second crash finds
    // it coming back again.
    for start in ["first", "second"] {
        cluster.kill(1);
        cluster.start_server(1);
        let other = cluster.uncached_client();
        let found = tokio::time::timeout(Duration::from_secs(30), other.lookup(dir, "a"))
            .await
            .unwrap_or_else(|_| panic!("the {start} restart still waits for a client"));
        assert!(found.is_ok());
    }
}
