//! A datafile's local file, which starts writing its dirty pages to disk
//! while a stream of writes is still arriving.
//!
//! Without this, a large file's bytes sit in the page cache until the
//! writer's fsync (the kernel starts write-out only once dirty pages pass
//! `dirty_background_ratio`, gigabytes on a large machine), so a streaming
//! write first fills memory at the speed of the CPU and then waits at the
//! fsync for the disk: the two run one after the other. Starting write-out
//! every [`WRITE_OUT_AFTER`] bytes lets the disk work while the client
//! sends, and leaves the fsync only the tail (the technique of RocksDB's
//! `bytes_per_sync` and Ceph's BlueStore). Small files never reach the
//! bound, so their writes cost nothing more.

use std::fs::File;
use std::ops::Deref;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes written to one local file after which its write-out is started.
/// Large enough that the disk gets long runs, small enough that a 1 GiB
/// stream is mostly on disk by its fsync.
pub const WRITE_OUT_AFTER: u64 = 8 << 20;

pub struct LocalFile {
    file: File,
    /// Bytes written since write-out was last started.
    unstarted: AtomicU64,
}

impl LocalFile {
    pub fn new(file: File) -> LocalFile {
        LocalFile {
            file,
            unstarted: AtomicU64::new(0),
        }
    }

    /// Writes all of `data` at `offset`, then starts the write-out of the
    /// file's dirty pages if [`WRITE_OUT_AFTER`] bytes were written since
    /// the last start.
    pub fn write_all_at(&self, data: &[u8], offset: u64) -> std::io::Result<()> {
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

impl Deref for LocalFile {
    type Target = File;

    fn deref(&self) -> &File {
        &self.file
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn writes_land_and_count_down_past_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let f = LocalFile::new(
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .unwrap(),
        );
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
}
