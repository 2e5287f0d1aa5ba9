"""An fsspec filesystem for Shoal: shoal:// URLs without a mount.

    import fsspec, pandas
    df = pandas.read_csv("shoal:///data/table.csv")          # SHOAL_CLUSTER set
    fs = fsspec.filesystem("shoal", cluster="/etc/shoal/cluster.toml")
    fs.ls("/data", detail=True)

A URL names a path inside the cluster's namespace: shoal:///data/x.csv is
/data/x.csv (shoal://data/x.csv too: there is no host part). Which cluster is
the cluster file's: the `cluster` storage option (fsspec.open(url,
cluster=...), pandas' storage_options={"cluster": ...}), else the
SHOAL_CLUSTER environment variable. The protocol is registered through the
`fsspec.specs` entry point, so fsspec finds it without `import shoal`.

Files open as the package's own buffered file objects (no fsspec cache
layer): a whole small file is one request. Opening a file for writing makes
its missing parent directories, as object stores let one write anywhere.
"""

import datetime
import os
import stat as _stat

from fsspec.spec import AbstractFileSystem

from . import Client

# Bytes per read and write when copying a file within the cluster.
_COPY_CHUNK = 4 << 20


def _cluster_file(cluster):
    if cluster is None:
        cluster = os.environ.get("SHOAL_CLUSTER")
    if not cluster:
        raise ValueError(
            "which Shoal cluster? give the cluster file as the `cluster` storage "
            "option or in the SHOAL_CLUSTER environment variable"
        )
    return os.path.abspath(os.fspath(cluster))


class ShoalFileSystem(AbstractFileSystem):
    """Files of one Shoal cluster through the native client (libshoal)."""

    protocol = "shoal"
    root_marker = "/"

    def __init__(self, cluster=None, **kwargs):
        super().__init__(cluster=cluster, **kwargs)
        self.cluster = _cluster_file(cluster)
        self.client = Client(self.cluster)

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = os.fspath(path)
        if path.startswith("shoal://"):
            path = path[len("shoal://"):]
        path = "/" + path.strip("/")
        return path

    def unstrip_protocol(self, name):
        return "shoal://" + self._strip_protocol(name)

    def _info(self, path, st):
        """fsspec's details of `path` from its lstat; a symlink is described
        by its target, as LocalFileSystem does, and marked islink."""
        link = _stat.S_ISLNK(st.st_mode)
        if link:
            try:
                st = self.client.stat(path)
            except FileNotFoundError:
                pass  # dangling: described as the link itself
        if _stat.S_ISDIR(st.st_mode):
            kind = "directory"
        elif _stat.S_ISREG(st.st_mode):
            kind = "file"
        else:
            kind = "other"
        return {
            "name": path,
            "size": st.st_size,
            "type": kind,
            "created": st.st_ctime,
            "mtime": st.st_mtime,
            "mode": st.st_mode,
            "uid": st.st_uid,
            "gid": st.st_gid,
            "ino": st.st_ino,
            "nlink": st.st_nlink,
            "islink": link,
        }

    def info(self, path, **kwargs):
        path = self._strip_protocol(path)
        return self._info(path, self.client.lstat(path))

    def ls(self, path, detail=True, **kwargs):
        path = self._strip_protocol(path)
        st = self.client.lstat(path)
        if not _stat.S_ISDIR(st.st_mode) and not (
            _stat.S_ISLNK(st.st_mode) and self.client.isdir(path)
        ):
            # fsspec's ls of a file is that file.
            return [self._info(path, st)] if detail else [path]
        with self.client.scandir(path) as entries:
            if not detail:
                return sorted(e.path for e in entries)
            found = [self._info(e.path, e.stat(follow_symlinks=False)) for e in entries]
        return sorted(found, key=lambda d: d["name"])

    def _open(self, path, mode="rb", block_size=None, autocommit=True,
              cache_options=None, **kwargs):
        if not autocommit:
            raise NotImplementedError("Shoal writes files in place: no transactions")
        path = self._strip_protocol(path)
        if "w" in mode or "a" in mode or "x" in mode:
            self.makedirs(self._parent(path), exist_ok=True)
        return self.client.open(path, mode, buffering=block_size or -1)

    def cat_file(self, path, start=None, end=None, **kwargs):
        """Bytes start:end of the file, negative counting from its end (as
        fsspec's, which would ask a file object for a .size that io's do
        not have)."""
        with self.open(path, "rb", **kwargs) as f:
            size = None
            if (start or 0) < 0 or (end or 0) < 0:
                size = f.seek(0, os.SEEK_END)
            start = start or 0
            if start < 0:
                start = max(0, size + start)
            if end is not None and end < 0:
                end = size + end
            f.seek(start)
            if end is None:
                return f.read()
            return f.read(max(0, end - start))

    def mkdir(self, path, create_parents=True, **kwargs):
        path = self._strip_protocol(path)
        if create_parents:
            self.makedirs(path, exist_ok=False)
        else:
            self.client.mkdir(path)

    def makedirs(self, path, exist_ok=False):
        self.client.makedirs(self._strip_protocol(path), exist_ok=exist_ok)

    def rmdir(self, path):
        self.client.rmdir(self._strip_protocol(path))

    def rm_file(self, path):
        self.client.remove(self._strip_protocol(path))

    def _rm(self, path):
        self.rm_file(path)

    def rm(self, path, recursive=False, maxdepth=None):
        paths = self.expand_path(path, recursive=recursive, maxdepth=maxdepth)
        # Reverse order: a directory's entries go before it.
        for p in sorted(paths, reverse=True):
            if _stat.S_ISDIR(self.client.lstat(p).st_mode):
                self.client.rmdir(p)
            else:
                self.client.remove(p)

    def mv(self, path1, path2, recursive=False, maxdepth=None, **kwargs):
        """A rename within the cluster (replacing path2 if it exists)."""
        path1, path2 = self._strip_protocol(path1), self._strip_protocol(path2)
        self.client.rename(path1, path2)

    def cp_file(self, path1, path2, **kwargs):
        path1, path2 = self._strip_protocol(path1), self._strip_protocol(path2)
        if self.isdir(path1):
            self.makedirs(path2, exist_ok=True)
            return
        with self.client.open(path1, "rb") as src, self.client.open(path2, "wb") as dst:
            while chunk := src.read(_COPY_CHUNK):
                dst.write(chunk)

    def created(self, path):
        st = self.client.stat(self._strip_protocol(path))
        return datetime.datetime.fromtimestamp(st.st_ctime, tz=datetime.timezone.utc)

    def modified(self, path):
        st = self.client.stat(self._strip_protocol(path))
        return datetime.datetime.fromtimestamp(st.st_mtime, tz=datetime.timezone.utc)
