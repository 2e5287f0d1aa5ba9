//! What a request that may be answered before its change is durable
//! (`sync = "replay"`) carries through its handler, on the handler's thread:
//! which client it is from, the handles its change takes (recorded for the
//! reply, so that the client can hand them back in a replay) and its place
//! in the commit sequence. Handlers run synchronously on one thread, so this
//! reaches `MetaStore::alloc`, `Pools::take` and `Service::change` without
//! threading it through every handler, as `reply_cache::Answering` does.
//!
//! A replay runs the request's handler again with the handles it took the
//! first time: `MetaStore::alloc` and `Pools::take` hand those out, in the
//! same order, instead of new ones. A handler's allocations follow from its
//! request and the store, and the replay runs on the store as it was (every
//! earlier change replayed first), so the order matches; a handle that does
//! not fit where it is asked for fails the replay's change with EIO
//! (`Service::change` asks [`misfit`] before it applies).

use std::cell::RefCell;
use std::collections::VecDeque;

use shoal_proto::error::{Result, ShoalError};
use shoal_proto::Handle;

/// Where the handles of this thread's change come from.
enum Handles {
    /// New ones, recorded in the order they are taken.
    Recorded(Vec<Handle>),
    /// The ones a replayed request took the first time, in that order.
    Replayed(VecDeque<Handle>),
}

struct Kept {
    client: u64,
    handles: Handles,
    /// The commit sequence after the request's last change (0: none, or
    /// the change was made durable before the reply).
    seq: u64,
    /// A replayed handle did not fit where it was asked for.
    misfit: Option<String>,
}

thread_local! {
    static KEPT: RefCell<Option<Kept>> = const { RefCell::new(None) };
}

/// A request whose change its client keeps until it is durable, being
/// handled on this thread; ends when dropped.
pub struct Scope {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Scope {
    /// Handles a request from `client` for the first time.
    pub fn first(client: u64) -> Scope {
        Scope::enter(client, Handles::Recorded(Vec::new()))
    }

    /// Handles a replayed request from `client`, which took `handles`.
    pub fn replay(client: u64, handles: Vec<Handle>) -> Scope {
        Scope::enter(client, Handles::Replayed(handles.into()))
    }

    fn enter(client: u64, handles: Handles) -> Scope {
        KEPT.with(|k| {
            let previous = k.borrow_mut().replace(Kept {
                client,
                handles,
                seq: 0,
                misfit: None,
            });
            assert!(previous.is_none(), "a kept change inside another");
        });
        Scope {
            _not_send: std::marker::PhantomData,
        }
    }

    /// The request's place in the commit sequence (0: nothing to keep) and
    /// the handles it took.
    pub fn finish(self) -> (u64, Vec<Handle>) {
        let kept = KEPT.with(|k| k.borrow_mut().take()).expect("scope entered");
        std::mem::forget(self);
        match kept.handles {
            Handles::Recorded(h) => (kept.seq, h),
            Handles::Replayed(_) => (kept.seq, Vec::new()),
        }
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        KEPT.with(|k| k.borrow_mut().take());
    }
}

/// The client whose request this thread handles, if its change may be
/// answered before it is durable.
pub fn kept_client() -> Option<u64> {
    KEPT.with(|k| k.borrow().as_ref().map(|k| k.client))
}

/// Notes that this thread's request made its change `seq` and did not make
/// it durable.
pub fn applied_as(seq: u64) {
    KEPT.with(|k| {
        if let Some(k) = k.borrow_mut().as_mut() {
            k.seq = seq;
        }
    });
}

/// A handle for this thread's change: `fresh()` for a first copy (recorded),
/// the next one the first copy took for a replay, if `fits` it (else the
/// change must fail: see [`misfit`]).
pub fn handle(fresh: impl FnOnce() -> Handle, fits: impl Fn(Handle) -> bool) -> Handle {
    KEPT.with(|k| {
        let mut k = k.borrow_mut();
        let Some(kept) = k.as_mut() else {
            return fresh();
        };
        match &mut kept.handles {
            Handles::Recorded(taken) => {
                let h = fresh();
                taken.push(h);
                h
            }
            Handles::Replayed(given) => match given.pop_front() {
                Some(h) if fits(h) => h,
                other => {
                    kept.misfit = Some(format!(
                        "a replayed request takes handle {other:#x?} where its first copy took \
                         another kind"
                    ));
                    fresh()
                }
            },
        }
    })
}

/// EIO if a replayed handle did not fit this thread's change.
pub fn misfit() -> Result<()> {
    KEPT.with(
        |k| match k.borrow_mut().as_mut().and_then(|k| k.misfit.take()) {
            Some(m) => Err(ShoalError::io(m)),
            None => Ok(()),
        },
    )
}

/// Whether this thread replays a request (its handles are given).
pub fn replaying() -> bool {
    KEPT.with(|k| {
        matches!(
            k.borrow().as_ref().map(|k| &k.handles),
            Some(Handles::Replayed(_))
        )
    })
}
