//! A server's state ([`Service`]: its stores, commit queue, pools and
//! peers), what a handler returns ([`Reply`]; what it gets is a
//! `request::Request`), and the shell of every change to the metadata
//! ([`Service::change`]). How a frame is handled is `handlers`' business
//! (`Service::handle` is there, beside the operation table), so that
//! nothing here depends on a handler.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use prost::Message;
use shoal_proto::auth::Secret;
use shoal_proto::cluster::{ClusterConfig, SyncMode};
use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::{crash_points, Handle};

use crate::client_table::ClientTable;
use crate::commit::CommitQueue;
use crate::data_store::DataStore;
use crate::delegations::Stop;
use crate::gathering::Gathering;
use crate::keys;
use crate::kv::{KvEngine, RedbEngine, WalEngine};
use crate::leases::Leases;
use crate::locks::Locks;
use crate::meta_store::{MetaStore, Txn};
use crate::pools::Pools;
use crate::recovery::Recovery;
use crate::replay::Kept;
use crate::reply_cache::ReplyCache;
use crate::request::Request;
use crate::split_queue::Splits;
use crate::stats::Stats;

pub struct Service {
    pub id: u32,
    pub config: ClusterConfig,
    pub data_dir: std::path::PathBuf,
    pub meta: Arc<MetaStore>,
    pub data: DataStore,
    pub commit: CommitQueue,
    /// Precreate pools and the connections to the other servers.
    pub pools: Arc<Pools>,
    /// Small writes clients sent here to merge (server write gathering).
    pub gathering: Gathering,
    /// Replies of requests that must not be done twice, for their copies.
    pub replies: ReplyCache,
    /// Clients that may hold changes not durable here (`sync = "replay"`).
    pub clients: ClientTable,
    /// What a restart with `sync = "replay"` waits for before it serves.
    pub recovery: Recovery,
    /// What clients cache of this server's objects until it recalls it.
    pub leases: Leases,
    /// The POSIX record locks on this server's files.
    pub locks: Locks,
    pub stats: Stats,
    pub started: Instant,
    /// Drawn at start: file data acknowledged by this process and not yet
    /// fsynced dies with it, and clients tell by a changed verifier.
    pub verifier: u64,
    /// The cluster secret, which signs and checks capabilities; `None` on a
    /// scratch cluster (no capabilities: data requests are not checked).
    pub secret: Option<Secret>,
    /// Directory partitions queued to split (`partitions`).
    pub splits: Splits,
}

/// What a handler returns: its reply message `M` (the reply of its
/// operation, see the table in `handlers`), raw payload, syncs it took.
#[derive(Default)]
pub struct Reply<M> {
    pub message: M,
    pub payload: Bytes,
    pub syncs: u64,
}

impl<M: Message> Reply<M> {
    pub fn new(message: M) -> Reply<M> {
        Reply {
            message,
            payload: Bytes::new(),
            syncs: 0,
        }
    }
    pub fn with_syncs(mut self, syncs: u64) -> Reply<M> {
        self.syncs = syncs;
        self
    }
    /// The reply as it goes on the wire.
    pub fn encode(self) -> Encoded {
        Encoded {
            body: Bytes::from(self.message.encode_to_vec()),
            payload: self.payload,
            syncs: self.syncs,
        }
    }
}

/// A reply encoded: body, raw payload, syncs it took.
pub struct Encoded {
    pub body: Bytes,
    pub payload: Bytes,
    pub syncs: u64,
}

impl Service {
    /// Opens server `id` of `config` with its on-disk KV store.
    pub fn open(config: ClusterConfig, id: u32) -> Result<Service> {
        let entry = config.server(id)?.clone();
        let store = RedbEngine::open(&entry.data)?;
        let kv: Arc<dyn KvEngine> = if config.settings.metadata_log {
            Arc::new(WalEngine::open(store, &entry.data)?)
        } else {
            Arc::new(WalEngine::retire(store, &entry.data)?)
        };
        Service::with_engine(config, id, kv, &entry.data)
    }

    pub fn with_engine(
        config: ClusterConfig,
        id: u32,
        kv: Arc<dyn KvEngine>,
        data_dir: &Path,
    ) -> Result<Service> {
        let secret = config.secret()?;
        let replies = ReplyCache::open(&*kv)?;
        let clients = ClientTable::open(&*kv)?;
        let meta = MetaStore::open(kv, id)?;
        let verifier = rand::random::<u64>().max(1);
        let recovery = if config.settings.sync == SyncMode::Replay {
            recovery_after_start(&meta, &clients, &config, verifier)?
        } else {
            Recovery::none()
        };
        let data = DataStore::new(
            data_dir,
            config.settings.inline_max,
            config.settings.uncached_reads.into(),
        )?;
        let pools = Arc::new(Pools::open(&config, id, &meta)?);
        Ok(Service {
            pools,
            gathering: Gathering::default(),
            replies,
            clients,
            recovery,
            leases: Leases::new(&config.settings),
            locks: Locks::open(data_dir),
            id,
            commit: CommitQueue::from_settings(&config.settings),
            config,
            data_dir: data_dir.to_path_buf(),
            meta: Arc::new(meta),
            data,
            stats: Stats::default(),
            started: Instant::now(),
            verifier,
            secret,
            splits: Splits::default(),
        })
    }

    /// Whether the changes request `r` makes are answered once applied,
    /// without waiting for a sync (`change`): every change with `sync =
    /// "none"`; with `sync = "replay"`, a client's metadata change once the
    /// client is in the client table. Such a change stays in memory unless
    /// its handler needs a local file or another server (each handler's own
    /// check, see `handlers`).
    pub fn answers_before_sync(&self, r: &Request) -> bool {
        let client = r.header.client.client;
        match self.config.settings.sync {
            SyncMode::None => true,
            SyncMode::Replay => {
                client != 0 && r.header.op.modifies_metadata() && self.clients.knows(client)
            }
            SyncMode::Full => false,
        }
    }

    /// Connection `conn` of `client` ended: if it was the one that took
    /// the client's recalls, the client's leases and directory delegations
    /// end with it.
    pub fn disconnected(&self, client: u64, conn: u64) {
        if self.leases.disconnected(client, conn) {
            self.meta.delegations.client_gone(client);
        }
    }

    /// Runs `build` under the store lock to read what it needs for request
    /// `r` and fill a transaction, applies it, then (lock released) waits
    /// until it is durable. Returns what `build` returned and the syncs it
    /// took (with commit coalescing, 0 when another request's sync covered
    /// this change); stops where `build` stops (an error, or a delegation
    /// it met), having applied nothing.
    ///
    /// `make_durable` is where the request leaves the commit queue's scheduling
    /// queue (its changes are applied: it spends `r`'s ticket) and decides to
    /// sync now or defer; it must run after `apply` and without the store
    /// lock, so that requests applying behind this one can join the same sync.
    ///
    /// The reply `build` says answers the change (`Txn::record_reply`) goes
    /// into the change's own transaction when `r`'s replies are cached: a
    /// restart keeps both or neither (see `reply_cache`).
    ///
    /// With `sync = "replay"`, a change from a client in the client table
    /// does not wait: its place in the commit sequence goes back with the
    /// reply (`r`'s kept change, `replay`), and the client keeps the request
    /// until it is durable. A client's first such change enters it into the
    /// table, and waits for the disk like any other.
    ///
    /// Before it returns, the leases other clients hold on the objects the
    /// change touched are recalled (`leases`), and the change's stamps are
    /// noted as `r`'s own (they do not refuse its answer's leases).
    pub fn change<T>(
        &self,
        r: &Request,
        build: impl FnOnce(&mut Txn) -> Result<T, Stop>,
    ) -> Result<(T, u64), Stop> {
        let kept = r.kept();
        let guard = self.meta.lock();
        let mut txn = Txn::new(kept);
        let out = build(&mut txn)?;
        if let Some(kept) = kept {
            kept.misfit()?;
        }
        if let Some(reply) = txn.reply.take() {
            if let Some((client, id)) = r.reply_to_record() {
                self.replies.record(&mut txn, client, id, &reply);
            }
        }
        let entering = kept.map(Kept::client).filter(|c| !self.clients.knows(*c));
        if let Some(client) = entering {
            self.clients.enter(&mut txn, client);
        }
        let touched = txn.objects_touched();
        self.meta.apply(txn)?;
        let seq = self.meta.applied_seq();
        if let Some(kept) = kept {
            self.clients.changed(kept.client(), seq);
        }
        drop(guard);
        // Applied, not yet answered: whoever else cached these objects
        // drops them before the change returns.
        self.leases.changed(&mut r.leasing(), &touched);
        shoal_proto::crash_point!(crash_points::COMMIT_AFTER_APPLY);
        let syncs = match kept {
            Some(kept) if entering.is_none() => {
                kept.applied_as(seq);
                0
            }
            _ => self
                .commit
                .make_durable(r.take_ticket(), &self.meta, &self.stats)?,
        };
        shoal_proto::crash_point!(crash_points::COMMIT_BEFORE_REPLY);
        Ok((out, syncs))
    }

    /// A change the server makes for itself (a split's steps, `partitions`):
    /// applied under the store's lock like a request's, every lease on
    /// what it touched recalled, and durable before it returns whatever
    /// `sync` says, as another server acts on it next. Nothing touched,
    /// nothing applied.
    pub fn change_itself<T>(
        &self,
        build: impl FnOnce(&mut Txn) -> Result<T, ShoalError>,
    ) -> Result<T, ShoalError> {
        let guard = self.meta.lock();
        let mut txn = Txn::new(None);
        let out = build(&mut txn)?;
        let touched = txn.objects_touched();
        if touched.is_empty() {
            return Ok(out);
        }
        self.meta.apply(txn)?;
        drop(guard);
        self.leases
            .changed(&mut crate::leases::Answer::default(), &touched);
        self.commit.sync_now(&self.meta, &self.stats)?;
        Ok(out)
    }

    /// Deletes the cached replies that have outlived `reply_cache::TTL`
    /// (not durably: they ride the next sync).
    pub fn forget_old_replies(&self) -> Result<()> {
        let _guard = self.meta.lock();
        let mut txn = Txn::default();
        self.replies.expire(&mut txn);
        self.meta.apply(txn)
    }

    /// The group flush (`sync = "replay"`): takes the clients whose changes
    /// were all durable at the previous flush, `durable`, out of the client
    /// table (not while recovering: the table is what recovery waits for),
    /// and makes everything applied durable. Returns the syncs it took.
    /// Nothing to flush, nothing done: a retirement waits for a flush that
    /// changes need anyway.
    pub fn group_flush(&self, durable: u64) -> Result<u64> {
        if self.meta.durable_seq() >= self.meta.applied_seq() {
            return Ok(0);
        }
        self.retire_clients(durable)?;
        shoal_proto::crash_point!(crash_points::GROUP_FLUSH);
        self.stats
            .replay_flushes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.commit.sync_now(&self.meta, &self.stats)
    }

    /// At a clean stop: empties the client table and makes everything
    /// applied durable, so no client holds a change the store lacks and the
    /// next start waits for none (a stop during recovery keeps the table:
    /// its clients still hold what they came to replay).
    pub fn stop_durably(&self) -> Result<()> {
        self.locks.stopped();
        self.retire_clients(u64::MAX)?;
        self.meta.sync()
    }

    /// Takes out of the client table every client whose last change is at
    /// or before `durable`, unless the server is recovering (the table is
    /// what recovery waits for); durable with the caller's next sync.
    fn retire_clients(&self, durable: u64) -> Result<()> {
        if self.recovery.active() {
            return Ok(());
        }
        let _guard = self.meta.lock();
        let mut txn = Txn::default();
        self.clients.retire(&mut txn, durable);
        self.meta.apply(txn)
    }

    /// Checks that `h` can name an object somewhere in the cluster.
    pub fn check_handle(&self, h: Handle) -> Result<()> {
        if shoal_proto::handle::is_valid(h, self.config.num_servers()) {
            Ok(())
        } else {
            Err(ShoalError::invalid(format!("invalid handle {h:#x}")))
        }
    }
}

/// How far a restarted server moves its handle counter (`sync = "replay"`):
/// more handles than it can hand out between two group flushes.
const RESTART_HANDLE_GAP: u64 = 1 << 24;

/// The recovery a server starting with `sync = "replay"` owes the clients in
/// its table; records this start's `verifier` for the next one, and moves
/// the handle counter past every handle a lost change may have handed out.
fn recovery_after_start(
    meta: &MetaStore,
    clients: &ClientTable,
    config: &ClusterConfig,
    verifier: u64,
) -> Result<Recovery> {
    let kv = meta.kv();
    let previous = kv
        .get(keys::BOOT)?
        .map(|v| keys::decode_u64(&v))
        .unwrap_or(0);
    let mut batch = crate::kv::Batch::default();
    batch.put(keys::BOOT.to_vec(), keys::encode_u64(verifier));
    kv.apply(batch)?;
    meta.skip_handles(RESTART_HANDLE_GAP)?;
    let window = std::time::Duration::from_millis(config.settings.recovery_window_ms as u64);
    Ok(Recovery::awaiting(
        clients.clients(),
        previous,
        meta.applied_seq(),
        window,
    ))
}

/// ENOTSUP unless the technique `name` is switched on in this cluster.
pub fn require(on: bool, name: &str) -> Result<()> {
    if on {
        Ok(())
    } else {
        Err(ShoalError::new(
            Errno::ENOTSUP,
            format!("{name} is switched off in this cluster"),
        ))
    }
}
