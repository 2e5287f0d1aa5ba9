//! The FUSE mount driven by ordinary tools: cp, mv, rm, ln, chmod, chown,
//! touch, truncate, dd, tar, rsync, df, getfattr/setfattr, and `shoal stat` /
//! `shoal cat` on paths under the mount. Every command runs under
//! `timeout 120` so a hung mount fails the test instead of the suite.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use shoal_tests::{shoal_bin, Cluster};

/// Seconds any one command may take.
const CMD_TIMEOUT: &str = "120";

const MIB: usize = 1 << 20;

/// `timeout 120 prog args...` in `cwd`, with a fixed locale and time zone.
fn command<I, S>(cwd: &Path, prog: impl AsRef<OsStr>, args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut c = Command::new("timeout");
    c.arg(CMD_TIMEOUT)
        .arg(prog)
        .args(args)
        .current_dir(cwd)
        .env("LC_ALL", "C")
        .env("TZ", "UTC")
        .stdin(Stdio::null());
    c
}

fn describe(c: &Command) -> String {
    let mut s = c.get_program().to_string_lossy().into_owned();
    for a in c.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs `c`, asserts it succeeded, returns its stdout.
fn run_ok(mut c: Command) -> String {
    let out = c.output().expect("spawn");
    assert_success(&c, &out);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn assert_success(c: &Command, out: &Output) {
    assert!(
        out.status.success(),
        "`{}` in {:?} failed with {}\nstdout: {}\nstderr: {}",
        describe(c),
        c.get_current_dir(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `prog args...` in `cwd`, asserted to succeed; its stdout.
fn ok<I, S>(cwd: &Path, prog: &str, args: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    run_ok(command(cwd, prog, args))
}

/// A bash script (with `set -euo pipefail`) in `cwd`, asserted to succeed.
fn sh(cwd: &Path, script: &str) -> String {
    ok(cwd, "bash", ["-c", &format!("set -euo pipefail\n{script}")])
}

/// `sha256sum` of every regular file under `dir`, sorted by path.
fn checksums(dir: &Path) -> String {
    let out = sh(
        dir,
        "find . -type f -print0 | sort -z | xargs -0 -r sha256sum",
    );
    assert!(!out.is_empty(), "no files under {}", dir.display());
    out
}

fn sha256(path: &Path) -> String {
    let out = ok(Path::new("/"), "sha256sum", [path]);
    out.split_whitespace().next().unwrap().to_string()
}

/// `find . -type f | sort` under `dir`.
fn file_list(dir: &Path) -> String {
    sh(dir, "find . -type f | sort")
}

/// `ls -lA` of `dir` as (mode string, size or "dir", name) per entry: what
/// must match between a tree and its copy (link counts and times may not).
fn ls_l(dir: &Path) -> Vec<(String, String, String)> {
    ok(dir, "ls", ["-lA", "--time-style=+%s"])
        .lines()
        .filter(|l| !l.starts_with("total "))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert!(f.len() >= 7, "odd ls -l line {l:?}");
            let size = if f[0].starts_with('d') {
                "dir".to_string()
            } else {
                f[4].to_string()
            };
            (f[0].to_string(), size, f[6..].join(" "))
        })
        .collect()
}

/// Deterministic pseudo-random bytes (xorshift64).
fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

fn write_file(path: &Path, data: &[u8], mode: u32) {
    std::fs::write(path, data).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Regular files of the source tree: (path, size, mode).
const TREE_FILES: &[(&str, usize, u32)] = &[
    ("empty", 0, 0o644),
    ("small.txt", 13, 0o644),
    ("run.sh", 300, 0o755),
    ("a/eight_k.bin", 8 << 10, 0o640),
    ("a/name with spaces.txt", 1000, 0o600),
    ("a/b/hundred_k.bin", 100 << 10, 0o644),
    ("a/b/c/three_m.bin", 3 * MIB, 0o644),
    ("a/b/c/d/deep", 4097, 0o444),
];

/// A small tree of files of several sizes (0 B to 3 MiB) and modes, an empty
/// directory and a symlink, in a new temporary directory.
fn source_tree() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("shoal-fuse-src-")
        .tempdir()
        .unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("a/b/c/d")).unwrap();
    std::fs::create_dir_all(root.join("emptydir")).unwrap();
    for (i, (name, len, mode)) in TREE_FILES.iter().enumerate() {
        let data = if *name == "small.txt" {
            b"hello, shoal\n".to_vec()
        } else {
            pattern(i as u64 + 1, *len)
        };
        assert_eq!(data.len(), *len);
        write_file(&root.join(name), &data, *mode);
    }
    std::os::unix::fs::symlink("../small.txt", root.join("a/link")).unwrap();
    std::fs::set_permissions(root.join("a/b"), std::fs::Permissions::from_mode(0o750)).unwrap();
    dir
}

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("shoal-fuse-")
        .tempdir()
        .unwrap()
}

fn stat_fmt(path: &Path, fmt: &str) -> String {
    ok(
        Path::new("/"),
        "stat",
        [OsStr::new("-c"), OsStr::new(fmt), path.as_os_str()],
    )
    .trim_end()
    .to_string()
}

/// Asserts the copy `dst` of the tree `src` has the same file list, bytes,
/// and `ls -l` modes and sizes in every directory.
fn assert_same_tree(src: &Path, dst: &Path) {
    assert_eq!(file_list(src), file_list(dst), "find . -type f | sort");
    assert_eq!(checksums(src), checksums(dst), "sha256sum of every file");
    for sub in ["", "a", "a/b", "a/b/c", "a/b/c/d", "emptydir"] {
        assert_eq!(ls_l(&src.join(sub)), ls_l(&dst.join(sub)), "ls -l {sub}");
    }
}

#[test]
fn mkdir_p_cp_r_diff_ls_find_cat() {
    let mut c = Cluster::builder().servers(4).start();
    let mnt = c.mount();
    let src = source_tree();

    ok(&mnt, "mkdir", ["-p", "x/y/z"]);
    assert_eq!(stat_fmt(&mnt.join("x/y/z"), "%F"), "directory");
    assert_eq!(sh(&mnt, "find x | sort"), "x\nx/y\nx/y/z\n");

    ok(
        &mnt,
        "cp",
        [OsStr::new("-r"), src.path().as_os_str(), OsStr::new("copy")],
    );
    let dst = mnt.join("copy");
    ok(
        &mnt,
        "diff",
        [OsStr::new("-r"), src.path().as_os_str(), dst.as_os_str()],
    );
    assert_same_tree(src.path(), &dst);
    assert_eq!(ok(&dst, "cat", ["small.txt"]), "hello, shoal\n");
    assert_eq!(ok(&dst, "cat", ["a/link"]), "hello, shoal\n");
    let out = command(&dst, "cat", ["a/b/c/three_m.bin"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cat a/b/c/three_m.bin: {}",
        out.status
    );
    assert!(
        out.stdout == std::fs::read(src.path().join("a/b/c/three_m.bin")).unwrap(),
        "cat of a 3 MiB file differs from the source"
    );
}

#[test]
fn mv_files_and_directories_within_and_across_directories() {
    let mut c = Cluster::builder().servers(4).start();
    let mnt = c.mount();
    let src = source_tree();
    ok(
        &mnt,
        "cp",
        [OsStr::new("-r"), src.path().as_os_str(), OsStr::new("t")],
    );
    ok(&mnt, "mkdir", ["other"]);
    let t = mnt.join("t");
    let sum = |p: &str| sha256(&mnt.join(p));
    let small = sum("t/small.txt");
    let big = sum("t/a/b/c/three_m.bin");

    // A file, within its directory.
    ok(&mnt, "mv", ["t/small.txt", "t/renamed.txt"]);
    assert!(!t.join("small.txt").exists());
    assert_eq!(sum("t/renamed.txt"), small);

    // A file, across directories.
    ok(&mnt, "mv", ["t/a/b/c/three_m.bin", "other/big.bin"]);
    assert!(!t.join("a/b/c/three_m.bin").exists());
    assert_eq!(sum("other/big.bin"), big);
    assert_eq!(
        stat_fmt(&mnt.join("other/big.bin"), "%s"),
        (3 * MIB).to_string()
    );

    // A file onto an existing one (replaces it).
    ok(&mnt, "cp", ["t/run.sh", "other/victim"]);
    ok(&mnt, "mv", ["t/renamed.txt", "other/victim"]);
    assert!(!t.join("renamed.txt").exists());
    assert_eq!(sum("other/victim"), small);

    // A directory, within its parent.
    let deep = sum("t/a/b/c/d/deep");
    ok(&mnt, "mv", ["t/a/b", "t/a/bee"]);
    assert!(!t.join("a/b").exists());
    assert_eq!(sum("t/a/bee/c/d/deep"), deep);

    // A directory, across directories; its contents move with it.
    ok(&mnt, "mv", ["t/a/bee", "other/bee"]);
    assert!(!t.join("a/bee").exists());
    assert_eq!(sum("other/bee/c/d/deep"), deep);
    assert_eq!(sh(&mnt, "find other | sort"),
        "other\nother/bee\nother/bee/c\nother/bee/c/d\nother/bee/c/d/deep\nother/bee/hundred_k.bin\nother/big.bin\nother/victim\n");
    assert_eq!(
        ok(&mnt, "ls", ["t/a"]),
        "eight_k.bin\nlink\nname with spaces.txt\n"
    );
    // `..` of the moved directory is its new parent.
    assert_eq!(
        stat_fmt(&mnt.join("other/bee/c/../.."), "%i"),
        stat_fmt(&mnt.join("other"), "%i")
    );
}

#[test]
fn rm_r_removes_the_tree() {
    let mut c = Cluster::builder().servers(4).start();
    let mnt = c.mount();
    let src = source_tree();
    ok(
        &mnt,
        "cp",
        [OsStr::new("-r"), src.path().as_os_str(), OsStr::new("t")],
    );
    ok(&mnt, "touch", ["keep"]);
    ok(&mnt, "rm", ["-r", "t"]);
    assert!(!mnt.join("t").exists());
    assert_eq!(ok(&mnt, "ls", ["-A"]), "keep\n");
    let out = command(&mnt, "ls", ["t"]).output().unwrap();
    assert!(!out.status.success(), "ls of a removed directory succeeded");
    // The name can be used again.
    ok(&mnt, "mkdir", ["-p", "t/a"]);
    assert_eq!(ok(&mnt, "ls", ["-A", "t"]), "a\n");
}

#[test]
fn symlink_readlink_and_reading_through_the_link() {
    let mut c = Cluster::builder().servers(4).start();
    let mnt = c.mount();
    ok(&mnt, "mkdir", ["-p", "d/sub"]);
    std::fs::write(mnt.join("d/sub/file"), b"through the link\n").unwrap();
    ok(&mnt, "ln", ["-s", "sub/file", "d/rel"]);
    ok(&mnt, "ln", ["-s", "sub", "d/dirlink"]);
    let abs = mnt.join("d/sub/file");
    ok(
        &mnt,
        "ln",
        [OsStr::new("-s"), abs.as_os_str(), OsStr::new("abs")],
    );

    assert_eq!(ok(&mnt, "readlink", ["d/rel"]), "sub/file\n");
    assert_eq!(
        ok(&mnt, "readlink", ["abs"]),
        format!("{}\n", abs.display())
    );
    assert_eq!(stat_fmt(&mnt.join("d/rel"), "%F"), "symbolic link");
    assert_eq!(stat_fmt(&mnt.join("d/rel"), "%s"), "8");
    assert_eq!(ok(&mnt, "cat", ["d/rel"]), "through the link\n");
    assert_eq!(ok(&mnt, "cat", ["abs"]), "through the link\n");
    assert_eq!(ok(&mnt, "cat", ["d/dirlink/file"]), "through the link\n");
    assert_eq!(ok(&mnt, "ls", ["d/dirlink/"]), "file\n");
    assert_eq!(
        ok(&mnt, "readlink", ["-f", "d/rel"]),
        format!("{}\n", abs.display())
    );
    // Writing through the link changes the target.
    sh(&mnt, "echo appended >> d/rel");
    assert_eq!(
        ok(&mnt, "cat", ["d/sub/file"]),
        "through the link\nappended\n"
    );
    // Removing the link leaves the target.
    ok(&mnt, "rm", ["d/rel"]);
    assert!(mnt.join("d/sub/file").exists());
    assert!(std::fs::symlink_metadata(mnt.join("d/rel")).is_err());
}

#[test]
fn chmod_chown_touch_truncate() {
    let mut c = Cluster::builder().servers(4).start();
    let mnt = c.mount();
    let f = mnt.join("f");
    write_file(&f, &pattern(7, 100), 0o644);

    ok(&mnt, "chmod", ["640", "f"]);
    assert_eq!(stat_fmt(&f, "%a"), "640");
    ok(&mnt, "chmod", ["u+x,o+r", "f"]);
    assert_eq!(stat_fmt(&f, "%a"), "744");
    ok(&mnt, "mkdir", ["d"]);
    ok(&mnt, "chmod", ["700", "d"]);
    assert_eq!(stat_fmt(&mnt.join("d"), "%a %F"), "700 directory");

    ok(&mnt, "chown", ["1234:5678", "f"]);
    assert_eq!(stat_fmt(&f, "%u:%g"), "1234:5678");
    ok(&mnt, "chown", ["42", "d"]);
    assert_eq!(stat_fmt(&mnt.join("d"), "%u:%g"), "42:0");

    ok(&mnt, "touch", ["-d", "2001-02-03 04:05:06", "f"]);
    assert_eq!(stat_fmt(&f, "%Y"), "981173106");
    ok(&mnt, "touch", ["-a", "-d", "1999-12-31 23:59:59", "f"]);
    assert_eq!(stat_fmt(&f, "%X %Y"), "946684799 981173106");
    ok(&mnt, "touch", ["-d", "2001-02-03 04:05:06", "d"]);
    assert_eq!(stat_fmt(&mnt.join("d"), "%Y"), "981173106");
    // touch of a new name creates an empty file.
    ok(&mnt, "touch", ["new"]);
    assert_eq!(stat_fmt(&mnt.join("new"), "%s %F"), "0 regular empty file");

    // Growing keeps the old bytes and reads zeros after them.
    ok(&mnt, "truncate", ["-s", "12345", "f"]);
    assert_eq!(stat_fmt(&f, "%s"), "12345");
    let data = std::fs::read(&f).unwrap();
    assert_eq!(data.len(), 12345);
    assert!(data[..100] == pattern(7, 100)[..]);
    assert!(
        data[100..].iter().all(|&b| b == 0),
        "grown part is not zeros"
    );
    // Shrinking keeps the prefix.
    ok(&mnt, "truncate", ["-s", "50", "f"]);
    assert_eq!(stat_fmt(&f, "%s"), "50");
    assert!(std::fs::read(&f).unwrap() == pattern(7, 50));
    // Across strips of a striped file.
    ok(&mnt, "truncate", ["-s", "3000000", "f"]);
    assert_eq!(stat_fmt(&f, "%s"), "3000000");
    ok(&mnt, "truncate", ["-s", "1048577", "f"]);
    let data = std::fs::read(&f).unwrap();
    assert_eq!(data.len(), 1_048_577);
    assert!(data[..50] == pattern(7, 50)[..] && data[50..].iter().all(|&b| b == 0));
    // Ownership and mode survive all that.
    assert_eq!(stat_fmt(&f, "%a %u:%g"), "744 1234:5678");
}

#[test]
fn dd_write_read_back_and_partial_overwrite() {
    let mut c = Cluster::builder().servers(4).start();
    let mnt = c.mount();
    let local = tempdir();
    let l = local.path();

    // Straight from /dev/urandom into the mount, and back out.
    ok(
        &mnt,
        "dd",
        ["if=/dev/urandom", "of=f", "bs=1M", "count=5", "status=none"],
    );
    assert_eq!(stat_fmt(&mnt.join("f"), "%s"), (5 * MIB).to_string());
    let back = l.join("back");
    ok(
        &mnt,
        "dd",
        [
            "if=f".to_string(),
            "bs=1M".to_string(),
            "status=none".to_string(),
            format!("of={}", back.display()),
        ],
    );
    assert_eq!(sha256(&back), sha256(&mnt.join("f")));

    // A local reference, copied in with dd, read back with dd.
    let reference = l.join("ref");
    ok(
        l,
        "dd",
        [
            "if=/dev/urandom",
            "of=ref",
            "bs=1M",
            "count=5",
            "status=none",
        ],
    );
    ok(
        l,
        "dd",
        [
            "if=ref".to_string(),
            "bs=1M".to_string(),
            "status=none".to_string(),
            format!("of={}", mnt.join("g").display()),
        ],
    );
    ok(
        l,
        "dd",
        [
            format!("if={}", mnt.join("g").display()),
            "bs=64K".to_string(),
            "of=back2".to_string(),
            "status=none".to_string(),
        ],
    );
    assert_eq!(sha256(&l.join("back2")), sha256(&reference));
    assert_eq!(sha256(&mnt.join("g")), sha256(&reference));

    // Partial overwrites, the same on the reference and the mount: aligned
    // blocks, and unaligned bytes across the 1 MiB strip boundary.
    write_file(&l.join("patch"), &pattern(99, 12288 + 777), 0o644);
    let patches = [
        ["bs=4096", "count=3", "seek=300", ""],
        ["bs=777", "count=1", "seek=1048200", "oflag=seek_bytes"],
        ["bs=1M", "count=1", "seek=4", ""],
    ];
    for p in patches {
        for target in [reference.clone(), mnt.join("g")] {
            let mut args: Vec<String> = vec![
                "if=patch".into(),
                format!("of={}", target.display()),
                "conv=notrunc".into(),
                "status=none".into(),
            ];
            args.extend(p.iter().filter(|a| !a.is_empty()).map(|a| a.to_string()));
            ok(l, "dd", &args);
        }
        assert_eq!(
            stat_fmt(&mnt.join("g"), "%s"),
            stat_fmt(&reference, "%s"),
            "size after dd {p:?}"
        );
        assert_eq!(
            sha256(&mnt.join("g")),
            sha256(&reference),
            "bytes after dd {p:?}"
        );
    }
    assert_eq!(stat_fmt(&mnt.join("g"), "%s"), (5 * MIB).to_string());
    // Past the end with notrunc: the file grows, the gap reads as zeros.
    for target in [reference.clone(), mnt.join("g")] {
        ok(
            l,
            "dd",
            [
                "if=patch".to_string(),
                format!("of={}", target.display()),
                "conv=notrunc".into(),
                "bs=1000".into(),
                "count=1".into(),
                "seek=6000".into(),
                "status=none".into(),
            ],
        );
    }
    assert_eq!(stat_fmt(&mnt.join("g"), "%s"), "6001000");
    assert_eq!(sha256(&mnt.join("g")), sha256(&reference));
}

#[test]
fn tar_round_trip_preserves_bytes_and_modes() {
    let mut c = Cluster::builder().servers(4).start();
    let mnt = c.mount();
    let src = source_tree();
    let out = tempdir();
    ok(&mnt, "mkdir", ["x"]);
    let x = mnt.join("x");
    sh(
        Path::new("/"),
        &format!(
            "tar -C '{}' -cf - . | tar -C '{}' -xf -",
            src.path().display(),
            x.display()
        ),
    );
    assert_same_tree(src.path(), &x);
    // Out of the mount again into a fresh directory.
    sh(
        Path::new("/"),
        &format!(
            "tar -C '{}' -cf - . | tar -C '{}' -xpf -",
            x.display(),
            out.path().display()
        ),
    );
    assert_same_tree(src.path(), out.path());
    assert_eq!(ok(out.path(), "readlink", ["a/link"]), "../small.txt\n");
    // Permissions and sizes of everything, including directories.
    let listing = |d: &Path| {
        sh(d, "find . -printf '%y %m %s %P\\n' | grep -v '^d' | sort; find . -type d -printf '%m %P\\n' | sort")
    };
    assert_eq!(listing(src.path()), listing(&x));
    assert_eq!(listing(src.path()), listing(out.path()));
    // tar keeps mtimes too (whole seconds in its default format).
    let mtimes = |d: &Path| sh(d, "find . -type f -printf '%Ts %P\\n' | sort -k2");
    assert_eq!(mtimes(src.path()), mtimes(&x));
    // And the archive of the mount lists the same members.
    let members = |d: &Path| {
        sh(
            Path::new("/"),
            &format!(
                "tar -C '{}' -cf - . | tar -tvf - | awk '{{print $1, $3, $NF}}' | sort",
                d.display()
            ),
        )
    };
    assert_eq!(members(src.path()), members(&x));
}

/// A tree with hard links (two names in one directory, one across
/// directories), a FIFO, a socket and a character device, made on `dir` by
/// ordinary tools.
fn linked_tree(dir: &Path) {
    sh(
        dir,
        "mkdir -p t/a t/b && printf 'shared data' > t/a/f && ln t/a/f t/a/g && ln t/a/f t/b/h \
         && mkfifo t/a/pipe && mknod t/b/null c 1 3 \
         && python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"t/b/sock\")'",
    );
}

/// Per entry of `dir`'s tree: type, link count, size (not a directory's:
/// file systems differ) and which of the tree's inodes it is (numbered in
/// order of first appearance, so two trees compare whatever their inode
/// numbers).
fn link_shape(dir: &Path) -> String {
    sh(
        dir,
        "find . -mindepth 1 -printf '%P %y %n %s %i\\n' | sort \
         | awk '{ if (!($5 in seen)) seen[$5] = ++n; $5 = seen[$5]; if ($2 == \"d\") $4 = \"-\"; print }'",
    )
}

#[test]
fn hard_links_and_special_files_survive_tar_and_rsync_h() {
    let mut c = Cluster::builder().servers(4).start();
    let mnt = c.mount();
    let local = tempdir();
    linked_tree(local.path());
    let shape = link_shape(&local.path().join("t"));
    assert!(
        shape.contains("a/f f 3 11 2") && shape.contains("b/h f 3 11 2"),
        "the tree made on the local disk: {shape}"
    );
    // Made on the mount directly: the same shape.
    linked_tree(&mnt);
    assert_eq!(link_shape(&mnt.join("t")), shape);
    // tar into the mount and back out keeps every link and file type but
    // the socket (tar never archives sockets).
    let tarred: String = shape
        .lines()
        .filter(|l| !l.contains(" s "))
        .map(|l| format!("{l}\n"))
        .collect();
    ok(&mnt, "mkdir", ["x"]);
    let x = mnt.join("x");
    sh(
        Path::new("/"),
        &format!(
            "tar -C '{}' -cf - t | tar -C '{}' -xf -",
            local.path().display(),
            x.display()
        ),
    );
    assert_eq!(link_shape(&x.join("t")), tarred);
    let out = tempdir();
    sh(
        Path::new("/"),
        &format!(
            "tar -C '{}' -cf - t | tar -C '{}' -xf -",
            x.display(),
            out.path().display()
        ),
    );
    assert_eq!(link_shape(&out.path().join("t")), tarred);
    // rsync -aH (hard links, devices, specials) into the mount.
    let s = format!("{}/", local.path().join("t").display());
    let d = format!("{}/", mnt.join("r").display());
    ok(
        Path::new("/"),
        "rsync",
        ["-aH", "--devices", "--specials", &s, &d],
    );
    assert_eq!(link_shape(&mnt.join("r")), shape);
    // Removing names one by one: the data lives until the last one goes.
    ok(&mnt, "rm", ["r/a/f", "r/b/h"]);
    assert_eq!(stat_fmt(&mnt.join("r/a/g"), "%h %s"), "1 11");
    assert_eq!(ok(&mnt, "cat", ["r/a/g"]), "shared data");
    // The directories' link counts: 2 plus their subdirectories.
    assert_eq!(stat_fmt(&mnt.join("r"), "%h"), "4");
    ok(&mnt, "rm", ["-r", "r", "t", "x"]);
}

#[test]
fn rsync_a_then_nothing_to_do() {
    let mut c = Cluster::builder().servers(4).start();
    let mnt = c.mount();
    let src = source_tree();
    let s = format!("{}/", src.path().display());
    let d = format!("{}/", mnt.join("r").display());
    ok(Path::new("/"), "rsync", ["-a", &s, &d]);
    let again = ok(
        Path::new("/"),
        "rsync",
        ["-a", "--dry-run", "--itemize-changes", &s, &d],
    );
    assert_eq!(again, "", "second rsync -a still has changes to make");
    assert_same_tree(src.path(), &mnt.join("r"));
    assert_eq!(ok(&mnt, "readlink", ["r/a/link"]), "../small.txt\n");
    let mtimes = |d: &Path| sh(d, "find . -type f -printf '%T@ %s %P\\n' | sort -k3");
    assert_eq!(mtimes(src.path()), mtimes(&mnt.join("r")));
    // A changed source file is the only thing a third rsync sends.
    std::fs::write(src.path().join("a/eight_k.bin"), pattern(1234, 9000)).unwrap();
    let changes = ok(Path::new("/"), "rsync", ["-a", "--itemize-changes", &s, &d]);
    let sent: Vec<&str> = changes
        .lines()
        .filter(|l| !l.starts_with(".d..t"))
        .collect();
    assert!(
        sent.len() == 1 && sent[0].starts_with(">f.s") && sent[0].ends_with(" a/eight_k.bin"),
        "rsync output: {changes}"
    );
    assert_eq!(checksums(src.path()), checksums(&mnt.join("r")));
}

#[test]
fn striped_64m_file_has_a_datafile_on_every_server() {
    let mut c = Cluster::builder().servers(4).start();
    let mnt = c.mount();
    let local = tempdir();
    let reference = local.path().join("ref");
    ok(
        local.path(),
        "dd",
        [
            "if=/dev/urandom",
            "of=ref",
            "bs=1M",
            "count=64",
            "status=none",
        ],
    );
    let big = mnt.join("big");
    ok(
        local.path(),
        "dd",
        [
            "if=ref".to_string(),
            "bs=1M".to_string(),
            "count=64".to_string(),
            "status=none".to_string(),
            format!("of={}", big.display()),
        ],
    );
    assert_eq!(stat_fmt(&big, "%s"), (64 * MIB).to_string());

    let json = run_ok(command(
        Path::new("/"),
        shoal_bin(),
        [
            OsStr::new("stat"),
            OsStr::new("--layout"),
            OsStr::new("--json"),
            big.as_os_str(),
        ],
    ));
    let v: serde_json::Value = serde_json::from_str(&json).expect("stat --json is JSON");
    assert_eq!(v["size"], 64 * MIB, "{json}");
    assert_eq!(v["kind"], "file", "{json}");
    let layout = &v["layout"];
    assert_eq!(layout["strip_size"], 1_048_576, "{json}");
    let datafiles = layout["datafiles"].as_array().expect("datafiles array");
    assert_eq!(datafiles.len(), 4, "{json}");
    let servers: BTreeSet<u64> = datafiles
        .iter()
        .map(|d| d["server"].as_u64().expect("server id"))
        .collect();
    assert_eq!(servers, BTreeSet::from([0, 1, 2, 3]), "{json}");

    let want = sha256(&reference);
    assert_eq!(sha256(&big), want, "read through the mount");
    let cat = sh(
        Path::new("/"),
        &format!(
            "'{}' cat '{}' | sha256sum",
            shoal_bin().display(),
            big.display()
        ),
    );
    assert_eq!(
        cat.split_whitespace().next(),
        Some(want.as_str()),
        "shoal cat"
    );
}

/// (1K-blocks, fs type) of `df -T` on `path`.
fn df(path: &Path) -> (u64, String) {
    let out = ok(Path::new("/"), "df", [OsStr::new("-kT"), path.as_os_str()]);
    let line = out
        .lines()
        .nth(1)
        .unwrap_or_else(|| panic!("df output {out:?}"));
    let f: Vec<&str> = line.split_whitespace().collect();
    (
        f[2].parse().unwrap_or_else(|_| panic!("df line {line:?}")),
        f[1].to_string(),
    )
}

#[test]
fn df_shows_aggregate_capacity_and_fuse_shoal_type() {
    let mut c = Cluster::builder().servers(4).start();
    let mnt = c.mount();
    let (blocks, fstype) = df(&mnt);
    assert_eq!(fstype, "fuse.shoal");
    assert!(blocks > 0, "df size is 0");
    // All four servers keep their data on the file system of the test's
    // temporary directory, so together they offer four times its size.
    let (local, _) = df(c.dir());
    let ratio = blocks as f64 / local as f64;
    assert!(
        (3.99..=4.01).contains(&ratio),
        "df of the mount {blocks} KiB, of one server's disk {local} KiB"
    );
    let canon = std::fs::canonicalize(&mnt).unwrap();
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    let line = mounts
        .lines()
        .find(|l| l.split(' ').nth(1) == Some(&*canon.to_string_lossy()))
        .expect("mount point in /proc/mounts");
    let f: Vec<&str> = line.split(' ').collect();
    assert_eq!(f[2], "fuse.shoal", "{line}");
    assert_eq!(
        f[0],
        std::fs::canonicalize(c.config_path())
            .unwrap()
            .to_string_lossy(),
        "{line}"
    );
    assert!(
        !f[3].split(',').any(|o| o == "default_permissions"),
        "the mount checks permissions itself: {line}"
    );
    // `stat -f` (statfs) agrees with df on the size.
    let sf = ok(
        Path::new("/"),
        "stat",
        [
            OsStr::new("-f"),
            OsStr::new("-c"),
            OsStr::new("%b %S"),
            mnt.as_os_str(),
        ],
    );
    let sf: Vec<u64> = sf
        .split_whitespace()
        .map(|s| {
            s.parse()
                .unwrap_or_else(|_| panic!("stat -f output {sf:?}"))
        })
        .collect();
    assert_eq!(sf[0] * sf[1] / 1024, blocks);
}

#[test]
fn slow_writer_does_not_block_stat_and_ls() {
    let mut c = Cluster::builder().servers(4).start();
    let mnt = c.mount();
    ok(&mnt, "mkdir", ["-p", "busy", "quiet"]);
    std::fs::write(mnt.join("quiet/small"), b"small\n").unwrap();
    let mut writer = command(
        &mnt,
        "dd",
        [
            "if=/dev/zero",
            "of=busy/big",
            "bs=1M",
            "count=200",
            "status=none",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn dd");
    let mut overlapped = 0;
    for i in 0..50 {
        let s = ok(&mnt, "stat", ["-c", "%s %F", "quiet/small"]);
        assert_eq!(s, "6 regular file\n", "stat {i}");
        assert_eq!(ok(&mnt, "ls", ["quiet"]), "small\n", "ls {i}");
        let root = ok(&mnt, "ls", ["-l"]);
        assert!(root.contains("busy") && root.contains("quiet"), "{root}");
        if matches!(writer.try_wait(), Ok(None)) {
            overlapped += 1;
        }
    }
    let out = writer.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "background dd failed with {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stat_fmt(&mnt.join("busy/big"), "%s"),
        (200 * MIB).to_string()
    );
    // Not asserted (timing), but shown: how many rounds ran during the write.
    eprintln!("{overlapped} of 50 stat/ls rounds ran while dd was writing");
}

#[test]
fn getfattr_setfattr_round_trip() {
    let mut c = Cluster::builder().servers(4).start();
    let mnt = c.mount();
    ok(&mnt, "mkdir", ["d"]);
    std::fs::write(mnt.join("f"), b"x").unwrap();
    for target in ["f", "d"] {
        ok(
            &mnt,
            "setfattr",
            ["-n", "user.test", "-v", "hello world", target],
        );
        assert_eq!(
            ok(
                &mnt,
                "getfattr",
                ["--only-values", "-n", "user.test", target]
            ),
            "hello world"
        );
    }
    ok(
        &mnt,
        "setfattr",
        ["-n", "user.other", "-v", "0x00ff10", "f"],
    );
    assert_eq!(
        ok(&mnt, "getfattr", ["-e", "hex", "-n", "user.other", "f"]),
        "# file: f\nuser.other=0x00ff10\n\n"
    );
    assert_eq!(
        ok(&mnt, "getfattr", ["-d", "f"]),
        "# file: f\nuser.other=0sAP8Q\nuser.test=\"hello world\"\n\n"
    );
    // Replace, then remove.
    ok(&mnt, "setfattr", ["-n", "user.test", "-v", "v2", "f"]);
    assert_eq!(
        ok(&mnt, "getfattr", ["--only-values", "-n", "user.test", "f"]),
        "v2"
    );
    ok(&mnt, "setfattr", ["-x", "user.test", "f"]);
    let gone = command(&mnt, "getfattr", ["-n", "user.test", "f"])
        .output()
        .unwrap();
    assert!(!gone.status.success(), "removed attribute still readable");
    assert!(
        String::from_utf8_lossy(&gone.stderr).contains("No such attribute"),
        "{}",
        String::from_utf8_lossy(&gone.stderr)
    );
    assert_eq!(
        ok(&mnt, "getfattr", ["-d", "f"]),
        "# file: f\nuser.other=0sAP8Q\n\n"
    );
    // Attributes survive a rename.
    ok(&mnt, "mv", ["d", "d2"]);
    assert_eq!(
        ok(&mnt, "getfattr", ["--only-values", "-n", "user.test", "d2"]),
        "hello world"
    );
}

/// File capabilities are not stored on Shoal (`fuse/src/xattr.rs`): setcap's
/// attribute is refused, and the kernel's question for it before a write is
/// answered by the mount, so that the write is its only message.
#[test]
fn file_capabilities_are_refused_and_a_small_write_is_one_message() {
    use std::os::unix::fs::FileExt;

    // The direct path, so that the write is its one message (the gathering
    // path would keep it for the close).
    let mut c = Cluster::builder()
        .servers(4)
        .set("write_threshold=0")
        .start();
    let mnt = c.mount();
    std::fs::write(mnt.join("f"), b"x").unwrap();
    // A well-formed VFS_CAP_REVISION_2 value (the kernel checks the format).
    let caps = "0x0100000200000000000000000000000000000000";
    for (prog, args) in [
        (
            "setfattr",
            vec!["-n", "security.capability", "-v", caps, "f"],
        ),
        ("getfattr", vec!["-n", "security.capability", "f"]),
    ] {
        let out = command(&mnt, prog, &args).output().unwrap();
        assert!(!out.status.success(), "{prog} {args:?} succeeded");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Operation not supported"),
            "{prog}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = c.client();
    rt.block_on(c.wait_for_pools(&client));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(mnt.join("f"))
        .unwrap();
    // Past the attribute TTL (100 ms), a stat refreshes the kernel's
    // attributes, after which it asks about capabilities before a write.
    std::thread::sleep(std::time::Duration::from_millis(300));
    std::fs::metadata(mnt.join("f")).unwrap();
    let ((), messages) = rt.block_on(c.messages_during(&client, async {
        f.write_all_at(b"hello", 0).unwrap();
    }));
    assert_eq!(messages, 1, "a small write through the mount");
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), b"hello");
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[test]
fn mtime_of_a_write_survives_chmod_and_chown() {
    let mut c = Cluster::builder().servers(4).start();
    let mnt = c.mount();
    let f = mnt.join("f");
    let mtime = |p: &Path| stat_fmt(p, "%Y").parse::<i64>().unwrap();
    for (i, change) in [["chmod", "600"], ["chown", "1234:5678"]]
        .iter()
        .enumerate()
    {
        ok(&mnt, "touch", ["-d", "2001-02-03 04:05:06", "f"]);
        assert_eq!(mtime(&f), 981_173_106);
        let before = now_secs();
        sh(&mnt, &format!("echo write{i} >> f"));
        assert!(mtime(&f) >= before, "write did not move mtime");
        ok(&mnt, change[0], [change[1], "f"]);
        let after = mtime(&f);
        assert!(
            after >= before,
            "after `{} {} f` the mtime is {after}, the write was at {before} or later",
            change[0],
            change[1]
        );
        // Another client (the native one) agrees.
        let json = run_ok(command(
            Path::new("/"),
            shoal_bin(),
            [OsStr::new("stat"), OsStr::new("--json"), f.as_os_str()],
        ));
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert!(
            v["mtime_ns"].as_i64().unwrap() >= before * 1_000_000_000,
            "shoal stat: {json}"
        );
    }
}

#[test]
fn setgid_directory_passes_its_group_on() {
    let mut c = Cluster::builder().servers(4).start();
    let mnt = c.mount();
    ok(&mnt, "mkdir", ["sg"]);
    ok(&mnt, "chown", [":5678", "sg"]);
    ok(&mnt, "chmod", ["2775", "sg"]);
    assert_eq!(stat_fmt(&mnt.join("sg"), "%a %g"), "2775 5678");
    ok(&mnt, "touch", ["sg/f"]);
    ok(&mnt, "mkdir", ["sg/d"]);
    ok(&mnt, "ln", ["-s", "f", "sg/l"]);
    assert_eq!(
        stat_fmt(&mnt.join("sg/f"), "%g"),
        "5678",
        "file in a setgid dir"
    );
    assert_eq!(
        stat_fmt(&mnt.join("sg/d"), "%g %A"),
        "5678 drwxr-sr-x",
        "directory in a setgid dir"
    );
}
