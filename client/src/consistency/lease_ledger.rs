//! The lease ledger: which objects servers leased this client and until
//! when, and when each was last recalled or changed here, the state the
//! rules of `leases` read and keep (see that module's doc). Bounded: at
//! most `cache_entries` leases and [`MAX_RECALLED`] moments of each kind.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use shoal_proto::Handle;

use crate::consistency::cache::{bounded, compacted, Bounded};
use crate::transport::conn::Recalled;

/// Recall times held at most: past it the ledger drops those older than a
/// lease, and if that is not enough, counts every object as recalled now
/// (safe: a few caches dropped that did not need to be).
const MAX_RECALLED: usize = 4096;

/// Where [`Ledger::last_recall`] counts from.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

/// `t` in nanoseconds after [`EPOCH`] (0 if before it).
pub(crate) fn since_epoch(t: Instant) -> u64 {
    t.saturating_duration_since(*EPOCH).as_nanos() as u64
}

/// A front end's part of a recall (see [`crate::client::Client::on_recall`]).
pub type RecallHook = Arc<dyn Fn(&Recalled) -> BoxFuture<'static, ()> + Send + Sync>;

pub struct Ledger {
    pub(crate) held: Mutex<Held>,
    pub(crate) hook: OnceLock<RecallHook>,
    /// When the latest recall was noted ([`since_epoch`] + 1; 0: never),
    /// stored before its objects are dropped: a caller whose requests all
    /// went out after it has nothing to undo and takes no lock.
    pub(crate) last_recall: AtomicU64,
}

pub(crate) struct Held {
    /// Until when each object is leased, for at most the setting
    /// `cache_entries` objects: past it the least used go (front ends then
    /// treat them as not leased: safe).
    pub(crate) until: Bounded<Handle, Instant>,
    /// The end of the latest lease noted: until then a server may recall.
    pub(crate) latest: Option<Instant>,
    /// When each object was last recalled (all of them: when a connection
    /// last ended, recalling all its server had leased). An entry older
    /// than a lease can go: every grant whose request went out before it
    /// has ended.
    pub(crate) recalled: Moments,
    /// When this client last changed each object (see the module doc),
    /// held as `recalled` is.
    pub(crate) changed: Moments,
}

/// When each of at most [`MAX_RECALLED`] objects was last recalled or
/// changed; past that, one moment for every object (safe: a few caches
/// dropped that did not need to be).
#[derive(Default)]
pub(crate) struct Moments {
    pub(crate) each: HashMap<Handle, Instant>,
    pub(crate) all: Option<Instant>,
}

impl Moments {
    /// Notes `handles` at `now`; entries older than `lease` may go.
    pub(crate) fn note(&mut self, handles: &[Handle], now: Instant, lease: Duration) {
        if self.all.is_some_and(|at| now.duration_since(at) > lease) {
            self.all = None;
        }
        if self.each.len() + handles.len() > MAX_RECALLED {
            self.each.retain(|_, at| now.duration_since(*at) <= lease);
        }
        if self.each.len() + handles.len() > MAX_RECALLED {
            self.all = Some(now);
            self.each.clear();
            return;
        }
        self.each.extend(handles.iter().map(|h| (*h, now)));
    }

    /// Whether `h` was noted at or after `sent`.
    fn since(&self, h: Handle, sent: Instant) -> bool {
        self.all.is_some_and(|at| at >= sent) || self.each.get(&h).is_some_and(|at| *at >= sent)
    }
}

impl Held {
    fn new(max: usize) -> Held {
        Held {
            until: bounded(max),
            latest: None,
            recalled: Moments::default(),
            changed: Moments::default(),
        }
    }

    /// Notes a recall of `handles` (every object if `None`) at `now`.
    pub(crate) fn note_recall(
        &mut self,
        handles: Option<&[Handle]>,
        now: Instant,
        lease: Duration,
    ) {
        match handles {
            Some(handles) => self.recalled.note(handles, now, lease),
            None => {
                self.recalled.all = Some(now);
                self.recalled.each.clear();
            }
        }
    }

    /// Whether `h` was recalled at or after `sent` (None: not known, so
    /// counted as recalled if anything ever was).
    pub(crate) fn recalled_since(&self, h: Handle, sent: Option<Instant>) -> bool {
        match sent {
            Some(sent) => self.recalled.since(h, sent),
            None => self.recalled.all.is_some() || !self.recalled.each.is_empty(),
        }
    }

    /// Whether this client changed `h` at or after `sent` (not known:
    /// no, its own changes update what it caches).
    pub(crate) fn changed_since(&self, h: Handle, sent: Option<Instant>) -> bool {
        sent.is_some_and(|sent| self.changed.since(h, sent))
    }
}

impl Ledger {
    /// A ledger of at most `max` objects.
    pub fn new(max: usize) -> Ledger {
        Ledger {
            held: Mutex::new(Held::new(max)),
            hook: OnceLock::new(),
            last_recall: AtomicU64::new(0),
        }
    }

    /// `h` is leased until `until` (if a lease was granted).
    pub fn note(&self, h: Handle, until: Option<Instant>) {
        self.note_many([(h, until)]);
    }

    /// [`note`](Self::note) of several, under one lock (a listing's).
    pub fn note_many(&self, leases: impl IntoIterator<Item = (Handle, Option<Instant>)>) {
        let mut leases = leases
            .into_iter()
            .filter_map(|(h, until)| Some((h, until?)))
            .peekable();
        if leases.peek().is_none() {
            return;
        }
        let mut held = self.held.lock().unwrap();
        for (h, until) in leases {
            match held.until.get_mut(&h) {
                Some(mut e) => *e = (*e).max(until),
                None => held.until.insert(h, until),
            }
            held.latest = held.latest.max(Some(until));
        }
    }

    /// Whether a lease noted may still be held, so that a server may recall
    /// it: a front end that reads its connections only while it calls
    /// (the preload library) must read them meanwhile too until then.
    pub fn any_held(&self) -> bool {
        self.held
            .lock()
            .unwrap()
            .latest
            .is_some_and(|l| l > Instant::now())
    }

    /// Until when `h` is leased, if it is now.
    pub fn until(&self, h: Handle) -> Option<Instant> {
        self.until_many(&[h])[0]
    }

    /// [`until`](Self::until) of each handle, under one lock.
    pub fn until_many(&self, handles: &[Handle]) -> Vec<Option<Instant>> {
        let held = self.held.lock().unwrap();
        let now = Instant::now();
        handles
            .iter()
            .map(|h| held.until.get(h).copied().filter(|u| *u > now))
            .collect()
    }

    /// Drops the objects of `handles` (the front end forgot them): they
    /// count as not leased from now on.
    pub fn forget(&self, handles: &[Handle]) {
        let mut held = self.held.lock().unwrap();
        for h in handles {
            held.until.remove(h);
        }
    }

    /// Drops the leases that ended and gives back their room.
    pub fn compact(&self) {
        let now = Instant::now();
        compacted(&mut self.held.lock().unwrap().until, |_, until| {
            *until > now
        });
    }

    /// Objects noted now (for the mount's stats).
    pub fn len(&self) -> usize {
        self.held.lock().unwrap().until.len()
    }

    pub fn set_hook(&self, hook: RecallHook) {
        if self.hook.set(hook).is_err() {
            tracing::warn!("a second recall hook was ignored");
        }
    }
}

/// The lease of something two answers made up: the earlier end, if both
/// granted one.
pub(crate) fn both(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    Some(a?.min(b?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(5);

    #[test]
    fn a_grant_counts_as_recalled_only_if_its_request_went_out_before_the_recall() {
        let mut held = Held::new(16);
        let before = Instant::now();
        let recall = before + Duration::from_millis(1);
        let after = recall + Duration::from_millis(1);
        held.note_recall(Some(&[1]), recall, LEASE);
        assert!(held.recalled_since(1, Some(before)));
        assert!(
            !held.recalled_since(1, Some(after)),
            "sent after the recall"
        );
        assert!(!held.recalled_since(2, Some(before)), "another object");
        assert!(held.recalled_since(2, None), "sent when, not known");
        held.note_recall(None, after, LEASE);
        assert!(
            held.recalled_since(2, Some(before)),
            "a connection's end recalls all"
        );
        assert!(!held.recalled_since(2, Some(after + Duration::from_millis(1))));
    }

    #[test]
    fn recall_times_are_held_a_lease_long_and_bounded() {
        let mut held = Held::new(16);
        let sent = Instant::now();
        let now = sent + Duration::from_secs(1);
        let many: Vec<Handle> = (0..MAX_RECALLED as u64).collect();
        held.note_recall(Some(&many), now, LEASE);
        assert_eq!(held.recalled.each.len(), MAX_RECALLED);
        // Past the bound with every entry younger than a lease: every
        // object counts as recalled now, and the map starts again.
        held.note_recall(Some(&[u64::MAX]), now, LEASE);
        assert!(held.recalled.each.is_empty());
        assert!(held.recalled_since(7, Some(sent)));
        // Older than a lease, entries go instead, and so does the mark.
        let later = now + LEASE + Duration::from_secs(1);
        held.note_recall(Some(&many[..10]), now, LEASE);
        held.note_recall(Some(&many[10..]), later, LEASE);
        assert!(held.recalled.all.is_none(), "older than a lease");
        held.note_recall(Some(&[u64::MAX]), later, LEASE);
        assert_eq!(held.recalled.each.len(), MAX_RECALLED - 10 + 1);
        assert!(!held.recalled_since(3, Some(sent)), "dropped as old");
    }

    #[test]
    fn own_changes_past_the_bound_are_no_recall() {
        let mut held = Held::new(16);
        let sent = Instant::now();
        let now = sent + Duration::from_millis(1);
        let files: Vec<Handle> = (100..100 + MAX_RECALLED as u64 + 1).collect();
        held.changed.note(&files, now, LEASE);
        assert!(
            held.changed_since(7, Some(sent)),
            "past the bound: every object"
        );
        assert!(
            !held.recalled_since(7, Some(sent)),
            "a directory's grant still stands"
        );
        assert!(
            !held.recalled_since(7, None),
            "nor counts as a recall if unknown"
        );
        assert!(!held.changed_since(7, None), "own changes update the cache");
    }
}
