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
//! Handle reservations: a server keeps `RESERVATIONS_KEPT` per client and
//! drops the oldest for a new one, so this client keeps no more per server
//! either, asks each server for one at a time (so that both sides agree on
//! which is oldest), and before asking for one past the bound stops using
//! its oldest and sends every create kept with it ([`make_room`]). A
//! reservation whose ask failed without an answer counts as kept: the
//! server may have made it.
//!
//! A recall may overtake the grant it recalls (the server grants, then
//! syncs the reservation, and another client's read recalls in between): a
//! directory recalled while its delegation is being asked for is not held
//! when the grant comes back.
//!
//! A kept create that fails when it is sent (another client made the name
//! while a restart of the server had ended the delegation, or the disk is
//! full) was already answered
//! as made: its handle is noted as failed, and the file's fsync and close
//! report it (EIO), as a write-behind's failure is. A client that dies
//! loses what it kept, as it loses unflushed writes.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use shoal_proto::error::ShoalError;
use shoal_proto::handle::{server_of, RESERVATIONS_KEPT};
use shoal_proto::{Cred, Handle};

use crate::known_dirs::AddAnswered;

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
    /// Directories whose delegation is being asked for; true once recalled
    /// meanwhile (the grant, if it comes, is void).
    asking: HashMap<Handle, bool>,
    /// Per server, the reservations it keeps for this client as far as
    /// this client knows, oldest first (an empty range: an ask that failed
    /// without an answer).
    reservations: HashMap<u32, VecDeque<Range<Handle>>>,
    /// Per server, held while a reservation is asked for.
    asks: HashMap<u32, Arc<tokio::sync::Mutex<()>>>,
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
        if st.dirs.get(&dir).is_some_and(|d| d.held) || st.asking.contains_key(&dir) {
            return false;
        }
        st.asking.insert(dir, false);
        true
    }

    /// The delegation of `dir` was granted to `who` (or not), with
    /// `handles`. It is held unless a recall came first, and only if `pin`
    /// says the names known are current (it pins them, under this lock, so
    /// that a recall cannot come between).
    pub fn granted(
        &self,
        dir: Handle,
        who: Cred,
        handles: Option<Range<Handle>>,
        pin: impl FnOnce() -> bool,
    ) {
        let mut st = self.state();
        let recalled = st.asking.remove(&dir).unwrap_or(true);
        let Some(handles) = handles.filter(|_| !recalled) else {
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
        if d.who == who && !d.held && pin() {
            d.free.push_back(handles);
            d.held = true;
        }
    }

    /// A new reservation for `dir` came back (None: refused or failed).
    pub fn reserved(&self, dir: Handle, handles: Option<Range<Handle>>) {
        let mut st = self.state();
        if let Some(d) = st.dirs.get_mut(&dir) {
            d.reserving = false;
            if d.held {
                d.free.extend(handles);
            }
        }
    }

    /// The lock held while a reservation of `server`'s is asked for.
    pub fn asks(&self, server: u32) -> Arc<tokio::sync::Mutex<()>> {
        self.state().asks.entry(server).or_default().clone()
    }

    /// Before asking `server` for a reservation (holding [`Self::asks`]):
    /// if it keeps as many for this client as it may, the oldest is no
    /// longer used here; returns whether one was, so that the creates kept
    /// with its handles are to be sent before the ask (the server drops it
    /// once it makes the new one).
    pub fn make_room(&self, server: u32) -> bool {
        let mut st = self.state();
        let kept = st.reservations.entry(server).or_default();
        if kept.len() < RESERVATIONS_KEPT {
            return false;
        }
        let oldest = kept.pop_front().expect("full");
        for (_, d) in st.dirs.iter_mut().filter(|(h, _)| server_of(**h) == server) {
            d.free
                .retain(|f| !(oldest.start <= f.start && f.end <= oldest.end));
        }
        true
    }

    /// An ask of `server`'s for a reservation was answered: `reply` is
    /// the range reserved (empty if refused), None if no answer came.
    pub fn asked(&self, server: u32, reply: Option<Range<Handle>>) {
        match reply {
            Some(range) if range.is_empty() => {}
            reply => {
                let mut st = self.state();
                let kept = st.reservations.entry(server).or_default();
                assert!(kept.len() < RESERVATIONS_KEPT, "room made before asking");
                kept.push_back(reply.unwrap_or(0..0));
            }
        }
    }

    /// Answers a create of `name` in `dir` for `who` here if the delegation
    /// allows: `add` puts the name among the directory's known names
    /// (`known_dirs`, under this lock so that a recall cannot come
    /// between).
    pub fn answer(
        &self,
        dir: Handle,
        name: &str,
        mode: u32,
        who: Cred,
        add: impl FnOnce() -> AddAnswered,
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
            AddAnswered::NotPinned => {
                d.held = false;
                return Answered::NotHeld;
            }
            AddAnswered::Busy => return Answered::NotHeld,
            AddAnswered::Taken => return Answered::Exists,
            AddAnswered::Added => {}
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
        if let Some(recalled) = st.asking.get_mut(&dir) {
            *recalled = true;
        }
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
        st.asking.values_mut().for_each(|recalled| *recalled = true);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn me() -> Cred {
        Cred::new(1000, 1000)
    }

    fn made(a: Answered) -> Handle {
        match a {
            Answered::Made { handle, .. } => handle,
            _ => panic!("not answered here"),
        }
    }

    #[test]
    fn a_recall_that_overtakes_its_grant_voids_it() {
        let d = DelegatedCreates::new(Duration::from_millis(5));
        assert!(d.begin_asking(7));
        assert!(!d.begin_asking(7), "asked already");
        d.ended(7);
        d.granted(7, me(), Some(100..200), || panic!("not pinned when void"));
        assert!(!d.holds(7));
        assert!(d.begin_asking(7));
        d.granted(7, me(), Some(100..200), || true);
        assert!(d.holds(7));
        let h = made(d.answer(7, "a", 0o644, me(), || AddAnswered::Added));
        assert_eq!(h, 100);
        assert!(matches!(
            d.answer(7, "b", 0o644, me(), || AddAnswered::Busy),
            Answered::NotHeld
        ));
        assert!(d.holds(7), "busy is not the end of it");
        assert_eq!(
            made(d.answer(7, "b", 0o644, me(), || AddAnswered::Added)),
            101
        );
        assert!(d.ended(7));
        assert!(matches!(
            d.answer(7, "c", 0o644, me(), || AddAnswered::Added),
            Answered::NotHeld
        ));
    }

    #[test]
    fn reservations_per_server_are_bounded_oldest_out() {
        let d = DelegatedCreates::new(Duration::from_millis(5));
        let server = server_of(7);
        for i in 0..RESERVATIONS_KEPT as u64 {
            assert!(!d.make_room(server));
            let start = 1000 + i * 10;
            d.asked(server, Some(start..start + 10));
        }
        assert!(d.begin_asking(7));
        d.granted(7, me(), Some(1000..1010), || true);
        assert!(d.make_room(server), "full: the oldest goes");
        assert!(
            matches!(
                d.answer(7, "a", 0o644, me(), || AddAnswered::Added),
                Answered::NotHeld
            ),
            "its handles are no longer used"
        );
        d.asked(server, Some(5000..5010));
        d.asked(server + 1, None);
        assert!(d.make_room(server));
        d.asked(server, None);
        assert!(d.make_room(server), "an unanswered ask counts");
        d.asked(server, Some(0..0));
        assert!(!d.make_room(server), "a refusal does not");
    }
}
