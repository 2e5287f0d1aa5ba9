//! Split directories (`split_entries`, server/src/partitions.rs): a
//! directory that grows past the limit splits over every server while
//! clients create, rename and remove in it; no entry is lost, doubled or
//! seen after its removal; each server holds a share of the entries;
//! lookups, creates and removes stay one message; rmdir sees every
//! partition; a server killed in the middle of a split finishes it.

use std::collections::BTreeSet;

use shoal_client::{Client, Errno};
use shoal_proto::crash_points as cp;
use shoal_proto::handle::{server_of, Handle, ROOT};
use shoal_proto::ObjectKind;
use shoal_tests::{entry_names, repair_to_zero, settled_fsck, Cluster};

/// Four servers whose directories split past 200 entries; no delegations,
/// so that one client's creates split a directory too.
fn cluster() -> Cluster {
    Cluster::builder()
        .servers(4)
        .set("split_entries=200")
        .set("dir_delegations=false")
        .start()
}

/// Creates `names` in `dir` through `c`.
async fn create_all(c: &Client, dir: Handle, names: &[String]) {
    for n in names {
        c.create(dir, n, 0o644)
            .await
            .unwrap_or_else(|e| panic!("create {n}: {e}"));
    }
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}.f{i}")).collect()
}

/// Every name of `dir` listed through `c`: each once.
async fn listed(c: &Client, dir: Handle) -> BTreeSet<String> {
    let all = entry_names(c, dir).await;
    let set: BTreeSet<String> = all.iter().cloned().collect();
    assert_eq!(set.len(), all.len(), "a name listed twice");
    set
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_directory_splits_over_every_server_and_keeps_every_name() {
    let cluster = cluster();
    let (a, b) = cluster.two_clients().await;
    let dir = a.mkdir(ROOT, "shared", 0o755).await.unwrap().handle;
    let (na, nb) = (names("a", 1200), names("b", 1200));
    tokio::join!(create_all(&a, dir, &na), create_all(&b, dir, &nb));
    let mut model: BTreeSet<String> = na.iter().chain(&nb).cloned().collect();

    // Renames within the directory, across partitions or not, and removes,
    // by both clients, after the splits.
    for i in (0..1200).step_by(7) {
        let (old, new) = (format!("a.f{i}"), format!("a.renamed{i}"));
        a.rename(dir, &old, dir, &new, false).await.unwrap();
        model.remove(&old);
        model.insert(new);
    }
    for i in (0..1200).step_by(5) {
        let name = format!("b.f{i}");
        b.unlink(dir, &name).await.unwrap();
        model.remove(&name);
    }
    for c in [&a, &b] {
        assert_eq!(listed(c, dir).await, model);
    }
    let fresh = cluster.client();
    assert_eq!(listed(&fresh, dir).await, model);
    for name in model.iter().step_by(13) {
        fresh.lookup(dir, name).await.unwrap();
    }
    let gone = fresh.lookup(dir, "b.f0").await.unwrap_err();
    assert_eq!(gone.errno, Errno::ENOENT);

    // One partition per server, each with its share of the entries.
    let parts = fresh.dir_partitions(dir).await.unwrap();
    assert_eq!(parts.len(), 4, "partitions {parts:?}");
    let servers: BTreeSet<u32> = parts.iter().map(|p| server_of(p.handle)).collect();
    assert_eq!(servers.len(), 4);
    let total: u64 = parts.iter().map(|p| p.entry_count).sum();
    assert_eq!(total, model.len() as u64);
    for p in &parts {
        let share = p.entry_count as f64 / total as f64;
        assert!(
            (0.15..0.35).contains(&share),
            "partition {}: {share}",
            p.partition_index
        );
    }

    // fsck walks every partition: nothing orphaned, no count wrong.
    let found = settled_fsck(&fresh).await;
    assert_eq!(found.problems(), 0, "{found:?}");

    // A lookup, a create and a remove: one message each, split or not.
    let (absent, m) = cluster
        .messages_during(&fresh, fresh.lookup(dir, "never-made"))
        .await;
    assert_eq!(absent.unwrap_err().errno, Errno::ENOENT);
    assert_eq!(m, 1, "lookup");
    let (_, m) = cluster
        .messages_during(&fresh, fresh.create(dir, "new-one", 0o644))
        .await;
    assert_eq!(m, 1, "create");
    let (_, m) = cluster
        .messages_during(&fresh, fresh.unlink(dir, "new-one"))
        .await;
    assert_eq!(m, 1, "remove");

    // rmdir sees every partition: refused while any holds a name.
    let refused = a.rmdir(ROOT, "shared").await.unwrap_err();
    assert_eq!(refused.errno, Errno::ENOTEMPTY);
    for name in &model {
        b.unlink(dir, name).await.unwrap();
    }
    a.rmdir(ROOT, "shared").await.unwrap();
    assert!(b.lookup(ROOT, "shared").await.is_err());
    for p in &parts {
        let gone = fresh.getattr(p.handle).await;
        assert!(gone.is_err(), "partition {:#x} left behind", p.handle);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_in_the_middle_of_a_split_finishes_it() {
    let mut cluster = cluster();
    let c = cluster.client();
    c.ping_all().await.unwrap();
    let dir = c.mkdir(ROOT, "d", 0o755).await.unwrap().handle;
    let home = server_of(dir);
    // The directory's server dies once the first half has moved.
    cluster.arm(home, cp::SPLIT_AFTER_MOVE);
    let c = cluster.client();
    let wanted = names("x", 260);
    let creating = {
        let c = c.clone();
        let wanted = wanted.clone();
        tokio::spawn(async move { create_all(&c, dir, &wanted).await })
    };
    cluster.restart_after_crash(home);
    creating.await.unwrap();
    let want: BTreeSet<String> = wanted.into_iter().collect();
    assert_eq!(listed(&c, dir).await, want);
    assert_eq!(listed(&cluster.client(), dir).await, want);
    let parts = c.dir_partitions(dir).await.unwrap();
    assert!(parts.len() >= 2, "the split finished: {parts:?}");
    assert!(parts.iter().all(|p| p.split_pending == 0));
    // The kill may orphan datafiles of the precreate pools (as any kill);
    // no partition is an orphan, no count is wrong, and repair empties it.
    let found = settled_fsck(&c).await;
    assert!(
        found
            .orphans
            .iter()
            .all(|(_, k)| *k == ObjectKind::Datafile),
        "{found:?}"
    );
    assert!(
        found.wrong_counts.is_empty() && found.stale_marks.is_empty(),
        "{found:?}"
    );
    repair_to_zero(&c).await;
    assert_eq!(listed(&c, dir).await, want);
}

/// Runs `cmd` through `sh -c`; its standard output.
fn sh(cmd: &str) -> String {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .output()
        .unwrap();
    assert!(out.status.success(), "{cmd}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn two_mounts_fill_one_directory_and_ls_and_find_see_each_name_once() {
    // The defaults (delegations on) but for the split limit.
    let mut cluster = Cluster::builder()
        .servers(4)
        .set("split_entries=200")
        .start();
    let m1 = cluster.mount();
    let second = shoal_tests::SharedMount::new(&cluster);
    let m2 = second.path();
    std::fs::create_dir(m1.join("shared")).unwrap();
    let writers: Vec<_> = [(m1.clone(), "a"), (m2.clone(), "b")]
        .into_iter()
        .map(|(mnt, prefix)| {
            std::thread::spawn(move || {
                for i in 0..600 {
                    let path = mnt.join("shared").join(format!("{prefix}.f{i}"));
                    std::fs::write(&path, format!("{prefix} {i}")).unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let want: BTreeSet<String> = ["a", "b"]
        .iter()
        .flat_map(|p| (0..600).map(move |i| format!("{p}.f{i}")))
        .collect();
    for mnt in [&m1, &m2] {
        let dir = mnt.join("shared");
        let ls = sh(&format!("ls -l {}", dir.display()));
        let names: Vec<&str> = ls
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().last())
            .collect();
        assert_eq!(names.len(), want.len(), "ls -l lists each name once");
        let found = sh(&format!("cd {} && find . -type f", dir.display()));
        let found: BTreeSet<String> = found
            .lines()
            .map(|l| l.trim_start_matches("./").to_string())
            .collect();
        assert_eq!(found, want, "find");
    }
    // Each file's bytes through the mount that did not write it.
    for i in (0..600).step_by(37) {
        let a = std::fs::read_to_string(m2.join(format!("shared/a.f{i}"))).unwrap();
        assert_eq!(a, format!("a {i}"));
        let b = std::fs::read_to_string(m1.join(format!("shared/b.f{i}"))).unwrap();
        assert_eq!(b, format!("b {i}"));
    }
    // The directory is split over the servers, as shoal stat shows.
    let layout = sh(&format!(
        "{} stat --layout --json --config {} /shared",
        shoal_tests::shoal_bin().display(),
        cluster.config_path().display()
    ));
    let layout: serde_json::Value = serde_json::from_str(&layout).unwrap();
    let parts = layout["partitions"].as_array().unwrap();
    assert_eq!(parts.len(), 4, "{layout}");
    // Removals through one mount are gone from the other's listing.
    for i in 0..300 {
        std::fs::remove_file(m2.join(format!("shared/a.f{i}"))).unwrap();
    }
    let ls = sh(&format!("ls {}", m1.join("shared").display()));
    assert_eq!(ls.lines().count(), 900);
    assert!(!m1.join("shared/a.f0").exists());
    // rm -r of the whole directory, through the first mount.
    sh(&format!("rm -r {}", m1.join("shared").display()));
    assert!(!m2.join("shared").exists());
}
