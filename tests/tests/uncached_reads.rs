//! Uncached reads on the servers (`uncached_reads`): a large read leaves
//! nothing in the server's page cache, and with the setting at 0 it stays
//! there as before. Checked on the servers' own datafiles with mincore.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use shoal_proto::handle::ROOT;
use shoal_tests::page_cache::{evict, page_size, resident_pages};
use shoal_tests::{pattern, Cluster};

const MIB: usize = 1 << 20;

/// Every local file under the servers' `files` directories.
fn datafiles(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if p
                .strip_prefix(dir)
                .is_ok_and(|rel| rel.components().any(|c| c.as_os_str() == "files"))
            {
                out.push(p);
            }
        }
    }
    out
}

/// (pages of `path` in the page cache, pages of `path`).
fn resident(path: &Path) -> (usize, usize) {
    let f = std::fs::File::open(path).unwrap();
    let len = f.metadata().unwrap().len() as usize;
    (resident_pages(&f, len), len.div_ceil(page_size()))
}

/// Whether the servers ask for uncached reads here: a kernel they ask it of,
/// which takes it for a file in `dir`.
fn kernel_has_uncached_reads(dir: &Path) -> bool {
    if !shoal_server::uncached::kernel_new_enough() {
        return false;
    }
    let path = dir.join("probe");
    std::fs::write(&path, [1u8; 4096]).unwrap();
    let f = std::fs::File::open(&path).unwrap();
    let mut buf = [0u8; 4096];
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: the kernel writes at most 4096 bytes into `buf`.
    let n = unsafe { libc::preadv2(f.as_raw_fd(), &iov, 1, 0, libc::RWF_DONTCACHE) };
    std::fs::remove_file(&path).unwrap();
    n == 4096
}

/// Writes and fsyncs 8 MiB over 2 servers, takes the datafiles out of the
/// page cache, reads the file back from another client in 1 MiB pieces,
/// and returns (pages of the datafiles cached after the read, their pages).
async fn cached_after_a_read(cluster: &Cluster) -> (usize, usize) {
    let writer = cluster.client();
    let h = writer.create(ROOT, "big", 0o644).await.unwrap().handle;
    let data = pattern(7, 8 * MIB);
    for (i, piece) in data.chunks(MIB).enumerate() {
        writer
            .write(h, (i * MIB) as u64, Bytes::copy_from_slice(piece))
            .await
            .unwrap();
    }
    writer.fsync(h).await.unwrap();
    let files = datafiles(cluster.dir());
    assert!(files.len() >= 2, "a datafile on each server: {files:?}");
    for f in &files {
        evict(&std::fs::File::open(f).unwrap());
    }
    let reader = cluster.client();
    for i in 0..8 {
        let back = reader.read(h, (i * MIB) as u64, MIB).await.unwrap();
        assert!(back == data[i * MIB..(i + 1) * MIB], "MiB {i} read back");
    }
    files
        .iter()
        .map(|f| resident(f))
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_reads_leave_the_servers_page_cache_as_they_found_it() {
    let cluster = Cluster::builder().servers(2).start();
    let (cached, pages) = cached_after_a_read(&cluster).await;
    assert_eq!(pages, 8 * MIB / page_size());
    if kernel_has_uncached_reads(cluster.dir()) {
        // A page two reads held at once may stay (the kernel drops a page
        // only when it can lock it): allow up to 1 MiB of the 8.
        assert!(
            cached <= pages / 8,
            "{cached} of {pages} pages cached after uncached reads"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_uncached_reads_at_zero_every_read_stays_cached() {
    let cluster = Cluster::builder()
        .servers(2)
        .set("uncached_reads=0")
        .start();
    let (cached, pages) = cached_after_a_read(&cluster).await;
    assert_eq!(cached, pages, "every page read is cached");
}
