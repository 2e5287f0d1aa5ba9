//! What a request that may be answered before its change is durable
//! (`sync = "replay"`) carries through its handler ([`Kept`], part of its
//! `request::Request`): which client it is from, the handles its change
//! takes (recorded for the reply, so that the client can hand them back in
//! a replay) and its place in the commit sequence. `Service::change` reads
//! and sets it, and gives it to the change's transaction (`Txn`), from which
//! `MetaStore::alloc` and `Pools::take` take their handles.
//!
//! A replay runs the request's handler again with the handles it took the
//! first time: `MetaStore::alloc` and `Pools::take` hand those out, in the
//! same order, instead of new ones. A handler's allocations follow from its
//! request and the store, and the replay runs on the store as it was (every
//! earlier change replayed first), so the order matches; a handle that does
//! not fit where it is asked for fails the replay's change with EIO
//! (`Service::change` asks [`Kept::misfit`] before it applies).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;

use shoal_proto::error::{Result, ShoalError};
use shoal_proto::Handle;

/// Where the handles of a kept request's change come from.
enum Handles {
    /// New ones, recorded in the order they are taken.
    Recorded(Vec<Handle>),
    /// The ones a replayed request took the first time, in that order.
    Replayed(VecDeque<Handle>),
}

/// A request whose change its client keeps until it is durable. Its
/// handler runs on one thread and hands it on by shared reference (the
/// request, then the transaction), hence the cells.
pub struct Kept {
    client: u64,
    handles: RefCell<Handles>,
    /// The commit sequence after the request's last change (0: none, or
    /// the change was made durable before the reply).
    seq: Cell<u64>,
    /// A replayed handle did not fit where it was asked for.
    misfit: RefCell<Option<String>>,
}

impl Kept {
    /// A request from `client` handled for the first time.
    pub fn first(client: u64) -> Kept {
        Kept::new(client, Handles::Recorded(Vec::new()))
    }

    /// A replayed request from `client`, which took `handles`.
    pub fn replay(client: u64, handles: Vec<Handle>) -> Kept {
        Kept::new(client, Handles::Replayed(handles.into()))
    }

    fn new(client: u64, handles: Handles) -> Kept {
        Kept {
            client,
            handles: RefCell::new(handles),
            seq: Cell::new(0),
            misfit: RefCell::new(None),
        }
    }

    /// The client the request is from.
    pub fn client(&self) -> u64 {
        self.client
    }

    /// The request's place in the commit sequence (0: nothing to keep) and
    /// the handles it took, for its reply.
    pub fn finish(&self) -> (u64, Vec<Handle>) {
        match &mut *self.handles.borrow_mut() {
            Handles::Recorded(h) => (self.seq.get(), std::mem::take(h)),
            Handles::Replayed(_) => (self.seq.get(), Vec::new()),
        }
    }

    /// Notes that the request made its change `seq` and did not make it
    /// durable.
    pub fn applied_as(&self, seq: u64) {
        self.seq.set(seq);
    }

    /// EIO if a replayed handle did not fit the request's change.
    pub fn misfit(&self) -> Result<()> {
        match self.misfit.borrow_mut().take() {
            Some(m) => Err(ShoalError::io(m)),
            None => Ok(()),
        }
    }

    /// Whether the request is replayed (its handles are given).
    pub fn replaying(&self) -> bool {
        matches!(*self.handles.borrow(), Handles::Replayed(_))
    }
}

/// A handle for a change: `fresh()` unless its request is `kept`; then
/// `fresh()` recorded for a first copy, the next one the first copy took
/// for a replay, if `fits` it (else the change must fail: see
/// [`Kept::misfit`]).
pub fn handle(
    kept: Option<&Kept>,
    fresh: impl FnOnce() -> Handle,
    fits: impl Fn(Handle) -> bool,
) -> Handle {
    let Some(kept) = kept else {
        return fresh();
    };
    match &mut *kept.handles.borrow_mut() {
        Handles::Recorded(taken) => {
            let h = fresh();
            taken.push(h);
            h
        }
        Handles::Replayed(given) => match given.pop_front() {
            Some(h) if fits(h) => h,
            other => {
                *kept.misfit.borrow_mut() = Some(format!(
                    "a replayed request takes handle {other:#x?} where its first copy took \
                     another kind"
                ));
                fresh()
            }
        },
    }
}
