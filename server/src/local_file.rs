//! A datafile's local file: large aligned writes go to disk directly
//! (O_DIRECT), and the others start their write-out while a stream of
//! writes is still arriving.
//!
//! Direct writes: a buffered write copies its bytes into fresh page-cache
//! pages, and on this machine's VM a copy into pages the guest has not
//! touched lately costs far more than the disk: four local `dd bs=1M
//! conv=fsync` writers ran at 650-680 MiB/s in one round and 1,780 the
//! next, 81% of the slow rounds' CPU in that copy, while with `oflag=direct`
//! they ran at 1,930-2,470 every round. A direct write copies the bytes
//! once into a buffer this thread reuses (O_DIRECT wants aligned memory,
//! and a frame's payload is not) and the disk reads them from there: no
//! page cache to fill, nothing left for the fsync but the device's flush.
//!
//! Uncached reads: a large read may pass through the page cache without
//! staying there (`crate::uncached`).
//!
//! Write-out: without it, bytes written through the page cache sit there
//! until the writer's fsync (the kernel starts write-out only once dirty pages pass
//! `dirty_background_ratio`, gigabytes on a large machine), so a streaming
//! write first fills memory at the speed of the CPU and then waits at the
//! fsync for the disk: the two run one after the other. Starting write-out
//! every [`WRITE_OUT_AFTER`] bytes lets the disk work while the client
//! sends, and leaves the fsync only the tail (the technique of RocksDB's
//! `bytes_per_sync` and Ceph's BlueStore). Small files never reach the
//! bound, so their writes cost nothing more.

use std::cell::RefCell;
use std::fs::{File, OpenOptions};
use std::ops::Deref;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use aligned_vec::{AVec, ConstAlign};

use crate::uncached;

/// Bytes written to one local file after which its write-out is started.
/// Large enough that the disk gets long runs, small enough that a 1 GiB
/// stream is mostly on disk by its fsync.
pub const WRITE_OUT_AFTER: u64 = 8 << 20;

/// Writes of at least this many bytes, at an offset and of a length that
/// are multiples of [`DIRECT_ALIGN`], go direct. Smaller ones stay in the
/// page cache: a direct write waits for the device, a cost a stream of
/// small writes would pay at each (a judgement, not measured: streams
/// through the mount come in 1 MiB strips).
pub const DIRECT_MIN: usize = 256 << 10;

/// The alignment of offset, length and memory a direct write keeps to: the
/// page size, which every Linux block device and file system accepts.
pub const DIRECT_ALIGN: usize = 4096;

thread_local! {
    /// The aligned copy of a direct write's bytes, reused by each of the
    /// server's blocking threads. It is scratch memory, not a request's
    /// context: a write fills and empties it before it returns, so nothing
    /// of it outlives the call or is read elsewhere, and one per thread is
    /// what lets concurrent writes each have one without allocating it
    /// anew.
    static STAGING: RefCell<AVec<u8, ConstAlign<DIRECT_ALIGN>>> =
        RefCell::new(AVec::new(DIRECT_ALIGN));
}

pub struct LocalFile {
    file: File,
    /// The same file opened with O_DIRECT, once a write wanted it; None if
    /// the file system refused (then every write goes through the cache).
    direct: OnceLock<Option<File>>,
    /// Bytes written through the page cache since write-out was last
    /// started.
    unstarted: AtomicU64,
}

impl LocalFile {
    pub fn new(file: File) -> LocalFile {
        LocalFile {
            file,
            direct: OnceLock::new(),
            unstarted: AtomicU64::new(0),
        }
    }

    /// Writes all of `data` at `offset`: direct if it is large and aligned
    /// and the file system allows it, else through the page cache, then
    /// starting the write-out of the file's dirty pages if
    /// [`WRITE_OUT_AFTER`] bytes were written so since the last start.
    pub fn write_all_at(&self, data: &[u8], offset: u64) -> std::io::Result<()> {
        if self.wrote_direct(data, offset)? {
            return Ok(());
        }
        self.file.write_all_at(data, offset)?;
        let len = data.len() as u64;
        if self.unstarted.fetch_add(len, Ordering::Relaxed) + len >= WRITE_OUT_AFTER
            // Of writers past the bound at once, the one that takes the
            // count starts write-out; the others find it taken.
            && self.unstarted.swap(0, Ordering::Relaxed) >= WRITE_OUT_AFTER
        {
            self.start_write_out();
        }
        Ok(())
    }

    /// Up to `len` bytes from `offset`, fewer only at the end of the file,
    /// read into fresh memory without zeroing it first (a MiB of memset
    /// per read was 2.5% of a streaming read's CPU); `uncached` asks that
    /// the pages the read brings into the page cache leave it again
    /// (`crate::uncached`: a request the kernel may not take).
    pub fn read_upto(&self, offset: u64, len: usize, uncached: bool) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::<u8>::with_capacity(len);
        while out.len() < len {
            let done = out.len();
            let at = libc::off_t::try_from(offset + done as u64)
                .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
            let flags = uncached::flags(uncached);
            let spare = libc::iovec {
                iov_base: out.spare_capacity_mut().as_mut_ptr().cast(),
                iov_len: len - done,
            };
            // SAFETY: the kernel writes at most `len - done` bytes into the
            // spare capacity, which holds at least that many; only the bytes
            // it says it wrote become part of `out`.
            let n = unsafe { libc::preadv2(self.file.as_raw_fd(), &spare, 1, at, flags) };
            match n {
                0 => break,
                // SAFETY: the kernel initialised these `n` bytes.
                n if n > 0 => unsafe { out.set_len(done + n as usize) },
                _ => {
                    let e = std::io::Error::last_os_error();
                    if !uncached::refused(flags, &e) && e.kind() != std::io::ErrorKind::Interrupted
                    {
                        return Err(e);
                    }
                }
            }
        }
        Ok(out)
    }

    /// Writes `data` at `offset` with O_DIRECT if it qualifies; false if
    /// it did not (or the file system refused it), for the caller to write
    /// it through the cache.
    fn wrote_direct(&self, data: &[u8], offset: u64) -> std::io::Result<bool> {
        let aligned = |n: usize| n.is_multiple_of(DIRECT_ALIGN);
        if data.len() < DIRECT_MIN || !aligned(data.len()) || !aligned(offset as usize) {
            return Ok(false);
        }
        let Some(direct) = self.direct.get_or_init(|| open_direct(&self.file)) else {
            return Ok(false);
        };
        STAGING.with_borrow_mut(|staging| {
            staging.clear();
            staging.extend_from_slice(data);
            match direct.write_all_at(staging, offset) {
                Ok(()) => Ok(true),
                // A file system that takes O_DIRECT opens but not this
                // write (an alignment of its own): the cache takes it.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(false),
                Err(e) => Err(e),
            }
        })
    }

    /// Asks the kernel to start writing every dirty page of the file,
    /// without waiting for the disk. A failure here is only a lost head
    /// start: the fsync that makes the data durable reports any error.
    fn start_write_out(&self) {
        // SAFETY: the descriptor is open for the life of `self.file`; offset
        // and length 0 name the whole file.
        let rc = unsafe {
            libc::sync_file_range(self.file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE)
        };
        if rc != 0 {
            tracing::debug!("starting write-out: {}", std::io::Error::last_os_error());
        }
    }
}

/// `file` opened again, for writing, with O_DIRECT (through its
/// descriptor, so it is the same file whatever its name became); None if
/// the file system does not do direct I/O.
fn open_direct(file: &File) -> Option<File> {
    let path = format!("/proc/self/fd/{}", file.as_raw_fd());
    match OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(Path::new(&path))
    {
        Ok(f) => Some(f),
        Err(e) => {
            tracing::debug!("no direct writes to a datafile: {e}");
            None
        }
    }
}

impl Deref for LocalFile {
    type Target = File;

    fn deref(&self) -> &File {
        &self.file
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_tests::page_cache::{evict, page_size, resident_pages};
    use std::io::Read;

    fn open_rw(path: &Path) -> LocalFile {
        LocalFile::new(
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(path)
                .unwrap(),
        )
    }

    #[test]
    fn direct_and_cached_writes_of_one_range_read_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let f = open_rw(&dir.path().join("f"));
        let len = 4 * DIRECT_MIN;
        let mut model = vec![0u8; len + 100];
        let mut put = |f: &LocalFile, at: usize, data: Vec<u8>| {
            f.write_all_at(&data, at as u64).unwrap();
            model[at..at + data.len()].copy_from_slice(&data);
        };
        let bytes = |seed: u8, n: usize| (0..n).map(|i| (i as u8) ^ seed).collect::<Vec<u8>>();
        put(&f, 10, bytes(1, len)); // unaligned: cached
        put(&f, 0, bytes(2, len)); // aligned and large: direct
        put(&f, DIRECT_ALIGN, bytes(3, DIRECT_MIN)); // direct over cached bytes
        put(&f, len, bytes(4, 100)); // a cached tail past a direct write
        assert!(
            f.direct.get().is_some(),
            "a large aligned write asked for the direct descriptor"
        );
        let mut back = vec![0u8; len + 100];
        f.read_exact_at(&mut back, 0).unwrap();
        assert!(back == model, "every write in order");
    }

    #[test]
    fn a_read_stops_at_the_end_of_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = open_rw(&dir.path().join("f"));
        f.write_all_at(b"0123456789", 0).unwrap();
        for uncached in [false, true] {
            assert_eq!(f.read_upto(5, 100, uncached).unwrap(), b"56789");
            assert_eq!(f.read_upto(2, 3, uncached).unwrap(), b"234");
            assert!(f.read_upto(20, 10, uncached).unwrap().is_empty());
        }
    }

    #[test]
    fn writes_land_and_count_down_past_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let f = open_rw(&path);
        let chunk = vec![7u8; (WRITE_OUT_AFTER / 2) as usize + 1];
        f.write_all_at(&chunk, 0).unwrap();
        assert_eq!(f.unstarted.load(Ordering::Relaxed), chunk.len() as u64);
        f.write_all_at(&chunk, chunk.len() as u64).unwrap();
        assert_eq!(
            f.unstarted.load(Ordering::Relaxed),
            0,
            "crossing the bound starts write-out and counts from zero"
        );
        let mut back = Vec::new();
        File::open(&path).unwrap().read_to_end(&mut back).unwrap();
        assert_eq!(back.len(), 2 * chunk.len());
        assert!(back.iter().all(|b| *b == 7));
    }

    #[test]
    fn an_uncached_read_leaves_no_new_pages_and_the_cached_ones_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let f = open_rw(&dir.path().join("f"));
        let len = 1 << 20;
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        f.file.write_all_at(&data, 0).unwrap();
        f.sync_all().unwrap();
        evict(&f);
        let evicted = resident_pages(&f, len) == 0;
        assert!(f.read_upto(0, len, true).unwrap() == data, "uncached bytes");
        if !evicted || !uncached::offered() {
            // The temporary directory's file system keeps pages against
            // advice (tmpfs), or this kernel or file system has no uncached
            // reads: they are read as any other, which is all the server
            // asks of them there.
            return;
        }
        assert_eq!(
            resident_pages(&f, len),
            0,
            "an uncached read of pages not cached leaves none"
        );
        assert!(f.read_upto(0, len, false).unwrap() == data, "cached bytes");
        let cached = resident_pages(&f, len);
        assert_eq!(cached, len / page_size(), "a cached read keeps its pages");
        assert!(f.read_upto(0, len, true).unwrap() == data);
        assert_eq!(
            resident_pages(&f, len),
            cached,
            "an uncached read leaves pages cached before in the cache"
        );
    }
}
