//! Server-side permission checks, through the native client acting as
//! different users (`Client::with_cred`): EACCES (or EPERM) exactly where
//! POSIX says for lookups, listings, creates, removals, renames, sticky
//! directories, attribute changes, extended attributes and file data;
//! supplementary groups count; root squash; and the capabilities that carry
//! data rights to the servers holding the data, which refuse forged,
//! expired or borrowed ones.

use std::fmt::Debug;
use std::time::Duration;

use bytes::Bytes;
use shoal_client::{Client, Cred, Errno, FileKind, SetAttr, SetTime};
use shoal_proto::capability::{self, READ, WRITE};
use shoal_proto::handle::{server_of, ROOT};
use shoal_proto::hints::Hint;
use shoal_proto::msg::{Capability, Empty, GetAttrReply, GetAttrRequest, ReadRequest};
use shoal_proto::{ops, Handle};
use shoal_tests::{entry_names, Cluster};

const ALICE: Cred = Cred::new(1001, 1001);
const BOB: Cred = Cred::new(1002, 1002);
/// The group of the team directory and files.
const TEAM: u32 = 2000;

/// Carol is in the team through a supplementary group only.
fn carol() -> Cred {
    Cred::new(1003, 1003).with_groups(&[TEAM])
}

/// A client of `cluster` acting as root, and views of it acting as alice
/// and bob.
fn people(cluster: &Cluster) -> (Client, Client, Client) {
    let root = cluster.client().with_cred(Cred::ROOT);
    let (alice, bob) = (root.with_cred(ALICE), root.with_cred(BOB));
    (root, alice, bob)
}

/// As root: /shared, a directory everyone may write (not sticky).
async fn shared_dir(root: &Client) -> Handle {
    dir_of(root, ROOT, "shared", 0o777, 0, 0).await
}

#[track_caller]
fn errno<T: Debug>(r: shoal_proto::error::Result<T>) -> Errno {
    r.expect_err("refused").errno
}

fn mode(m: u32) -> SetAttr {
    SetAttr {
        mode: Some(m),
        ..Default::default()
    }
}

fn owner(uid: u32, gid: u32) -> SetAttr {
    SetAttr {
        uid: Some(uid),
        gid: Some(gid),
        ..Default::default()
    }
}

fn group(gid: u32) -> SetAttr {
    SetAttr {
        gid: Some(gid),
        ..Default::default()
    }
}

/// As root: directory `name` under `parent` with `mode`, owned by uid:gid.
async fn dir_of(root: &Client, parent: Handle, name: &str, m: u32, uid: u32, gid: u32) -> Handle {
    let h = root.mkdir(parent, name, 0o700).await.unwrap().handle;
    root.setattr(h, &owner(uid, gid)).await.unwrap();
    root.setattr(h, &mode(m)).await.unwrap();
    h
}

/// As `user`: file `name` in `dir` holding `data`, then given mode `m`.
async fn file_of(user: &Client, dir: Handle, name: &str, m: u32, data: &[u8]) -> Handle {
    let h = user.create(dir, name, 0o600).await.unwrap().handle;
    user.write(h, 0, Bytes::copy_from_slice(data))
        .await
        .unwrap();
    user.setattr(h, &mode(m)).await.unwrap();
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookup_needs_search_and_listing_needs_read() {
    let cluster = Cluster::builder().servers(3).start();
    let (root, alice, bob) = people(&cluster);
    let home = dir_of(&root, ROOT, "alice", 0o700, ALICE.uid, ALICE.gid).await;
    file_of(&alice, home, "secret", 0o600, b"mine").await;

    assert!(alice.lookup(home, "secret").await.is_ok());
    assert_eq!(alice.readdir_all(home).await.unwrap().len(), 1);
    assert_eq!(errno(bob.lookup(home, "secret").await), Errno::EACCES);
    assert_eq!(errno(bob.lookup_attr(home, "secret").await), Errno::EACCES);
    assert_eq!(errno(bob.readdir_all(home).await), Errno::EACCES);
    assert_eq!(errno(bob.resolve("/alice/secret").await), Errno::EACCES);
    let e = bob.lookup(home, "secret").await.unwrap_err();
    assert!(
        e.message.contains("uid 1002") && e.message.contains("search permission"),
        "the refusal names the user and the right: {}",
        e.message
    );

    // Search only: names can be used, not listed.
    alice.setattr(home, &mode(0o711)).await.unwrap();
    assert!(bob.lookup(home, "secret").await.is_ok());
    assert_eq!(errno(bob.readdir_all(home).await), Errno::EACCES);
    // Read only: listed, not looked up, even right after the listing.
    alice.setattr(home, &mode(0o744)).await.unwrap();
    let bob = cluster.client().with_cred(BOB);
    assert_eq!(bob.readdir_all(home).await.unwrap().len(), 1);
    assert_eq!(errno(bob.lookup(home, "secret").await), Errno::EACCES);
    // Root searches and lists anything.
    let root_home = dir_of(&root, ROOT, "locked", 0o000, ALICE.uid, ALICE.gid).await;
    assert!(root.readdir_all(root_home).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creating_and_removing_entries_need_write_and_search_on_the_directory() {
    for baseline in [false, true] {
        let cluster = Cluster::builder().servers(3).baseline_if(baseline).start();
        let (root, alice, bob) = people(&cluster);
        let home = dir_of(&root, ROOT, "alice", 0o755, ALICE.uid, ALICE.gid).await;
        file_of(&alice, home, "f", 0o666, b"x").await;
        alice.mkdir(home, "sub", 0o777).await.unwrap();

        for (what, r) in [
            ("create", bob.create(home, "new", 0o644).await.map(|_| ())),
            ("mkdir", bob.mkdir(home, "d", 0o755).await.map(|_| ())),
            ("symlink", bob.symlink(home, "l", "f").await.map(|_| ())),
            ("unlink", bob.unlink(home, "f").await),
            ("rmdir", bob.rmdir(home, "sub").await),
            ("rename", bob.rename(home, "f", home, "g", false).await),
        ] {
            assert_eq!(errno(r), Errno::EACCES, "{what} (baseline {baseline})");
        }
        // Nothing happened, and a refused create left no object behind.
        let names = entry_names(&alice, home).await;
        assert_eq!(names, ["f", "sub"]);
        let report = shoal_tests::settled_fsck(&root).await;
        assert!(report.orphans.is_empty(), "{report:?}");
        // A refused rmdir leaves the directory usable.
        alice.create(home, "again", 0o644).await.unwrap();
        alice
            .create(alice.lookup(home, "sub").await.unwrap().0, "inside", 0o644)
            .await
            .unwrap();

        // In a directory everyone may write, anyone removes anyone's file.
        let shared = shared_dir(&root).await;
        file_of(&alice, shared, "hers", 0o600, b"x").await;
        bob.unlink(shared, "hers").await.unwrap();
        bob.create(shared, "his", 0o644).await.unwrap();
        alice
            .rename(shared, "his", shared, "now-hers", false)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_move_to_another_directory_changes_nothing() {
    let cluster = Cluster::builder().servers(3).start();
    let (root, alice, bob) = people(&cluster);
    let home = dir_of(&root, ROOT, "alice", 0o755, ALICE.uid, ALICE.gid).await;
    let drop_box = dir_of(&root, ROOT, "drop", 0o777, 0, 0).await;
    let f = file_of(&alice, home, "f", 0o644, b"x").await;
    // Bob may write the target, not the source.
    assert_eq!(
        errno(bob.rename(home, "f", drop_box, "f", false).await),
        Errno::EACCES
    );
    // ... nor the target here.
    bob.create(drop_box, "his", 0o644).await.unwrap();
    assert_eq!(
        errno(bob.rename(drop_box, "his", home, "his", false).await),
        Errno::EACCES
    );
    assert_eq!(alice.lookup(home, "f").await.unwrap().0, f);
    assert_eq!(
        errno(alice.lookup(drop_box, "f").await),
        Errno::ENOENT,
        "no second name was made"
    );
    assert_eq!(
        alice.lookup(home, "his").await.unwrap_err().errno,
        Errno::ENOENT
    );
    assert!(bob.lookup(drop_box, "his").await.is_ok());

    // Moving a directory to another parent changes its "..": it needs
    // write permission on the directory itself; renaming it in place does not.
    let d = alice.mkdir(home, "ro", 0o555).await.unwrap().handle;
    let other = alice.mkdir(home, "other", 0o755).await.unwrap().handle;
    assert_eq!(
        errno(alice.rename(home, "ro", other, "ro", false).await),
        Errno::EACCES
    );
    assert_eq!(alice.lookup(home, "ro").await.unwrap().0, d);
    alice.rename(home, "ro", home, "ro2", false).await.unwrap();
    alice.setattr(d, &mode(0o755)).await.unwrap();
    alice.rename(home, "ro2", other, "ro", false).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sticky_directories_let_only_owners_remove_and_rename() {
    // Baseline places metafiles and directories round the ring, so the
    // owner the rule needs often lives on another server.
    for baseline in [false, true] {
        let cluster = Cluster::builder().servers(3).baseline_if(baseline).start();
        let (root, alice, bob) = people(&cluster);
        let tmp = dir_of(&root, ROOT, "tmp", 0o1777, 0, 0).await;
        let elsewhere = dir_of(&root, ROOT, "elsewhere", 0o777, 0, 0).await;
        for i in 0..3 {
            file_of(&alice, tmp, &format!("f{i}"), 0o666, b"x").await;
            alice.mkdir(tmp, &format!("d{i}"), 0o777).await.unwrap();
        }
        bob.create(tmp, "his", 0o666).await.unwrap();
        for i in 0..3 {
            let (f, d) = (format!("f{i}"), format!("d{i}"));
            for (what, r) in [
                ("unlink", bob.unlink(tmp, &f).await),
                ("rmdir", bob.rmdir(tmp, &d).await),
                ("rename", bob.rename(tmp, &f, tmp, "mine", false).await),
                ("rename over", bob.rename(tmp, "his", tmp, &f, false).await),
                ("move out", bob.rename(tmp, &f, elsewhere, "f", false).await),
            ] {
                assert_eq!(errno(r), Errno::EPERM, "{what} {i} (baseline {baseline})");
            }
        }
        // Bob's own entries, and the owners of the others, and root.
        bob.rename(tmp, "his", tmp, "his2", false).await.unwrap();
        bob.unlink(tmp, "his2").await.unwrap();
        alice.unlink(tmp, "f0").await.unwrap();
        alice.rmdir(tmp, "d0").await.unwrap();
        root.unlink(tmp, "f1").await.unwrap();
        // The directory's owner too.
        root.setattr(tmp, &owner(BOB.uid, BOB.gid)).await.unwrap();
        bob.unlink(tmp, "f2").await.unwrap();
        bob.rmdir(tmp, "d2").await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chmod_by_owner_chown_by_root_and_times_as_posix_says() {
    let cluster = Cluster::builder().servers(2).start();
    let root = cluster.client();
    let alice = root.with_cred(ALICE.with_groups(&[TEAM]));
    let bob = root.with_cred(BOB);
    let shared = shared_dir(&root).await;
    let f = file_of(&alice, shared, "f", 0o644, b"x").await;

    assert_eq!(errno(bob.setattr(f, &mode(0o666)).await), Errno::EPERM);
    assert_eq!(alice.setattr(f, &mode(0o640)).await.unwrap().mode, 0o640);
    // Only root gives a file away; its owner may pick among its groups.
    assert_eq!(
        errno(alice.setattr(f, &owner(BOB.uid, ALICE.gid)).await),
        Errno::EPERM
    );
    assert_eq!(alice.setattr(f, &group(TEAM)).await.unwrap().gid, TEAM);
    assert_eq!(errno(alice.setattr(f, &group(3000)).await), Errno::EPERM);
    assert_eq!(errno(bob.setattr(f, &group(BOB.gid)).await), Errno::EPERM);
    let a = root.setattr(f, &owner(BOB.uid, 3000)).await.unwrap();
    assert_eq!((a.uid, a.gid), (BOB.uid, 3000));
    root.setattr(f, &owner(ALICE.uid, ALICE.gid)).await.unwrap();

    // Times: to now, anyone who may write; to a given time, the owner.
    let now = SetAttr {
        atime: Some(SetTime::Now),
        mtime: Some(SetTime::Now),
        ..Default::default()
    };
    let given = SetAttr {
        mtime: Some(SetTime::At(1_000_000_000)),
        ..Default::default()
    };
    assert_eq!(errno(bob.setattr(f, &now).await), Errno::EACCES);
    alice.setattr(f, &mode(0o666)).await.unwrap();
    let before = alice.getattr(f).await.unwrap().mtime_ns;
    assert!(bob.setattr(f, &now).await.unwrap().mtime_ns >= before);
    assert_eq!(errno(bob.setattr(f, &given).await), Errno::EPERM);
    assert_eq!(
        alice.setattr(f, &given).await.unwrap().mtime_ns,
        1_000_000_000
    );
    // A size change is a write. (A client that holds a capability from
    // before the chmod keeps its rights for the capability's lifetime: ask
    // from another one.)
    alice.setattr(f, &mode(0o644)).await.unwrap();
    let truncate = SetAttr {
        size: Some(0),
        ..Default::default()
    };
    let bob = cluster.client().with_cred(BOB);
    assert_eq!(errno(bob.setattr(f, &truncate).await), Errno::EACCES);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_data_follows_the_mode_for_other_users_and_groups() {
    for baseline in [false, true] {
        let cluster = Cluster::builder().servers(3).baseline_if(baseline).start();
        let root = cluster.client();
        let alice = root.with_cred(ALICE);
        let (bob, carol) = (root.with_cred(BOB), root.with_cred(carol()));
        let team = dir_of(&root, ROOT, "team", 0o775, ALICE.uid, TEAM).await;
        // (mode, bob reads, bob writes, carol reads, carol writes); carol is
        // in the file's group, bob is other.
        let cases: [(u32, bool, bool, bool, bool); 6] = [
            (0o600, false, false, false, false),
            (0o640, false, false, true, false),
            (0o604, true, false, false, false),
            (0o644, true, false, true, false),
            (0o660, false, false, true, true),
            (0o606, true, true, false, false),
        ];
        for (m, bob_r, bob_w, carol_r, carol_w) in cases {
            let name = format!("f{m:o}");
            let h = file_of(&alice, team, &name, m, b"data").await;
            root.setattr(h, &group(TEAM)).await.unwrap();
            for (who, user, may_read, may_write) in [
                ("bob", &bob, bob_r, bob_w),
                ("carol", &carol, carol_r, carol_w),
            ] {
                let read = user.read(h, 0, 4).await;
                let wrote = user.write(h, 0, Bytes::from_static(b"DATA")).await;
                let truncated = user.truncate(h, 4).await;
                let at = format!("{who} on {m:04o} (baseline {baseline})");
                assert_eq!(read.is_ok(), may_read, "read: {at}: {read:?}");
                assert_eq!(wrote.is_ok(), may_write, "write: {at}: {wrote:?}");
                assert_eq!(truncated.is_ok(), may_write, "truncate: {at}");
                for r in [read.err(), wrote.err(), truncated.err()]
                    .into_iter()
                    .flatten()
                {
                    assert_eq!(r.errno, Errno::EACCES, "{at}: {r}");
                }
            }
            // The owner may use its file whatever the mode (the kernel
            // checked at open; a file created read-only is written through
            // the descriptor that created it), and root may.
            alice.setattr(h, &mode(0o000)).await.unwrap();
            alice
                .write(h, 0, Bytes::from_static(b"mine"))
                .await
                .unwrap();
            assert_eq!(&root.read(h, 0, 4).await.unwrap()[..], b"mine");
        }
        // Striped files too: every datafile checks. Bob's first capability
        // names the one datafile of the file still stuffed; after alice's
        // write unstuffs it, he reads all of it with a new one.
        let big = file_of(&alice, team, "big", 0o644, b"small").await;
        assert_eq!(&bob.read(big, 0, 5).await.unwrap()[..], b"small");
        let data = shoal_tests::pattern(1, 3 << 20);
        alice
            .write(big, 0, Bytes::from(data.clone()))
            .await
            .unwrap();
        assert_eq!(bob.read(big, 0, data.len()).await.unwrap(), data);
        assert_eq!(
            errno(bob.write(big, 2 << 20, Bytes::from_static(b"x")).await),
            Errno::EACCES
        );
        assert!(bob.fsync(big).await.is_ok(), "fsync needs any right");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_without_a_metafile_are_checked_from_their_own_record() {
    let cluster = Cluster::builder().servers(3).baseline().start();
    let (root, alice, bob) = people(&cluster);
    let nm = dir_of(&root, ROOT, "nm", 0o777, 0, 0).await;
    root.set_hint(nm, Hint::NoMetafile, "1").await.unwrap();
    let private = file_of(&alice, nm, "private", 0o600, b"mine").await;
    let public = file_of(&alice, nm, "public", 0o644, b"ours").await;
    assert!(alice.layout(private).await.unwrap().no_metafile);
    assert_eq!(errno(bob.read(private, 0, 4).await), Errno::EACCES);
    assert_eq!(&bob.read(public, 0, 4).await.unwrap()[..], b"ours");
    assert_eq!(
        errno(bob.write(public, 0, Bytes::from_static(b"x")).await),
        Errno::EACCES
    );
    alice
        .write(public, 0, Bytes::from_static(b"OURS"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supplementary_groups_grant_what_the_group_bits_say() {
    let cluster = Cluster::builder().servers(2).start();
    let root = cluster.client();
    let alice = root.with_cred(ALICE);
    let team = dir_of(&root, ROOT, "team", 0o770, 0, TEAM).await;
    let f = file_of(&root, team, "plan", 0o640, b"plan").await;
    root.setattr(f, &group(TEAM)).await.unwrap();
    let carol = root.with_cred(carol());
    assert_eq!(carol.lookup(team, "plan").await.unwrap().0, f);
    assert_eq!(&carol.read(f, 0, 4).await.unwrap()[..], b"plan");
    carol.create(team, "hers", 0o644).await.unwrap();
    // Without the group: other, and the directory is closed to others.
    assert_eq!(errno(alice.lookup(team, "plan").await), Errno::EACCES);
    assert_eq!(errno(alice.read(f, 0, 4).await), Errno::EACCES);
    // The same user, with the group as a supplementary one.
    let alice_in_team = root.with_cred(ALICE.with_groups(&[7, TEAM]));
    assert_eq!(&alice_in_team.read(f, 0, 4).await.unwrap()[..], b"plan");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xattrs_need_read_and_write_and_hints_write_on_the_directory() {
    let cluster = Cluster::builder().servers(2).start();
    let (root, alice, bob) = people(&cluster);
    let home = dir_of(&root, ROOT, "alice", 0o755, ALICE.uid, ALICE.gid).await;
    let f = file_of(&alice, home, "f", 0o644, b"x").await;
    alice
        .setxattr(f, "user.note", b"hi", false, false)
        .await
        .unwrap();
    assert_eq!(bob.getxattr(f, "user.note").await.unwrap(), b"hi");
    assert_eq!(
        errno(bob.setxattr(f, "user.note", b"no", false, false).await),
        Errno::EACCES
    );
    assert_eq!(errno(bob.removexattr(f, "user.note").await), Errno::EACCES);
    alice.setattr(f, &mode(0o600)).await.unwrap();
    assert_eq!(errno(bob.getxattr(f, "user.note").await), Errno::EACCES);
    assert!(bob.listxattr(f).await.is_ok(), "listing needs nothing");
    assert_eq!(
        errno(alice.setxattr(f, "trusted.x", b"1", false, false).await),
        Errno::EPERM
    );
    root.setxattr(f, "trusted.x", b"1", false, false)
        .await
        .unwrap();
    assert_eq!(errno(alice.getxattr(f, "trusted.x").await), Errno::ENODATA);
    // Directory hints: write permission on the directory.
    assert_eq!(
        errno(bob.set_hint(home, Hint::NumDfiles, "1").await),
        Errno::EACCES
    );
    alice.set_hint(home, Hint::NumDfiles, "1").await.unwrap();
    assert_eq!(
        errno(bob.unset_hint(home, Hint::NumDfiles).await),
        Errno::EACCES
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_squash_makes_root_nobody_and_without_it_root_may_do_anything() {
    let mut cluster = Cluster::builder().servers(2).start();
    let (root, alice, _) = people(&cluster);
    let home = dir_of(&root, ROOT, "alice", 0o755, ALICE.uid, ALICE.gid).await;
    let secret = file_of(&alice, home, "secret", 0o600, b"mine").await;
    let public = file_of(&alice, home, "public", 0o644, b"ours").await;
    let drop_box = dir_of(&root, ROOT, "drop", 0o777, 0, 0).await;
    // Without root squash (the default), root may do anything.
    assert_eq!(&root.read(secret, 0, 4).await.unwrap()[..], b"mine");
    root.write(public, 0, Bytes::from_static(b"ours"))
        .await
        .unwrap();
    root.setattr(secret, &owner(BOB.uid, BOB.gid))
        .await
        .unwrap();
    root.setattr(secret, &owner(ALICE.uid, ALICE.gid))
        .await
        .unwrap();
    root.create(home, "by-root", 0o644).await.unwrap();

    cluster.restart_with("root_squash=true");
    let root = cluster.client().with_cred(Cred::ROOT.with_groups(&[0]));
    let alice = root.with_cred(ALICE);
    assert_eq!(errno(root.read(secret, 0, 4).await), Errno::EACCES);
    assert_eq!(&root.read(public, 0, 4).await.unwrap()[..], b"ours");
    assert_eq!(
        errno(root.write(public, 0, Bytes::from_static(b"x")).await),
        Errno::EACCES
    );
    assert_eq!(
        errno(root.setattr(secret, &owner(0, 0)).await),
        Errno::EPERM
    );
    assert_eq!(errno(root.setattr(ROOT, &mode(0o777)).await), Errno::EPERM);
    assert_eq!(
        errno(root.create(home, "again", 0o644).await),
        Errno::EACCES
    );
    assert_eq!(errno(root.unlink(home, "by-root").await), Errno::EACCES);
    // What root makes belongs to nobody, which may then use it.
    let mine = root.create(drop_box, "nobodys", 0o600).await.unwrap();
    let seen = cluster
        .uncached_client()
        .getattr(mine.handle)
        .await
        .unwrap();
    assert_eq!((seen.uid, seen.gid), (65534, 65534));
    assert_eq!((mine.uid, mine.gid), (65534, 65534), "the client agrees");
    root.write(mine.handle, 0, Bytes::from_static(b"n"))
        .await
        .unwrap();
    root.setattr(mine.handle, &mode(0o640)).await.unwrap();
    // Other users are not affected.
    assert_eq!(&alice.read(secret, 0, 4).await.unwrap()[..], b"mine");
}

/// The capability (if any) the file's server grants `user` for file `h`,
/// and the file's first datafile.
async fn granted(user: &Client, h: Handle) -> (Option<Capability>, Handle) {
    let reply: GetAttrReply = user
        .call::<ops::GetAttr>(server_of(h), &GetAttrRequest { handle: h })
        .await
        .unwrap();
    let datafile = reply.object.unwrap().dist.unwrap().datafiles[0];
    (reply.cap, datafile)
}

/// A raw read of `datafile` as `user` with capability `cap`.
async fn read_with(
    user: &Client,
    datafile: Handle,
    cap: Option<Capability>,
) -> shoal_proto::error::Result<Empty> {
    user.call::<ops::Read>(
        server_of(datafile),
        &ReadRequest {
            handle: datafile,
            offset: 0,
            length: 4,
            cap,
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn datafile_servers_refuse_missing_forged_expired_and_borrowed_capabilities() {
    let cluster = Cluster::builder().servers(3).baseline().start();
    let secret = cluster.config().secret().unwrap().unwrap();
    let (root, alice, bob) = people(&cluster);
    let shared = shared_dir(&root).await;
    let public = file_of(&alice, shared, "public", 0o644, b"ours").await;
    let private = file_of(&alice, shared, "private", 0o600, b"mine").await;
    let (cap, df) = granted(&bob, public).await;
    let cap = cap.expect("a cluster with a secret grants capabilities");
    assert_eq!((cap.uid, cap.rights), (BOB.uid, READ));
    let refused = |r: shoal_proto::error::Result<Empty>, why: &str| {
        let e = r.expect_err(why);
        assert_eq!(e.errno, Errno::EACCES, "{why}: {e}");
        assert!(e.message.contains(why), "{why}: {e}");
    };

    // The real one works; none, another key's, a widened one do not.
    read_with(&bob, df, Some(cap.clone())).await.unwrap();
    refused(read_with(&bob, df, None).await, "no capability");
    let other = shoal_proto::auth::Secret::new(b"not the cluster's").unwrap();
    let now_ms = shoal_proto::time::now_ns() / 1_000_000;
    let life = Duration::from_secs(60);
    let foreign = capability::issue(&other, public, &[df], BOB.uid, READ, now_ms, life);
    refused(read_with(&bob, df, Some(foreign)).await, "not signed");
    let mut widened = cap.clone();
    widened.rights = READ | WRITE;
    refused(read_with(&bob, df, Some(widened)).await, "not signed");
    // Signed with the cluster's secret, but expired, for another user, or
    // for another file's datafile.
    let expired = capability::issue(&secret, public, &[df], BOB.uid, READ, now_ms - 61_000, life);
    refused(read_with(&bob, df, Some(expired)).await, "expired");
    let (alices, _) = granted(&alice, public).await;
    refused(read_with(&bob, df, alices).await, "is for uid 1001");
    let (_, private_df) = granted(&alice, private).await;
    refused(
        read_with(&bob, private_df, Some(cap.clone())).await,
        "does not name this datafile",
    );
    // A capability without the right: the server grants none for a 0600
    // file, and bob's read-only one does not write.
    let (none, _) = granted(&bob, private).await;
    assert_eq!(none.unwrap().rights, 0);
    let wrote = bob
        .call::<ops::Truncate>(
            server_of(df),
            &shoal_proto::msg::TruncateRequest {
                handle: df,
                size: 0,
                cap: Some(cap),
            },
        )
        .await;
    refused(wrote.map(|_| Empty {}), "may not write");
    assert_eq!(&alice.read(public, 0, 4).await.unwrap()[..], b"ours");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chmod_reaches_a_user_holding_a_capability_within_its_lifetime() {
    let cluster = Cluster::builder()
        .servers(2)
        .set("capability_ttl_s=1")
        .start();
    let (root, alice, bob) = people(&cluster);
    let shared = shared_dir(&root).await;
    let f = file_of(&alice, shared, "f", 0o644, b"data").await;
    assert_eq!(&bob.read(f, 0, 4).await.unwrap()[..], b"data");
    alice.setattr(f, &mode(0o600)).await.unwrap();
    // Once bob's capability is over (the client keeps it for 3/4 of its
    // second), bob asks again and is refused.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(errno(bob.read(f, 0, 4).await), Errno::EACCES);
    // An expired capability is replaced without the caller noticing.
    alice.setattr(f, &mode(0o644)).await.unwrap();
    assert_eq!(&bob.read(f, 0, 4).await.unwrap()[..], b"data");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(&bob.read(f, 0, 4).await.unwrap()[..], b"data");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_cost_no_message_where_the_switches_promise_one() {
    // All on: a user's create, small write, stat, read and remove are one
    // message each (the capability comes with the create's reply). The
    // write takes the direct path here (the gathering path would send it
    // later, with whatever else the file gets).
    let cluster = Cluster::builder()
        .servers(4)
        .set("write_threshold=0")
        .start();
    let root = cluster.uncached_client();
    root.ping_all().await.unwrap();
    cluster.wait_for_pools(&root).await;
    let alice = root.with_cred(ALICE);
    let (home, h, [create, write]) = alices_create_and_write(&cluster, &root).await;
    let (a, stat) = cluster.messages_during(&root, alice.getattr(h)).await;
    assert_eq!(a.unwrap().size, 5);
    let (r, read) = cluster.messages_during(&root, alice.read(h, 0, 5)).await;
    assert_eq!(&r.unwrap()[..], b"hello");
    let (u, remove) = cluster
        .messages_during(&root, alice.unlink(home, "f"))
        .await;
    u.unwrap();
    assert_eq!([create, write, stat, read, remove], [1, 1, 1, 1, 1]);

    // Another user reading it first asks for a capability: the stat that a
    // reader through the mount makes anyway (lookup with attributes).
    let f = file_of(&alice, home, "g", 0o644, b"x").await;
    let bob = cluster.uncached_client().with_cred(BOB);
    let (_, lookup) = cluster
        .messages_during(&root, bob.lookup_attr(home, "g"))
        .await;
    let (r, read) = cluster.messages_during(&root, bob.read(f, 0, 1)).await;
    assert_eq!(&r.unwrap()[..], b"x");
    assert_eq!((lookup, read), (1, 1));
    assert_eq!(bob.lookup(home, "g").await.unwrap().1, FileKind::File);

    // The baseline protocol: create n+3 (set_dist brings the capability),
    // a small write 2 (rendezvous and data, eager being off).
    let cluster = Cluster::builder()
        .servers(4)
        .baseline()
        .set("write_threshold=0")
        .start();
    let root = cluster.uncached_client();
    let (_, _, [create, write]) = alices_create_and_write(&cluster, &root).await;
    assert_eq!((create, write), (4 + 3, 2));
}

/// Alice's home on `cluster` (made by `root`, whose client counts), and the
/// messages her create of a file `f` there and a write of 5 bytes to it
/// take; returns the home, the file and the counts.
async fn alices_create_and_write(cluster: &Cluster, root: &Client) -> (Handle, Handle, [u64; 2]) {
    let alice = root.with_cred(ALICE);
    let home = dir_of(root, ROOT, "alice", 0o755, ALICE.uid, ALICE.gid).await;
    let (made, create) = cluster
        .messages_during(root, alice.create(home, "f", 0o644))
        .await;
    let h = made.unwrap().handle;
    let (w, write) = cluster
        .messages_during(root, alice.write(h, 0, Bytes::from_static(b"hello")))
        .await;
    w.unwrap();
    (home, h, [create, write])
}

/// A file's distribution (which datafiles hold its bytes) is set by its
/// creator right after making it: no one else may point a file at other
/// datafiles (EPERM), its owner and root may.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_owner_or_root_sets_a_files_distribution() {
    use shoal_proto::msg::SetDistRequest;
    let cluster = Cluster::builder().servers(2).start();
    let root = cluster.client();
    let shared = root.mkdir(ROOT, "shared", 0o777).await.unwrap().handle;
    let alice = root.with_cred(ALICE);
    let bob = root.with_cred(BOB);
    let h = alice.create(shared, "hers", 0o666).await.unwrap().handle;
    let dist = alice.distribution(h).await.unwrap();
    let set = SetDistRequest {
        handle: h,
        dist: Some(dist.clone()),
    };
    let e = bob
        .call::<ops::SetDist>(server_of(h), &set)
        .await
        .unwrap_err();
    assert_eq!(e.errno, Errno::EPERM, "{e:?}");
    alice
        .call::<ops::SetDist>(server_of(h), &set)
        .await
        .unwrap();
    root.call::<ops::SetDist>(server_of(h), &set).await.unwrap();
    assert_eq!(root.distribution(h).await.unwrap(), dist);
}
