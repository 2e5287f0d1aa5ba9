//! The FUSE mount driven from Python: file I/O with seeks, appends and
//! holes, and the errno of each failing call (including EACCES for another
//! user). Every command runs under `timeout 120`.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use shoal_tests::{Cluster, SharedMount};

/// The system Python: readable by every user (the pyenv shim under /root is not).
const PYTHON: &str = "/usr/bin/python3";

/// `timeout 120 prog args...` in `cwd`.
fn command<I, S>(cwd: &Path, prog: impl AsRef<OsStr>, args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut c = Command::new("timeout");
    c.arg("120")
        .arg(prog)
        .args(args)
        .current_dir(cwd)
        .env("LC_ALL", "C")
        .stdin(Stdio::null());
    c
}

/// Runs `c`, asserts it succeeded, returns its stdout.
fn run_ok(mut c: Command) -> String {
    let out = c.output().expect("spawn");
    assert!(
        out.status.success(),
        "{:?} failed with {}\nstdout: {}\nstderr: {}",
        c,
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a Python script with `dir` as its argument (`sys.argv[1]`).
fn python(dir: &Path, script: &str) -> String {
    run_ok(command(
        Path::new("/"),
        PYTHON,
        [OsStr::new("-c"), OsStr::new(script), dir.as_os_str()],
    ))
}

/// Runs a Python script as user and group 65534 (nobody / nogroup).
fn python_as_nobody(dir: &Path, script: &str) -> String {
    run_ok(command(
        Path::new("/"),
        "setpriv",
        [
            OsStr::new("--reuid=65534"),
            OsStr::new("--regid=65534"),
            OsStr::new("--clear-groups"),
            OsStr::new(PYTHON),
            OsStr::new("-c"),
            OsStr::new(script),
            dir.as_os_str(),
        ],
    ))
}

/// Python that defines `check(name, fn)`, printing `name OK` or `name
/// ERRNAME` (the errno `fn` raised), and `holds(name, fn)`, printing `name OK`
/// if `fn()` is true and `name FALSE` otherwise.
const CHECK_PY: &str = r#"
import errno, os, sys
os.chdir(sys.argv[1])
def check(name, fn):
    try:
        fn()
        print(name, "OK")
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, str(e.errno)))
    except Exception as e:
        print(name, "EXCEPTION:" + type(e).__name__)
def holds(name, fn):
    try:
        print(name, "OK" if fn() else "FALSE")
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, str(e.errno)))
"#;

/// Parses `name RESULT` lines and compares them with `want` (a case may allow
/// several results), reporting every mismatch at once.
fn assert_results(out: &str, want: &[(&str, &[&str])]) {
    let got: BTreeMap<&str, &str> = out
        .lines()
        .map(|l| {
            l.split_once(' ')
                .unwrap_or_else(|| panic!("odd line {l:?}"))
        })
        .collect();
    let mut wrong = Vec::new();
    for (name, allowed) in want {
        match got.get(name) {
            Some(r) if allowed.contains(r) => {}
            r => wrong.push(format!("{name}: expected {allowed:?}, got {r:?}")),
        }
    }
    assert_eq!(got.len(), want.len(), "cases run: {out}");
    assert!(wrong.is_empty(), "wrong results:\n{}", wrong.join("\n"));
}

fn stat_fmt(path: &Path, fmt: &str) -> String {
    run_ok(command(
        Path::new("/"),
        "stat",
        [OsStr::new("-c"), OsStr::new(fmt), path.as_os_str()],
    ))
    .trim_end()
    .to_string()
}

#[test]
fn python_seek_overwrite_append_and_holes() {
    let mut c = Cluster::builder().servers(4).start();
    let mnt = c.mount();
    let out = python(
        &mnt,
        r#"
import hashlib, os, sys
os.chdir(sys.argv[1])
MiB = 1 << 20
data = bytearray(os.urandom(3 * MiB + 123))
with open("f", "wb") as f:
    assert f.write(data) == len(data)
assert os.stat("f").st_size == len(data), os.stat("f")

with open("f", "r+b") as f:
    # Across the first strip boundary, near the start, and past the end.
    f.seek(MiB - 100)
    f.write(b"X" * 200)
    data[MiB - 100:MiB + 100] = b"X" * 200
    f.seek(10)
    f.write(b"hello")
    data[10:15] = b"hello"
    f.seek(-50, os.SEEK_END)
    f.write(b"E" * 100)
    data[-50:] = b"E" * 50
    data += b"E" * 50
    f.flush()
    f.seek(MiB - 110)
    got = f.read(220)
    assert got == bytes(data[MiB - 110:MiB + 110]), "middle read back"
    assert f.tell() == MiB + 110
    f.seek(0)
    assert f.read(20) == bytes(data[:20])
assert os.stat("f").st_size == len(data), (os.stat("f").st_size, len(data))
with open("f", "rb") as f:
    assert f.read() == bytes(data), "whole file after overwrites"

# Append mode writes at the end even after a seek.
with open("f", "ab") as f:
    f.write(b"tail1")
    f.seek(0)
    f.write(b"tail2")
data += b"tail1tail2"
assert os.stat("f").st_size == len(data)
with open("f", "rb") as f:
    f.seek(-12, os.SEEK_END)
    assert f.read() == bytes(data[-12:]), "appended bytes"

# A hole reads as zeros; pread/pwrite/ftruncate on a raw descriptor.
fd = os.open("g", os.O_CREAT | os.O_RDWR, 0o644)
assert os.pwrite(fd, b"abc", 5 * MiB) == 3
assert os.fstat(fd).st_size == 5 * MiB + 3
assert os.pread(fd, 10, 5 * MiB - 7) == b"\0" * 7 + b"abc"
assert os.pread(fd, 4096, 12345) == b"\0" * 4096
assert os.pread(fd, 100, 5 * MiB + 3) == b""
os.ftruncate(fd, 100)
assert os.fstat(fd).st_size == 100
assert os.pread(fd, 200, 0) == b"\0" * 100
os.close(fd)
assert os.stat("g").st_size == 100

# Text mode, "x" mode, and a file read while another handle writes it.
with open("t.txt", "w") as f:
    f.write("line1\nline2\n")
with open("t.txt") as f:
    assert f.readlines() == ["line1\n", "line2\n"]
try:
    open("t.txt", "x")
    raise SystemExit("open(existing, 'x') succeeded")
except FileExistsError:
    pass
w = open("shared", "wb", buffering=0)
r = open("shared", "rb", buffering=0)
w.write(b"0123456789")
assert r.read() == b"0123456789"
w.seek(3)
w.write(b"abc")
r.seek(0)
assert r.read() == b"012abc6789"
w.close(); r.close()
print(hashlib.sha256(bytes(data)).hexdigest())
"#,
    );
    // Another process reads the same bytes.
    let sum = run_ok(command(&mnt, "sha256sum", ["f"]));
    assert_eq!(sum.split_whitespace().next(), Some(out.trim()));
    assert_eq!(
        stat_fmt(&mnt.join("f"), "%s"),
        (3 * (1 << 20) + 123 + 50 + 10).to_string()
    );
}

#[test]
fn failing_calls_return_the_right_errno() {
    let mut c = Cluster::builder().servers(4).start();
    let mnt = c.mount();
    let script = format!(
        r#"{CHECK_PY}
os.makedirs("d/sub")
os.mkdir("e")
os.mkdir("empty")
with open("file", "w") as f:
    f.write("x")
with open("d/sub/f", "w") as f:
    f.write("y")
check("mkdir_existing", lambda: os.mkdir("d"))
check("mkdir_over_file", lambda: os.mkdir("file"))
check("open_missing", lambda: open("missing"))
check("create_in_missing_dir", lambda: open("nodir/x", "w"))
check("stat_missing", lambda: os.stat("missing"))
check("rmdir_missing", lambda: os.rmdir("missing"))
check("rmdir_nonempty", lambda: os.rmdir("d"))
check("mkdir_under_file", lambda: os.mkdir("file/x"))
check("open_under_file", lambda: open("file/x"))
check("listdir_file", lambda: os.listdir("file"))
check("rmdir_file", lambda: os.rmdir("file"))
check("unlink_dir", lambda: os.unlink("d"))
check("open_dir_w", lambda: open("d", "w"))
check("create_exclusive_existing", lambda: os.open("file", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
check("name_256", lambda: open("x" * 256, "w"))
check("mkdir_256", lambda: os.mkdir("y" * 256))
check("lookup_256", lambda: os.stat("z" * 256))
check("name_255", lambda: open("x" * 255, "w").close())
check("rename_into_own_subdir", lambda: os.rename("d", "d/sub/inside"))
check("rename_dir_over_file", lambda: os.rename("e", "file"))
check("rename_file_over_dir", lambda: os.rename("file", "e"))
check("rename_dir_over_nonempty_dir", lambda: os.rename("e", "d"))
check("rename_missing", lambda: os.rename("missing", "other"))
check("hard_link_over_existing", lambda: os.link("file", "empty"))
check("hard_link_of_dir", lambda: os.link("d", "dlink"))
check("hard_link_into_missing_dir", lambda: os.link("file", "nodir/x"))
check("symlink_over_existing", lambda: os.symlink("target", "file"))
check("readlink_of_file", lambda: os.readlink("file"))
check("getxattr_missing", lambda: os.getxattr("file", "user.nope"))
check("rename_dir_over_empty_dir", lambda: os.rename("e", "empty"))
# Nothing a failing call touched changed.
holds("state_after", lambda: (
    sorted(os.listdir(".")) == sorted(["d", "empty", "file", "x" * 255])
    and open("file").read() == "x"
    and sorted(os.listdir("d")) == ["sub"]
    and open("d/sub/f").read() == "y"
))
"#
    );
    let out = python(&mnt, &script);
    let ok: &[&str] = &["OK"];
    assert_results(
        &out,
        &[
            ("mkdir_existing", &["EEXIST"]),
            ("mkdir_over_file", &["EEXIST"]),
            ("open_missing", &["ENOENT"]),
            ("create_in_missing_dir", &["ENOENT"]),
            ("stat_missing", &["ENOENT"]),
            ("rmdir_missing", &["ENOENT"]),
            ("rmdir_nonempty", &["ENOTEMPTY"]),
            ("mkdir_under_file", &["ENOTDIR"]),
            ("open_under_file", &["ENOTDIR"]),
            ("listdir_file", &["ENOTDIR"]),
            ("rmdir_file", &["ENOTDIR"]),
            ("unlink_dir", &["EISDIR"]),
            ("open_dir_w", &["EISDIR"]),
            ("create_exclusive_existing", &["EEXIST"]),
            ("name_256", &["ENAMETOOLONG"]),
            ("mkdir_256", &["ENAMETOOLONG"]),
            ("lookup_256", &["ENAMETOOLONG"]),
            ("name_255", ok),
            ("rename_into_own_subdir", &["EINVAL"]),
            ("rename_dir_over_file", &["ENOTDIR"]),
            ("rename_file_over_dir", &["EISDIR"]),
            ("rename_dir_over_nonempty_dir", &["ENOTEMPTY", "EEXIST"]),
            ("rename_missing", &["ENOENT"]),
            ("hard_link_over_existing", &["EEXIST"]),
            ("hard_link_of_dir", &["EPERM"]),
            ("hard_link_into_missing_dir", &["ENOENT"]),
            ("symlink_over_existing", &["EEXIST"]),
            ("readlink_of_file", &["EINVAL"]),
            ("getxattr_missing", &["ENODATA"]),
            ("rename_dir_over_empty_dir", ok),
            ("state_after", ok),
        ],
    );
}

#[test]
fn other_user_gets_eacces_where_modes_forbid_and_succeeds_where_they_allow() {
    let c = Cluster::builder().servers(4).start();
    let shared = SharedMount::new(&c);
    let mnt = shared.path();
    // As root: a 0755 directory, a 0700 one, a 0644 file, a 0777 directory.
    std::fs::create_dir(mnt.join("rootdir")).unwrap();
    std::fs::set_permissions(mnt.join("rootdir"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(mnt.join("rootdir/file"), b"readable").unwrap();
    std::fs::set_permissions(
        mnt.join("rootdir/file"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    std::fs::create_dir(mnt.join("private")).unwrap();
    std::fs::set_permissions(mnt.join("private"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::create_dir(mnt.join("public")).unwrap();
    std::fs::set_permissions(mnt.join("public"), std::fs::Permissions::from_mode(0o777)).unwrap();
    assert_eq!(stat_fmt(&mnt.join("rootdir"), "%a %u"), "755 0");

    let script = format!(
        r#"{CHECK_PY}
holds("whoami", lambda: (os.getuid(), os.getgid(), os.getgroups()) == (65534, 65534, []))
holds("listdir_0755", lambda: os.listdir("rootdir") == ["file"])
holds("read_0644", lambda: open("rootdir/file").read() == "readable")
check("create_in_0755", lambda: open("rootdir/new", "w"))
check("mkdir_in_0755", lambda: os.mkdir("rootdir/newdir"))
check("write_0644", lambda: open("rootdir/file", "a"))
check("unlink_in_0755", lambda: os.unlink("rootdir/file"))
check("rename_in_0755", lambda: os.rename("rootdir/file", "rootdir/moved"))
check("chmod_not_owner", lambda: os.chmod("rootdir/file", 0o777))
check("listdir_0700", lambda: os.listdir("private"))
check("create_in_0777", lambda: open("public/mine", "w").write("mine"))
holds("owner_of_new_file", lambda: (os.stat("public/mine").st_uid, os.stat("public/mine").st_gid) == (65534, 65534))
check("chmod_own_file", lambda: os.chmod("public/mine", 0o600))
"#
    );
    let out = python_as_nobody(&mnt, &script);
    let ok: &[&str] = &["OK"];
    assert_results(
        &out,
        &[
            ("whoami", ok),
            ("listdir_0755", ok),
            ("read_0644", ok),
            ("create_in_0755", &["EACCES"]),
            ("mkdir_in_0755", &["EACCES"]),
            ("write_0644", &["EACCES"]),
            ("unlink_in_0755", &["EACCES"]),
            ("rename_in_0755", &["EACCES"]),
            ("chmod_not_owner", &["EPERM"]),
            ("listdir_0700", &["EACCES"]),
            ("create_in_0777", ok),
            ("owner_of_new_file", ok),
            ("chmod_own_file", ok),
        ],
    );
    // Root sees what the other user did, and nothing it was refused.
    assert_eq!(
        stat_fmt(&mnt.join("public/mine"), "%u:%g %a %s"),
        "65534:65534 600 4"
    );
    let listing = run_ok(command(&mnt, "ls", ["-A", "rootdir"]));
    assert_eq!(listing, "file\n");
}

#[test]
fn open_file_stays_readable_after_unlink_and_replace() {
    let mut c = Cluster::builder().servers(4).start();
    let mnt = c.mount();
    let script = format!(
        r#"{CHECK_PY}
with open("gone", "wb") as f:
    f.write(b"still here" * 10000)
with open("old", "wb") as f:
    f.write(b"old bytes")
with open("new", "wb") as f:
    f.write(b"new bytes")
r1 = open("gone", "rb")
os.unlink("gone")
holds("read_after_unlink", lambda: r1.read() == b"still here" * 10000)
r2 = open("old", "rb")
os.rename("new", "old")
holds("read_after_rename_over", lambda: r2.read() == b"old bytes")
holds("new_name_has_new_bytes", lambda: open("old", "rb").read() == b"new bytes")
"#
    );
    let out = python(&mnt, &script);
    let ok: &[&str] = &["OK"];
    assert_results(
        &out,
        &[
            ("read_after_unlink", ok),
            ("read_after_rename_over", ok),
            ("new_name_has_new_bytes", ok),
        ],
    );
}
