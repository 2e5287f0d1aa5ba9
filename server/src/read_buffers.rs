//! The buffers that reads of local files fill, kept for later reads once
//! the replies that carried them are sent.
//!
//! Why: a fresh 1 MiB buffer per read comes from memory the allocator has
//! handed back to the kernel, and on this machine's VM the first touch of
//! memory the guest freed a while ago is slow (the effect behind
//! `local_file`'s direct writes). In a profile of four readers right after
//! direct writes, 41% of all CPU was the servers' copy from the page cache
//! into such buffers. A buffer used before is warm.
//!
//! Only reads of at least [`POOLED_FROM`] bytes take one: smaller buffers
//! come from the allocator's own free lists, which are warm already.

use std::sync::Mutex;

use bytes::Bytes;

/// The least read that takes a kept buffer.
pub const POOLED_FROM: usize = 64 << 10;

/// Buffers kept at most, and the largest kept: a server's idle memory for
/// them stays under 32 MiB (replies in flight hold more while they last).
const KEEP: usize = 32;
const LARGEST: usize = 1 << 20;

static KEPT: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// An empty buffer with room for `len` bytes.
pub fn take(len: usize) -> Vec<u8> {
    if (POOLED_FROM..=LARGEST).contains(&len) {
        if let Some(mut b) = KEPT.lock().unwrap().pop() {
            b.clear();
            b.reserve(len);
            return b;
        }
        return Vec::with_capacity(LARGEST);
    }
    Vec::with_capacity(len)
}

/// `buf` as a reply's payload; a kept-size buffer comes back when the last
/// of its `Bytes` is dropped.
pub fn share(buf: Vec<u8>) -> Bytes {
    if buf.capacity() == LARGEST {
        Bytes::from_owner(Returned(buf))
    } else {
        Bytes::from(buf)
    }
}

/// A buffer that goes back to the kept ones when dropped.
struct Returned(Vec<u8>);

impl AsRef<[u8]> for Returned {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Returned {
    fn drop(&mut self) {
        let mut kept = KEPT.lock().unwrap();
        if kept.len() < KEEP {
            kept.push(std::mem::take(&mut self.0));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_read_buffer_comes_back_when_its_bytes_go() {
        let mut b = take(LARGEST);
        b.extend_from_slice(&[7u8; 100]);
        let shared = share(b);
        let slice = shared.slice(10..20);
        drop(shared);
        assert_eq!(&slice[..], &[7u8; 10], "a slice keeps the buffer alive");
        drop(slice);
        let again = take(POOLED_FROM);
        assert!(again.is_empty());
        // Tests share the process's pool: another test may have put one
        // back too, so only the capacity is certain.
        assert!(again.capacity() >= LARGEST);
    }

    #[test]
    fn small_reads_do_not_take_kept_buffers() {
        let b = take(4096);
        assert!(b.capacity() < LARGEST);
        let shared = share(b);
        assert!(shared.is_empty());
    }
}
