//! File data acknowledged but not yet made durable, and the servers' word on
//! whether it still can be (NFS's write verifier).
//!
//! A server acknowledges a write once it is applied, not once it is on disk;
//! fsync makes it durable. If the server restarts in between, the write may
//! be gone, and an fsync sent to the new process would succeed all the same.
//! So every write and truncate reply carries the server's verifier (drawn
//! when it starts); for each file this remembers, per server, the verifier
//! of the first unsynced change, and an fsync whose reply carries another
//! one fails with EIO: the application learns that data may be lost, as it
//! would from a local disk's writeback error. The error is reported once.
//!
//! Memory is bounded: past [`MAX_FILES`] files with unsynced changes, a
//! change to another file is not tracked; the client commits it at once
//! instead (write-through), which checks the verifier right away.

use std::collections::HashMap;
use std::sync::Mutex;

use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::Handle;

/// Files with unsynced changes tracked one by one.
pub const MAX_FILES: usize = 1 << 20;

#[derive(Default)]
pub struct UncommittedWrites {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Per file: (server, verifier of its first unsynced change there).
    files: HashMap<Handle, Vec<(u32, u64)>>,
}

impl UncommittedWrites {
    /// Records that `server`, with `verifier`, acknowledged a change to file
    /// `h`. False if it cannot be tracked (too many files): the caller must
    /// make it durable now.
    pub fn changed(&self, h: Handle, server: u32, verifier: u64) -> bool {
        let mut st = self.state.lock().unwrap();
        let full = st.files.len() >= MAX_FILES;
        match st.files.get_mut(&h) {
            Some(seen) => {
                if !seen.iter().any(|(s, _)| *s == server) {
                    seen.push((server, verifier));
                }
                true
            }
            None if !full => {
                st.files.insert(h, vec![(server, verifier)]);
                true
            }
            None => false,
        }
    }

    /// Checks the verifiers of an fsync of `h` (per server that answered):
    /// Ok if every change since the last fsync is still there to be made
    /// durable, EIO if a server restarted since one of them. Either way the
    /// file starts afresh.
    pub fn synced(&self, h: Handle, replies: &[(u32, u64)]) -> Result<()> {
        let mut st = self.state.lock().unwrap();
        let seen = st.files.remove(&h);
        let lost = replies
            .iter()
            .find(|(server, now)| seen.iter().flatten().any(|(s, v)| s == server && v != now));
        match lost {
            Some((server, _)) => Err(ShoalError::new(
                Errno::EIO,
                format!(
                    "server {server} restarted after acknowledging data of file {h:#x} \
                     that was not yet durable: that data may be lost"
                ),
            )),
            None => Ok(()),
        }
    }

    /// Drops what is known of `h` (the file is gone).
    pub fn forget(&self, h: Handle) {
        self.state.lock().unwrap().files.remove(&h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restart_between_change_and_fsync_is_reported_once() {
        let u = UncommittedWrites::default();
        u.changed(1, 0, 100);
        u.changed(1, 1, 200);
        u.changed(1, 0, 101); // after a restart of server 0: the first one counts
        assert!(u.synced(1, &[(0, 101), (1, 200)]).is_err());
        assert!(u.synced(1, &[(0, 101), (1, 200)]).is_ok(), "reported once");
        u.changed(1, 0, 101);
        assert!(u.synced(1, &[(0, 101)]).is_ok());
        // An fsync of a file never changed through this client is fine.
        assert!(u.synced(2, &[(0, 5)]).is_ok());
        u.changed(3, 0, 1);
        u.forget(3);
        assert!(u.synced(3, &[(0, 2)]).is_ok());
    }

    #[test]
    fn past_the_limit_changes_are_not_tracked() {
        let u = UncommittedWrites::default();
        for h in 0..MAX_FILES as u64 {
            assert!(u.changed(h, 0, 7));
        }
        assert!(!u.changed(u64::MAX, 1, 9), "the caller commits it at once");
        assert!(u.changed(0, 1, 9), "a tracked file still is");
        assert!(u.synced(0, &[(0, 7), (1, 9)]).is_ok());
        assert!(u.changed(u64::MAX, 1, 9), "room again");
    }
}
