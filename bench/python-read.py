"""The driver of bench/run-python-read (run with a virtual environment that has
the shoal wheel and fsspec): one step per invocation, so that every reader is a
fresh process with empty caches of its own.

    python-read.py write CLUSTER DIR FILES   # FILES files of 8 KiB under DIR
    python-read.py read fsspec CLUSTER DIR FILES THREADS
    python-read.py read mount MOUNTPOINT DIR FILES THREADS
    python-read.py remove CLUSTER DIR

A read prints files/s. The reading code is the same for both: only the
function that opens a path differs (fsspec's ShoalFileSystem.open, or the
built-in open on the mount's path).
"""

import sys
import threading
import time

SIZE = 8192
PER_DIR = 1000


def paths(directory, files):
    """The dataset's paths: PER_DIR files a subdirectory."""
    return [f"{directory}/d{i // PER_DIR:03d}/f{i:06d}" for i in range(files)]


def write(cluster, directory, files):
    import shoal

    with shoal.Client(cluster) as c:
        for d in range(0, files, PER_DIR):
            c.makedirs(f"{directory}/d{d // PER_DIR:03d}")
        data = bytes(range(256)) * (SIZE // 256)
        for p in paths(directory, files):
            with c.open(p, "wb") as f:
                f.write(data)


def read(opener, prefix, directory, files, threads):
    """Reads every file with `threads` threads: files/s."""
    todo = [prefix + p for p in paths(directory, files)]
    failed = []

    def reader(mine):
        for p in mine:
            with opener(p, "rb") as f:
                if len(f.read()) != SIZE:
                    failed.append(p)

    workers = [threading.Thread(target=reader, args=(todo[i::threads],)) for i in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - start
    if failed:
        sys.exit(f"{len(failed)} files read short, e.g. {failed[0]}")
    return files / elapsed


def main(argv):
    step = argv[1]
    if step == "write":
        write(argv[2], argv[3], int(argv[4]))
    elif step == "read":
        how, where, directory, files, threads = argv[2], argv[3], argv[4], int(argv[5]), int(argv[6])
        if how == "fsspec":
            import fsspec

            fs = fsspec.filesystem("shoal", cluster=where)
            rate = read(fs.open, "", directory, files, threads)
        else:
            rate = read(open, where, directory, files, threads)
        print(f"{rate:.0f}")
    elif step == "remove":
        import fsspec

        fsspec.filesystem("shoal", cluster=argv[2]).rm(argv[3], recursive=True)
    else:
        sys.exit(f"unknown step {step}")


if __name__ == "__main__":
    main(sys.argv)
