//! The one client of the process: a `shoal_client::Client` (one multiplexed
//! connection per server, shared by every descriptor and thread) and the
//! tokio runtime its async API runs on, owned by the library.
//!
//! Fork: a child must never use its parent's sockets (replies would go to
//! whichever process reads first) nor its runtime (whose threads did not
//! survive the fork). Every call compares the pid that built the session with
//! the caller's; in a child the session is rebuilt from the cluster file's
//! contents (new runtime, new connections, opened lazily), and the parent's is
//! leaked, never dropped: dropping it would wait for threads that do not
//! exist in the child. Descriptors survive the fork (the table is memory),
//! with their offsets copied, not shared. `pthread_atfork` handlers (`fork`)
//! hold the library's locks across `fork` so that a child never starts with a
//! lock a vanished thread held.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, RwLockWriteGuard};

use shoal_client::{Client, Recalled};
use shoal_proto::cluster::{ClusterConfig, Settings};

use crate::error::{err, Result};
use crate::files;
use crate::recall_listener::{Listener, Sockets};

/// Worker threads of the library's runtime: they drive the sockets; the
/// caller's thread runs each call itself (`block_on`).
const WORKER_THREADS: usize = 2;

pub struct Session {
    pub client: Client,
    rt: tokio::runtime::Runtime,
    pid: u32,
    /// The effective uid that built it: a process that becomes another
    /// user gets a session of that user's (its connections prove who it
    /// was: the secret, or a credential for the old uid).
    euid: u32,
    flavor: Flavor,
    /// Reads the sockets between calls for lease recalls (`Caller` only).
    listener: Option<Arc<Listener>>,
}

/// How the library's runtime drives the sockets.
#[derive(Clone, Copy, Debug)]
pub enum Flavor {
    /// `WORKER_THREADS` threads of its own; the caller's thread waits while
    /// one of them reads the reply and wakes it. For long-lived programs
    /// with concurrent calls.
    Threads,
    /// The calling thread sends, polls the socket and reads the reply
    /// itself (concurrent callers take turns driving the sockets): no
    /// wake-up of another thread per reply, two context switches less per
    /// round trip, which on a busy machine is most of a short process's
    /// cost. Between calls, while the client holds leases, one thread of
    /// its own reads the sockets every few milliseconds for the servers'
    /// recalls (`recall_listener`), and `forget` runs on each before it is
    /// answered (the caller's own caches go). For `libshoal_preload.so`.
    Caller { forget: fn() },
}

impl Session {
    /// A session, and in the `Caller` flavor its recall listener; without
    /// one (no thread could start) it takes no leases.
    fn start(mut config: ClusterConfig, flavor: Flavor) -> Result<Arc<Session>> {
        let Flavor::Caller { forget } = flavor else {
            return Ok(Arc::new(Session::new(config, flavor, None)?));
        };
        let (send, receive) = std::sync::mpsc::channel();
        let listener = Listener::start(receive);
        if listener.is_none() {
            config.settings.lease_ms = 0;
        }
        let session = Arc::new(Session::new(config, flavor, listener)?);
        session.client.on_recall(Arc::new(move |_: &Recalled| {
            forget();
            Box::pin(std::future::ready(()))
        }));
        let _ = send.send(Arc::downgrade(&session));
        Ok(session)
    }

    fn new(
        config: ClusterConfig,
        flavor: Flavor,
        listener: Option<Arc<Listener>>,
    ) -> Result<Session> {
        let mut builder = match flavor {
            Flavor::Threads => {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(WORKER_THREADS).thread_name("shoal-io");
                b
            }
            Flavor::Caller { .. } => tokio::runtime::Builder::new_current_thread(),
        };
        let rt = builder.enable_all().build().map_err(|e| {
            err(
                libc::EAGAIN,
                format!("cannot start libshoal's runtime: {e}"),
            )
        })?;
        // Client::new registers nothing with the runtime (connections open
        // lazily), but entering it costs nothing and keeps that true.
        let client = {
            let _in_rt = rt.enter();
            Client::new(config)
        };
        // No readable secret and no credential from a broker: said now, so
        // that a caller (the preload library) can leave the cluster to the
        // mount instead of failing every call.
        if let Some(e) = client.cannot_connect() {
            return Err(e);
        }
        Ok(Session {
            client,
            rt,
            pid: std::process::id(),
            euid: euid(),
            flavor,
            listener,
        })
    }

    /// Runs `fut` to completion on the calling thread.
    pub fn run<T: Send>(&self, fut: impl std::future::Future<Output = T> + Send) -> T {
        if let Some(listener) = &self.listener {
            listener.before_call();
        }
        let out = self.run_quietly(fut);
        if let Some(listener) = &self.listener {
            listener.after_call(self);
        }
        out
    }

    /// [`run`](Self::run), without telling the recall listener (its own).
    ///
    /// On a thread whose thread-locals are gone, on a thread of its own:
    /// glibc's exit(3) runs the exiting thread's thread-local destructors
    /// first, then the program's atexit handlers and stdio's last flush, so a
    /// handler that writes to a Shoal file, or a stream left open on one,
    /// calls here after the runtime's context (a thread-local) was dropped,
    /// where `block_on` would panic and the bytes be lost.
    pub(crate) fn run_quietly<T: Send>(
        &self,
        fut: impl std::future::Future<Output = T> + Send,
    ) -> T {
        let gone =
            tokio::runtime::Handle::try_current().is_err_and(|e| e.is_thread_local_destroyed());
        if !gone {
            return self.rt.block_on(fut);
        }
        let run = || self.rt.block_on(fut);
        // SAFETY: the thread is joined before this function returns, so
        // nothing it borrows (self, the future's captures) ends before it.
        let thread = unsafe {
            std::thread::Builder::new()
                .name("shoal-late".into())
                .spawn_unchecked(run)
        };
        match thread.map(|t| t.join()) {
            Ok(Ok(out)) => out,
            // The caller's catch_unwind turns either into EIO.
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            Err(e) => panic!("no thread to finish a call at exit on: {e}"),
        }
    }
}

impl Sockets for Session {
    fn needs_listener(&self) -> bool {
        self.client.holds_leases() || self.client.holds_back()
    }

    fn drive(&self, until: impl std::future::Future<Output = ()> + Send) {
        self.run_quietly(until);
    }
}

pub struct Connected {
    cluster_file: PathBuf,
    config: ClusterConfig,
    /// shoal_connect calls not matched by shoal_disconnect yet.
    users: usize,
    session: Arc<Session>,
}

static STATE: RwLock<Option<Connected>> = RwLock::new(None);

pub type StateGuard = RwLockWriteGuard<'static, Option<Connected>>;

pub fn write_state() -> StateGuard {
    STATE.write().unwrap_or_else(|e| e.into_inner())
}

fn euid() -> u32 {
    // SAFETY: no arguments, cannot fail.
    unsafe { libc::geteuid() }
}

/// The session of this process; in a forked child, or once the process
/// acts as another user (setuid), a new one.
pub fn current() -> Result<Arc<Session>> {
    let ours = |s: &Session| s.pid == std::process::id() && s.euid == euid();
    {
        let state = STATE.read().unwrap_or_else(|e| e.into_inner());
        let c = state.as_ref().ok_or_else(not_connected)?;
        if ours(&c.session) {
            return Ok(c.session.clone());
        }
    }
    let mut state = write_state();
    let c = state.as_mut().ok_or_else(not_connected)?;
    if c.session.pid != std::process::id() {
        let fresh = Session::start(c.config.clone(), c.session.flavor)?;
        let parents = std::mem::replace(&mut c.session, fresh);
        std::mem::forget(parents);
    } else if !ours(&c.session) {
        // The same process as another user: what the old session holds back
        // goes first, as the user that wrote it; its connections close once
        // calls still running on it end.
        let fresh = Session::start(c.config.clone(), c.session.flavor)?;
        let old = std::mem::replace(&mut c.session, fresh);
        if let Err(e) = old.run(old.client.flush_all()) {
            eprintln!("libshoal: writes held back before a change of user were lost: {e}");
        }
    }
    Ok(c.session.clone())
}

/// The session if this process built it (never builds one: a forked child
/// that made no call has nothing of its own to send).
pub fn ours() -> Option<Arc<Session>> {
    let state = STATE.read().unwrap_or_else(|e| e.into_inner());
    let c = state.as_ref()?;
    (c.session.pid == std::process::id()).then(|| c.session.clone())
}

fn not_connected() -> shoal_client::ShoalError {
    err(
        libc::ENOTCONN,
        "not connected to a Shoal cluster: call shoal_connect first",
    )
}

/// Connects to the cluster described by `cluster_file` and, if `check`,
/// checks that every server answers (otherwise each server is connected to
/// when a call first needs it). Connecting again to the same file counts one
/// more user; to another file is EISCONN. The caller installs the fork
/// handlers (`fork`) and the send at exit (`held_back`) first.
pub fn connect(cluster_file: &Path, check: bool, flavor: Flavor) -> Result<()> {
    let canonical = std::fs::canonicalize(cluster_file).map_err(|e| {
        shoal_client::ShoalError::from(e)
            .context(format!("cluster file {}", cluster_file.display()))
    })?;
    let mut state = write_state();
    if let Some(c) = state.as_mut() {
        if c.cluster_file != canonical {
            return Err(err(
                libc::EISCONN,
                format!(
                    "already connected to {}; one cluster per process",
                    c.cluster_file.display()
                ),
            ));
        }
        c.users += 1;
        return Ok(());
    }
    let config = ClusterConfig::load(&canonical)?;
    let session = Session::start(config.clone(), flavor)?;
    if check {
        if let Err(e) = session.run(session.client.ping_all()) {
            return Err(e.context(format!("cluster {}", canonical.display())));
        }
    }
    *state = Some(Connected {
        cluster_file: canonical,
        config,
        users: 1,
        session,
    });
    Ok(())
}

/// Drops one user; the last closes every descriptor and the connections.
pub fn disconnect() -> Result<()> {
    let mut state = write_state();
    let c = state.as_mut().ok_or_else(not_connected)?;
    c.users -= 1;
    if c.users > 0 {
        return Ok(());
    }
    let c = state.take().expect("checked above");
    drop(state);
    let doomed = files::close_all();
    if c.session.pid != std::process::id() {
        // A child that made no call since fork: the parent's, never dropped.
        std::mem::forget(c.session);
        return Ok(());
    }
    // Buffered writes (the gathering path's) go before the connections do.
    let mut first_error = c.session.run(c.session.client.flush_all()).err();
    for h in doomed {
        if let Err(e) = c.session.run(c.session.client.reclaim(h)) {
            first_error.get_or_insert(e);
        }
    }
    // The runtime shuts down when the last call still running lets go of it.
    drop(c.session);
    first_error.map_or(Ok(()), Err)
}

/// The connected cluster's `cache_ttl_ms`.
pub fn settings() -> Option<Settings> {
    let state = STATE.read().unwrap_or_else(|e| e.into_inner());
    state.as_ref().map(|c| c.config.settings.clone())
}

pub fn is_connected() -> bool {
    STATE.read().unwrap_or_else(|e| e.into_inner()).is_some()
}
