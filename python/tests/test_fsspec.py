"""The fsspec filesystem (shoal://) against a real cluster: fsspec's generic
calls, URLs, the entry point, and pandas and pyarrow on shoal:// paths."""

import os
import subprocess
import sys

import fsspec
import pandas
import pytest

from shoal.fsspec import ShoalFileSystem


@pytest.fixture
def fs(cluster_file, monkeypatch):
    monkeypatch.setenv("SHOAL_CLUSTER", cluster_file)
    return fsspec.filesystem("shoal")


def test_the_protocol_is_found_through_the_entry_point(cluster_file):
    # A fresh interpreter that never imported shoal: fsspec finds the class
    # in the package's fsspec.specs entry point.
    code = "import fsspec; print(fsspec.get_filesystem_class('shoal').__module__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "shoal.fsspec"


def test_the_cluster_comes_from_storage_options_or_the_environment(cluster_file, monkeypatch, base):
    monkeypatch.delenv("SHOAL_CLUSTER", raising=False)
    with pytest.raises(ValueError, match="SHOAL_CLUSTER"):
        ShoalFileSystem(skip_instance_cache=True)
    with fsspec.open(f"shoal://{base}/opt.txt", "w", cluster=cluster_file) as f:
        f.write("by option")
    monkeypatch.setenv("SHOAL_CLUSTER", cluster_file)
    # Both spellings name the same path: a URL has no host part.
    with fsspec.open(f"shoal://{base}/opt.txt") as f:
        assert f.read() == b"by option"
    with fsspec.open(f"shoal:/{base}/opt.txt", "rt") as f:
        assert f.read() == "by option"


def test_open_binary_and_text_with_seek(fs, base):
    with fs.open(f"{base}/sub/b.bin", "wb") as f:  # parents made as needed
        f.write(bytes(range(256)) * 100)
    with fs.open(f"shoal://{base}/sub/b.bin", "rb") as f:
        f.seek(256 * 50)
        assert f.read(3) == b"\x00\x01\x02"
        assert f.tell() == 256 * 50 + 3
    with fs.open(f"{base}/t.txt", "w", encoding="utf-8") as f:
        f.write("ä\nb\n")
    with fs.open(f"{base}/t.txt", "r", encoding="utf-8") as f:
        assert f.readlines() == ["ä\n", "b\n"]


def test_ls_with_detail_info_and_kinds(fs, base):
    fs.pipe_file(f"{base}/a", b"12345")
    fs.mkdir(f"{base}/d")
    fs.client.symlink(f"{base}/a", f"{base}/l")
    listed = fs.ls(base, detail=True)
    assert [e["name"] for e in listed] == [f"{base}/a", f"{base}/d", f"{base}/l"]
    by_name = {e["name"]: e for e in listed}
    assert by_name[f"{base}/a"]["type"] == "file" and by_name[f"{base}/a"]["size"] == 5
    assert by_name[f"{base}/d"]["type"] == "directory"
    assert by_name[f"{base}/l"]["type"] == "file" and by_name[f"{base}/l"]["islink"]
    assert fs.ls(f"shoal://{base}", detail=False) == [f"{base}/a", f"{base}/d", f"{base}/l"]
    info = fs.info(f"{base}/a")
    assert info["type"] == "file" and info["size"] == 5 and info["name"] == f"{base}/a"
    assert fs.ls(f"{base}/a", detail=False) == [f"{base}/a"]
    assert fs.isdir(f"{base}/d") and fs.isfile(f"{base}/a") and fs.exists(f"{base}/l")
    assert not fs.exists(f"{base}/none")
    with pytest.raises(FileNotFoundError):
        fs.info(f"{base}/none")
    with pytest.raises(FileNotFoundError):
        fs.ls(f"{base}/none")
    assert fs.size(f"{base}/a") == 5
    assert fs.modified(f"{base}/a").timestamp() == pytest.approx(info["mtime"])


def test_cat_file_and_pipe_file(fs, base):
    fs.pipe_file(f"{base}/p/x", b"0123456789")
    assert fs.cat_file(f"{base}/p/x") == b"0123456789"
    assert fs.cat_file(f"{base}/p/x", start=2, end=5) == b"234"
    assert fs.cat_file(f"{base}/p/x", start=-3) == b"789"
    fs.pipe({f"{base}/p/y": b"y", f"{base}/p/z": b"z"})
    assert fs.cat([f"{base}/p/y", f"{base}/p/z"]) == {f"{base}/p/y": b"y", f"{base}/p/z": b"z"}
    fs.pipe_file(f"{base}/p/x", b"new")
    assert fs.cat_file(f"{base}/p/x") == b"new"
    with pytest.raises(FileNotFoundError):
        fs.cat_file(f"{base}/p/none")


def _tree(fs, base):
    for p in ("a/1.csv", "a/2.txt", "a/b/3.csv", "a/b/c/4.csv", "e/5.csv"):
        fs.pipe_file(f"{base}/{p}", p.encode())


def test_find_and_glob(fs, base):
    _tree(fs, base)
    assert fs.find(base) == [f"{base}/{p}" for p in ("a/1.csv", "a/2.txt", "a/b/3.csv", "a/b/c/4.csv", "e/5.csv")]
    assert fs.find(f"{base}/a", maxdepth=1) == [f"{base}/a/1.csv", f"{base}/a/2.txt"]
    withdirs = fs.find(f"{base}/a", withdirs=True)
    assert f"{base}/a/b" in withdirs and f"{base}/a/b/c" in withdirs
    detail = fs.find(base, detail=True)
    assert detail[f"{base}/a/b/3.csv"]["size"] == len("a/b/3.csv")
    assert fs.glob(f"{base}/a/*.csv") == [f"{base}/a/1.csv"]
    assert fs.glob(f"shoal://{base}/**/*.csv") == [
        f"{base}/{p}" for p in ("a/1.csv", "a/b/3.csv", "a/b/c/4.csv", "e/5.csv")]
    assert fs.du(f"{base}/a") == sum(len(p) for p in ("a/1.csv", "a/2.txt", "a/b/3.csv", "a/b/c/4.csv"))


def test_rm_recursive_mv_and_copy(fs, base):
    _tree(fs, base)
    fs.copy(f"{base}/a", f"{base}/copy", recursive=True)
    assert fs.cat_file(f"{base}/copy/b/c/4.csv") == b"a/b/c/4.csv"
    fs.mv(f"{base}/copy", f"{base}/moved")
    assert not fs.exists(f"{base}/copy") and fs.isdir(f"{base}/moved/b")
    with pytest.raises(OSError):
        fs.rm(f"{base}/a")  # a directory, not recursive
    fs.rm(f"{base}/a", recursive=True)
    assert not fs.exists(f"{base}/a")
    fs.rm(f"{base}/e/5.csv")
    assert fs.ls(f"{base}/e", detail=False) == []
    fs.rm([f"{base}/moved", f"{base}/e"], recursive=True)
    assert fs.ls(base, detail=False) == []


def test_pandas_reads_and_writes_shoal_urls(fs, cluster_file, base):
    frame = pandas.DataFrame({"x": [1, 2, 3], "name": ["a", "b", "c"]})
    frame.to_csv(f"shoal://{base}/t.csv", index=False)
    assert fs.cat_file(f"{base}/t.csv").startswith(b"x,name\n1,a\n")
    back = pandas.read_csv(f"shoal://{base}/t.csv")
    pandas.testing.assert_frame_equal(back, frame)
    # The cluster given as a storage option rather than the environment.
    opts = pandas.read_csv(f"shoal://{base}/t.csv", storage_options={"cluster": cluster_file})
    pandas.testing.assert_frame_equal(opts, frame)


def test_pyarrow_dataset_reads_parquet_files_on_shoal(fs, base):
    import pyarrow
    import pyarrow.dataset
    import pyarrow.parquet

    for i in range(3):
        part = pyarrow.table({"part": [i] * 4, "v": list(range(4 * i, 4 * i + 4))})
        with fs.open(f"{base}/data/p{i}.parquet", "wb") as f:
            pyarrow.parquet.write_table(part, f)
    # pyarrow takes an fsspec filesystem as it is.
    dataset = pyarrow.dataset.dataset(f"{base}/data", format="parquet", filesystem=fs)
    table = dataset.to_table()
    assert table.num_rows == 12
    assert sorted(table.column("v").to_pylist()) == list(range(12))


class _Samples:
    """A torch.utils.data-style dataset: an indexable sequence whose items
    are read from shoal:// paths by whichever worker process asks."""

    def __init__(self, fs, paths):
        self.fs, self.paths = fs, paths

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return self.fs.cat_file(self.paths[i])


def _load(args):
    dataset, i = args
    return dataset[i]


def test_a_loader_with_forked_workers_and_pickled_filesystem(fs, base):
    import multiprocessing
    import pickle

    paths = [f"{base}/s{i}" for i in range(12)]
    for i, p in enumerate(paths):
        fs.pipe_file(p, bytes([i]) * (i + 1))
    dataset = _Samples(fs, paths)
    # As a DataLoader's workers: forked after the filesystem was made, each
    # item's dataset pickled to them.
    with multiprocessing.get_context("fork").Pool(3) as pool:
        got = pool.map(_load, [(dataset, i) for i in range(len(dataset))])
    assert got == [bytes([i]) * (i + 1) for i in range(12)]
    again = pickle.loads(pickle.dumps(fs))
    assert again.cat_file(paths[3]) == b"\x03" * 4
