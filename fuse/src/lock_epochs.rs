//! The write epoch at which the kernel's caches of each file were last
//! dropped after a lock grant (`locks`). A later grant at the same epoch
//! saw no write lock on the file let go since (the server's `LockReply`),
//! so the caches still hold what the lock holders wrote, and stay.
//!
//! Why not drop them at every grant: a drop (FUSE_NOTIFY_INVAL_INODE) makes
//! the kernel discard the reply of any GETATTR of the file in flight, and a
//! read past the end the kernel knew, which sent that GETATTR, then stops
//! at the old end. With several processes of one mount taking read locks
//! on a file another host had just extended, one grant's drop met another
//! process's read past its old end, which read nothing (2 runs in 10 of the
//! MPI test in `tests/tests/hosts.rs`). Grants at one epoch now send the
//! kernel one drop, before any of their readers read.
//!
//! Bounded: past [`MAX`] files it starts again empty (a drop more, never
//! one fewer).

use std::collections::HashMap;
use std::sync::Mutex;

/// Files remembered at most.
const MAX: usize = 4096;

#[derive(Default)]
pub struct LockEpochs(Mutex<HashMap<u64, u64>>);

impl LockEpochs {
    /// Whether the kernel's caches of `ino` were last dropped after a grant
    /// at `epoch` (0, not known: no).
    pub fn current(&self, ino: u64, epoch: u64) -> bool {
        epoch != 0 && self.0.lock().unwrap().get(&ino) == Some(&epoch)
    }

    /// The kernel's caches of `ino` were dropped after a grant at `epoch`:
    /// what it caches from now on is what was written before it.
    pub fn dropped(&self, ino: u64, epoch: u64) {
        let mut m = self.0.lock().unwrap();
        if m.len() >= MAX && !m.contains_key(&ino) {
            m.clear();
        }
        m.insert(ino, epoch);
    }
}
