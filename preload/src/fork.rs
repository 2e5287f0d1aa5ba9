//! Fork: a child has only the thread that forked, so a lock another thread
//! held at that moment would stay held in the child for ever, and its first
//! call that needs it would hang. The forking thread therefore takes every
//! lock of the library's own before the fork and lets go of them after it,
//! in the parent and in the child (libshoal does the same for its own, in
//! `capi/src/session.rs`). The recall thread takes the listing cache's lock
//! even in a program with one thread; a program's other threads take the
//! others in their calls.
//!
//! Prepare handlers run in the reverse order of their registration, so the
//! order of the three registrations below is the order locks are taken in
//! reverse. When the library loads it registers, in this order:
//! 1. its own locks' handler. Each of those locks is a leaf: its holder takes
//!    no other lock and calls into nothing that waits, so taking them all in
//!    any order cannot deadlock with a thread that holds one. It runs last,
//!    after libshoal's, as a recall does, which holds libshoal's locks while
//!    it empties the cache;
//! 2. libshoal's (`shoal::install_fork_handlers`, early instead of at the
//!    first connect);
//! 3. the handler of the lock held while connecting. Its holder waits for
//!    libshoal's locks, so it is taken first. Without it, a fork while
//!    another thread made the process's first call to Shoal left the lock
//!    held in the child, whose first call then hung (35 of 300 children in
//!    `preload/tests/run`'s check).
//!
//! The child also starts with an empty listing cache: its client is new,
//! and no server will recall its parent's leases from it. A vfork child
//! runs none of this and shares its parent's memory: the calls it makes
//! before exec leave the library's tables alone (`state::in_vfork_child`).

use std::any::Any;
use std::cell::RefCell;

use crate::cache;

struct Held {
    cache: cache::ForkHold,
    others: Vec<Box<dyn Any>>,
}

thread_local! {
    /// The locks the forking thread holds from prepare to parent or child.
    static HELD: RefCell<Option<Held>> = const { RefCell::new(None) };
    /// The connecting lock, likewise (handler 3 above).
    static CONNECTING: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
}

// `try_with`: a fork from a thread-local destructor finds the slot gone;
// the locks are then let go at once rather than the process aborted in a
// handler.
extern "C" fn before_fork() {
    crate::unwind::guarded(
        || (),
        || {
            let mut others = crate::state::hold_for_fork();
            others.extend(crate::posix::hold_for_fork());
            others.push(crate::statahead::hold_for_fork());
            let held = Held {
                cache: cache::hold_for_fork(),
                others,
            };
            let _ = HELD.try_with(|h| *h.borrow_mut() = Some(held));
        },
    )
}

extern "C" fn after_fork_in_parent() {
    crate::unwind::guarded(
        || (),
        || {
            let _ = HELD.try_with(|h| h.borrow_mut().take());
        },
    )
}

extern "C" fn after_fork_in_child() {
    crate::unwind::guarded(
        || (),
        || {
            crate::state::owned_here();
            if let Ok(Some(held)) = HELD.try_with(|h| h.borrow_mut().take()) {
                held.cache.empty_in_child();
                drop(held.others);
            }
        },
    )
}

extern "C" fn before_fork_connecting() {
    crate::unwind::guarded(
        || (),
        || {
            let held = crate::state::hold_connecting_for_fork();
            let _ = CONNECTING.try_with(|h| *h.borrow_mut() = Some(held));
        },
    )
}

extern "C" fn after_fork_connecting() {
    crate::unwind::guarded(
        || (),
        || {
            let _ = CONNECTING.try_with(|h| h.borrow_mut().take());
        },
    )
}

/// Installs the handlers, libshoal's between the library's two (once, when
/// the library loads). If registration fails, a fork is as safe as it was
/// without them.
pub fn install_handlers() {
    // SAFETY: plain functions that live as long as the process.
    unsafe {
        libc::pthread_atfork(
            Some(before_fork),
            Some(after_fork_in_parent),
            Some(after_fork_in_child),
        )
    };
    shoal::install_fork_handlers();
    // SAFETY: as above.
    unsafe {
        libc::pthread_atfork(
            Some(before_fork_connecting),
            Some(after_fork_connecting),
            Some(after_fork_connecting),
        )
    };
}
