//! The client itself: [`Client`], a user's view of one shared [`Inner`],
//! which holds the connections, caches and tables every operation's module
//! works on. The operations are `impl Client` blocks in their concern's
//! folder (`namespace`, `data`, `consistency`, `locks`); `wiring` builds a
//! client. This file imports only the state types, never an operation's
//! module, so that imports point one way (`scripts/import-graph`).

use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::time::Instant;

use shoal_proto::cluster::ClusterConfig;
use shoal_proto::error::{Result, ShoalError};
use shoal_proto::msg::{DirHints, PingReply};
use shoal_proto::{ops, Handle, Operation};

use crate::consistency::cache::TtlCache;
use crate::transport::pool::Pool;
use crate::types::{Attr, Cred};

/// A connection to a Shoal cluster.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
    pub(crate) cred: Cred,
}

pub(crate) struct Inner {
    pub(crate) pool: Arc<Pool>,
    /// Entries: the handle and the kind of object named.
    pub(crate) names: crate::consistency::name_cache::NameCache,
    pub(crate) attrs: TtlCache<Handle, Attr>,
    /// Directory hints as last seen, cached without a TTL (see `hints`).
    pub(crate) hints: TtlCache<Handle, DirHints>,
    /// Distributions: cached without a TTL, except stuffed ones (see [`DistCache`]).
    pub(crate) dists: crate::data::dists::DistCache,
    /// Capabilities for file data, per (file, caller).
    pub(crate) caps: TtlCache<(Handle, Cred), shoal_proto::msg::Capability>,
    /// Directories made here whose every entry is known (negative lookups
    /// without a message).
    pub(crate) known_dirs: crate::consistency::known_dirs::KnownDirs,
    /// The partitions known of split directories.
    pub(crate) partitions: crate::consistency::partition_maps::PartitionMaps,
    /// Round-robin cursor for placing new objects.
    pub(crate) next_server: AtomicU32,
    /// File changes acknowledged and not yet fsynced (unstable writes
    /// awaiting commit), with their servers' verifiers.
    pub(crate) uncommitted_writes: crate::data::uncommitted_writes::UncommittedWrites,
    /// Buffered writes: small writes held to send later (the gathering path).
    pub(crate) gathering: crate::data::gathering_buffer::Gathering,
    /// Large direct writes on their way, not yet answered.
    pub(crate) write_behind: crate::data::write_behind::WriteBehind,
    pub(crate) listings_ahead: crate::namespace::fetched_ahead::ListingsAhead,
    /// The objects servers leased to this client (`leases`).
    pub(crate) leases: crate::consistency::lease_ledger::Ledger,
    pub(crate) delegated: crate::consistency::delegations::DelegatedCreates,
}

impl Client {
    /// A client of `inner` acting for nobody in particular (root, or the
    /// one user a credential allows): for work that picks who it acts for
    /// itself.
    pub(crate) fn of(inner: Arc<Inner>) -> Client {
        let cred = inner.pool.own_cred();
        Client { inner, cred }
    }

    /// The same client acting as `cred`. Connections and caches are shared,
    /// except what depends on the caller's rights: names (a lookup needs
    /// search permission) and capabilities are cached per caller.
    pub fn with_cred(&self, cred: Cred) -> Client {
        Client {
            inner: self.inner.clone(),
            cred,
        }
    }

    pub fn cred(&self) -> Cred {
        self.cred
    }

    /// Why this client cannot open a connection at all (it can read no
    /// cluster secret and no broker issued it a credential), if so: known
    /// when it starts, before a call would fail with it.
    pub fn cannot_connect(&self) -> Option<ShoalError> {
        self.pool().authority().refused().cloned()
    }

    /// The user a credential from this node's broker lets this client act
    /// for, and no other; None if it holds the secret (or the cluster has
    /// none).
    pub fn credential_user(&self) -> Option<Cred> {
        self.pool().authority().user()
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
    pub fn on_recall(&self, hook: crate::consistency::lease_ledger::RecallHook) {
        self.inner.leases.set_hook(hook);
    }

    /// Drops everything cached about `handle`.
    pub fn forget(&self, handle: Handle) {
        self.inner.attrs.remove(&handle);
        self.inner.known_dirs.forget(handle);
    }

    /// Gives back what is cached of objects a front end no longer knows (the
    /// kernel forgot their inodes): their attributes, layouts, leases
    /// noted, a directory's hints and names, what is known of a directory
    /// unless a delegation or a change of its own needs it, and the files
    /// made there under its delegation. Each is fetched again if asked for
    /// (an unlink of a file made here goes to the server). Capabilities,
    /// cached per caller, go by eviction.
    pub fn forget_many(&self, handles: &[Handle]) {
        let inner = &self.inner;
        inner.attrs.remove_many(handles);
        inner.dists.remove_many(handles);
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
        inner.dists.compact();
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
            TableSize::new("layouts", inner.dists.entries(), entries),
            TableSize::new("hints", inner.hints.entries(), entries),
            TableSize::new("capabilities", inner.caps.entries(), entries),
            TableSize::new("leases", inner.leases.len(), entries),
            TableSize::new(
                "known_dirs",
                known_dirs,
                crate::consistency::known_dirs::MAX_DIRS,
            ),
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
