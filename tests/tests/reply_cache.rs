//! A request that must not be done twice (a create, rename, unlink, mkdir),
//! whose change its server made durable before dying without answering, is
//! sent again once the server is back and answered from the server's reply
//! cache (`server/src/reply_cache.rs`): the caller sees the first copy's
//! success, not EEXIST or ENOENT, and nothing is done twice. Through the
//! mount, a server killed and restarted in the middle of a `cp -r` is not
//! seen by `cp`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use shoal_client::Errno;
use shoal_tests::{
    across_a_crash, dir_on, entry_names, repair_to_zero, settled_fsck, Cluster, SharedMount,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_whose_replies_died_with_their_server_succeed_once() {
    // No precreate: the armed server's first change is the test's request
    // (a pool refill would take the crash point otherwise). Every change
    // durable before its reply: with `replay` a group flush could take the
    // crash point instead (the replayed side is tests/tests/replay.rs).
    let mut cluster = Cluster::builder()
        .servers(2)
        .set("sync=full")
        .set("precreate=false")
        .start();
    let client = cluster.client();
    let dir = dir_on(&client, 1, "d").await;

    let c = client.clone();
    let made = across_a_crash(&mut cluster, &client, 1, async move {
        c.create(dir, "f", 0o644).await
    })
    .await
    .expect("the create succeeds");
    assert_eq!(client.lookup(dir, "f").await.unwrap().0, made.handle);

    let c = client.clone();
    across_a_crash(&mut cluster, &client, 1, async move {
        c.rename(dir, "f", dir, "g", false).await
    })
    .await
    .expect("the rename succeeds");
    let c = client.clone();
    let sub = across_a_crash(&mut cluster, &client, 1, async move {
        c.mkdir(dir, "sub", 0o755).await
    })
    .await
    .expect("the mkdir succeeds");
    let c = client.clone();
    across_a_crash(
        &mut cluster,
        &client,
        1,
        async move { c.unlink(dir, "g").await },
    )
    .await
    .expect("the unlink succeeds");

    let fresh = cluster.uncached_client();
    assert_eq!(fresh.lookup(dir, "sub").await.unwrap().0, sub.handle);
    for gone in ["f", "g"] {
        let e = fresh.lookup(dir, gone).await.unwrap_err();
        assert_eq!(e.errno, Errno::ENOENT, "{gone}");
    }
    let names = entry_names(&fresh, dir).await;
    assert_eq!(names, ["sub"]);
    settled_fsck(&fresh).await;
    repair_to_zero(&fresh).await;
}

/// A tree of `dirs` directories of `files` small files each under `root`.
fn source_tree(root: &Path, dirs: usize, files: usize) {
    for d in 0..dirs {
        let dir = root.join(format!("dir{d:03}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..files {
            std::fs::write(dir.join(format!("file{f:03}")), format!("{d} {f}\n")).unwrap();
        }
    }
}

/// `diff -r` of two trees: every name, kind and byte the same (symlinks
/// compared as links); its output if not.
fn differences(a: &Path, b: &Path) -> String {
    let out = Command::new("diff")
        .args(["-r", "--no-dereference"])
        .arg(a)
        .arg(b)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    text.lines().take(20).collect::<Vec<_>>().join("\n")
}

/// Every path under `root`, relative to it, sorted.
fn names_under(root: &Path) -> Vec<String> {
    let out = Command::new("find")
        .arg(".")
        .current_dir(root)
        .output()
        .unwrap();
    let mut names: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_and_restarted_during_cp_r_is_not_seen_by_cp() {
    // Every name `cp` made before the kill must be there after it.
    let mut cluster = Cluster::builder().servers(4).durable().start();
    let mnt = cluster.mount();
    let src = cluster.dir().join("src");
    source_tree(&src, 40, 40);
    let cp = Command::new("cp")
        .arg("-r")
        .arg(&src)
        .arg(mnt.join("copy"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once the copy is under way, a server dies and comes back a second later.
    let started = mnt.join("copy").join("dir002");
    let patience = std::time::Instant::now() + Duration::from_secs(120);
    while !started.exists() {
        assert!(std::time::Instant::now() < patience, "cp did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    cluster.kill(1);
    std::thread::sleep(Duration::from_secs(1));
    cluster.start_server(1);
    let out = cp.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "cp failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    assert_eq!(names_under(&mnt.join("copy")), names_under(&src));
    // Every byte, read right away through the mount that wrote it (whose
    // listings come from the caches the restart and the writes went
    // through), and through another. A restarted server's lost writes are
    // sent again by the writer (docs/operations.md).
    assert_eq!(
        differences(&src, &mnt.join("copy")),
        "",
        "through the writer's mount"
    );
    let other = SharedMount::new(&cluster);
    assert_eq!(
        differences(&src, &other.path().join("copy")),
        "",
        "through another mount"
    );
    drop(other);
    cluster.unmount();
}
