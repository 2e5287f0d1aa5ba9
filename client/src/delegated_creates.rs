//! Creates answered by this client itself, under a directory delegation
//! (`dir_delegations`; the server's half is `server/src/delegations.rs`),
//! and sent many to a message later (CephFS's asynchronous creates).
//!
//! A create through the mount costs a message, a server transaction and a
//! reply, and the mount's share alone would allow about three times the
//! rate (bench/results/async-create-probe.md). So where this client knows
//! every entry of a directory (`known_dirs`) it asks for the directory's
//! delegation and a reservation of handles; while it holds them, a create
//! of a new name there is answered at once, with the next reserved handle,
//! and kept here. What is kept goes as `CreateFiles` messages (up to 1,024
//! names each), `delegated_flush_ms` after the first one was kept, at once
//! when [`SEND_AT`] wait in one directory, and in any case before this
//! client sends anything else ([`Pool`](crate::pool::Pool)'s fence): its own
//! later requests — a write to a new file, a listing, an unlink, an fsync
//! — then find every file it was told was made. Other clients find them
//! because the server recalls the delegation before their requests: the
//! recall sends what is kept, then answers.
//!
//! A kept create that fails when it is sent (another client made the name
//! while a restart of the server had ended the delegation, or the disk is
//! full) was already answered
//! as made: its handle is noted as failed, and the file's fsync and close
//! report it (EIO), as a write-behind's failure is. A client that dies
//! loses what it kept, as it loses unflushed writes.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use shoal_proto::error::ShoalError;
use shoal_proto::{Cred, Handle};

/// Creates kept in one directory that are sent at once.
pub const SEND_AT: usize = 256;
/// Handles asked for with each reservation.
pub const RESERVE: u32 = 1024;
/// Handles left under which a new reservation is asked for.
const RESERVE_AGAIN_UNDER: usize = 256;
/// Failed creates remembered for their fsync and close.
const MAX_FAILED: usize = 4096;

/// One create answered here and not yet sent.
pub struct Kept {
    pub name: String,
    pub handle: Handle,
    pub mode: u32,
}

struct Dir {
    /// Creates may be answered here (false once recalled or lost: what is
    /// kept is only to send).
    held: bool,
    who: Cred,
    free: VecDeque<Range<Handle>>,
    kept: Vec<Kept>,
    /// Held while a message of this directory's is in flight: one at a
    /// time, so that whoever takes it next finds the ones before answered.
    sending: Arc<tokio::sync::Mutex<()>>,
    reserving: bool,
}

#[derive(Default)]
struct State {
    dirs: HashMap<Handle, Dir>,
    /// Directories whose delegation is being asked for.
    asking: HashSet<Handle>,
    failed: HashMap<Handle, ShoalError>,
    failed_order: VecDeque<Handle>,
}

/// What [`DelegatedCreates::answer`] did.
pub enum Answered {
    /// Made as `handle`; `first`: the first kept in its directory (the
    /// send is to be scheduled), `full`: [`SEND_AT`] are kept there, `low`:
    /// a new reservation is due.
    Made {
        handle: Handle,
        first: bool,
        full: bool,
        low: bool,
    },
    /// The name is taken.
    Exists,
    /// Not answered here: the create goes to the server.
    NotHeld,
}

pub struct DelegatedCreates {
    pub delay: Duration,
    state: Mutex<State>,
    /// Creates answered here and not yet answered by their server (kept or
    /// in flight): the fence waits while there are any.
    unsettled: AtomicUsize,
}

impl DelegatedCreates {
    pub fn new(delay: Duration) -> DelegatedCreates {
        DelegatedCreates {
            delay,
            state: Mutex::default(),
            unsettled: AtomicUsize::new(0),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn unsettled(&self) -> bool {
        self.unsettled.load(Ordering::SeqCst) > 0
    }

    /// Whether asking for `dir`'s delegation may start now (not held, not
    /// being asked for); if so it counts as being asked for.
    pub fn begin_asking(&self, dir: Handle) -> bool {
        let mut st = self.state();
        if st.dirs.get(&dir).is_some_and(|d| d.held) {
            return false;
        }
        st.asking.insert(dir)
    }

    /// The delegation of `dir` was granted to `who` (or not), with
    /// `handles`; `pinned`: the names known are current.
    pub fn granted(&self, dir: Handle, who: Cred, handles: Option<Range<Handle>>, pinned: bool) {
        let mut st = self.state();
        st.asking.remove(&dir);
        let Some(handles) = handles else {
            return;
        };
        let d = st.dirs.entry(dir).or_insert_with(|| Dir {
            held: false,
            who,
            free: VecDeque::new(),
            kept: Vec::new(),
            sending: Arc::default(),
            reserving: false,
        });
        d.free.push_back(handles);
        if pinned && d.who == who {
            d.held = true;
        }
    }

    /// A new reservation for `dir` came back (None: refused or failed).
    pub fn reserved(&self, dir: Handle, handles: Option<Range<Handle>>) {
        let mut st = self.state();
        if let Some(d) = st.dirs.get_mut(&dir) {
            d.reserving = false;
            d.free.extend(handles);
        }
    }

    /// Answers a create of `name` in `dir` for `who` here if the delegation
    /// allows: `add` puts the name among the directory's known names
    /// (`known_dirs`, under this lock so that a recall cannot come
    /// between): None if it is not pinned there, Some(false) if taken.
    pub fn answer(
        &self,
        dir: Handle,
        name: &str,
        mode: u32,
        who: Cred,
        add: impl FnOnce() -> Option<bool>,
    ) -> Answered {
        let mut st = self.state();
        let Some(d) = st.dirs.get_mut(&dir).filter(|d| d.held && d.who == who) else {
            return Answered::NotHeld;
        };
        let Some(range) = d.free.front_mut().filter(|r| !r.is_empty()) else {
            return Answered::NotHeld;
        };
        let handle = range.start;
        match add() {
            None => {
                d.held = false;
                return Answered::NotHeld;
            }
            Some(false) => return Answered::Exists,
            Some(true) => {}
        }
        range.start += 1;
        if range.is_empty() {
            d.free.pop_front();
        }
        d.kept.push(Kept {
            name: name.to_string(),
            handle,
            mode,
        });
        self.unsettled.fetch_add(1, Ordering::SeqCst);
        let left: u64 = d.free.iter().map(|r| r.end - r.start).sum();
        let low = !d.reserving && left < RESERVE_AGAIN_UNDER as u64;
        d.reserving |= low;
        Answered::Made {
            handle,
            first: d.kept.len() == 1,
            full: d.kept.len() == SEND_AT,
            low,
        }
    }

    /// `dir`'s delegation ended (recalled, or its server's connection
    /// ended): nothing more is answered there; what is kept is still sent.
    /// Returns whether it was held.
    pub fn ended(&self, dir: Handle) -> bool {
        let mut st = self.state();
        let Some(d) = st.dirs.get_mut(&dir) else {
            return false;
        };
        let was = d.held;
        d.held = false;
        d.free.clear();
        was
    }

    /// Every delegation ended (a server's connection did): the directories
    /// held.
    pub fn all_ended(&self) -> Vec<Handle> {
        let mut st = self.state();
        let mut ended = Vec::new();
        for (h, d) in st.dirs.iter_mut() {
            if d.held {
                ended.push(*h);
            }
            d.held = false;
            d.free.clear();
        }
        ended
    }

    /// The directories with creates kept or in flight.
    pub fn unsent_dirs(&self) -> Vec<Handle> {
        let st = self.state();
        let busy = |d: &Dir| !d.kept.is_empty() || d.sending.try_lock().is_err();
        st.dirs
            .iter()
            .filter(|(_, d)| busy(d))
            .map(|(h, _)| *h)
            .collect()
    }

    /// The lock a sender of `dir`'s kept creates holds.
    pub fn sending(&self, dir: Handle) -> Option<Arc<tokio::sync::Mutex<()>>> {
        self.state().dirs.get(&dir).map(|d| d.sending.clone())
    }

    /// Takes up to `max` (at least one) of `dir`'s kept creates with one
    /// mode, oldest first, and who they act for; None if none are kept.
    pub fn take(&self, dir: Handle, max: usize) -> Option<(Cred, Vec<Kept>)> {
        let mut st = self.state();
        let d = st.dirs.get_mut(&dir)?;
        let mode = d.kept.first()?.mode;
        let n = d
            .kept
            .iter()
            .take(max)
            .take_while(|k| k.mode == mode)
            .count();
        let taken = d.kept.drain(..n).collect();
        Some((d.who, taken))
    }

    /// `count` creates taken were answered by their server; `failed` of
    /// them failed.
    pub fn settled(&self, count: usize, failed: Vec<(Handle, ShoalError)>) {
        let mut st = self.state();
        for (h, e) in failed {
            if st.failed.len() == MAX_FAILED {
                if let Some(old) = st.failed_order.pop_front() {
                    st.failed.remove(&old);
                }
            }
            if st.failed.insert(h, e).is_none() {
                st.failed_order.push_back(h);
            }
        }
        let before = self.unsettled.fetch_sub(count, Ordering::SeqCst);
        assert!(before >= count, "settled more creates than were kept");
    }

    /// Drops `dir` once nothing is held, kept or sent there.
    pub fn tidy(&self, dir: Handle) {
        let mut st = self.state();
        let idle = st
            .dirs
            .get(&dir)
            .is_some_and(|d| !d.held && d.kept.is_empty() && Arc::strong_count(&d.sending) == 1);
        if idle {
            st.dirs.remove(&dir);
        }
    }

    pub fn holds(&self, dir: Handle) -> bool {
        self.state().dirs.get(&dir).is_some_and(|d| d.held)
    }

    /// The failure of the create answered as `h`, if it failed when sent.
    pub fn failure(&self, h: Handle) -> Option<ShoalError> {
        self.state().failed.get(&h).cloned()
    }
}
