//! Creates answered by this client itself, under a directory delegation
//! (`dir_delegations`; the server's half is `server/src/delegations.rs`),
//! and sent many to a message later (CephFS's asynchronous creates).
//!
//! A create through the mount costs a message, a server transaction and a
//! reply, and the mount's share alone would allow about three times the
//! rate (bench/results/changes.md). So where this client knows
//! every entry of a directory (`known_dirs`) it asks for the directory's
//! delegation and a reservation of handles; while it holds them, a create
//! of a new name there is answered at once, with the next reserved handle,
//! and held here, not yet sent (an unsent create). Unsent creates go as
//! `CreateFiles` messages (up to 1,024 names each), `delegated_flush_ms`
//! after the first one was answered, at once when [`SEND_AT`] wait in one
//! directory, and in any case before this
//! client sends anything else ([`Pool`](crate::transport::pool::Pool)'s fence): its own
//! later requests — a write to a new file, a listing, an unlink, an fsync
//! — then find every file it was told was made. Other clients find them
//! because the server recalls the delegation before their requests: the
//! recall sends the unsent changes, then answers.
//!
//! Unlinks too: while it holds the delegation, an unlink of a file this
//! client made there under it (so it knows the name is a regular file it
//! owns) is answered at once and held here too (an unsent unlink); one of
//! a create still unsent cancels both. Unsent unlinks go as `RemoveFiles`
//! messages, before the unsent creates (see [`DelegatedCreates::take`]).
//! Together they are the delegation's unsent changes.
//!
//! Handle reservations: a server holds `MAX_RESERVATIONS` per client and
//! drops the oldest for a new one, so this client holds no more per server
//! either, asks each server for one at a time (so that both sides agree on
//! which is oldest), and before asking for one past the bound stops using
//! its oldest and sends every unsent create made with it ([`make_room`]). A
//! reservation whose ask failed without an answer counts as held: the
//! server may have made it.
//!
//! A recall may overtake the grant it recalls (the server grants, then
//! syncs the reservation, and another client's read recalls in between): a
//! directory recalled while its delegation is being asked for is not held
//! when the grant comes back.
//!
//! An unsent create that fails when it is sent (another client made the name
//! while a restart of the server had ended the delegation, or the disk is
//! full) was already answered
//! as made: its handle is noted as failed, and the file's fsync and close
//! report it (EIO), as a write-behind's failure is.
//!
//! A client that dies loses what it answered and its servers have not:
//! normally the changes of its last `delegated_flush_ms`. So that a slow
//! or restarting server cannot stretch that window, at most
//! [`MAX_UNSETTLED`] changes are answered here and not yet by their
//! servers; past it, changes go to the server (behind the fence, so they
//! wait for the unsent ones) until some are answered.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::watch;

use shoal_proto::error::ShoalError;
use shoal_proto::handle::{server_of, MAX_RESERVATIONS};
use shoal_proto::{Cred, Handle};

use crate::consistency::known_dirs::LocalChange;

/// Unsent changes in one directory that are sent at once.
pub const SEND_AT: usize = 256;
/// Changes this client answers itself that its servers have not answered
/// yet, at most: what its crash can lose.
pub const MAX_UNSETTLED: usize = 1024;
/// Handles asked for with each reservation.
pub const RESERVE: u32 = 1024;
/// Handles left under which a new reservation is asked for.
const RESERVE_AGAIN_UNDER: usize = 256;
/// Failed creates remembered for their fsync and close.
const MAX_FAILED: usize = 4096;
/// Files made under one delegation whose unlink may be answered here.
const MAX_MADE: usize = 1 << 16;
// And in all directories together, the setting `known_names` (a client
// holding delegations on many directories would keep every name made in
// each): past it, unlinks of files made since go to the server.
/// Directories whose last ask was refused, remembered so that creates there
/// do not wait for the next (past it, all are forgotten).
const MAX_REFUSED: usize = 4096;

/// An unsent create: answered here and not yet sent.
pub struct UnsentCreate {
    pub name: String,
    pub handle: Handle,
    pub mode: u32,
}

struct Dir {
    /// Creates may be answered here (false once recalled or lost: the
    /// unsent changes are only to send).
    held: bool,
    who: Cred,
    free: VecDeque<Range<Handle>>,
    /// Unsent creates, oldest first.
    creates: Vec<UnsentCreate>,
    /// Regular files made here under this delegation, by name, whose
    /// unlink this client can answer: it knows the name is theirs, that
    /// they are no directory, and that it may remove them (it owns them).
    made: HashMap<String, Handle>,
    /// Unsent unlinks: answered here and not yet sent (of files of `made`).
    unlinks: Vec<(String, Handle)>,
    /// Held while a message of this directory's is in flight: one at a
    /// time, so that whoever takes it next finds the ones before answered.
    sending: Arc<tokio::sync::Mutex<()>>,
    reserving: bool,
}

/// An ask for a directory's delegation, in flight.
struct Asking {
    /// Recalled meanwhile: the grant, if it comes, is void.
    recalled: bool,
    /// Closed when the ask ends (its [`AskInFlight`] dropped), for creates
    /// there to wait on; None where the last ask was refused (it likely
    /// will be again: creates go on to the server meanwhile).
    ended: Option<watch::Receiver<()>>,
}

/// Held while a directory's delegation is asked for: creates there wait
/// until it is dropped.
pub struct AskInFlight {
    _ends_when_dropped: watch::Sender<()>,
}

#[derive(Default)]
struct State {
    dirs: HashMap<Handle, Dir>,
    /// Directories whose delegation is being asked for.
    asking: HashMap<Handle, Asking>,
    /// Per server, the reservations it keeps for this client as far as
    /// this client knows, oldest first (an empty range: an ask that failed
    /// without an answer).
    reservations: HashMap<u32, VecDeque<Range<Handle>>>,
    /// Per server, held while a reservation is asked for.
    asks: HashMap<u32, Arc<tokio::sync::Mutex<()>>>,
    failed: HashMap<Handle, ShoalError>,
    failed_order: VecDeque<Handle>,
    /// Directories whose last ask was refused or failed.
    refused: HashSet<Handle>,
}

/// What [`DelegatedCreates::answer`] did.
pub enum Answered {
    /// Made as `handle`; `low`: a new reservation is due.
    Made {
        handle: Handle,
        send: Send,
        low: bool,
    },
    /// The name is taken.
    Exists,
    /// Not answered here: the create goes to the server.
    NotHeld,
}

/// What a change answered here asks of the sending: `first`, the first
/// unsent one in its directory (the send is to be scheduled); `full`,
/// [`SEND_AT`] are unsent there (it is due now).
#[derive(Clone, Copy, Default)]
pub struct Send {
    pub first: bool,
    pub full: bool,
}

/// Which unsent changes of one directory go next, in one message, for whom.
pub enum Batch {
    Creates(Cred, Vec<UnsentCreate>),
    Unlinks(Cred, Vec<(String, Handle)>),
}

impl Dir {
    fn send(&self) -> Send {
        let pending = self.creates.len() + self.unlinks.len();
        Send {
            first: pending == 1,
            full: pending == SEND_AT,
        }
    }
}

pub struct DelegatedCreates {
    pub delay: Duration,
    state: Mutex<State>,
    /// Creates answered here and not yet answered by their server (unsent
    /// or in flight): the fence waits while there are any.
    unsettled: AtomicUsize,
    /// Files in every directory's `made`, and their bound.
    made: AtomicUsize,
    max_made: usize,
}

impl DelegatedCreates {
    pub fn new(delay: Duration, max_made: usize) -> DelegatedCreates {
        DelegatedCreates {
            delay,
            state: Mutex::default(),
            unsettled: AtomicUsize::new(0),
            made: AtomicUsize::new(0),
            max_made,
        }
    }

    /// Forgets the files made in `d` (unlinks there go to the server).
    fn clear_made(&self, d: &mut Dir) {
        self.made.fetch_sub(d.made.len(), Ordering::SeqCst);
        d.made.clear();
    }

    /// Files remembered as made here, in all directories.
    pub fn made(&self) -> usize {
        self.made.load(Ordering::SeqCst)
    }

    /// The kernel forgot `dirs`: the files made there are forgotten too.
    pub fn forget(&self, dirs: &[Handle]) {
        let mut st = self.state();
        for dir in dirs {
            if let Some(d) = st.dirs.get_mut(dir) {
                self.clear_made(d);
            }
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn unsettled(&self) -> bool {
        self.unsettled.load(Ordering::SeqCst) > 0
    }

    /// Whether asking for `dir`'s delegation may start now (not held, not
    /// being asked for); if so it counts as being asked for until
    /// [`Self::granted`], and creates there wait until the [`AskInFlight`]
    /// returned is dropped (unless the last ask there was refused).
    pub fn begin_asking(&self, dir: Handle) -> Option<AskInFlight> {
        let mut st = self.state();
        if st.dirs.get(&dir).is_some_and(|d| d.held) || st.asking.contains_key(&dir) {
            return None;
        }
        let (ask, ended) = watch::channel(());
        let ended = (!st.refused.contains(&dir)).then_some(ended);
        let recalled = false;
        st.asking.insert(dir, Asking { recalled, ended });
        Some(AskInFlight {
            _ends_when_dropped: ask,
        })
    }

    /// Waits for the end of an ask for `dir`'s delegation, if one is in
    /// flight.
    pub async fn ask_ended(&self, dir: Handle) {
        let Some(mut ended) = self.state().asking.get(&dir).and_then(|a| a.ended.clone()) else {
            return;
        };
        // Err once its sender is dropped: the only way it ends.
        let _ = ended.changed().await;
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
        let recalled = st.asking.remove(&dir).is_none_or(|a| a.recalled);
        if handles.is_none() {
            if st.refused.len() == MAX_REFUSED {
                st.refused.clear();
            }
            st.refused.insert(dir);
        } else {
            st.refused.remove(&dir);
        }
        let Some(handles) = handles.filter(|_| !recalled) else {
            return;
        };
        let d = st.dirs.entry(dir).or_insert_with(|| Dir {
            held: false,
            who,
            free: VecDeque::new(),
            creates: Vec::new(),
            made: HashMap::new(),
            unlinks: Vec::new(),
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
    /// longer used here; returns whether one was, so that the unsent creates
    /// made with its handles are to be sent before the ask (the server drops it
    /// once it makes the new one).
    pub fn make_room(&self, server: u32) -> bool {
        let mut st = self.state();
        let held = st.reservations.entry(server).or_default();
        if held.len() < MAX_RESERVATIONS {
            return false;
        }
        let oldest = held.pop_front().expect("full");
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
                let held = st.reservations.entry(server).or_default();
                assert!(held.len() < MAX_RESERVATIONS, "room made before asking");
                held.push_back(reply.unwrap_or(0..0));
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
        add: impl FnOnce() -> LocalChange,
    ) -> Answered {
        if self.unsettled.load(Ordering::SeqCst) >= MAX_UNSETTLED {
            return Answered::NotHeld;
        }
        let mut st = self.state();
        let Some(d) = st.dirs.get_mut(&dir).filter(|d| d.held && d.who == who) else {
            return Answered::NotHeld;
        };
        let Some(range) = d.free.front_mut().filter(|r| !r.is_empty()) else {
            return Answered::NotHeld;
        };
        let handle = range.start;
        match add() {
            LocalChange::NotPinned => {
                d.held = false;
                return Answered::NotHeld;
            }
            LocalChange::Busy => return Answered::NotHeld,
            LocalChange::Conflict => return Answered::Exists,
            LocalChange::Done => {}
        }
        range.start += 1;
        if range.is_empty() {
            d.free.pop_front();
        }
        d.creates.push(UnsentCreate {
            name: name.to_string(),
            handle,
            mode,
        });
        let room = d.made.len() < MAX_MADE && self.made() < self.max_made;
        if room && d.made.insert(name.to_string(), handle).is_none() {
            self.made.fetch_add(1, Ordering::SeqCst);
        }
        self.unsettled.fetch_add(1, Ordering::SeqCst);
        let left: u64 = d.free.iter().map(|r| r.end - r.start).sum();
        let low = !d.reserving && left < RESERVE_AGAIN_UNDER as u64;
        d.reserving |= low;
        Answered::Made {
            handle,
            send: d.send(),
            low,
        }
    }

    /// Answers an unlink of `name` in `dir` for `who` here if the
    /// delegation allows: `name` is a file made here under it. `remove`
    /// takes the name out of the directory's known names (`known_dirs`,
    /// under this lock). Returns the file's handle and what the sending is
    /// to do; None: the unlink goes to the server. An unlink of a file
    /// whose create is still unsent cancels it: neither is sent.
    pub fn answer_unlink(
        &self,
        dir: Handle,
        name: &str,
        who: Cred,
        remove: impl FnOnce() -> LocalChange,
    ) -> Option<(Handle, Send)> {
        let mut st = self.state();
        let d = st.dirs.get_mut(&dir).filter(|d| d.held && d.who == who)?;
        let handle = *d.made.get(name)?;
        // An unlink of a create still unsent cancels it; another one is a
        // change more to lose, within the bound.
        let unsent_at = d.creates.iter().position(|k| k.name == name);
        if unsent_at.is_none() && self.unsettled.load(Ordering::SeqCst) >= MAX_UNSETTLED {
            return None;
        }
        match remove() {
            LocalChange::Done => {}
            LocalChange::NotPinned => {
                d.held = false;
                return None;
            }
            LocalChange::Conflict | LocalChange::Busy => return None,
        }
        d.made.remove(name);
        self.made.fetch_sub(1, Ordering::SeqCst);
        if let Some(i) = unsent_at {
            d.creates.remove(i);
            let before = self.unsettled.fetch_sub(1, Ordering::SeqCst);
            assert!(before >= 1, "an unsent create counts as unsettled");
            return Some((handle, Send::default()));
        }
        d.unlinks.push((name.to_string(), handle));
        self.unsettled.fetch_add(1, Ordering::SeqCst);
        Some((handle, d.send()))
    }

    /// This client is about to change `names` of `dir` itself, by the
    /// server (a create or unlink not answered here): they are no longer
    /// files made here. (A rename in or out of `dir` ends the delegation.)
    pub fn entries_changing(&self, dir: Handle, names: &[&str]) {
        if let Some(d) = self.state().dirs.get_mut(&dir) {
            for name in names {
                if d.made.remove(*name).is_some() {
                    self.made.fetch_sub(1, Ordering::SeqCst);
                }
            }
        }
    }

    /// File `h` is getting another name (an unlink of one of its names is
    /// no longer an unlink of the file: its other name keeps it, and its
    /// writes) or another owner: none of its unlinks is answered here.
    pub fn not_made_here(&self, h: Handle) {
        for d in self.state().dirs.values_mut() {
            let before = d.made.len();
            d.made.retain(|_, made| *made != h);
            self.made.fetch_sub(before - d.made.len(), Ordering::SeqCst);
        }
    }

    /// `dir`'s delegation ended (recalled, or its server's connection
    /// ended): nothing more is answered there; its unsent changes are
    /// still sent.
    /// Returns whether it was held.
    pub fn ended(&self, dir: Handle) -> bool {
        let mut st = self.state();
        if let Some(a) = st.asking.get_mut(&dir) {
            a.recalled = true;
        }
        let Some(d) = st.dirs.get_mut(&dir) else {
            return false;
        };
        let was = d.held;
        d.held = false;
        d.free.clear();
        self.clear_made(d);
        was
    }

    /// Every delegation ended (a server's connection did): the directories
    /// held.
    pub fn all_ended(&self) -> Vec<Handle> {
        let mut st = self.state();
        st.asking.values_mut().for_each(|a| a.recalled = true);
        let mut ended = Vec::new();
        for (h, d) in st.dirs.iter_mut() {
            if d.held {
                ended.push(*h);
            }
            d.held = false;
            d.free.clear();
            self.clear_made(d);
        }
        ended
    }

    /// The directories with unsent changes or changes in flight.
    pub fn unsent_dirs(&self) -> Vec<Handle> {
        let st = self.state();
        let busy = |d: &Dir| {
            !d.creates.is_empty() || !d.unlinks.is_empty() || d.sending.try_lock().is_err()
        };
        st.dirs
            .iter()
            .filter(|(_, d)| busy(d))
            .map(|(h, _)| *h)
            .collect()
    }

    /// The lock a sender of `dir`'s unsent changes holds.
    pub fn sending(&self, dir: Handle) -> Option<Arc<tokio::sync::Mutex<()>>> {
        self.state().dirs.get(&dir).map(|d| d.sending.clone())
    }

    /// Takes the next message's worth of `dir`'s unsent changes, oldest
    /// first: up to `max` (at least one) unlinks, or while none are unsent,
    /// creates with one mode; None if nothing is unsent. Unlinks go before
    /// creates: an unsent unlink is of a file whose create was sent (one
    /// still unsent was cancelled with it), so the only order that matters,
    /// a name unlinked and then made again, holds.
    pub fn take(&self, dir: Handle, max: usize) -> Option<Batch> {
        let mut st = self.state();
        let d = st.dirs.get_mut(&dir)?;
        if !d.unlinks.is_empty() {
            let n = d.unlinks.len().min(max);
            return Some(Batch::Unlinks(d.who, d.unlinks.drain(..n).collect()));
        }
        let mode = d.creates.first()?.mode;
        let n = d
            .creates
            .iter()
            .take(max)
            .take_while(|k| k.mode == mode)
            .count();
        let taken = d.creates.drain(..n).collect();
        Some(Batch::Creates(d.who, taken))
    }

    /// `count` changes taken were answered by their server; `failed` of
    /// them (creates) failed.
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
        assert!(before >= count, "settled more changes than were unsettled");
    }

    /// Drops `dir` once nothing is held, unsent or being sent there.
    pub fn tidy(&self, dir: Handle) {
        let mut st = self.state();
        let idle = st.dirs.get(&dir).is_some_and(|d| {
            !d.held
                && d.creates.is_empty()
                && d.unlinks.is_empty()
                && Arc::strong_count(&d.sending) == 1
        });
        if let Some(mut d) = idle.then(|| st.dirs.remove(&dir)).flatten() {
            self.clear_made(&mut d);
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
    use futures::FutureExt;

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
        let d = DelegatedCreates::new(Duration::from_millis(5), 1 << 20);
        assert!(d.begin_asking(7).is_some());
        assert!(d.begin_asking(7).is_none(), "asked already");
        d.ended(7);
        d.granted(7, me(), Some(100..200), || panic!("not pinned when void"));
        assert!(!d.holds(7));
        assert!(d.begin_asking(7).is_some());
        d.granted(7, me(), Some(100..200), || true);
        assert!(d.holds(7));
        let h = made(d.answer(7, "a", 0o644, me(), || LocalChange::Done));
        assert_eq!(h, 100);
        assert!(matches!(
            d.answer(7, "b", 0o644, me(), || LocalChange::Busy),
            Answered::NotHeld
        ));
        assert!(d.holds(7), "busy is not the end of it");
        assert_eq!(
            made(d.answer(7, "b", 0o644, me(), || LocalChange::Done)),
            101
        );
        assert!(d.ended(7));
        assert!(matches!(
            d.answer(7, "c", 0o644, me(), || LocalChange::Done),
            Answered::NotHeld
        ));
    }

    #[test]
    fn no_more_changes_are_answered_here_than_a_crash_may_lose() {
        let d = DelegatedCreates::new(Duration::from_millis(5), 1 << 20);
        assert!(d.begin_asking(7).is_some());
        d.granted(7, me(), Some(100..10_000), || true);
        for i in 0..MAX_UNSETTLED {
            made(d.answer(7, &format!("f{i}"), 0o644, me(), || LocalChange::Done));
        }
        let over = d.answer(7, "over", 0o644, me(), || LocalChange::Done);
        assert!(matches!(over, Answered::NotHeld), "to the server");
        // An unlink that cancels an unsent create is no change more to lose.
        assert!(d
            .answer_unlink(7, "f0", me(), || LocalChange::Done)
            .is_some());
        made(d.answer(7, "again", 0o644, me(), || LocalChange::Done));
        // Once the servers answered some, more are answered here.
        let Some(Batch::Creates(_, batch)) = d.take(7, 10) else {
            panic!("unsent creates to send");
        };
        d.settled(batch.len(), Vec::new());
        made(d.answer(7, "later", 0o644, me(), || LocalChange::Done));
    }

    #[test]
    fn creates_wait_for_an_ask_unless_the_last_was_refused() {
        let d = DelegatedCreates::new(Duration::from_millis(5), 1 << 20);
        assert!(d.ask_ended(7).now_or_never().is_some(), "none in flight");
        let ask = d.begin_asking(7).unwrap();
        assert!(d.ask_ended(7).now_or_never().is_none(), "waits");
        d.granted(7, me(), None, || panic!("refused"));
        drop(ask);
        let _again = d.begin_asking(7).unwrap();
        assert!(d.ask_ended(7).now_or_never().is_some(), "refused before");
        d.granted(7, me(), Some(100..200), || true);
        assert!(d.holds(7));
    }

    #[test]
    fn unlinks_are_answered_for_files_made_here_and_go_first() {
        let d = DelegatedCreates::new(Duration::from_millis(5), 1 << 20);
        assert!(d.begin_asking(7).is_some());
        d.granted(7, me(), Some(100..200), || true);
        let done = || LocalChange::Done;
        assert!(
            d.answer_unlink(7, "old", me(), done).is_none(),
            "not made here"
        );
        made(d.answer(7, "a", 0o644, me(), done));
        made(d.answer(7, "b", 0o644, me(), done));
        // b's create is still unsent: both go, neither is sent.
        let (h, _) = d.answer_unlink(7, "b", me(), done).unwrap();
        assert_eq!(h, 101);
        let Some(Batch::Creates(_, creates)) = d.take(7, 10) else {
            panic!("a's create")
        };
        assert_eq!(creates.len(), 1);
        assert!(d
            .answer_unlink(7, "a", me(), || LocalChange::Busy)
            .is_none());
        assert!(d.holds(7), "busy is not the end of it");
        assert!(d.answer_unlink(7, "a", me(), done).is_some());
        assert!(d.answer_unlink(7, "a", me(), done).is_none(), "once");
        made(d.answer(7, "a", 0o644, me(), done));
        // The unlink of the sent create goes before the create again.
        assert!(matches!(d.take(7, 10), Some(Batch::Unlinks(_, u)) if u[0].0 == "a"));
        assert!(matches!(d.take(7, 10), Some(Batch::Creates(_, c)) if c[0].name == "a"));
        assert!(d.take(7, 10).is_none());
        d.settled(3, Vec::new());
        assert!(!d.unsettled());
        d.entries_changing(7, &["a"]);
        assert!(
            d.answer_unlink(7, "a", me(), done).is_none(),
            "made is forgotten"
        );
    }

    #[test]
    fn reservations_per_server_are_bounded_oldest_out() {
        let d = DelegatedCreates::new(Duration::from_millis(5), 1 << 20);
        let server = server_of(7);
        for i in 0..MAX_RESERVATIONS as u64 {
            assert!(!d.make_room(server));
            let start = 1000 + i * 10;
            d.asked(server, Some(start..start + 10));
        }
        assert!(d.begin_asking(7).is_some());
        d.granted(7, me(), Some(1000..1010), || true);
        assert!(d.make_room(server), "full: the oldest goes");
        assert!(
            matches!(
                d.answer(7, "a", 0o644, me(), || LocalChange::Done),
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
