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
//!
//! A recall can also arrive after a reply that grants a lease and before
//! the caller has cached what came with it (a striped file's attributes
//! wait for its other servers' sizes; a multi-threaded runtime's reader
//! handles the recall meanwhile): the recall then finds nothing to drop and
//! is answered, and the caller would cache a state the server has since
//! changed, trusted until the lease ends. So the ledger remembers when each
//! object was last recalled, and every caller that caches under a lease
//! asks afterwards ([`Inner::undo_if_recalled`]) whether one came after its
//! request went out; if so it drops what it cached. Cached first, asked
//! second: a recall either comes before the question and is seen, or after
//! the caching and drops it.
//!
//! This client's own changes outdate an answer the same way, and no server
//! recalls for them (the changer keeps its leases): a reply read before
//! this client's write of a file reached its server, and cached after the
//! write's own update of the cache, would put back the size from before
//! the write, trusted for the whole lease (a file `cp` had just written,
//! listed as empty for 30 s). So each change of an object's data or
//! attributes is noted as it is made here and again as its server
//! acknowledges it ([`Inner::changed_here`]), before the change updates
//! the cache: an answer whose request went out before either is undone.
//! The change's update and the answer's caching then meet in either
//! order: the update runs after the caching and corrects it, or the
//! question after the caching sees the note. Own changes are noted apart
//! from recalls, and undo only the object's cached attributes: a client
//! writing tens of thousands of files within a lease overflows the note
//! (past [`MAX_RECALLED`] it counts as one change of everything), and that
//! must not count as a recall of everything, which would also drop the
//! directories' known names and end the delegations it holds.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Instant;

use futures::FutureExt;
use shoal_proto::Handle;

use crate::client::Inner;
use crate::consistency::lease_ledger::{since_epoch, Held};
use crate::transport::conn::{OnRecall, Recalled};

/// What the pool's connections run when a server recalls: drops what
/// `inner` caches of the objects (if the client still exists), then runs
/// the front end's hook.
pub(crate) fn on_recall(inner: Weak<Inner>) -> OnRecall {
    Arc::new(move |what: Recalled| {
        let Some(inner) = inner.upgrade() else {
            return futures::future::ready(()).boxed();
        };
        if let Recalled::Delegations(dirs) = what {
            return crate::namespace::delegated::recalled(inner, dirs);
        }
        // A split directory's partition recalled is the directory recalled.
        let what = match what {
            Recalled::Objects(mut handles) => {
                let dirs = inner.partitions.directories_of(&handles);
                handles.extend(dirs);
                Recalled::Objects(handles)
            }
            other => other,
        };
        inner.drop_recalled(&what);
        match inner.leases.hook.get() {
            Some(hook) => hook(&what),
            None => futures::future::ready(()).boxed(),
        }
    })
}

impl Inner {
    /// This client changes `h` (its data, size or attributes), or its
    /// server has just acknowledged such a change: an answer about `h`
    /// whose request went out before now describes it as it was, and is
    /// not to be cached (see the module doc). Called before the change
    /// updates what is cached of `h`.
    pub(crate) fn changed_here(&self, h: Handle) {
        let lease = self.pool.lease();
        if lease.is_zero() {
            // Nothing is cached under a lease: nothing to outdate.
            return;
        }
        let now = Instant::now();
        let mut held = self.leases.held.lock().unwrap();
        self.leases
            .last_recall
            .store(since_epoch(now) + 1, Ordering::SeqCst);
        held.changed.note(&[h], now, lease);
    }

    /// Whether this client changed `h` after a request sent at `sent`: an
    /// answer to it is not cached at all then (dropping it afterwards would
    /// drop the change's own update too, and send the next lookup to a
    /// server).
    pub(crate) fn changed_since(&self, h: Handle, sent: Instant) -> bool {
        let last = self.leases.last_recall.load(Ordering::SeqCst);
        if last == 0 || since_epoch(sent) >= last {
            return false;
        }
        let held = self.leases.held.lock().unwrap();
        held.changed_since(h, Some(sent))
    }

    fn drop_recalled(&self, what: &Recalled) {
        let lease = self.pool.lease();
        let now = Instant::now();
        let mut held = self.leases.held.lock().unwrap();
        self.leases
            .last_recall
            .store(since_epoch(now) + 1, Ordering::SeqCst);
        match what {
            Recalled::Objects(handles) => {
                held.note_recall(Some(handles), now, lease);
                self.drop_leased(&mut held, handles);
            }
            Recalled::Delegations(_) | Recalled::Attributes(_) => {}
            Recalled::Everything => {
                crate::namespace::delegated::all_ended(self);
                held.note_recall(None, now, lease);
                held.until.clear();
                self.attrs.clear();
                self.names.clear();
            }
        }
    }

    /// Objects noted as leased that their server did not lease after all:
    /// files of unsent creates, noted under their directory's delegation
    /// (`namespace::delegated`), whose creates landed without a lease (the
    /// server leases nothing to a maker whose delegation another client
    /// recalled, nor when its grant is refused). Dropped as a recall drops
    /// them, the front end's hook included: the mount gave the kernel
    /// their attributes for as long as the delegation's lease.
    pub(crate) async fn not_leased(&self, handles: Vec<Handle>) {
        if handles.is_empty() || self.pool.lease().is_zero() {
            return;
        }
        let what = Recalled::Objects(handles);
        self.drop_recalled(&what);
        if let Some(hook) = self.leases.hook.get() {
            hook(&what).await;
        }
    }

    /// Drops what is cached of `handles` as a recall of them does.
    fn drop_leased(&self, held: &mut Held, handles: &[Handle]) {
        for h in handles {
            held.until.remove(h);
            self.attrs.remove(h);
            self.names.remove_dir(*h);
            self.known_dirs.forget(*h);
            self.dists.forget_stuffed(*h);
        }
    }

    /// To be called after caching, under leases ending at `until` (each
    /// `sent + lease_ms`: a reply's own), what a reply said of each handle:
    /// drops what is cached of those recalled since their request went out
    /// (see the module doc). A handle cached without a lease has nothing
    /// to undo.
    pub(crate) fn undo_if_recalled(
        &self,
        leased: impl IntoIterator<Item = (Handle, Option<Instant>)>,
    ) {
        let lease = self.pool.lease();
        self.undo_if_recalled_since(leased.into_iter().filter_map(|(h, until)| {
            let until = until?;
            Some((h, until.checked_sub(lease)))
        }));
    }

    /// [`undo_if_recalled`](Self::undo_if_recalled) of what a reply to a
    /// request sent at `sent` said of `h`, cached under a lease the ledger
    /// held on it (a change's reply: the change itself grants none). The
    /// ledger's lease may come from a request later than the change, so
    /// the change's own sending counts if earlier.
    pub(crate) fn undo_if_recalled_after(&self, h: Handle, sent: Instant) {
        let Some(until) = self.leases.until(h) else {
            return;
        };
        let from_ledger = until.checked_sub(self.pool.lease());
        self.undo_if_recalled_since([(h, from_ledger.map(|l| l.min(sent)))]);
    }

    /// Drops, and tells the front end about, what is cached of each handle
    /// recalled at or after its request was sent (None: not known).
    fn undo_if_recalled_since(&self, sent: impl IntoIterator<Item = (Handle, Option<Instant>)>) {
        self.undo_since(sent, true)
    }

    /// [`undo_if_recalled`](Self::undo_if_recalled) of entries that hold
    /// this client's own changes already (see [`Self::changed_since`]):
    /// only a recall undoes them.
    pub(crate) fn undo_if_recalled_elsewhere(
        &self,
        leased: impl IntoIterator<Item = (Handle, Option<Instant>)>,
    ) {
        let lease = self.pool.lease();
        let sent = leased.into_iter().filter_map(|(h, until)| {
            let until = until?;
            Some((h, until.checked_sub(lease)))
        });
        self.undo_since(sent, false)
    }

    /// Drops what is cached of each handle recalled (or, if `own`, changed
    /// here) at or after its request was sent.
    fn undo_since(&self, sent: impl IntoIterator<Item = (Handle, Option<Instant>)>, own: bool) {
        let last = self.leases.last_recall.load(Ordering::SeqCst);
        if last == 0 {
            return;
        }
        // Only requests sent before the latest recall can have crossed one.
        let mut suspects = sent
            .into_iter()
            .filter(|(_, sent)| sent.is_none_or(|s| since_epoch(s) < last))
            .peekable();
        if suspects.peek().is_none() {
            return;
        }
        let mut held = self.leases.held.lock().unwrap();
        let mut recalled = Vec::new();
        let mut changed = Vec::new();
        for (h, sent) in suspects {
            if held.recalled_since(h, sent) {
                recalled.push(h);
            } else if own && held.changed_since(h, sent) {
                changed.push(h);
            }
        }
        if recalled.is_empty() && changed.is_empty() {
            return;
        }
        self.drop_leased(&mut held, &recalled);
        // An own change outdates the object's attributes, nothing else.
        for h in &changed {
            self.attrs.remove(h);
        }
        drop(held);
        // The recall's hook ran before this caching: the front end may have
        // passed on what was cached meanwhile (the mount, its kernel
        // timeouts), so it hears of these objects again; of those changed
        // here, of their attributes alone (past the ledger's bound every
        // object counts as changed, and a directory's names are not what
        // its attributes' change outdates). Every caller runs on a runtime
        // (the client's API is async); none found is a bug to log, not a
        // panic in a caller's thread.
        let Some(hook) = self.leases.hook.get() else {
            return;
        };
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            tracing::warn!("an undone lease's hook found no runtime to run on");
            return;
        };
        if !recalled.is_empty() {
            drop(rt.spawn(hook(&Recalled::Objects(recalled))));
        }
        if !changed.is_empty() {
            drop(rt.spawn(hook(&Recalled::Attributes(changed))));
        }
    }
}
