//! Lease recalls between calls, for the `Caller` flavor (the preload
//! library).
//!
//! In that flavor no thread of the library reads the sockets: each caller
//! drives them while it waits for its own reply, which saves a thread
//! wake-up per round trip. A server's lease recall that arrives between
//! calls would wait for the process's next call, perhaps past the server's
//! bound (`lease_recall_ms`), which would cost the process its connections
//! and hold the changing client up that long. So while the client may hold
//! a lease, this thread drives the runtime for a moment every [`POLL`]: the
//! connections' reader tasks read what arrived, a recall among it, drop
//! what the client cached of its objects and answer. A call in progress
//! drives the sockets itself meanwhile. While nothing is leased the thread
//! sleeps until a call returns holding a lease.
//!
//! Cost: a recall to a process between calls waits up to [`POLL`] for its
//! answer; a process holding leases wakes every [`POLL`] until they end
//! (`lease_ms` after its last call that got one).

use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, Weak};
use std::time::Duration;

/// How often the sockets are read between calls while leases are held:
/// well inside the servers' bound for an answer (`lease_recall_ms`, 1 s
/// by default).
pub const POLL: Duration = Duration::from_millis(10);
/// How long each look at the sockets drives the runtime.
const DRIVE: Duration = Duration::from_micros(500);
/// A sleeping listener looks at whether its session still exists this
/// often, so that it ends after the last disconnect.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// What a listener reads the sockets of: the session.
pub trait Sockets {
    /// Whether the client holds a lease, which a server may recall.
    fn holds_leases(&self) -> bool;
    /// Drives the runtime for `time`, on the calling thread: the
    /// connections' reader tasks read what arrived.
    fn drive(&self, time: Duration);
}

#[derive(Default)]
pub struct Listener {
    /// Sleeping until a call returns holding a lease.
    parked: AtomicBool,
    woken: Mutex<bool>,
    wake: Condvar,
}

impl Listener {
    /// Starts a listener thread for the session `session` will send (it
    /// ends once that session is gone, or if none is sent). None if no
    /// thread could start: the session must then take no leases, since
    /// nothing would answer their recalls between calls.
    pub fn start<S: Sockets + Send + Sync + 'static>(
        session: mpsc::Receiver<Weak<S>>,
    ) -> Option<Arc<Listener>> {
        let listener = Arc::new(Listener::default());
        let me = listener.clone();
        let started = std::thread::Builder::new()
            .name("shoal-recalls".into())
            .spawn(move || {
                if let Ok(session) = session.recv() {
                    me.run(session);
                }
            });
        match started {
            Ok(_) => Some(listener),
            Err(e) => {
                eprintln!("libshoal: no thread to answer lease recalls, so no leases: {e}");
                None
            }
        }
    }

    /// A call of `session` returned: if it left the client holding a lease
    /// while the listener sleeps, wake it (one wake-up per idle spell).
    pub fn after_call(&self, session: &impl Sockets) {
        // Against `park`'s store and check, in the other order: one of the
        // two sides sees the other's (a lease noted, the listener parked).
        fence(Ordering::SeqCst);
        if self.parked.load(Ordering::SeqCst) && session.holds_leases() {
            *self.woken.lock().unwrap_or_else(|p| p.into_inner()) = true;
            self.wake.notify_one();
        }
    }

    fn run(&self, session: Weak<impl Sockets>) {
        loop {
            let Some(s) = session.upgrade() else {
                return;
            };
            if s.holds_leases() {
                s.drive(DRIVE);
                drop(s);
                std::thread::sleep(POLL);
            } else {
                drop(s);
                self.park(|| session.upgrade().is_some_and(|s| s.holds_leases()));
            }
        }
    }

    /// Sleeps until [`after_call`](Self::after_call) wakes it, or
    /// [`IDLE_CHECK`] has passed; not at all if `leased` says a call got a
    /// lease just before it began to.
    fn park(&self, leased: impl Fn() -> bool) {
        let mut woken = self.woken.lock().unwrap_or_else(|p| p.into_inner());
        self.parked.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if !*woken && !leased() {
            woken = self
                .wake
                .wait_timeout(woken, IDLE_CHECK)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        *woken = false;
        self.parked.store(false, Ordering::SeqCst);
    }
}
