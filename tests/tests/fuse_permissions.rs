//! Permissions through the mount, as two non-root users (uids 1001 and
//! 1002, used numerically) running everyday tools under `setpriv`: each
//! reads what the modes let it read and gets "Permission denied" (EACCES)
//! or "Operation not permitted" (EPERM, sticky directories) where POSIX
//! says, with the exit status of a failure; a supplementary group opens
//! what its group bits allow (the servers must not refuse what the kernel
//! allows); the same users and tools get exactly the same answers under
//! the preload library, which serves them directly with credentials from
//! the mount's broker; and with root squash, root on the mount is refused by the
//! servers where only root's privilege would have let it through.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use shoal_tests::{shoal_bin, Cluster, SharedMount};

const ALICE: u32 = 1001;
const BOB: u32 = 1002;
/// The team's group; neither user has it unless a test gives it.
const TEAM: u32 = 2000;

/// How a user's tools reach the files: through the mount, or through
/// `libshoal_preload.so` (its credential from the mount's broker), each
/// process's statistics written under `stats`.
#[derive(Clone, Copy)]
enum Via<'a> {
    Mount,
    Library { stats: &'a Path },
}

/// Runs `sh -c script` in `dir` as `uid` (its own gid) with the
/// supplementary groups `groups`, under `timeout 120`, `via` the mount or
/// the library.
fn as_user_via(via: Via, uid: u32, groups: &[u32], dir: &Path, script: &str) -> Output {
    let groups = if groups.is_empty() {
        "--clear-groups".to_string()
    } else {
        let list: Vec<String> = groups.iter().map(u32::to_string).collect();
        format!("--groups={}", list.join(","))
    };
    let mut cmd = Command::new("timeout");
    cmd.arg("120")
        .arg("setpriv")
        .arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg(groups)
        .args(["sh", "-c", script])
        .current_dir(dir)
        .env("LC_ALL", "C")
        .stdin(Stdio::null());
    if let Via::Library { stats } = via {
        cmd.env(
            "LD_PRELOAD",
            shoal_bin().with_file_name("libshoal_preload.so"),
        )
        .env("SHOAL_STATS", stats.join("%p"));
    }
    cmd.output().expect("spawn setpriv")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `script` as `uid` succeeds; returns its stdout.
#[track_caller]
fn ok(uid: u32, groups: &[u32], dir: &Path, script: &str) -> String {
    ok_via(Via::Mount, uid, groups, dir, script)
}

#[track_caller]
fn ok_via(via: Via, uid: u32, groups: &[u32], dir: &Path, script: &str) -> String {
    let out = as_user_via(via, uid, groups, dir, script);
    assert!(
        out.status.success(),
        "uid {uid}: {script:?} failed ({}): {}",
        out.status,
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// `script` as `uid` fails, and says `why` ("Permission denied").
#[track_caller]
fn refused(uid: u32, groups: &[u32], dir: &Path, script: &str, why: &str) {
    refused_via(Via::Mount, uid, groups, dir, script, why)
}

#[track_caller]
fn refused_via(via: Via, uid: u32, groups: &[u32], dir: &Path, script: &str, why: &str) {
    let out = as_user_via(via, uid, groups, dir, script);
    let stderr = text(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains(why),
        "uid {uid}: {script:?} should fail with {why:?}; got {} and {stderr:?}",
        out.status
    );
}

const DENIED: &str = "Permission denied";

/// As root: directory `name` in `mnt` with `mode`, owned by uid:gid.
fn dir_of(mnt: &Path, name: &str, mode: u32, uid: u32, gid: u32) {
    let p = mnt.join(name);
    std::fs::create_dir(&p).unwrap();
    std::os::unix::fs::chown(&p, Some(uid), Some(gid)).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn two_users_get_exactly_what_the_modes_give_them() {
    let cluster = Cluster::builder().servers(3).start();
    let shared = SharedMount::new(&cluster);
    the_two_users_matrix(Via::Mount, &shared.path());
}

/// The same users and tools under the preload library, which serves them
/// directly with a credential from the mount's broker (each process's
/// statistics say so, and none left a call to the mount): exactly the
/// mount's answers.
#[test]
fn two_users_get_exactly_what_the_modes_give_them_through_the_library() {
    let cluster = Cluster::builder().servers(3).start();
    // The cluster file is the users' to read, the secret is not.
    std::fs::set_permissions(cluster.dir(), PermissionsExt::from_mode(0o755)).unwrap();
    let shared = SharedMount::new(&cluster);
    let stats = tempfile::Builder::new()
        .prefix("shoal-user-stats-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(stats.path(), PermissionsExt::from_mode(0o1777)).unwrap();
    the_two_users_matrix(
        Via::Library {
            stats: stats.path(),
        },
        &shared.path(),
    );
    let mut served = 0;
    for f in std::fs::read_dir(stats.path()).unwrap() {
        let table = std::fs::read_to_string(f.unwrap().path()).unwrap();
        assert!(!table.contains("left to the mount"), "{table}");
        if table.contains("by a user credential") {
            served += 1;
            assert!(
                table.contains("served as uid 1001") || table.contains("served as uid 1002"),
                "{table}"
            );
        }
    }
    assert!(served >= 20, "processes the library served: {served}");
}

fn the_two_users_matrix(via: Via, mnt: &Path) {
    let mnt = mnt.to_path_buf();
    let ok = |uid, groups: &[u32], dir: &Path, script: &str| ok_via(via, uid, groups, dir, script);
    let refused = |uid, groups: &[u32], dir: &Path, script: &str, why: &str| {
        refused_via(via, uid, groups, dir, script, why)
    };
    dir_of(&mnt, "alice", 0o755, ALICE, ALICE);
    dir_of(&mnt, "team", 0o770, 0, TEAM);
    dir_of(&mnt, "shared", 0o777, 0, 0);
    dir_of(&mnt, "tmp", 0o1777, 0, 0);
    ok(
        ALICE,
        &[],
        &mnt,
        "echo mine > alice/private && chmod 600 alice/private && \
         echo ours > alice/public && chmod 644 alice/public",
    );
    std::fs::write(mnt.join("team/plan"), "plan\n").unwrap();
    std::os::unix::fs::chown(mnt.join("team/plan"), Some(0), Some(TEAM)).unwrap();
    std::fs::set_permissions(mnt.join("team/plan"), PermissionsExt::from_mode(0o640)).unwrap();

    // Bob, in no group: other for everything of alice's and the team's.
    assert_eq!(ok(BOB, &[], &mnt, "id -u; id -G"), "1002\n1002\n");
    refused(BOB, &[], &mnt, "cat alice/private", DENIED);
    assert_eq!(ok(BOB, &[], &mnt, "cat alice/public"), "ours\n");
    refused(BOB, &[], &mnt, "touch alice/new", DENIED);
    refused(BOB, &[], &mnt, "cp /etc/hostname alice/copy", DENIED);
    refused(BOB, &[], &mnt, "rm -f alice/public", DENIED);
    refused(BOB, &[], &mnt, "echo more >> alice/public", DENIED);
    refused(BOB, &[], &mnt, "mkdir alice/d", DENIED);
    refused(BOB, &[], &mnt, "mv alice/public alice/moved", DENIED);
    refused(BOB, &[], &mnt, "cat team/plan", DENIED);
    refused(BOB, &[], &mnt, "ls team", DENIED);
    refused(
        BOB,
        &[],
        &mnt,
        "chmod 666 alice/public",
        "Operation not permitted",
    );
    // With the team as a supplementary group: the group's bits.
    assert_eq!(ok(BOB, &[TEAM], &mnt, "cat team/plan"), "plan\n");
    ok(BOB, &[TEAM], &mnt, "touch team/bob-was-here && ls team");
    refused(BOB, &[TEAM], &mnt, "echo more >> team/plan", DENIED);
    // What bob keeps to himself, alice cannot read; in a plain shared
    // directory she may still remove it, in a sticky one she may not.
    ok(
        BOB,
        &[],
        &mnt,
        "echo his > shared/his && chmod 600 shared/his && \
         echo his > tmp/his && chmod 666 tmp/his",
    );
    refused(ALICE, &[], &mnt, "cat shared/his", DENIED);
    refused(ALICE, &[], &mnt, "rm -f tmp/his", "Operation not permitted");
    refused(
        ALICE,
        &[],
        &mnt,
        "mv tmp/his tmp/hers",
        "Operation not permitted",
    );
    assert_eq!(ok(ALICE, &[], &mnt, "cat tmp/his"), "his\n");
    ok(ALICE, &[], &mnt, "rm shared/his && touch alice/public");

    // Nothing refused happened; what was allowed did.
    let listing = |d: &str| {
        let mut names: Vec<String> = std::fs::read_dir(mnt.join(d))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(listing("alice"), ["private", "public"]);
    assert_eq!(listing("team"), ["bob-was-here", "plan"]);
    assert_eq!(listing("shared"), Vec::<String>::new());
    assert_eq!(listing("tmp"), ["his"]);
    assert_eq!(
        std::fs::read_to_string(mnt.join("alice/public")).unwrap(),
        "ours\n"
    );
    let made = std::fs::metadata(mnt.join("team/bob-was-here")).unwrap();
    assert_eq!((made.uid(), made.gid()), (BOB, BOB));
}

#[test]
fn with_root_squash_root_on_the_mount_is_nobody() {
    let mut cluster = Cluster::builder().servers(2).start();
    {
        let shared = SharedMount::new(&cluster);
        let mnt = shared.path();
        dir_of(&mnt, "alice", 0o755, ALICE, ALICE);
        dir_of(&mnt, "shared", 0o777, 0, 0);
        ok(
            ALICE,
            &[],
            &mnt,
            "echo mine > alice/private && chmod 600 alice/private && echo ours > alice/public",
        );
        // Root, not squashed, may read anything.
        assert_eq!(
            std::fs::read_to_string(mnt.join("alice/private")).unwrap(),
            "mine\n"
        );
    }
    // The mount reads the cluster file when it starts: mount again.
    cluster.restart_with("root_squash=true");
    let shared = SharedMount::new(&cluster);
    let mnt = shared.path();
    // The kernel lets root through; the servers do not.
    refused(0, &[], &mnt, "cat alice/private", DENIED);
    assert_eq!(ok(0, &[], &mnt, "cat alice/public"), "ours\n");
    refused(0, &[], &mnt, "touch alice/new", DENIED);
    refused(
        0,
        &[],
        &mnt,
        "chown 0 alice/public",
        "Operation not permitted",
    );
    ok(0, &[], &mnt, "echo r > shared/roots");
    let made = std::fs::metadata(mnt.join("shared/roots")).unwrap();
    assert_eq!((made.uid(), made.gid()), (65534, 65534));
    // Alice is not affected.
    assert_eq!(ok(ALICE, &[], &mnt, "cat alice/private"), "mine\n");
}

/// The mount checks what the kernel no longer checks for it (the mount has
/// no `default_permissions`): opens by the mode, the owner's too; execve by
/// the caller's x bit; access(2) and cd; listings; truncate by path and by
/// O_TRUNC; `user.*` xattrs; creates in a setgid directory; hard links under
/// `protected_hardlinks`; and walks through directories not every user may
/// search, even over entries another user's walk left in the kernel's
/// cache, and after a chmod takes search away.
#[test]
fn the_mount_checks_opens_walks_and_access_itself() {
    let cluster = Cluster::builder().servers(2).start();
    let shared = SharedMount::new(&cluster);
    let mnt = shared.path();
    dir_of(&mnt, "shared", 0o777, 0, 0);
    dir_of(&mnt, "alice", 0o700, ALICE, ALICE);
    dir_of(&mnt, "unlisted", 0o711, ALICE, ALICE);
    ok(
        ALICE,
        &[],
        &mnt,
        "echo mine > alice/note && cat alice/note >/dev/null && \
         echo pub > unlisted/pub && chmod 644 unlisted/pub && \
         echo ro > shared/ro && chmod 444 shared/ro && \
         printf '#!/bin/sh\\necho ran\\n' > shared/mine.sh && chmod 700 shared/mine.sh && \
         printf '#!/bin/sh\\necho ran\\n' > shared/readable.sh && chmod 704 shared/readable.sh",
    );

    // Bob walks where alice's walk left entries.
    refused(BOB, &[], &mnt, "cat alice/note", DENIED);
    refused(BOB, &[], &mnt, "stat alice/note", DENIED);
    refused(BOB, &[], &mnt, "env --chdir=alice true", DENIED);
    refused(BOB, &[], &mnt, "ls alice", DENIED);
    // Searchable but not readable: a known name opens, the listing does not.
    assert_eq!(ok(BOB, &[], &mnt, "cat unlisted/pub"), "pub\n");
    refused(BOB, &[], &mnt, "ls unlisted", DENIED);
    // The owner of a read-only file may read it, not write or truncate it.
    assert_eq!(ok(ALICE, &[], &mnt, "cat shared/ro"), "ro\n");
    refused(ALICE, &[], &mnt, "echo more >> shared/ro", DENIED);
    refused(ALICE, &[], &mnt, "truncate -s 0 shared/ro", DENIED);
    assert_eq!(
        std::fs::read_to_string(mnt.join("shared/ro")).unwrap(),
        "ro\n"
    );
    // access(2) answers as the opens do.
    let access = "/usr/bin/python3 -c \"import os, sys; \
                  print(*[int(os.access(p, m)) for p in sys.argv[1:] \
                  for m in (os.R_OK, os.W_OK, os.X_OK)])\" \
                  shared/ro shared/mine.sh shared/readable.sh";
    assert_eq!(ok(ALICE, &[], &mnt, access), "1 0 0 1 1 1 1 1 1\n");
    assert_eq!(ok(BOB, &[], &mnt, access), "1 0 0 0 0 0 1 0 0\n");
    // execve needs the caller's x bit, not just any.
    assert_eq!(ok(ALICE, &[], &mnt, "shared/mine.sh"), "ran\n");
    refused(BOB, &[], &mnt, "shared/mine.sh", DENIED);
    refused(BOB, &[], &mnt, "shared/readable.sh", DENIED);
    // Root reads anything.
    assert_eq!(
        std::fs::read_to_string(mnt.join("alice/note")).unwrap(),
        "mine\n"
    );

    // O_TRUNC on a read-only open is a truncate: refused without write.
    let trunc = "/usr/bin/python3 -c \"import os; os.open('shared/ro', os.O_RDONLY | os.O_TRUNC)\"";
    refused(ALICE, &[], &mnt, trunc, DENIED);
    assert_eq!(
        std::fs::read_to_string(mnt.join("shared/ro")).unwrap(),
        "ro\n"
    );
    // user.* attributes (the write threshold is the client's own): write.
    let setx = "/usr/bin/python3 -c \"import os; \
                os.setxattr('shared/ro', 'user.shoal.write_threshold', b'4096')\"";
    refused(BOB, &[], &mnt, setx, DENIED);
    refused(ALICE, &[], &mnt, setx, DENIED);
    // A setgid directory of a group bob is not in, writable by that group:
    // his creates go with the directory's group, but are his to make.
    dir_of(&mnt, "team", 0o2775, 0, TEAM);
    refused(BOB, &[], &mnt, "touch team/bob", DENIED);
    refused(BOB, &[], &mnt, "mkdir team/d", DENIED);
    refused(BOB, &[], &mnt, "ln -s x team/l", DENIED);
    ok(BOB, &[TEAM], &mnt, "touch team/bob && mkdir team/d");
    let made = std::fs::metadata(mnt.join("team/d")).unwrap();
    assert_eq!((made.gid(), made.mode() & 0o2000), (TEAM, 0o2000));
    // Under fs.protected_hardlinks (Debian's default), no link to a file
    // bob may not read and write.
    if std::fs::read_to_string("/proc/sys/fs/protected_hardlinks").is_ok_and(|v| v.trim() == "1") {
        refused(
            BOB,
            &[],
            &mnt,
            "ln shared/ro shared/bobs",
            "Operation not permitted",
        );
        ok(ALICE, &[], &mnt, "ln shared/ro shared/alices");
    }

    // A chmod that takes search away holds for what bob's walk left.
    dir_of(&mnt, "later", 0o755, ALICE, ALICE);
    ok(ALICE, &[], &mnt, "echo soon > later/f");
    assert_eq!(ok(BOB, &[], &mnt, "cat later/f"), "soon\n");
    ok(ALICE, &[], &mnt, "chmod 700 later");
    refused(BOB, &[], &mnt, "cat later/f", DENIED);
}
