//! Shoal's native client library: the system interface every other front end
//! (FUSE mount, `shoal` CLI, C ABI) is built on.
//!
//! A [`Client`] holds one multiplexed connection per server (`pool`), name and
//! attribute caches with a short TTL ([`cache`]), and implements the namespace
//! (`namespace`), attribute (`attrs`) and striped data (`io`) operations,
//! whose data requests carry the capabilities the servers grant (`caps`).
//! Clones are cheap and share everything; [`Client::with_cred`] gives a view
//! that acts as another user (the servers check each request against the
//! user it names).
//!
//! Other crates see the [`Client`] and its types, [`cache::TtlCache`] (the
//! mount keeps callers' groups in one), [`fsck`]'s report and [`mounts`] (how
//! a path under a live mount names its cluster); the rest is private.

mod attrs;
mod auto_threshold;
pub mod cache;
mod caps;
mod conn;
mod delegated_creates;
pub mod fsck;
mod gathering_server;
mod held_locks;
mod hints;
mod io;
mod kept_changes;
mod known_dirs;
mod landing;
mod leases;
mod listings_ahead;
mod locks;
pub mod mounts;
mod name_cache;
mod namespace;
mod open_files;
mod pool;
mod readdirplus;
mod types;
mod uncommitted_writes;
mod write_back;
mod write_behind;
mod write_path;

use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shoal_proto::cluster::ClusterConfig;
use shoal_proto::error::Result;
use shoal_proto::msg::{DirHints, Distribution, PingReply};
use shoal_proto::{ops, Handle, Operation};

pub use conn::Recalled;
pub use delegated_creates::MAX_UNSETTLED;
pub use landing::{Landing, ReadData};
pub use leases::RecallHook;
pub use listings_ahead::ReadAhead;
pub use locks::{LockAsk, LockConflict, LockKind};
pub use open_files::OpenFiles;
pub use shoal_proto::error::{Errno, ShoalError};
pub use types::*;
pub use uncommitted_writes::MAX_KEPT_BYTES;
pub use write_behind::AUTO_KEEPS_UNDER;
pub use write_path::{WritePaths, THRESHOLD_XATTR};

use cache::TtlCache;
use pool::Pool;

/// A connection to a Shoal cluster.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    cred: Cred,
}

struct Inner {
    pool: Arc<Pool>,
    /// Entries: the handle and the kind of object named.
    names: name_cache::NameCache,
    attrs: TtlCache<Handle, Attr>,
    /// Directory hints as last seen, kept without a TTL (see `hints`).
    hints: TtlCache<Handle, DirHints>,
    /// Distributions: kept without a TTL, except stuffed ones (see [`DistCache`]).
    dists: DistCache,
    /// Capabilities for file data, per (file, caller).
    caps: caps::Caps,
    /// Directories made here whose every entry is known (negative lookups
    /// without a message).
    known_dirs: known_dirs::KnownDirs,
    /// Round-robin cursor for placing new objects.
    next_server: AtomicU32,
    /// File changes acknowledged and not yet fsynced (unstable writes
    /// awaiting commit), with their servers' verifiers.
    uncommitted_writes: uncommitted_writes::UncommittedWrites,
    /// Small writes kept to send later (the gathering path).
    gathering: write_path::Gathering,
    /// Large direct writes on their way, not yet answered.
    write_behind: write_behind::WriteBehind,
    listings_ahead: listings_ahead::ListingsAhead,
    /// The objects servers leased to this client (`leases`).
    leases: leases::Ledger,
    delegated: delegated_creates::DelegatedCreates,
}

impl Client {
    /// A client of the cluster described by `config`. Connections open lazily;
    /// call [`Client::ping_all`] to check that every server answers.
    pub fn new(config: ClusterConfig) -> Client {
        let ttl = Duration::from_millis(config.settings.cache_ttl_ms);
        let entries = config.settings.cache_entries as usize;
        let known_names = config.settings.known_names as usize;
        let first = std::process::id() % config.num_servers();
        let delay = Duration::from_millis(config.settings.delegated_flush_ms as u64);
        let client = Client {
            inner: Arc::new_cyclic(|me| Inner {
                names: name_cache::NameCache::new(ttl, entries),
                attrs: TtlCache::bounded(ttl, entries),
                hints: TtlCache::bounded(cache::FOREVER, entries),
                dists: DistCache::new(ttl, entries),
                caps: TtlCache::bounded(caps::keep_for(config.settings.capability_ttl_s), entries),
                known_dirs: known_dirs::KnownDirs::new(ttl, known_names),
                next_server: AtomicU32::new(first),
                uncommitted_writes: Default::default(),
                gathering: Default::default(),
                write_behind: Default::default(),
                listings_ahead: Default::default(),
                leases: leases::Ledger::new(entries),
                delegated: delegated_creates::DelegatedCreates::new(delay, known_names),
                pool: Pool::new(config, leases::on_recall(me.clone())),
            }),
            cred: current_cred(),
        };
        let fence = namespace::delegated::fence(Arc::downgrade(&client.inner));
        client.inner.pool.set_fence(fence);
        client
    }

    /// A client of `inner` acting for nobody in particular: for work that
    /// picks who it acts for itself.
    fn of(inner: Arc<Inner>) -> Client {
        Client {
            inner,
            cred: Cred::ROOT,
        }
    }

    /// The same client acting as `cred`. Connections and caches are shared,
    /// except what depends on the caller's rights: names (a lookup needs
    /// search permission) and capabilities are kept per caller.
    pub fn with_cred(&self, cred: Cred) -> Client {
        Client {
            inner: self.inner.clone(),
            cred,
        }
    }

    pub fn cred(&self) -> Cred {
        self.cred
    }

    pub fn config(&self) -> &ClusterConfig {
        self.inner.pool.config()
    }

    pub fn num_servers(&self) -> u32 {
        self.config().num_servers()
    }

    pub(crate) fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// Checks that every server answers and owns the id the cluster file gives it.
    pub async fn ping_all(&self) -> Result<()> {
        let pings = (0..self.num_servers()).map(|s| async move {
            let reply: PingReply = self
                .pool()
                .call::<ops::Ping>(s, self.cred, &shoal_proto::msg::Empty {})
                .await?;
            if reply.server_id != s {
                return Err(ShoalError::invalid(format!(
                    "server at the address of id {s} says it is server {}",
                    reply.server_id
                )));
            }
            Ok(())
        });
        futures::future::try_join_all(pings).await?;
        Ok(())
    }

    /// Sends one raw protocol request to `server` (administration tools and
    /// tests that must take single steps, e.g. to leave what a crash leaves).
    pub async fn call<O: Operation>(&self, server: u32, request: &O::Request) -> Result<O::Reply> {
        self.pool().call::<O>(server, self.cred, request).await
    }

    /// [`Client::call`] with raw bytes after the request (file data).
    pub async fn call_with_payload<O: Operation>(
        &self,
        server: u32,
        request: &O::Request,
        payload: bytes::Bytes,
    ) -> Result<O::Reply> {
        let pool = self.pool();
        let (reply, _) = pool
            .call_with_payload::<O>(server, self.cred, request, payload)
            .await?;
        Ok(reply)
    }

    /// Next server for a new object, round robin from a per-process start.
    pub(crate) fn pick_server(&self) -> u32 {
        self.inner
            .next_server
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            % self.num_servers()
    }

    /// Until when a server leases `h` to this client, if it does now: what
    /// this client caches of it stays right until then, unless recalled.
    pub fn lease_until(&self, h: Handle) -> Option<Instant> {
        self.inner.leases.until(h)
    }

    /// Whether a server may still recall a lease it gave this client.
    pub fn holds_leases(&self) -> bool {
        self.inner.leases.any_held()
    }

    /// [`lease_until`](Self::lease_until) of each handle, at once.
    pub fn leases_until(&self, handles: &[Handle]) -> Vec<Option<Instant>> {
        self.inner.leases.until_many(handles)
    }

    /// Runs `hook` on every lease recall, after the client dropped what it
    /// cached and before it answers the server (the mount drops the
    /// kernel's caches there). One hook per client.
    pub fn on_recall(&self, hook: RecallHook) {
        self.inner.leases.set_hook(hook);
    }

    /// Drops everything cached about `handle`.
    pub fn forget(&self, handle: Handle) {
        self.inner.attrs.remove(&handle);
        self.inner.known_dirs.forget(handle);
    }

    /// Gives back what is kept of objects a front end no longer knows (the
    /// kernel forgot their inodes): their attributes, layouts, leases
    /// noted, a directory's hints and names, what is known of a directory
    /// unless a delegation or a change of its own needs it, and the files
    /// made there under its delegation. Each is fetched again if asked for
    /// (an unlink of a file made here goes to the server). Capabilities, kept per caller, go by
    /// eviction.
    pub fn forget_many(&self, handles: &[Handle]) {
        let inner = &self.inner;
        inner.attrs.remove_many(handles);
        inner.dists.map.remove_many(handles);
        inner.hints.remove_many(handles);
        inner.leases.forget(handles);
        inner.names.remove_dirs(handles);
        inner.known_dirs.evict(handles);
        inner.delegated.forget(handles);
    }

    /// Drops what has expired from the caches and gives back the room of
    /// what was evicted or forgotten (after the kernel forgot many inodes).
    pub fn compact(&self) {
        let inner = &self.inner;
        inner.names.compact();
        inner.attrs.compact();
        inner.dists.map.compact();
        inner.hints.compact();
        inner.caps.compact();
        inner.leases.compact();
    }

    /// The size of each of the client's bounded caches and tables, with
    /// its bound, for the mount's stats.
    pub fn table_sizes(&self) -> Vec<TableSize> {
        let inner = &self.inner;
        let settings = &self.config().settings;
        let entries = settings.cache_entries as usize;
        let (known_dirs, known_names) = inner.known_dirs.len();
        vec![
            TableSize::new("names", inner.names.len(), entries),
            TableSize::new("attrs", inner.attrs.entries(), entries),
            TableSize::new("layouts", inner.dists.map.entries(), entries),
            TableSize::new("hints", inner.hints.entries(), entries),
            TableSize::new("capabilities", inner.caps.entries(), entries),
            TableSize::new("leases", inner.leases.len(), entries),
            TableSize::new("known_dirs", known_dirs, known_dirs::MAX_DIRS),
            TableSize::new("known_names", known_names, settings.known_names as usize),
            TableSize::new(
                "made_here",
                inner.delegated.made(),
                settings.known_names as usize,
            ),
        ]
    }
}

/// One bounded table's size and bound (entries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableSize {
    pub name: &'static str,
    pub len: usize,
    pub max: usize,
}

impl TableSize {
    pub fn new(name: &'static str, len: usize, max: usize) -> TableSize {
        TableSize { name, len, max }
    }
}

/// Cached distributions. A distribution never changes once set, except that a
/// stuffed one (stuffing) is replaced once by its unstuffed form, by whichever
/// client first goes past the first strip. So unstuffed distributions are kept
/// without a TTL, and stuffed ones count as current only for the attribute
/// TTL: another client sees the new layout as soon as it sees the new size.
/// Past the TTL a stuffed layout is still kept for accesses within the first
/// strip, where it is right whatever happened since: datafile 0 never changes.
pub(crate) struct DistCache {
    ttl: Duration,
    /// A distribution and, for a stuffed one, when it was seen (one map, so
    /// that a readdirplus batch's puts cost one lock each).
    map: TtlCache<Handle, (Distribution, Option<Instant>)>,
}

impl DistCache {
    fn new(stuffed_ttl: Duration, max: usize) -> DistCache {
        DistCache {
            ttl: stuffed_ttl,
            map: TtlCache::bounded(cache::FOREVER, max),
        }
    }

    /// The current distribution of `h`, if known.
    pub(crate) fn get(&self, h: &Handle) -> Option<Distribution> {
        match self.map.get(h)? {
            (d, None) => Some(d),
            (d, Some(at)) => (at.elapsed() < self.ttl).then_some(d),
        }
    }

    /// A layout of `h` seen at any time, stuffed or not: good for what an
    /// unstuff keeps (its strip size, its write threshold).
    pub(crate) fn seen(&self, h: &Handle) -> Option<Distribution> {
        self.map.get(h).map(|(d, _)| d)
    }

    /// A stuffed layout of `h` seen at any time: good for its first strip only.
    pub(crate) fn stuffed_layout(&self, h: &Handle) -> Option<Distribution> {
        self.map.get(h).filter(|(d, _)| d.stuffed).map(|(d, _)| d)
    }

    pub(crate) fn put(&self, h: Handle, dist: Distribution) {
        self.put_many([(h, dist)]);
    }

    /// Drops a stuffed layout of `h` (another client may have unstuffed it).
    pub(crate) fn forget_stuffed(&self, h: Handle) {
        if self.stuffed_layout(&h).is_some() {
            self.map.remove(&h);
        }
    }

    /// Several at once, under one lock (a listing's).
    pub(crate) fn put_many(&self, dists: impl IntoIterator<Item = (Handle, Distribution)>) {
        let now = Instant::now();
        self.map.put_many(dists.into_iter().map(|(h, d)| {
            let seen = d.stuffed.then_some(now);
            (h, (d, seen))
        }));
    }
}
