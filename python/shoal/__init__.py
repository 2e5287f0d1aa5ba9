"""Shoal's native client for Python: files and directories of a Shoal cluster
without a mount.

    import shoal
    with shoal.Client("cluster.toml") as c:
        with c.open("/data/a.txt", "w") as f:
            f.write("hello\\n")
        print(c.listdir("/data"), c.stat("/data/a.txt").st_size)

Paths are absolute paths inside the cluster's namespace ("/dir/file").
`open()` returns the standard file objects (io.BufferedReader, BufferedWriter,
BufferedRandom, TextIOWrapper) over a raw file of libshoal's; the other
methods follow the `os` module's functions of the same name, and errors are
the usual OSError subclasses (FileNotFoundError, ...) with errno set.

The calls are libshoal's (the C API, linked in), made with the GIL released:
threads wait on the servers in parallel over one connection per server. A
process is connected to one cluster at a time; a Client made before fork()
works in the child, which gets connections of its own at its first call. A
process that cannot read the cluster secret (an unprivileged user) acts as
itself with a credential from the node's broker (the mount, or `shoal agent`).
The fsspec filesystem for shoal:// URLs is `shoal.fsspec.ShoalFileSystem`.
"""

import io
import os
import stat as _stat

from . import _shoal

__all__ = ["Client", "DirEntry"]

# Reads and writes through the buffered objects go to libshoal in pieces of
# this size: libshoal's read-ahead window, so a small sequential read costs
# no more requests than a read of the window would.
BUFFER_SIZE = 256 * 1024


def _path(path):
    """A path argument (str or os.PathLike) as the str libshoal takes."""
    path = os.fspath(path)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    return path


def _stat_result(t):
    """os.stat_result from the extension's tuple (times in nanoseconds)."""
    mode, ino, dev, nlink, uid, gid, size, atime, mtime, ctime, blksize, blocks = t
    return os.stat_result(
        (mode, ino, dev, nlink, uid, gid, size,
         atime // 10**9, mtime // 10**9, ctime // 10**9),
        {
            "st_atime": atime / 1e9,
            "st_mtime": mtime / 1e9,
            "st_ctime": ctime / 1e9,
            "st_atime_ns": atime,
            "st_mtime_ns": mtime,
            "st_ctime_ns": ctime,
            "st_blksize": blksize,
            "st_blocks": blocks,
        },
    )


def _flags(mode):
    """open(2) flags for a Python mode string, checked as open() checks it:
    (flags, binary, readable, writable)."""
    chars = set(mode)
    if len(chars) != len(mode) or not chars <= set("rwaxbt+"):
        raise ValueError(f"invalid mode: {mode!r}")
    creating = len(chars & set("rwax")) == 1
    if not creating:
        raise ValueError("must have exactly one of create/read/write/append mode")
    if "b" in chars and "t" in chars:
        raise ValueError("can't have text and binary mode at once")
    plus = "+" in chars
    if "r" in chars:
        flags, readable, writable = 0, True, plus
    elif "w" in chars:
        flags, readable, writable = os.O_CREAT | os.O_TRUNC, plus, True
    elif "a" in chars:
        flags, readable, writable = os.O_CREAT | os.O_APPEND, plus, True
    else:
        flags, readable, writable = os.O_CREAT | os.O_EXCL, plus, True
    flags |= os.O_RDWR if readable and writable else os.O_WRONLY if writable else os.O_RDONLY
    return flags, "b" in chars, readable, writable


class _RawFile(io.RawIOBase):
    """A libshoal descriptor as a raw file: what the buffered objects wrap."""

    def __init__(self, client, path, mode, fd, readable, writable):
        super().__init__()
        # The client stays connected while a file of its is open.
        self._client = client
        self._fd = fd
        self._readable = readable
        self._writable = writable
        self.name = path
        self.mode = mode

    def _fd_open(self):
        if self.closed:
            raise ValueError("I/O operation on closed file")
        return self._fd

    def readable(self):
        self._fd_open()
        return self._readable

    def writable(self):
        self._fd_open()
        return self._writable

    def seekable(self):
        self._fd_open()
        return True

    def readinto(self, buffer):
        return _shoal.readinto(self._fd_open(), buffer)

    def readall(self):
        # One request for a small file, where RawIOBase's loop would make a
        # second to find the end.
        return _shoal.readall(self._fd_open())

    def write(self, buffer):
        return _shoal.write(self._fd_open(), buffer)

    def seek(self, offset, whence=io.SEEK_SET):
        return _shoal.lseek(self._fd_open(), offset, whence)

    def tell(self):
        return _shoal.lseek(self._fd_open(), 0, io.SEEK_CUR)

    def truncate(self, size=None):
        fd = self._fd_open()
        if size is None:
            size = self.tell()
        _shoal.ftruncate(fd, size)
        return size

    def fsync(self):
        """Waits until the file's writes are on the servers' disks."""
        _shoal.fsync(self._fd_open())

    def stat(self):
        """fstat(2) of the open file, as os.stat_result."""
        return _stat_result(_shoal.fstat(self._fd_open()))

    def close(self):
        """Closes the file: its buffered writes are sent first, and an error
        sending them is raised here (the descriptor is released anyway)."""
        if self.closed:
            return
        try:
            _shoal.close(self._fd, self._writable)
        finally:
            super().close()

    def __repr__(self):
        return f"<shoal raw file name={self.name!r} mode={self.mode!r}>"


class DirEntry:
    """An entry of Client.scandir(), as os.DirEntry: its attributes came with
    the listing (readdirplus), so is_dir(), is_file() and stat() send nothing
    (stat() and the is_ methods of a symlink followed excepted)."""

    __slots__ = ("name", "path", "_ino", "_type", "_lstat", "_client", "_stat")

    def __init__(self, client, directory, entry):
        name, ino, d_type, st = entry
        self.name = name
        self.path = directory.rstrip("/") + "/" + name
        self._ino = ino
        self._type = d_type
        self._lstat = _stat_result(st) if st is not None else None
        self._client = client
        self._stat = None

    def inode(self):
        return self._ino

    def is_symlink(self):
        return self._type == _DT_LNK

    def stat(self, *, follow_symlinks=True):
        if follow_symlinks and self.is_symlink():
            if self._stat is None:
                self._stat = self._client.stat(self.path)
            return self._stat
        if self._lstat is None:
            self._lstat = self._client.stat(self.path, follow_symlinks=False)
        return self._lstat

    def _mode(self, follow_symlinks):
        try:
            return self.stat(follow_symlinks=follow_symlinks).st_mode
        except FileNotFoundError:
            # A dangling symlink: neither a directory nor a file (as os).
            return 0

    def is_dir(self, *, follow_symlinks=True):
        if not (follow_symlinks and self.is_symlink()):
            return self._type == _DT_DIR
        return _stat.S_ISDIR(self._mode(follow_symlinks))

    def is_file(self, *, follow_symlinks=True):
        if not (follow_symlinks and self.is_symlink()):
            return self._type == _DT_REG
        return _stat.S_ISREG(self._mode(follow_symlinks))

    def __fspath__(self):
        return self.path

    def __repr__(self):
        return f"<shoal.DirEntry {self.name!r}>"


# d_type values (dirent.h), as libshoal gives them.
_DT_DIR, _DT_REG, _DT_LNK = 4, 8, 10


class _ScandirIterator:
    """What Client.scandir() returns: an iterator and a context manager, as
    os.scandir's, fetching entries a batch at a time."""

    def __init__(self, client, path, listing):
        self._client = client
        self._path = path
        self._listing = listing

    def __iter__(self):
        return self

    def __next__(self):
        return DirEntry(self._client, self._path, next(self._listing))

    def close(self):
        self._listing.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Client:
    """A connection to the Shoal cluster that `cluster_file` describes (as
    `shoal up` writes it); checks that every server answers.

    One cluster per process: a second Client of the same file shares the
    connection, of another file raises OSError (EISCONN). close() (or the
    end of a `with` block) lets go of it; files still open keep it.
    """

    def __init__(self, cluster_file):
        self.cluster_file = _path(cluster_file)
        _shoal.connect(self.cluster_file)
        self._connected = True

    def close(self):
        """Lets go of the connection: the process's last user sends what is
        held back and closes the connections."""
        if self._connected:
            self._connected = False
            _shoal.disconnect()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return f"<shoal.Client {self.cluster_file!r}>"

    def __reduce__(self):
        # Unpickled (in a worker process, say) it connects again.
        return (Client, (self.cluster_file,))

    # Files.

    def open(self, path, mode="r", buffering=-1, encoding=None, errors=None,
             newline=None):
        """As the built-in open(): binary modes give io.BufferedReader,
        BufferedWriter or BufferedRandom (or the raw file with
        buffering=0), text modes an io.TextIOWrapper over one. A new file's
        mode is 0o666 less the umask. Writes are visible to other clients
        once the file is closed (or flushed and fsync()ed)."""
        path = _path(path)
        flags, binary, readable, writable = _flags(mode)
        if binary and (encoding is not None or errors is not None or newline is not None):
            raise ValueError("binary mode doesn't take an encoding, errors or newline argument")
        if buffering == 0 and not binary:
            raise ValueError("can't have unbuffered text I/O")
        line_buffering = buffering == 1 and not binary
        fd = _shoal.open(path, flags, 0o666)
        raw = _RawFile(self, path, mode, fd, readable, writable)
        try:
            if buffering == 0:
                return raw
            size = buffering if buffering > 1 else BUFFER_SIZE
            if readable and writable:
                buffered = io.BufferedRandom(raw, size)
            elif writable:
                buffered = io.BufferedWriter(raw, size)
            else:
                buffered = io.BufferedReader(raw, size)
            if binary:
                return buffered
            text = io.TextIOWrapper(buffered, encoding, errors, newline, line_buffering)
            text.mode = mode
            return text
        except BaseException:
            raw.close()
            raise

    # Attributes.

    def stat(self, path, *, follow_symlinks=True):
        return _stat_result(_shoal.stat(_path(path), follow_symlinks))

    def lstat(self, path):
        return self.stat(path, follow_symlinks=False)

    def exists(self, path):
        """Whether `path` names something (a dangling symlink does not), as
        os.path.exists; errors other than "no such file" are raised."""
        try:
            self.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return False
        return True

    def isdir(self, path):
        try:
            return _stat.S_ISDIR(self.stat(path).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return False

    def isfile(self, path):
        try:
            return _stat.S_ISREG(self.stat(path).st_mode)
        except (FileNotFoundError, NotADirectoryError):
            return False

    def chmod(self, path, mode):
        _shoal.chmod(_path(path), mode)

    def truncate(self, path, length):
        _shoal.truncate(_path(path), length)

    # Directories.

    def listdir(self, path="/"):
        """The names in directory `path` (no "." or ".."), without fetching
        their attributes."""
        listing = _shoal.listing(_path(path), False)
        try:
            return [entry[0] for entry in listing]
        finally:
            listing.close()

    def scandir(self, path="/"):
        """The entries of directory `path` as DirEntry objects, their
        attributes fetched with the names (readdirplus)."""
        path = _path(path)
        return _ScandirIterator(self, path, _shoal.listing(path, True))

    def walk(self, top="/", topdown=True, onerror=None, followlinks=False):
        """As os.walk: (dirpath, dirnames, filenames) for each directory,
        each listed once with its entries' attributes (scandir). Top-down,
        the caller may prune dirnames in place."""
        stack = [_path(top)]
        while stack:
            top = stack.pop()
            if isinstance(top, tuple):
                # Bottom-up: a directory whose subdirectories are done.
                yield top
                continue
            dirs, files, links = [], [], set()
            try:
                with self.scandir(top) as it:
                    for entry in it:
                        if entry.is_dir():
                            dirs.append(entry.name)
                            if entry.is_symlink():
                                links.add(entry.name)
                        else:
                            files.append(entry.name)
            except OSError as e:
                if onerror is not None:
                    onerror(e)
                continue
            if not topdown:
                stack.append((top, dirs, files))
            else:
                yield top, dirs, files
            base = top.rstrip("/")
            stack.extend(
                base + "/" + name
                for name in reversed(dirs)
                if followlinks or name not in links
            )

    def mkdir(self, path, mode=0o777):
        _shoal.mkdir(_path(path), mode)

    def makedirs(self, path, mode=0o777, exist_ok=False):
        """As os.makedirs: the missing parents too."""
        path = _path(path).rstrip("/") or "/"
        head = path.rsplit("/", 1)[0] or "/"
        if head != path and not self.exists(head):
            try:
                self.makedirs(head, mode, exist_ok=True)
            except FileExistsError:
                pass  # made by someone else meanwhile
        try:
            self.mkdir(path, mode)
        except OSError:
            if not exist_ok or not self.isdir(path):
                raise

    def remove(self, path):
        _shoal.unlink(_path(path))

    unlink = remove

    def rmdir(self, path):
        _shoal.rmdir(_path(path))

    def rename(self, src, dst):
        """Renames `src` to `dst`, replacing `dst` if it exists (POSIX
        rename, as os.replace)."""
        _shoal.rename(_path(src), _path(dst))

    replace = rename

    def symlink(self, target, path):
        """Makes `path` a symlink to `target`."""
        _shoal.symlink(_path(target), _path(path))

    def readlink(self, path):
        return _shoal.readlink(_path(path))

    # Extended attributes.

    def getxattr(self, path, name, *, follow_symlinks=True):
        return bytes(_shoal.getxattr(_path(path), name, follow_symlinks))

    def setxattr(self, path, name, value, flags=0, *, follow_symlinks=True):
        """flags: os.XATTR_CREATE or os.XATTR_REPLACE, as os.setxattr."""
        _shoal.setxattr(_path(path), name, bytes(value), flags, follow_symlinks)

    def listxattr(self, path, *, follow_symlinks=True):
        return _shoal.listxattr(_path(path), follow_symlinks)

    def removexattr(self, path, name, *, follow_symlinks=True):
        _shoal.removexattr(_path(path), name, follow_symlinks)

    # Directory hints: how files made in a directory from then on are laid
    # out ("strip_size", "num_dfiles", "dist", "no_metafile"; `shoal hint`).

    def hints(self, path):
        """The hints set on directory `path`, as a dict of strings."""
        text = _shoal.hint_list(_path(path))
        return dict(line.split("=", 1) for line in text.splitlines() if line)

    def get_hint(self, path, name):
        """The value of hint `name` of directory `path`; OSError (ENODATA)
        if it is not set."""
        return _shoal.hint_get(_path(path), name)

    def set_hint(self, path, name, value):
        _shoal.hint_set(_path(path), name, str(value))

    def unset_hint(self, path, name):
        _shoal.hint_set(_path(path), name, None)

    def layout(self, path):
        """Where file `path`'s bytes live, as the hints of its directory made
        it: {"strip_size": bytes, "num_datafiles": servers, "no_metafile":
        bool}."""
        strip, width, no_metafile = _shoal.layout(_path(path))
        return {"strip_size": strip, "num_datafiles": width, "no_metafile": no_metafile}

    def flush(self):
        """Sends every write this process holds back, of every file."""
        _shoal.flush_all()
