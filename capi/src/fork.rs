//! The library's `pthread_atfork` handlers: the forking thread holds the
//! library's locks (the session's state, the descriptor table, the held
//! attribute change) across `fork`, so that a child never starts with a
//! lock a vanished thread held. What a child does with what it inherits is
//! the session's (`session`).

use std::cell::RefCell;
use std::sync::{MutexGuard, Once};

use crate::{files, held_attrs, session};

thread_local! {
    /// The locks the forking thread holds from prepare to parent/child.
    static HELD: RefCell<Option<Held>> = const { RefCell::new(None) };
}

struct Held {
    // Dropped in field order: the held attribute change first, state last
    // (the reverse of taking).
    _attrs: MutexGuard<'static, Option<held_attrs::Held>>,
    _files: files::TableGuard,
    _state: session::StateGuard,
}

// `try_with`: a fork from a thread-local destructor finds the slot gone;
// the locks are then let go at once rather than the process aborted in a
// handler (with libshoal_preload.so these handlers run in every process).
extern "C" fn before_fork() {
    let state = session::write_state();
    let files = files::lock_table();
    let attrs = held_attrs::lock();
    let _ = HELD.try_with(|h| {
        *h.borrow_mut() = Some(Held {
            _attrs: attrs,
            _files: files,
            _state: state,
        })
    });
}

extern "C" fn after_fork() {
    let _ = HELD.try_with(|h| h.borrow_mut().take());
}

/// Installs the handlers (once; a later call does nothing).
pub fn install_handlers() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: the handlers are plain functions that live forever. If
        // registration fails, the pid check alone still gives a child new
        // connections.
        unsafe { libc::pthread_atfork(Some(before_fork), Some(after_fork), Some(after_fork)) };
    });
}
