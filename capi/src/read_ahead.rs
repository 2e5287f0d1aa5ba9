//! Read-ahead for sequential small reads through one descriptor: a program
//! reading a file 4 KiB at a time (`cat`, `cp`, stdio, Bonnie's per-char
//! reads) would otherwise pay a round trip per call, where the mount has the
//! kernel's read-ahead.
//!
//! A read under [`WINDOW`] that starts where the descriptor's previous read
//! ended, or a little after it (a strided read: MPI ranks reading their
//! interleaved blocks of a shared file skip the others' blocks), fetches a
//! whole window; the reads that follow are served from it while they fall
//! inside it. This is ROMIO's data sieving: one large contiguous read instead
//! of many small ones, at the cost of the skipped bytes. A read elsewhere
//! (random access, backwards) fetches just what it asks for. What was read ahead is as fresh as the moment it was
//! fetched: a write or truncate through this process drops it
//! (`files::data_changed`), another client's write shows once the reader
//! moves past the window or reopens the file (close-to-open, as NFS's
//! read-ahead).

use bytes::Bytes;

/// Bytes fetched ahead by a sequential small read.
pub const WINDOW: usize = 256 * 1024;
/// A read at most this many of its own lengths after the previous one's end
/// counts as strided (8: every rank of 9 reading its blocks in turn).
const MAX_SKIP: u64 = 8;
/// Strided reads are read ahead only up to this size: a window then carries
/// many of them for one round trip. Bigger ones would move several times the
/// bytes they need for few saved round trips (measured: 16 KiB and 64 KiB
/// blocks of 4 interleaved ranks read slower through a window).
const MAX_STRIDED: usize = 8 * 1024;

#[derive(Default)]
pub struct ReadAhead {
    /// Where `data` starts in the file.
    start: u64,
    data: Bytes,
    /// Where the previous read ended: a read starting there is sequential.
    next: Option<u64>,
}

impl ReadAhead {
    /// Serves a read of `buf.len()` bytes at `off` if the window holds all of
    /// it; returns the bytes copied.
    pub fn serve(&mut self, off: u64, buf: &mut [u8]) -> Option<usize> {
        let from = usize::try_from(off.checked_sub(self.start)?).ok()?;
        let to = from.checked_add(buf.len())?;
        if to > self.data.len() {
            return None;
        }
        buf.copy_from_slice(&self.data[from..to]);
        self.next = Some(off + buf.len() as u64);
        Some(buf.len())
    }

    /// How many bytes a read of `len` at `off` that the window could not
    /// serve should fetch: a window if it is small and sequential.
    pub fn fetch_len(&self, off: u64, len: usize) -> usize {
        let near = self.next.is_some_and(|next| match off.checked_sub(next) {
            Some(0) => true,
            Some(skip) => len <= MAX_STRIDED && skip <= MAX_SKIP * len as u64,
            None => false,
        });
        if len < WINDOW && near {
            WINDOW
        } else {
            len
        }
    }

    /// Records what a read at `off` fetched (`data`) and returned (`n`
    /// bytes); keeps `data` as the window if it fetched ahead.
    pub fn fetched(&mut self, off: u64, data: Bytes, n: usize) {
        if data.len() > n {
            self.start = off;
            self.data = data;
        }
        self.next = Some(off + n as u64);
    }

    /// Forgets the window (the file's data changed through this process).
    pub fn clear(&mut self) {
        *self = ReadAhead::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_and_strided_small_reads_fetch_a_window_and_are_served_from_it() {
        let mut ra = ReadAhead::default();
        let mut buf = [0u8; 4];
        assert_eq!(ra.serve(0, &mut buf), None, "nothing fetched yet");
        assert_eq!(ra.fetch_len(0, 4), 4, "a first read is not sequential");
        ra.fetched(0, Bytes::from_static(b"abcd"), 4);
        assert_eq!(ra.fetch_len(4, 4), WINDOW, "the next one is");
        let file: Vec<u8> = (0..20u8).collect();
        ra.fetched(4, Bytes::from(file[4..20].to_vec()), 4);
        assert_eq!(ra.serve(8, &mut buf), Some(4));
        assert_eq!(buf, [8, 9, 10, 11]);
        assert_eq!(ra.serve(18, &mut buf), None, "past the window's end");
        assert_eq!(ra.fetch_len(100, 4), 4, "a jump is not sequential");
        assert_eq!(ra.fetch_len(8 + 12, 4), WINDOW, "a stride of 4 is");
        assert_eq!(ra.fetch_len(0, 4), 4, "backwards is not");
        ra.fetched(0, Bytes::from(vec![0; 16384]), 16384);
        assert_eq!(ra.fetch_len(16384, 16384), WINDOW, "sequential 16 KiB");
        assert_eq!(ra.fetch_len(65536, 16384), 16384, "strided 16 KiB is not");
        assert_eq!(
            ra.fetch_len(12, WINDOW),
            WINDOW,
            "a big read fetches itself"
        );
        ra.clear();
        assert_eq!(ra.serve(8, &mut buf), None);
    }
}
