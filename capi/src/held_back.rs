//! What this process holds back, and when it goes: an attribute change
//! (`held_attrs`), its client's buffered writes (the gathering path) and
//! the creates and unlinks it answered under a directory delegation.
//! Both go at `shoal_flush`, at exit(3) (a handler registered at the first
//! connect), and, once that handler has run, at the end of every call.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

use crate::error::Result;
use crate::{held_attrs, session};

/// Sends what this process holds back: an attribute change (`held_attrs`),
/// its client's buffered writes (the gathering path) and unsent creates and
/// unlinks (`Client::flush_all`). Reports the first
/// failure, of this send or of an earlier one not reported yet.
pub fn send_everything() -> Result<()> {
    let attrs = held_attrs::flush();
    let writes = match session::ours() {
        Some(s) => s.run(s.client.flush_all()),
        None => Ok(()),
    };
    attrs.and(writes)
}

/// Set when the atexit handler below has run.
static EXITED: AtomicBool = AtomicBool::new(false);

/// Whether [`register_exit_send`]'s handler has run: what a call holds back
/// after that (a program's own atexit handler registered before the first
/// Shoal call, stdio's last flush of a stream left open) would never be
/// sent, so every call then sends it before it returns
/// ([`crate::ffi::call`]).
pub fn exited() -> bool {
    EXITED.load(Ordering::Acquire)
}

/// [`send_everything`], if anything is held back.
pub fn send_held_back() -> Result<()> {
    let keeps = session::ours().is_some_and(|s| s.client.holds_back());
    if keeps || held_attrs::holding() {
        send_everything()
    } else {
        Ok(())
    }
}

/// What is held back goes at exit(3) (not at `_exit`, which skips atexit
/// handlers: a program that ends so calls shoal_flush first). The exiting
/// thread's runtime context is gone by then: `Session::run_quietly` waits
/// on a thread of its own.
pub fn register_exit_send() {
    static ONCE: Once = Once::new();
    extern "C" fn at_exit() {
        EXITED.store(true, Ordering::Release);
        let sent = std::panic::catch_unwind(send_held_back);
        if !matches!(sent, Ok(Ok(()))) {
            eprintln!(
                "libshoal: at exit, sending buffered writes or held attribute changes failed"
            );
        }
    }
    // SAFETY: a plain function that lives as long as the process.
    ONCE.call_once(|| unsafe {
        libc::atexit(at_exit);
    });
}
