"""shoal.Client against a real cluster: files, directories, attributes,
errors, threads, fork and an unprivileged user."""

import errno
import io
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
import uuid

import pytest

import shoal


# Files.

def test_binary_file_round_trip_across_buffer_and_strip_sizes(client, base):
    # Bigger than the buffer (256 KiB) and the cluster's strip (1 MiB), and
    # not a multiple of either.
    data = os.urandom(3 * 1024 * 1024 + 12345)
    with client.open(f"{base}/big", "wb") as f:
        assert isinstance(f, io.BufferedWriter)
        for i in range(0, len(data), 100_000):
            f.write(data[i:i + 100_000])
    assert f.closed
    with client.open(f"{base}/big", "rb") as f:
        assert isinstance(f, io.BufferedReader)
        assert f.read(10) == data[:10]
        assert f.tell() == 10
        assert f.read() == data[10:]
        assert f.read() == b""
        f.seek(-5, io.SEEK_END)
        assert f.read() == data[-5:]
        f.seek(1_000_000)
        buf = bytearray(4096)
        assert f.readinto(buf) == 4096
        assert bytes(buf) == data[1_000_000:1_004_096]
    assert client.stat(f"{base}/big").st_size == len(data)


def test_text_mode_encodes_and_splits_lines(client, base):
    text = "première ligne\nzweite Zeile\r\nthird\n"
    with client.open(f"{base}/t.txt", "w", encoding="utf-8", newline="") as f:
        assert isinstance(f, io.TextIOWrapper)
        assert f.mode == "w"
        f.write(text)
    with client.open(f"{base}/t.txt", encoding="utf-8") as f:
        assert list(f) == ["première ligne\n", "zweite Zeile\n", "third\n"]
    with client.open(f"{base}/t.txt", "rb") as f:
        assert f.read() == text.encode("utf-8")


def test_modes_create_truncate_append_exclusive_and_update(client, base):
    path = f"{base}/m"
    with client.open(path, "xb") as f:
        f.write(b"0123456789")
    with pytest.raises(FileExistsError):
        client.open(path, "x")
    with client.open(path, "ab") as f:
        f.write(b"ab")
    with client.open(path, "r+b") as f:
        assert isinstance(f, io.BufferedRandom)
        f.seek(2)
        f.write(b"XY")
        f.seek(0)
        assert f.read() == b"01XY456789ab"
        f.truncate(4)
    assert client.stat(path).st_size == 4
    with client.open(path, "wb") as f:
        pass
    assert client.stat(path).st_size == 0
    raw = client.open(path, "rb", buffering=0)
    assert isinstance(raw, io.RawIOBase)
    raw.close()
    with pytest.raises(ValueError):
        raw.read(1)
    for bad in ("rw", "q", "rbt", "bb"):
        with pytest.raises(ValueError):
            client.open(path, bad)
    with pytest.raises(ValueError):
        client.open(path, "r", buffering=0)


def test_file_objects_are_not_kernel_descriptors(client, base):
    with client.open(f"{base}/f", "wb") as f:
        with pytest.raises(io.UnsupportedOperation):
            f.fileno()
        assert f.writable() and not f.readable() and f.seekable()
        f.write(b"x")
        f.flush()
        f.raw.fsync()
        assert f.raw.stat().st_size == 1


# Errors.

def test_errors_are_oserror_subclasses_with_errno_and_filename(client, base):
    with pytest.raises(FileNotFoundError) as e:
        client.stat(f"{base}/missing")
    assert e.value.errno == errno.ENOENT
    assert e.value.filename == f"{base}/missing"
    with pytest.raises(FileNotFoundError):
        client.open(f"{base}/missing/file", "w")
    client.mkdir(f"{base}/d")
    with pytest.raises(FileExistsError) as e:
        client.mkdir(f"{base}/d")
    assert e.value.errno == errno.EEXIST
    with pytest.raises(IsADirectoryError):
        client.open(f"{base}/d", "w")
    with client.open(f"{base}/d/f", "w"):
        pass
    with pytest.raises(OSError) as e:
        client.rmdir(f"{base}/d")
    assert e.value.errno == errno.ENOTEMPTY
    with pytest.raises(NotADirectoryError):
        client.listdir(f"{base}/d/f")
    with pytest.raises(NotADirectoryError):
        client.rmdir(f"{base}/d/f")
    with pytest.raises(FileNotFoundError) as e:
        client.rename(f"{base}/nothing", f"{base}/else")
    assert (e.value.filename, e.value.filename2) == (f"{base}/nothing", f"{base}/else")
    with pytest.raises(OSError) as e:
        client.stat("relative/path")
    assert e.value.errno == errno.EINVAL
    with pytest.raises(ValueError):
        client.stat(f"{base}/nul\0byte")


def test_a_second_cluster_in_one_process_is_refused(client, cluster_file, tmp_path):
    other = tmp_path / "other.toml"
    other.write_text(open(cluster_file).read())
    with pytest.raises(OSError) as e:
        shoal.Client(other)
    assert e.value.errno == errno.EISCONN
    # The same file is one more user of the same connection.
    with shoal.Client(cluster_file) as again:
        assert again.exists("/")
    assert client.exists("/")


# Directories.

def test_listdir_and_scandir_span_several_batches(client, base):
    # More names than one listing request brings (1024).
    names = {f"f{i:05d}" for i in range(2500)}
    for n in names:
        with client.open(f"{base}/{n}", "wb") as f:
            f.write(b"x" * (int(n[1:]) % 7))
    client.mkdir(f"{base}/sub")
    listed = client.listdir(base)
    assert len(listed) == len(set(listed)) == 2501
    assert set(listed) == names | {"sub"}
    with client.scandir(base) as it:
        entries = {e.name: e for e in it}
    assert entries.keys() == names | {"sub"}
    assert entries["sub"].is_dir() and not entries["sub"].is_file()
    for n in names:
        e = entries[n]
        assert e.is_file() and not e.is_dir() and not e.is_symlink()
        assert e.path == f"{base}/{n}"
        assert e.stat().st_size == int(n[1:]) % 7
        assert e.inode() == e.stat().st_ino


def _requests(cluster_file):
    """Requests the servers counted so far, per operation (`shoal stats`)."""
    out = subprocess.run(
        [os.environ.get("SHOAL_BIN", "shoal"), "stats", "--config", cluster_file, "--json"],
        capture_output=True, text=True, check=True,
    )
    counts = {}
    for server in json.loads(out.stdout)["servers"]:
        for op, counted in server["ops"].items():
            counts[op] = counts.get(op, 0) + counted["requests"]
    return counts


SCANDIR = """
import sys, shoal
c = shoal.Client(sys.argv[1])
print(sum(e.stat().st_size for e in c.scandir(sys.argv[2]) if e.is_file()))
"""


def test_scandir_brings_attributes_with_the_listing_not_per_entry(client, cluster_file, base):
    for i in range(300):
        with client.open(f"{base}/{i}", "wb") as f:
            f.write(b"x" * (i % 3))
    client.flush()
    before = _requests(cluster_file)
    # A fresh process: nothing of the directory cached or leased.
    out = subprocess.run([sys.executable, "-c", SCANDIR, cluster_file, base],
                         capture_output=True, text=True, check=True)
    after = _requests(cluster_file)
    assert int(out.stdout) == sum(i % 3 for i in range(300))
    sent = {op: n - before.get(op, 0) for op, n in after.items() if n != before.get(op, 0)}
    assert sent.get("readdir", 0) >= 1 and sent.get("listattr", 0) >= 1, sent
    # The path's own lookups, not one per entry.
    assert sent.get("getattr", 0) + sent.get("lookup", 0) < 10, sent


def test_walk_top_down_with_pruning_and_bottom_up(client, base):
    for d in ("a/b/c", "a/skip/deep", "e"):
        client.makedirs(f"{base}/{d}")
    for f in ("a/1", "a/b/c/2", "a/skip/3", "top"):
        with client.open(f"{base}/{f}", "w"):
            pass
    seen = []
    for top, dirs, files in client.walk(base):
        dirs.sort()
        if "skip" in dirs:
            dirs.remove("skip")
        seen.append((top[len(base):] or "/", sorted(dirs), sorted(files)))
    assert seen == [
        ("/", ["a", "e"], ["top"]),
        ("/a", ["b"], ["1"]),
        ("/a/b", ["c"], []),
        ("/a/b/c", [], ["2"]),
        ("/e", [], []),
    ]
    bottom_up = [top[len(base):] for top, _, _ in client.walk(base, topdown=False)]
    assert bottom_up.index("/a/b/c") < bottom_up.index("/a/b") < bottom_up.index("/a")
    assert bottom_up[-1] == ""
    errors = []
    assert list(client.walk(f"{base}/none", onerror=errors.append)) == []
    assert isinstance(errors[0], FileNotFoundError)


def test_makedirs_remove_rmdir_rename_exists(client, base):
    client.makedirs(f"{base}/x/y/z")
    client.makedirs(f"{base}/x/y/z", exist_ok=True)
    with pytest.raises(FileExistsError):
        client.makedirs(f"{base}/x/y/z")
    assert client.isdir(f"{base}/x/y") and not client.isfile(f"{base}/x/y")
    with client.open(f"{base}/x/f", "w") as f:
        f.write("one")
    with client.open(f"{base}/x/g", "w") as f:
        f.write("two")
    client.rename(f"{base}/x/f", f"{base}/x/g")
    assert not client.exists(f"{base}/x/f")
    with client.open(f"{base}/x/g") as f:
        assert f.read() == "one"
    client.rename(f"{base}/x/y", f"{base}/moved")
    assert client.isdir(f"{base}/moved/z")
    client.remove(f"{base}/x/g")
    assert not client.exists(f"{base}/x/g")
    client.rmdir(f"{base}/moved/z")
    assert client.listdir(f"{base}/moved") == []
    assert not client.exists(f"{base}/x/g/under/a/file")


def test_symlinks_stat_and_lstat(client, base):
    with client.open(f"{base}/target", "w") as f:
        f.write("12345")
    client.symlink(f"{base}/target", f"{base}/link")
    client.symlink(f"{base}/gone", f"{base}/dangling")
    assert client.readlink(f"{base}/link") == f"{base}/target"
    assert client.stat(f"{base}/link").st_size == 5
    assert stat.S_ISLNK(client.lstat(f"{base}/link").st_mode)
    assert not client.exists(f"{base}/dangling")
    entries = {e.name: e for e in client.scandir(base)}
    assert entries["link"].is_symlink() and entries["link"].is_file()
    assert not entries["link"].is_file(follow_symlinks=False)
    assert not entries["dangling"].is_file() and not entries["dangling"].is_dir()


def test_chmod_and_truncate(client, base):
    with client.open(f"{base}/f", "wb") as f:
        f.write(b"abcdef")
    client.chmod(f"{base}/f", 0o600)
    assert stat.S_IMODE(client.stat(f"{base}/f").st_mode) == 0o600
    client.truncate(f"{base}/f", 2)
    with client.open(f"{base}/f", "rb") as f:
        assert f.read() == b"ab"


# Extended attributes and hints.

def test_xattrs(client, base):
    path = f"{base}/f"
    with client.open(path, "w"):
        pass
    client.setxattr(path, "user.color", b"blue")
    # Longer than a first guess at the size would be.
    client.setxattr(path, "user.long", b"v" * 10000)
    assert client.getxattr(path, "user.color") == b"blue"
    assert client.getxattr(path, "user.long") == b"v" * 10000
    assert {"user.color", "user.long"} <= set(client.listxattr(path))
    with pytest.raises(FileExistsError):
        client.setxattr(path, "user.color", b"red", os.XATTR_CREATE)
    client.setxattr(path, "user.color", b"red", os.XATTR_REPLACE)
    assert client.getxattr(path, "user.color") == b"red"
    client.removexattr(path, "user.color")
    with pytest.raises(OSError) as e:
        client.getxattr(path, "user.color")
    assert e.value.errno == errno.ENODATA


def test_directory_hints(client, base):
    assert client.hints(base) == {}
    with pytest.raises(OSError) as e:
        client.get_hint(base, "strip_size")
    assert e.value.errno == errno.ENODATA
    client.set_hint(base, "strip_size", 65536)
    client.set_hint(base, "num_dfiles", 2)
    assert client.hints(base) == {"strip_size": "65536", "num_dfiles": "2"}
    assert client.get_hint(base, "strip_size") == "65536"
    with pytest.raises(OSError) as e:
        client.set_hint(base, "no_such_hint", "1")
    assert e.value.errno == errno.EINVAL
    # A file made under the hints is striped as they say.
    with client.open(f"{base}/f", "wb") as f:
        f.write(b"x" * 200_000)
    assert client.layout(f"{base}/f") == {
        "strip_size": 65536, "num_datafiles": 2, "no_metafile": False}
    client.unset_hint(base, "strip_size")
    assert client.hints(base) == {"num_dfiles": "2"}


# Threads, fork, users.

def test_threads_read_in_parallel_and_correctly(client, base):
    files = {f"{base}/f{i}": os.urandom(8192 + i) for i in range(200)}
    for path, data in files.items():
        with client.open(path, "wb") as f:
            f.write(data)
    errors = []

    def reader(paths):
        try:
            for p in paths:
                with client.open(p, "rb") as f:
                    if f.read() != files[p]:
                        errors.append(f"{p}: wrong data")
        except Exception as e:  # reported below, not lost in the thread
            errors.append(repr(e))

    paths = list(files)
    threads = [threading.Thread(target=reader, args=(paths[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_the_gil_is_released_while_a_call_waits(client, cluster_file):
    # With every server stopped, a call waits; if it held the GIL, this
    # thread could not run meanwhile. The servers are the test cluster's,
    # started by python/tests/run (state.json beside the cluster file).
    state = json.load(open(os.path.join(os.path.dirname(cluster_file), "state.json")))
    pids = [pid for _, pid in state["servers"]]
    finished = threading.Event()
    result = []

    def waiter():
        # A name never looked up: the call must ask a server.
        result.append(client.exists(f"/never-{uuid.uuid4().hex}"))
        finished.set()

    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        t = threading.Thread(target=waiter)
        t.start()
        time.sleep(0.5)
        # Python ran here while the call waited.
        assert not finished.is_set()
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    t.join(30)
    assert finished.is_set() and result == [False]


def test_a_client_made_before_fork_works_in_the_child(client, base):
    with client.open(f"{base}/parent", "w") as f:
        f.write("from the parent")
    pid = os.fork()
    if pid == 0:
        # The child: exit status 0 only if everything worked.
        code = 1
        try:
            with client.open(f"{base}/parent") as f:
                ok = f.read() == "from the parent"
            with client.open(f"{base}/child", "w") as f:
                f.write(f"from {os.getpid()}")
            code = 0 if ok else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    with client.open(f"{base}/child") as f:
        assert f.read() == f"from {pid}"
    # And the parent's own connections still work.
    assert set(client.listdir(base)) == {"parent", "child"}


def test_multiprocessing_fork_pool(client, base):
    import multiprocessing

    for i in range(8):
        with client.open(f"{base}/{i}", "w") as f:
            f.write(str(i * i))
    with multiprocessing.get_context("fork").Pool(3) as pool:
        got = pool.map(_read_text, [(client, f"{base}/{i}") for i in range(8)])
    assert got == [str(i * i) for i in range(8)]


def _read_text(args):
    client, path = args
    with client.open(path) as f:
        return f.read()


UNPRIVILEGED = """
import os, sys, shoal
cluster, path = sys.argv[1], sys.argv[2]
try:
    open(os.path.join(os.path.dirname(cluster), "secret")).read()
    sys.exit("read the cluster secret: the test would prove nothing")
except PermissionError:
    pass
with shoal.Client(cluster) as c:
    with c.open(path, "w") as f:
        f.write("mine")
    assert c.open(path).read() == "mine"
    print(c.stat(path).st_uid)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user needs root")
def test_an_unprivileged_user_acts_as_itself_through_the_broker(client, cluster_file, base):
    # The node's broker (`shoal agent`, started by python/tests/run) gives
    # uid 65534 a credential for itself: it can write where it may, and
    # what it makes is its own.
    client.chmod(base, 0o1777)
    path = f"{base}/nobody"
    out = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
         sys.executable, "-c", UNPRIVILEGED, cluster_file, path],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "65534"
    assert client.stat(path).st_uid == 65534
    # Root's file in a sticky directory is not the user's to remove.
    with client.open(f"{base}/roots", "w"):
        pass
    denied = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
         sys.executable, "-c",
         "import shoal, sys; shoal.Client(sys.argv[1]).remove(sys.argv[2])",
         cluster_file, f"{base}/roots"],
        capture_output=True, text=True, timeout=60,
    )
    assert denied.returncode != 0 and "PermissionError" in denied.stderr
    assert client.exists(f"{base}/roots")
