//! Leases, the client's side: which objects a server lets this client cache
//! until it says otherwise, and what the client does when it does (the
//! server's side, and what each answer leases, is `shoal_server::leases`).
//!
//! A reply that grants a lease (`Pool::call_leasing`) gives until when: its
//! request's sending plus `lease_ms`, so the client's lease always ends
//! before the server's. Names and attributes cached under a lease live that
//! long instead of the cache TTL (`TtlCache::put_leased`,
//! `NameCache::put`); a file's attributes count as leased only if every
//! server that contributed to them (its metafile's, each datafile's) leased
//! them. The [`Ledger`] says which objects are leased now, for front ends
//! that cache on their own (the mount gives the kernel long timeouts for
//! them, and keeps a file's pages across opens).
//!
//! A recall (`conn::Recalled`) drops the objects' names, attributes and
//! ledger entries, then runs the front end's own hook (the mount
//! invalidates the kernel's caches), and only then does the connection
//! answer the server. When a connection ends, the server has forgotten
//! every lease it gave: everything cached goes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Instant;

use futures::future::BoxFuture;
use futures::FutureExt;
use shoal_proto::Handle;

use crate::conn::{OnRecall, Recalled};
use crate::Inner;

/// Objects remembered as leased at most; past it the ledger starts again
/// (front ends then treat those objects as not leased: safe).
const MAX_LEDGER: usize = 1 << 20;

/// A front end's part of a recall (see [`crate::Client::on_recall`]).
pub type RecallHook = Arc<dyn Fn(&Recalled) -> BoxFuture<'static, ()> + Send + Sync>;

#[derive(Default)]
pub struct Ledger {
    held: Mutex<Held>,
    hook: OnceLock<RecallHook>,
}

#[derive(Default)]
struct Held {
    /// Until when each object is leased.
    until: HashMap<Handle, Instant>,
    /// The end of the latest lease noted: until then a server may recall.
    latest: Option<Instant>,
}

impl Ledger {
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
            if held.until.len() >= MAX_LEDGER {
                held.until.clear();
            }
            let e = held.until.entry(h).or_insert(until);
            *e = (*e).max(until);
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

/// What the pool's connections run when a server recalls: drops what
/// `inner` caches of the objects (if the client still exists), then runs
/// the front end's hook.
pub(crate) fn on_recall(inner: Weak<Inner>) -> OnRecall {
    Arc::new(move |what: Recalled| {
        let Some(inner) = inner.upgrade() else {
            return futures::future::ready(()).boxed();
        };
        inner.drop_recalled(&what);
        match inner.leases.hook.get() {
            Some(hook) => hook(&what),
            None => futures::future::ready(()).boxed(),
        }
    })
}

impl Inner {
    fn drop_recalled(&self, what: &Recalled) {
        match what {
            Recalled::Objects(handles) => {
                let mut held = self.leases.held.lock().unwrap();
                for h in handles {
                    held.until.remove(h);
                    self.attrs.remove(h);
                    self.names.remove_dir(*h);
                    self.known_dirs.forget(*h);
                    self.dists.forget_stuffed(*h);
                }
            }
            Recalled::Everything => {
                self.leases.held.lock().unwrap().until.clear();
                self.attrs.clear();
                self.names.clear();
            }
        }
    }
}
