//! A lock wait a signal can end, as the kernel's own F_SETLKW and blocking
//! flock are: the caller gets EINTR once a handler it installed without
//! SA_RESTART runs (with SA_RESTART the wait goes on, as the kernel
//! restarts it), and a SIGKILLed caller is simply gone (its connections
//! close, and its server drops what it waited for).
//!
//! The caller's thread cannot both drive the request and notice a signal:
//! the wait runs on a thread of its own, with every signal blocked so that
//! none is delivered there, while the caller sleeps in poll(2) on an
//! eventfd the waiting thread writes when done. poll is never restarted
//! after a handler, so a handler's run is seen as EINTR; the wait is then
//! withdrawn at its server (`Client::lock_until`), which answers EINTR, or
//! had already granted the lock, which the caller then holds.

use shoal_client::{Errno, LockAsk};
use shoal_proto::Handle;
use tokio::sync::oneshot;

use crate::error::{err, Result};
use crate::session::Session;

/// Takes `ask` on `h`, waiting as long as another owner's lock
/// is in the way, unless a signal interrupts the caller first.
pub fn lock(s: &Session, h: Handle, ask: LockAsk) -> Result<()> {
    let client = &s.client;
    // Most locks are free: no thread for those.
    match s.run(client.lock(h, ask, false)) {
        Err(e) if e.errno == Errno::EAGAIN => {}
        other => return other,
    }
    let done = EventFd::new()?;
    let (interrupt, interrupted) = oneshot::channel::<()>();
    std::thread::scope(|scope| {
        let waiter = std::thread::Builder::new()
            .name("shoal-lock-wait".into())
            .spawn_scoped(scope, || {
                block_all_signals();
                let until = async move {
                    // Dropped unsent: the caller is gone, not interrupted.
                    if interrupted.await.is_err() {
                        std::future::pending::<()>().await;
                    }
                };
                // No kernel cache here to keep: the grant's epoch goes.
                let taken = s.run(client.lock_until(h, ask, true, until));
                done.write();
                taken.map(drop)
            })
            .map_err(|e| {
                err(
                    libc::EAGAIN,
                    format!("cannot start a lock's waiting thread: {e}"),
                )
            })?;
        while !done.wait_for_signal_or_write() {
            if !handlers_restart() {
                let _ = interrupt.send(());
                break;
            }
        }
        waiter
            .join()
            .unwrap_or_else(|_| Err(err(libc::EIO, "a lock's waiting thread panicked")))
    })
}

/// An eventfd, closed on drop.
struct EventFd(i32);

impl EventFd {
    fn new() -> Result<EventFd> {
        // SAFETY: plain integers.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            return Err(err(
                e.raw_os_error().unwrap_or(libc::EIO),
                format!("eventfd: {e}"),
            ));
        }
        Ok(EventFd(fd))
    }

    fn write(&self) {
        let one: u64 = 1;
        // SAFETY: 8 bytes from a live u64 to our own eventfd.
        let _ = unsafe { libc::write(self.0, (&one as *const u64).cast(), 8) };
    }

    /// Sleeps until the eventfd is written (true) or a signal handler ran
    /// on this thread (false).
    fn wait_for_signal_or_write(&self) -> bool {
        let mut pfd = libc::pollfd {
            fd: self.0,
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            // SAFETY: one pollfd, ours.
            let n = unsafe { libc::poll(&mut pfd, 1, -1) };
            if n > 0 {
                return true;
            }
            if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                return false;
            }
        }
    }
}

impl Drop for EventFd {
    fn drop(&mut self) {
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(self.0) };
    }
}

/// Blocks every signal on the calling thread, so that the process's
/// signals go to its own threads, the waiting caller among them.
fn block_all_signals() {
    // SAFETY: a sigset filled by sigfillset, given to pthread_sigmask.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
    }
}

/// Whether the kernel would restart a lock wait after the handler that just
/// ran: which signal it was is not known here, so only if every handler
/// the process installed has SA_RESTART.
fn handlers_restart() -> bool {
    (1..=libc::SIGRTMAX()).all(|sig| {
        // SAFETY: reads the signal's disposition into a zeroed struct.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        if unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) } != 0 {
            return true;
        }
        let caught = old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN;
        !caught || old.sa_flags & libc::SA_RESTART != 0
    })
}
