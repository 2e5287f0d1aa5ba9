//! Lease recalls between calls, for the `Caller` flavor (the preload
//! library).
//!
//! In that flavor no thread of the library reads the sockets: each caller
//! drives them while it waits for its own reply, which saves a thread
//! wake-up per round trip. A server's lease recall that arrives between
//! calls would wait for the process's next call, perhaps past the server's
//! bound (`lease_recall_ms`), which would cost the process its connections
//! and hold the changing client up that long; and the creates and unlinks
//! the client answered under a directory delegation are sent by a timer
//! that only a thread driving the runtime runs. So while the client may
//! hold a lease or holds such changes, this thread drives the runtime
//! itself once no call has run for [`QUIET`]: it sleeps in the runtime's
//! wait for the sockets, so a recall is read, the client's caches of its
//! objects dropped and the recall answered as soon as it arrives. A call
//! that begins meanwhile tells it to let the runtime go (one wake-up of
//! this thread), and drives the sockets itself. While there is nothing of
//! the kind the thread sleeps until a call returns leaving some.
//!
//! Cost: a recall to a process that is between calls but made one in the
//! last [`QUIET`] waits for the rest of it; a process making calls wakes
//! this thread every [`QUIET`], and once per spell of calls after one
//! without any (the call that ends the spell of listening).

use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// How long after the last call ends the thread starts listening: calls
/// closer together than this drive the sockets themselves, and this thread
/// stays out of their way. Well inside the servers' bound for an answer
/// (`lease_recall_ms`, 1 s by default).
pub const QUIET: Duration = Duration::from_millis(1);
/// The longest the thread listens at a time before it looks again at
/// whether the session still exists and needs it.
const LISTEN: Duration = Duration::from_millis(100);
/// A sleeping listener looks at whether its session still exists this
/// often, so that it ends after the last disconnect.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// What a listener reads the sockets of: the session.
pub trait Sockets {
    /// Whether the client holds a lease, which a server may recall, or
    /// what it holds back (changes it answered itself, buffered writes),
    /// which timers on its runtime send.
    fn needs_listener(&self) -> bool;
    /// Drives the runtime on the calling thread until `until` completes:
    /// the connections' reader tasks read what arrives.
    fn drive(&self, until: impl std::future::Future<Output = ()> + Send);
}

pub struct Listener {
    /// Sleeping until a call returns leaving it something to do.
    parked: AtomicBool,
    woken: Mutex<bool>,
    wake: Condvar,
    /// Calls running now.
    in_calls: AtomicUsize,
    /// When the last call ended, in nanoseconds from `start`.
    last_end: AtomicU64,
    start: Instant,
    /// Driving the runtime, waiting for the sockets.
    listening: AtomicBool,
    /// Told by a call that begins while the thread listens: let it go.
    release: Notify,
}

impl Listener {
    fn new() -> Listener {
        Listener {
            parked: AtomicBool::new(false),
            woken: Mutex::new(false),
            wake: Condvar::new(),
            in_calls: AtomicUsize::new(0),
            last_end: AtomicU64::new(0),
            start: Instant::now(),
            listening: AtomicBool::new(false),
            release: Notify::new(),
        }
    }

    /// Starts a listener thread for the session `session` will send (it
    /// ends once that session is gone, or if none is sent). None if no
    /// thread could start: the session must then take no leases, since
    /// nothing would answer their recalls between calls.
    pub fn start<S: Sockets + Send + Sync + 'static>(
        session: mpsc::Receiver<Weak<S>>,
    ) -> Option<Arc<Listener>> {
        let listener = Arc::new(Listener::new());
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

    /// A call is about to drive the runtime: if the thread listens, it lets
    /// the runtime go.
    pub fn before_call(&self) {
        self.in_calls.fetch_add(1, Ordering::SeqCst);
        // Against `run`'s store of `listening` and load of `in_calls`, in
        // the other order: either it sees this call and does not listen, or
        // this sees it listening and releases it (a permit, if it has not
        // begun to wait yet).
        if self.listening.load(Ordering::SeqCst) {
            self.release.notify_one();
        }
    }

    /// A call of `session` returned: if it left the client needing the
    /// listener while it sleeps, wake it (one wake-up per idle spell).
    pub fn after_call(&self, session: &impl Sockets) {
        let now = self.start.elapsed().as_nanos() as u64;
        self.last_end.fetch_max(now, Ordering::SeqCst);
        self.in_calls.fetch_sub(1, Ordering::SeqCst);
        // Against `park`'s store and check, in the other order: one of the
        // two sides sees the other's (a lease noted, the listener parked).
        fence(Ordering::SeqCst);
        if self.parked.load(Ordering::SeqCst) && session.needs_listener() {
            *self.woken.lock().unwrap_or_else(|p| p.into_inner()) = true;
            self.wake.notify_one();
        }
    }

    /// How long no call has run (zero while one does).
    fn quiet_for(&self) -> Duration {
        if self.in_calls.load(Ordering::SeqCst) > 0 {
            return Duration::ZERO;
        }
        let last = Duration::from_nanos(self.last_end.load(Ordering::SeqCst));
        self.start.elapsed().saturating_sub(last)
    }

    fn run(&self, session: Weak<impl Sockets>) {
        loop {
            let Some(s) = session.upgrade() else {
                return;
            };
            if !s.needs_listener() {
                drop(s);
                self.park(|| session.upgrade().is_some_and(|s| s.needs_listener()));
                continue;
            }
            let quiet = self.quiet_for();
            if quiet < QUIET {
                drop(s);
                std::thread::sleep(QUIET - quiet);
                continue;
            }
            self.listening.store(true, Ordering::SeqCst);
            if self.in_calls.load(Ordering::SeqCst) == 0 {
                s.drive(async {
                    tokio::select! {
                        _ = self.release.notified() => {}
                        _ = tokio::time::sleep(LISTEN) => {}
                    }
                });
            }
            self.listening.store(false, Ordering::SeqCst);
        }
    }

    /// Sleeps until [`after_call`](Self::after_call) wakes it, or
    /// [`IDLE_CHECK`] has passed; not at all if `needed` says a call left
    /// it something to do just before it began to.
    fn park(&self, needed: impl Fn() -> bool) {
        let mut woken = self.woken.lock().unwrap_or_else(|p| p.into_inner());
        self.parked.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if !*woken && !needed() {
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
