//! File data acknowledged but not yet made durable: the servers' word on
//! whether it still can be (NFS's write verifier), and a copy of it to send
//! again when it cannot, its resend copy (as an NFS client holds its
//! unstable writes until COMMIT answers under the same verifier).
//!
//! A server acknowledges a write once it is applied, not once it is on disk;
//! fsync makes it durable. If the server restarts in between, the write may
//! be gone, and an fsync sent to the new process would succeed all the same.
//! So every write and truncate reply carries the server's verifier (drawn
//! when it starts); for each file this remembers, per server, the verifier
//! of the first unsynced change. The client also copies each change it sends
//! directly (a write's bytes, a truncate's size), in the order it sent them,
//! from just before it sends it until the file's fsync finds it durable. An
//! fsync whose reply carries another verifier then gets those changes to
//! send again, in order, to the new process ([`Verdict::SendAgain`]), and
//! fsyncs once more: the restart costs nothing. Only when the copy is gone
//! does the fsync fail with EIO ([`Verdict::Lost`]), once: the application
//! learns that data may be lost, as it would from a local disk's writeback
//! error.
//!
//! Memory is bounded twice. The copies: past [`MAX_RESEND_BYTES`] the copy of
//! the file that has held one longest is dropped (its oldest changes are the
//! likeliest to be durable already: servers sync what they hold every
//! second), and that file's restart is reported as before. The files: past
//! [`MAX_FILES`] files with unsynced changes, a change to another file is not
//! tracked; the client commits it at once instead (write-through), which
//! checks the verifier right away.
//!
//! A change is copied before it is sent, so a copy taken to send again holds
//! every change whose own send may still land after it; if the file changed
//! while its copy was being sent again, the copy goes again (newest last),
//! so the servers end with the newest bytes.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};

use bytes::Bytes;
use shoal_proto::error::{Errno, ShoalError};
use shoal_proto::handle::server_of;
use shoal_proto::Handle;

/// Files with unsynced changes tracked one by one.
pub const MAX_FILES: usize = 1 << 20;
/// Bytes of resend copies (changes held to send again), for all files.
pub const MAX_RESEND_BYTES: usize = 64 << 20;
/// What one copied change costs beside its bytes (so that many truncates or
/// tiny writes are bounded too).
const CHANGE_OVERHEAD: usize = 64;

/// A change to one datafile, as it was sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Write { offset: u64, data: Bytes },
    Truncate { size: u64 },
}

impl Change {
    fn cost(&self) -> usize {
        CHANGE_OVERHEAD
            + match self {
                Change::Write { data, .. } => data.len(),
                Change::Truncate { .. } => 0,
            }
    }
}

/// Changes to send again, in order, each with its datafile.
pub type Changes = Vec<(Handle, Change)>;

/// What an fsync's replies say of a file's unsynced changes.
#[derive(Debug)]
pub enum Verdict {
    /// Every change since the last fsync is durable; the file starts afresh.
    Durable,
    /// A server restarted since it acknowledged changes this client still
    /// holds: send these again, in order (each to its datafile), record
    /// each reply with [`UncommittedWrites::sent_again`], and fsync again,
    /// passing `copy` to [`UncommittedWrites::check`].
    SendAgain { changes: Changes, copy: u64 },
    /// A server restarted and the copy is gone: the data may be lost (EIO).
    Lost(ShoalError),
}

#[derive(Default)]
pub struct UncommittedWrites {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    files: HashMap<Handle, FileChanges>,
    /// Files with a copy, by when their copy began (oldest first).
    copies: BTreeMap<u64, Handle>,
    resend_bytes: usize,
    /// Numbers changes, copies and their versions.
    next: u64,
    /// The verifier each server last answered with: one that changes says
    /// the server restarted.
    verifiers: HashMap<u32, u64>,
}

#[derive(Default)]
struct FileChanges {
    /// Per server: the verifier of its first unsynced change.
    servers: Vec<(u32, u64)>,
    /// The changes sent since the last fsync, oldest first, each with its
    /// number and datafile; `None` once dropped for room.
    copy: Option<Vec<(u64, Handle, Change)>>,
    /// When the copy began (its key in `State::copies`).
    since: u64,
    /// Bumped by every change copied: a copy sent again is current only if
    /// this did not move meanwhile.
    version: u64,
    bytes: usize,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl State {
    fn number(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// Drops the oldest copies until the resend bytes fit.
    fn make_room(&mut self) {
        while self.resend_bytes > MAX_RESEND_BYTES {
            let Some((_, h)) = self.copies.pop_first() else {
                break;
            };
            if let Some(f) = self.files.get_mut(&h) {
                f.copy = None;
                self.resend_bytes -= std::mem::take(&mut f.bytes);
            }
        }
    }

    fn remove(&mut self, h: Handle) -> Option<FileChanges> {
        let f = self.files.remove(&h)?;
        if f.copy.is_some() {
            self.copies.remove(&f.since);
        }
        self.resend_bytes -= f.bytes;
        Some(f)
    }
}

impl UncommittedWrites {
    /// Keeps a copy of `change` to datafile `d` of file `h`, about to be
    /// sent; returns its number (for [`UncommittedWrites::unkeep`]), 0 if
    /// it is not copied (the file's copy was dropped, or too many files).
    pub fn keep(&self, h: Handle, d: Handle, change: Change) -> u64 {
        let mut st = lock(&self.state);
        let full = st.files.len() >= MAX_FILES;
        if full && !st.files.contains_key(&h) {
            return 0;
        }
        let n = st.number();
        let cost = change.cost();
        let f = st.files.entry(h).or_default();
        let fresh = f.servers.is_empty() && f.copy.is_none();
        if fresh {
            f.copy = Some(Vec::new());
            f.since = n;
        }
        let Some(copy) = f.copy.as_mut() else {
            return 0;
        };
        copy.push((n, d, change));
        f.version = n;
        f.bytes += cost;
        let since = f.since;
        if fresh {
            st.copies.insert(since, h);
        }
        st.resend_bytes += cost;
        st.make_room();
        n
    }

    /// The send of copied change `n` of `h` failed: as far as the caller
    /// knows it was not applied, so it is not sent again either.
    pub fn unkeep(&self, h: Handle, n: u64) {
        let mut st = lock(&self.state);
        let Some(f) = st.files.get_mut(&h) else {
            return;
        };
        let Some(copy) = f.copy.as_mut() else {
            return;
        };
        if let Some(at) = copy.iter().position(|(m, _, _)| *m == n) {
            let cost = copy.remove(at).2.cost();
            f.bytes -= cost;
            st.resend_bytes -= cost;
        }
    }

    /// Records that `server`, with `verifier`, acknowledged a change to file
    /// `h`. False if it cannot be tracked (too many files): the caller must
    /// make it durable now.
    pub fn changed(&self, h: Handle, server: u32, verifier: u64) -> bool {
        let mut st = lock(&self.state);
        let full = st.files.len() >= MAX_FILES;
        let f = match st.files.get_mut(&h) {
            Some(f) => f,
            None if !full => st.files.entry(h).or_default(),
            None => return false,
        };
        if !f.servers.iter().any(|(s, _)| *s == server) {
            f.servers.push((server, verifier));
        }
        true
    }

    /// Records that `server` answered with `verifier`; if that says it
    /// restarted since it last answered, returns what it may have lost:
    /// every file's copied changes there acknowledged under an older
    /// verifier, to send again as after [`Verdict::SendAgain`] (with the
    /// copy's version, for [`UncommittedWrites::changed_since`]). Only the
    /// first caller to see the new verifier gets them.
    pub fn restarted(&self, server: u32, verifier: u64) -> Vec<(Handle, Changes, u64)> {
        let mut st = lock(&self.state);
        match st.verifiers.insert(server, verifier) {
            Some(before) if before != verifier => {}
            _ => return Vec::new(),
        }
        st.files
            .iter()
            .filter(|(_, f)| {
                f.servers
                    .iter()
                    .any(|(s, v)| *s == server && *v != verifier)
            })
            .filter_map(|(h, f)| {
                let copy = f.copy.as_ref()?;
                let changes: Changes = copy
                    .iter()
                    .filter(|(_, d, _)| server_of(*d) == server)
                    .map(|(_, d, c)| (*d, c.clone()))
                    .collect();
                Some((*h, changes, f.version))
            })
            .collect()
    }

    /// If `h`'s copy moved past `version` (more was copied since), its
    /// changes to `server` now and the new version.
    pub fn changed_since(&self, h: Handle, server: u32, version: u64) -> Option<(Changes, u64)> {
        let st = lock(&self.state);
        let f = st.files.get(&h).filter(|f| f.version != version)?;
        let changes = f
            .copy
            .as_ref()?
            .iter()
            .filter(|(_, d, _)| server_of(*d) == server)
            .map(|(_, d, c)| (*d, c.clone()))
            .collect();
        Some((changes, f.version))
    }

    /// Records that `server`, with `verifier`, acknowledged a change of `h`
    /// sent again: its first unsynced change there is now that one.
    pub fn sent_again(&self, h: Handle, server: u32, verifier: u64) {
        let mut st = lock(&self.state);
        if let Some(f) = st.files.get_mut(&h) {
            match f.servers.iter_mut().find(|(s, _)| *s == server) {
                Some(seen) => seen.1 = verifier,
                None => f.servers.push((server, verifier)),
            }
        }
    }

    /// What the verifiers of an fsync of `h` (per server that answered)
    /// say; `copy` is the version of the copy this fsync sent again, if it
    /// did. Durable and Lost start the file afresh.
    pub fn check(&self, h: Handle, replies: &[(u32, u64)], copy: Option<u64>) -> Verdict {
        let mut st = lock(&self.state);
        let Some(f) = st.files.get(&h) else {
            return Verdict::Durable;
        };
        let restarted: Vec<u32> = replies
            .iter()
            .filter(|(server, now)| f.servers.iter().any(|(s, v)| s == server && v != now))
            .map(|(server, _)| *server)
            .collect();
        let moved = copy.is_some_and(|v| v != f.version);
        if restarted.is_empty() && !moved {
            st.remove(h);
            return Verdict::Durable;
        }
        match &f.copy {
            Some(copied) => {
                // Changed while being sent again: all of it goes again, so
                // that nothing older lands last; else what the restarted
                // servers lost.
                let changes = copied
                    .iter()
                    .filter(|(_, d, _)| moved || restarted.contains(&server_of(*d)))
                    .map(|(_, d, c)| (*d, c.clone()))
                    .collect();
                Verdict::SendAgain {
                    changes,
                    copy: f.version,
                }
            }
            None => {
                st.remove(h);
                Verdict::Lost(ShoalError::new(
                    Errno::EIO,
                    format!(
                        "server {} restarted after acknowledging data of file {h:#x} \
                         that was not yet durable: that data may be lost",
                        restarted.first().copied().unwrap_or_default()
                    ),
                ))
            }
        }
    }

    /// Whether a resend copy of changes to `h` is held.
    pub fn holds_copy(&self, h: Handle) -> bool {
        lock(&self.state)
            .files
            .get(&h)
            .is_some_and(|f| f.copy.is_some())
    }

    /// Drops the copy of `h`'s changes, keeping its verifiers: they are no
    /// longer the newest bytes (the file was written through its gathering
    /// server too, whose own copy goes again by its own rule), so sending
    /// them again could land older bytes last. A restart is then reported:
    /// callers make the changes durable first.
    pub fn forgo_copy(&self, h: Handle) {
        let mut st = lock(&self.state);
        let Some(f) = st.files.get_mut(&h) else {
            return;
        };
        if f.copy.take().is_some() {
            let (since, bytes) = (f.since, std::mem::take(&mut f.bytes));
            st.copies.remove(&since);
            st.resend_bytes -= bytes;
        }
    }

    /// Drops what is known of `h` (the file is gone).
    pub fn forget(&self, h: Handle) {
        lock(&self.state).remove(h);
    }

    /// Bytes of resend copies now, for all files (tests).
    #[cfg(test)]
    fn resend_bytes(&self) -> usize {
        lock(&self.state).resend_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_proto::handle::range_of;

    /// A datafile handle on `server`.
    fn on(server: u32) -> Handle {
        range_of(server).0 + 7
    }

    fn write(byte: u8, len: usize) -> Change {
        Change::Write {
            offset: 0,
            data: Bytes::from(vec![byte; len]),
        }
    }

    fn durable(v: Verdict) -> bool {
        matches!(v, Verdict::Durable)
    }

    #[test]
    fn a_restart_between_change_and_fsync_sends_the_copy_again() {
        let u = UncommittedWrites::default();
        u.keep(1, on(0), write(1, 10));
        u.changed(1, 0, 100);
        u.keep(1, on(1), Change::Truncate { size: 3 });
        u.changed(1, 1, 200);
        u.keep(1, on(0), write(2, 10));
        u.changed(1, 0, 101); // after a restart of server 0: the first one counts
        let Verdict::SendAgain { changes, copy } = u.check(1, &[(0, 101), (1, 200)], None) else {
            panic!("server 0 restarted");
        };
        assert_eq!(changes, [(on(0), write(1, 10)), (on(0), write(2, 10))]);
        u.sent_again(1, 0, 101);
        assert!(durable(u.check(1, &[(0, 101), (1, 200)], Some(copy))));
        assert_eq!(u.resend_bytes(), 0, "released once durable");
        // An fsync of a file never changed through this client is fine.
        assert!(durable(u.check(2, &[(0, 5)], None)));
        u.keep(3, on(0), write(1, 1));
        u.changed(3, 0, 1);
        u.forget(3);
        assert!(durable(u.check(3, &[(0, 2)], None)));
        assert_eq!(u.resend_bytes(), 0);
    }

    #[test]
    fn a_change_made_while_the_copy_was_sent_again_sends_it_all_again() {
        let u = UncommittedWrites::default();
        u.keep(1, on(0), write(1, 10));
        u.changed(1, 0, 100);
        let Verdict::SendAgain { copy, .. } = u.check(1, &[(0, 101)], None) else {
            panic!("restarted");
        };
        u.keep(1, on(0), write(2, 10));
        u.changed(1, 0, 101);
        u.sent_again(1, 0, 101);
        let Verdict::SendAgain { changes, copy } = u.check(1, &[(0, 101)], Some(copy)) else {
            panic!("the file changed while its copy went again");
        };
        assert_eq!(changes, [(on(0), write(1, 10)), (on(0), write(2, 10))]);
        assert!(durable(u.check(1, &[(0, 101)], Some(copy))));
    }

    #[test]
    fn a_failed_send_is_not_sent_again() {
        let u = UncommittedWrites::default();
        let n = u.keep(1, on(0), write(1, 10));
        u.keep(1, on(0), write(2, 10));
        u.changed(1, 0, 100);
        u.unkeep(1, n);
        let Verdict::SendAgain { changes, .. } = u.check(1, &[(0, 101)], None) else {
            panic!("restarted");
        };
        assert_eq!(changes, [(on(0), write(2, 10))]);
    }

    #[test]
    fn past_the_byte_limit_the_oldest_copy_goes_and_its_restart_is_reported_once() {
        let u = UncommittedWrites::default();
        let big = MAX_RESEND_BYTES / 2;
        u.keep(1, on(0), write(1, big));
        u.changed(1, 0, 100);
        u.keep(2, on(0), write(2, big));
        u.changed(2, 0, 100);
        assert_eq!(u.keep(1, on(0), write(1, 1)), 0, "file 1's copy is gone");
        assert!(matches!(u.check(1, &[(0, 101)], None), Verdict::Lost(_)));
        assert!(durable(u.check(1, &[(0, 101)], None)), "reported once");
        assert!(matches!(
            u.check(2, &[(0, 101)], None),
            Verdict::SendAgain { .. }
        ));
    }

    #[test]
    fn a_forgone_copy_reports_the_restart() {
        let u = UncommittedWrites::default();
        u.keep(1, on(0), write(1, 10));
        u.changed(1, 0, 100);
        u.forgo_copy(1);
        assert_eq!(u.resend_bytes(), 0);
        assert_eq!(
            u.keep(1, on(0), write(2, 10)),
            0,
            "not copied until durable"
        );
        assert!(matches!(u.check(1, &[(0, 101)], None), Verdict::Lost(_)));
    }

    #[test]
    fn a_new_verifier_hands_out_what_the_server_may_have_lost_once() {
        let u = UncommittedWrites::default();
        assert!(u.restarted(0, 100).is_empty(), "first seen");
        u.keep(1, on(0), write(1, 10));
        u.changed(1, 0, 100);
        u.keep(1, on(1), write(2, 10));
        u.changed(1, 1, 200);
        u.keep(2, on(1), write(3, 10));
        u.changed(2, 1, 200);
        assert!(u.restarted(0, 100).is_empty(), "same process");
        let lost = u.restarted(0, 101);
        assert_eq!(lost.len(), 1);
        let (h, changes, version) = &lost[0];
        assert_eq!((*h, changes.as_slice()), (1, &[(on(0), write(1, 10))][..]));
        assert!(u.restarted(0, 101).is_empty(), "handed out once");
        assert_eq!(u.changed_since(1, 0, *version), None);
        u.sent_again(1, 0, 101);
        assert!(durable(u.check(1, &[(0, 101), (1, 200)], None)));
        u.keep(2, on(1), write(4, 10));
        let (newer, _) = u.changed_since(2, 1, 0).expect("copied more");
        assert_eq!(newer, [(on(1), write(3, 10)), (on(1), write(4, 10))]);
    }

    #[test]
    fn past_the_file_limit_changes_are_not_tracked() {
        let u = UncommittedWrites::default();
        for h in 0..MAX_FILES as u64 {
            assert!(u.changed(h, 0, 7));
        }
        assert!(!u.changed(u64::MAX, 1, 9), "the caller commits it at once");
        assert_eq!(u.keep(u64::MAX, on(1), write(1, 1)), 0);
        assert!(u.changed(0, 1, 9), "a tracked file still is");
        assert!(durable(u.check(0, &[(0, 7), (1, 9)], None)));
        assert!(u.changed(u64::MAX, 1, 9), "room again");
    }
}
