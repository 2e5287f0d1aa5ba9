//! Directory read-ahead (`client/src/namespace/listings_ahead.rs`): once a process
//! walks a tree, the first batch of each subdirectory a listing shows is
//! fetched before the walk opens it, and used only while it is still what
//! the directory holds. Each test walks as libshoal does: every listing
//! reports the subdirectories it showed.

use std::time::{Duration, Instant};

use shoal_client::{Client, FileKind, ReadAhead, SetAttr};
use shoal_proto::handle::ROOT;
use shoal_proto::Handle;
use shoal_tests::Cluster;

const BATCH: u32 = 512;

/// Opens `dir`'s listing as libshoal's opendir does and reports the
/// subdirectories it shows; its entries' names, its mode.
async fn list(c: &Client, dir: Handle) -> (Vec<String>, u32) {
    let (entries, done, attr) = c.open_listing(dir, BATCH).await.unwrap();
    assert!(done, "a test directory fits one batch");
    let subdirs: Vec<Handle> = entries
        .iter()
        .filter(|e| e.kind == FileKind::Directory)
        .map(|e| e.handle)
        .collect();
    c.listed_subdirectories(&subdirs, BATCH, false);
    (entries.into_iter().map(|e| e.name).collect(), attr.mode)
}

fn sorted(names: &[String]) -> Vec<&str> {
    let mut v: Vec<&str> = names.iter().map(String::as_str).collect();
    v.sort_unstable();
    v
}

/// Starts `c`'s walk as `ls -R` does: lists `top`, then opens `d0`, which
/// that listing showed, so that `d0`'s listing reads its `n` subdirectories
/// ahead; waits until they are brought.
async fn walk_into(c: &Client, top: Handle, d0: Handle, n: u64) -> ReadAhead {
    list(c, top).await;
    list(c, d0).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = c.read_ahead_listings();
        if now.fetched >= n {
            return now;
        }
        assert!(Instant::now() < deadline, "read-ahead stuck at {now}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// `top/dK/sJ` for K, J < `n`, each `sJ` holding file `f`; the handles of
/// `top`, of each `dK` and of `d0`'s subdirectories.
async fn tree(c: &Client, n: usize) -> (Handle, Vec<Handle>, Vec<Handle>) {
    let top = c.mkdir(ROOT, "top", 0o755).await.unwrap().handle;
    let mut ds = Vec::new();
    let mut d0_subs = Vec::new();
    for k in 0..n {
        let d = c.mkdir(top, &format!("d{k}"), 0o755).await.unwrap().handle;
        ds.push(d);
        for j in 0..n {
            let s = c.mkdir(d, &format!("s{j}"), 0o755).await.unwrap().handle;
            c.create(s, "f", 0o644).await.unwrap();
            if k == 0 {
                d0_subs.push(s);
            }
        }
    }
    (top, ds, d0_subs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_walk_reads_each_directory_once_and_ahead_of_opening_it() {
    // Without delegations: the writer's, granted in the background after
    // its creates, could come mid-walk and recall a listing read ahead
    // (rightly), which this count of messages does not expect.
    let cluster = Cluster::builder()
        .servers(4)
        .set("dir_delegations=false")
        .start();
    let (w, r) = cluster.two_clients().await;
    let (top, _, _) = tree(&w, 3).await;

    let ((), messages) = cluster
        .messages_during(&r, async {
            // A depth-first walk, as ls -R's, in listing order (the
            // names' hash order).
            let (names, _) = list(&r, top).await;
            assert_eq!(sorted(&names), ["d0", "d1", "d2"]);
            for d in &names {
                let (d, _) = r.lookup(top, d).await.unwrap();
                let (subs, _) = list(&r, d).await;
                assert_eq!(sorted(&subs), ["s0", "s1", "s2"]);
                for s in &subs {
                    let (h, _) = r.lookup(d, s).await.unwrap();
                    assert_eq!(list(&r, h).await.0, ["f"]);
                }
            }
        })
        .await;
    let ahead = r.read_ahead_listings();
    // The first dK is opened before the walk is seen: its listing and those
    // of the top and the other two (shown before that) are read as they
    // open; the nine
    // sJ's are read ahead, every one used.
    assert_eq!(ahead.used, 9, "{ahead}");
    assert_eq!(ahead.dropped, 0, "{ahead}");
    // One Readdir per directory: nothing read twice (the lookups are
    // answered by the listings' names).
    assert_eq!(messages, 13, "{ahead}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_read_ahead_is_not_used_once_its_directory_changed() {
    let cluster = Cluster::builder().servers(4).start();
    let (w, r) = cluster.two_clients().await;
    let (top, ds, subs) = tree(&w, 4).await;

    // The walk starts at d0, whose listing reads s0..s3 ahead.
    let before = walk_into(&r, top, ds[0], 4).await;
    assert_eq!(before.used + before.dropped, 0);

    // Another client's changes: a file in s1, and s2's mode. Each recalls
    // the lease r's batch came with.
    w.create(subs[1], "theirs", 0o644).await.unwrap();
    let chmod = SetAttr {
        mode: Some(0o700),
        ..Default::default()
    };
    w.setattr(subs[2], &chmod).await.unwrap();
    assert_eq!(list(&r, subs[1]).await.0, ["f", "theirs"]);
    let (names, mode) = list(&r, subs[2]).await;
    assert_eq!(names, ["f"]);
    assert_eq!(mode & 0o7777, 0o700);
    let recalled = r.read_ahead_listings();
    assert_eq!((recalled.used, recalled.dropped), (0, 2), "{recalled}");

    // This client's own change (not recalled from it): a file in s0.
    r.create(subs[0], "mine", 0o644).await.unwrap();
    assert_eq!(list(&r, subs[0]).await.0, ["f", "mine"]);
    // s3 did not change, but this client does not tell its changes apart:
    // its batch goes too.
    assert_eq!(list(&r, subs[3]).await.0, ["f"]);
    let after = r.read_ahead_listings();
    assert_eq!((after.used, after.dropped), (0, 4), "{after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_walk_that_changes_what_it_walks_reads_nothing_ahead() {
    let cluster = Cluster::builder().servers(4).start();
    let (w, r) = cluster.two_clients().await;
    let (top, ds, subs) = tree(&w, 2).await;

    walk_into(&r, top, ds[0], 2).await;
    // As rm -r does: a change, then a listing that shows subdirectories.
    r.unlink(subs[0], "f").await.unwrap();
    let (names, _) = list(&r, ds[1]).await;
    let before = r.read_ahead_listings();
    for s in names {
        let (h, _) = r.lookup(ds[1], &s).await.unwrap();
        assert_eq!(list(&r, h).await.0, ["f"]);
    }
    // d1's subdirectories were neither used from read-ahead nor dropped:
    // none was read ahead.
    let after = r.read_ahead_listings();
    assert_eq!(
        after.used + after.dropped,
        before.used + before.dropped,
        "{after}"
    );
}
