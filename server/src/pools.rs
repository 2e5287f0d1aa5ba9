//! Precreate pools ([Carns 2009], server-driven precreate): for every other server
//! this server keeps a pool of empty datafiles created ahead on that server
//! with one batch request (`CreateDatafiles { count: precreate_batch }`).
//! An augmented create (`CreateFile`) or an `Unstuff` takes its remote
//! datafiles from the pools in the same transaction that uses them, so a
//! handle leaves a pool exactly when a durable distribution names it.
//!
//! Pools are persistent: each pooled handle is a key `P` server-id handle in
//! the KV store (keys.rs). A background task per peer refills a pool when it
//! falls under `precreate_low_mark`, starting at server start. A create that
//! finds a pool empty fills it itself, waiting at most [`FILL_WAIT`], and
//! fails with a clear error if the peer cannot be reached.
//!
//! Crash safety: the peer creates (durably) before this server records; a
//! crash in between leaves orphan datafiles on the peer, never a handle that
//! is handed out twice.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::Poll;
use std::time::Duration;

use shoal_proto::cluster::ClusterConfig;
use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::handle::{server_of, Handle};
use shoal_proto::msg::{CreateDatafilesReply, CreateDatafilesRequest, RemoveReply, RemoveRequest};
use shoal_proto::ops;
use tokio::sync::{Mutex, Notify};

use crate::keys;
use crate::meta_store::{MetaStore, Txn};
use crate::peers::Peers;
use crate::replay::{self, Kept};
use crate::request::Request;

/// Longest a request waits for an empty pool to be filled (or for a peer to
/// create the datafiles an unstuff needs when precreate is off).
pub const FILL_WAIT: Duration = Duration::from_secs(10);
/// Longest one batch-create request to a peer may take.
const RPC_TIMEOUT: Duration = Duration::from_secs(8);
/// The background task looks at its pool at least this often.
const IDLE_CHECK: Duration = Duration::from_secs(5);
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Prefix of this server's pool of datafiles living on `server`.
pub fn pool_prefix(server: u32) -> Vec<u8> {
    let mut k = Vec::with_capacity(13);
    k.push(keys::POOL);
    k.extend_from_slice(&server.to_be_bytes());
    k
}

/// The key of precreated datafile `handle` in this server's pool for its server.
pub fn pool_key(handle: Handle) -> Vec<u8> {
    let mut k = pool_prefix(server_of(handle));
    k.extend_from_slice(&handle.to_be_bytes());
    k
}

/// The handle a pool key holds.
pub fn handle_of(key: &[u8]) -> Option<Handle> {
    Some(Handle::from_be_bytes(key.get(5..13)?.try_into().ok()?))
}

struct PeerPool {
    /// Handles in the pool (the KV store is the truth; this follows it).
    count: AtomicU64,
    /// One filler at a time, so a create that finds the pool empty waits for
    /// a refill already under way instead of asking again.
    fill: Mutex<()>,
    wake: Notify,
}

pub struct Pools {
    id: u32,
    servers: u32,
    enabled: bool,
    batch: u32,
    low_mark: u64,
    pub peers: Arc<Peers>,
    pools: Vec<PeerPool>,
    runtime: OnceLock<tokio::runtime::Handle>,
}

impl Pools {
    /// The pools of server `id`, counted from its store.
    pub fn open(config: &ClusterConfig, id: u32, meta: &MetaStore) -> Result<Pools> {
        let pools = (0..config.num_servers())
            .map(|peer| {
                let count = if peer == id {
                    0
                } else {
                    meta.kv().scan(&pool_prefix(peer), None, usize::MAX)?.len() as u64
                };
                Ok(PeerPool {
                    count: AtomicU64::new(count),
                    fill: Mutex::new(()),
                    wake: Notify::new(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Pools {
            id,
            servers: config.num_servers(),
            enabled: config.settings.precreate,
            batch: config.settings.precreate_batch,
            low_mark: config.settings.precreate_low_mark as u64,
            peers: Arc::new(Peers::new(config, id, config.secret()?)),
            pools,
            runtime: OnceLock::new(),
        })
    }

    /// Starts one refill task per peer (with precreate on), which records
    /// what it gets in `meta`. Call once, from inside the server's runtime.
    pub fn start(self: &Arc<Pools>, meta: &Arc<MetaStore>) {
        let _ = self.runtime.set(tokio::runtime::Handle::current());
        if !self.enabled {
            return;
        }
        for peer in (0..self.servers).filter(|p| *p != self.id) {
            tokio::spawn(refill_loop(self.clone(), meta.clone(), peer));
        }
    }

    /// Handles currently pooled for `peer`.
    pub fn count(&self, peer: u32) -> u64 {
        self.pools
            .get(peer as usize)
            .map(|p| p.count.load(Ordering::Relaxed))
            .unwrap_or(0)
    }

    /// Runs `fut` to completion from a handler (a blocking-pool thread).
    fn block_on<T>(&self, fut: impl Future<Output = Result<T>>) -> Result<T> {
        let rt = self
            .runtime
            .get()
            .cloned()
            .or_else(|| tokio::runtime::Handle::try_current().ok())
            .ok_or_else(|| ShoalError::io("server peers are not started"))?;
        rt.block_on(fut)
    }

    /// Makes sure every pool named in `peers` (one entry per datafile needed)
    /// holds enough handles, filling empty ones now. Blocks at most
    /// [`FILL_WAIT`]; an unreachable peer is an error naming it.
    ///
    /// Request `r`, if it must wait, leaves the commit queue's scheduling
    /// queue first (`Request::leave_scheduling_queue`): the requests
    /// deferred behind it must not wait for a peer.
    pub fn ensure(&self, r: &Request, meta: &MetaStore, peers: &[u32]) -> Result<()> {
        let mut need: Vec<(u32, u64)> = Vec::new();
        for p in peers {
            match need.iter_mut().find(|(q, _)| q == p) {
                Some((_, n)) => *n += 1,
                None => need.push((*p, 1)),
            }
        }
        need.retain(|(p, n)| self.count(*p) < *n);
        if need.is_empty() {
            return Ok(());
        }
        r.leave_scheduling_queue();
        self.block_on(async {
            let fills = need.iter().map(|(p, n)| async move {
                tokio::time::timeout(FILL_WAIT, self.fill(meta, *p, *n))
                    .await
                    .unwrap_or_else(|_| {
                        Err(ShoalError::new(
                            Errno::ETIMEDOUT,
                            format!("server {p} did not fill its precreate pool in {FILL_WAIT:?}"),
                        ))
                    })
                    .map_err(|e| {
                        ShoalError::new(
                            e.errno,
                            format!(
                                "the precreate pool for server {p} is empty and cannot be \
                                 refilled: {}",
                                e.message
                            ),
                        )
                    })
            });
            join_all(fills.collect()).await.into_iter().collect()
        })
    }

    /// Fills the pool of `peer` with one batch if it holds fewer than `want`.
    async fn fill(&self, meta: &MetaStore, peer: u32, want: u64) -> Result<()> {
        let pool = &self.pools[peer as usize];
        let _filling = pool.fill.lock().await;
        if pool.count.load(Ordering::SeqCst) >= want {
            return Ok(());
        }
        let reply: CreateDatafilesReply = self
            .peers
            .call::<ops::CreateDatafiles>(
                peer,
                &CreateDatafilesRequest { count: self.batch },
                RPC_TIMEOUT,
            )
            .await?;
        if let Some(bad) = reply
            .handles
            .iter()
            .find(|h| server_of(**h) != peer || **h == 0)
        {
            return Err(ShoalError::protocol(format!(
                "server {peer} created datafile {bad:#x}, which is not its own"
            )));
        }
        shoal_proto::crash_point!(shoal_proto::crash_points::REFILL_AFTER_CREATE);
        let mut txn = Txn::default();
        for h in &reply.handles {
            txn.batch.put(pool_key(*h), Vec::new());
        }
        {
            // Durable with the next commit: a handle is only handed out by a
            // transaction that is itself made durable after this one.
            let _guard = meta.lock();
            meta.apply(txn)?;
        }
        pool.count
            .fetch_add(reply.handles.len() as u64, Ordering::SeqCst);
        tracing::debug!(
            "server {}: pool for server {peer} refilled with {} datafiles",
            self.id,
            reply.handles.len()
        );
        Ok(())
    }

    /// Picks one pooled datafile for each entry of `peers` and deletes them in
    /// `txn` (the caller holds the store lock and applies `txn`). None, with
    /// `txn` untouched, if some pool has too few; then [`Pools::ensure`] and retry.
    pub fn take(
        &self,
        meta: &MetaStore,
        txn: &mut Txn,
        peers: &[u32],
    ) -> Result<Option<Vec<Handle>>> {
        if txn.kept().is_some_and(Kept::replaying) {
            return self.take_again(meta, txn, peers).map(Some);
        }
        let mut picked: Vec<(u32, Vec<Handle>)> = Vec::new();
        for p in peers {
            if picked.iter().any(|(q, _)| q == p) {
                continue;
            }
            let want = peers.iter().filter(|q| *q == p).count();
            let found: Vec<Handle> = meta
                .kv()
                .scan(&pool_prefix(*p), None, want)?
                .iter()
                .filter_map(|(k, _)| handle_of(k))
                .collect();
            if found.len() < want {
                return Ok(None);
            }
            picked.push((*p, found));
        }
        let mut out = Vec::with_capacity(peers.len());
        for p in peers {
            let list = &mut picked.iter_mut().find(|(q, _)| q == p).expect("picked").1;
            let h = list.remove(0);
            assert_eq!(server_of(h), *p, "pool of server {p} holds {h:#x}");
            txn.batch.delete(pool_key(h));
            out.push(replay::handle(txn.kept(), || h, |_| true));
        }
        Ok(Some(out))
    }

    /// [`Pools::take`] for a replayed request: the datafiles its first copy
    /// took (`replay`). Their refill may have been lost with the change
    /// (the datafiles themselves are durable on their servers, which made
    /// them for this pool before it recorded them), so a datafile missing
    /// from the pool is taken all the same, and counted as if it had been
    /// there.
    fn take_again(&self, meta: &MetaStore, txn: &mut Txn, peers: &[u32]) -> Result<Vec<Handle>> {
        let mut out = Vec::with_capacity(peers.len());
        for p in peers {
            let h = replay::handle(txn.kept(), || 0, |h| h != 0 && server_of(h) == *p);
            if h == 0 {
                continue;
            }
            if meta.kv().get(&pool_key(h))?.is_some() {
                txn.batch.delete(pool_key(h));
            } else if let Some(pool) = self.pools.get(*p as usize) {
                pool.count.fetch_add(1, Ordering::SeqCst);
            }
            out.push(h);
        }
        Ok(out)
    }

    /// Accounts for datafiles [`Pools::take`] handed out once their
    /// transaction applied, and wakes the refill of any pool now under the low mark.
    pub fn taken(&self, handles: &[Handle]) {
        for h in handles {
            if let Some(pool) = self.pools.get(server_of(*h) as usize) {
                let before = pool.count.fetch_sub(1, Ordering::SeqCst);
                if before.saturating_sub(1) < self.low_mark {
                    pool.wake.notify_one();
                }
            }
        }
    }

    /// Without precreate: creates one datafile on each of `peers` now (all
    /// at once), waiting at most [`FILL_WAIT`].
    /// Request `r` leaves the scheduling queue first, as in [`Pools::ensure`].
    pub fn create_remote(&self, r: &Request, peers: &[u32]) -> Result<Vec<Handle>> {
        if peers.is_empty() {
            return Ok(Vec::new());
        }
        if r.kept().is_some_and(Kept::replaying) {
            // The datafiles its first copy had made (durable on their
            // servers: other servers' requests are synced before replies).
            return Ok(peers
                .iter()
                .map(|p| replay::handle(r.kept(), || 0, |h| h != 0 && server_of(h) == *p))
                .collect());
        }
        r.leave_scheduling_queue();
        let created: Vec<Result<Handle>> = self.block_on(async {
            let calls = peers.iter().map(|p| async move {
                let reply: CreateDatafilesReply = self
                    .peers
                    .call::<ops::CreateDatafiles>(
                        *p,
                        &CreateDatafilesRequest { count: 1 },
                        FILL_WAIT,
                    )
                    .await?;
                match reply.handles.first() {
                    Some(h) if server_of(*h) == *p => Ok(*h),
                    _ => Err(ShoalError::protocol(format!(
                        "server {p} did not create a datafile"
                    ))),
                }
            });
            Ok(join_all(calls.collect()).await)
        })?;
        if let Some(e) = created.iter().find_map(|r| r.as_ref().err().cloned()) {
            self.discard(
                created
                    .iter()
                    .filter_map(|r| r.as_ref().ok().copied())
                    .collect(),
            );
            return Err(e);
        }
        Ok(created
            .into_iter()
            .flatten()
            .map(|h| replay::handle(r.kept(), || h, |_| true))
            .collect())
    }

    /// Best-effort removal, in the background, of remote datafiles nothing
    /// names (created for an unstuff that another request already did).
    pub fn discard(&self, handles: Vec<Handle>) {
        let Some(rt) = self.runtime.get() else {
            return;
        };
        for h in handles {
            let peers = self.peers.clone();
            rt.spawn(async move {
                let removed: Result<RemoveReply> = peers
                    .call::<ops::Remove>(
                        server_of(h),
                        &RemoveRequest {
                            handle: h,
                            ..Default::default()
                        },
                        FILL_WAIT,
                    )
                    .await;
                if let Err(e) = removed {
                    tracing::warn!("could not remove unused datafile {h:#x}: {e}");
                }
            });
        }
    }
}

/// Keeps the pool for `peer` above the low mark, for as long as the server
/// runs: asks `peer` through the pools' peers, records in `meta`.
async fn refill_loop(pools: Arc<Pools>, meta: Arc<MetaStore>, peer: u32) {
    let pool = &pools.pools[peer as usize];
    let mut backoff = BACKOFF_MIN;
    let mut failures = 0u32;
    loop {
        if pool.count.load(Ordering::SeqCst) < pools.low_mark {
            let filled = tokio::time::timeout(FILL_WAIT, pools.fill(&meta, peer, pools.low_mark))
                .await
                .unwrap_or_else(|_| Err(ShoalError::new(Errno::ETIMEDOUT, "refill timed out")));
            match filled {
                Ok(()) => {
                    backoff = BACKOFF_MIN;
                    failures = 0;
                }
                Err(e) => {
                    failures += 1;
                    // Peers start one after another: the first misses are normal.
                    if failures == 20 {
                        tracing::warn!(
                            "server {}: cannot refill the precreate pool for server {peer}: {e}",
                            pools.id
                        );
                    } else {
                        tracing::debug!("pool for server {peer}: {e}");
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                }
            }
            continue;
        }
        tokio::select! {
            _ = pool.wake.notified() => {}
            _ = tokio::time::sleep(IDLE_CHECK) => {}
        }
    }
}

/// Polls every future until all are done; outputs in order.
async fn join_all<F: Future>(futs: Vec<F>) -> Vec<F::Output> {
    let mut futs: Vec<Pin<Box<F>>> = futs.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, slot) in futs.iter_mut().zip(out.iter_mut()) {
            if slot.is_none() {
                match f.as_mut().poll(cx) {
                    Poll::Ready(v) => *slot = Some(v),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(|o| o.expect("joined")).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::kv::MemEngine;
    use bytes::Bytes;
    use shoal_proto::cluster::{ServerEntry, Settings};
    use shoal_proto::frame::Frame;
    use shoal_proto::handle::make;
    use shoal_proto::{Cred, Op};

    /// A cluster of `n` servers that are not there.
    pub(crate) fn config(n: u32) -> ClusterConfig {
        ClusterConfig {
            secret_file: None,
            broker_socket: None,
            loaded_from: None,
            settings: Settings::default(),
            servers: (0..n)
                .map(|id| ServerEntry {
                    id,
                    addr: "127.0.0.1:1".parse().unwrap(),
                    data: "/nonexistent".into(),
                    metrics_addr: None,
                })
                .collect(),
        }
    }

    #[test]
    fn takes_come_from_the_store_and_leave_it_atomically() {
        let meta = MetaStore::open(Arc::new(MemEngine::default()), 0).unwrap();
        let mut txn = Txn::default();
        for c in 1..=3 {
            txn.batch.put(pool_key(make(1, c)), Vec::new());
        }
        txn.batch.put(pool_key(make(2, 7)), Vec::new());
        meta.apply(txn).unwrap();
        let pools = Pools::open(&config(3), 0, &meta).unwrap();
        assert_eq!((pools.count(1), pools.count(2)), (3, 1));

        let mut txn = Txn::default();
        assert_eq!(pools.take(&meta, &mut txn, &[1, 2, 2]).unwrap(), None);
        assert!(txn.batch.is_empty(), "a short pool takes nothing");

        let got = pools.take(&meta, &mut txn, &[1, 2, 1]).unwrap().unwrap();
        assert_eq!(got, vec![make(1, 1), make(2, 7), make(1, 2)]);
        meta.apply(txn).unwrap();
        pools.taken(&got);
        assert_eq!((pools.count(1), pools.count(2)), (1, 0));
        let left = meta.kv().scan(&pool_prefix(1), None, 10).unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(handle_of(&left[0].0), Some(make(1, 3)));
        // Reopening counts what the store holds.
        let again = Pools::open(&config(3), 0, &meta).unwrap();
        assert_eq!((again.count(1), again.count(2)), (1, 0));
    }

    #[test]
    fn an_unreachable_peer_is_a_bounded_clear_error() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap();
        let meta = MetaStore::open(Arc::new(MemEngine::default()), 0).unwrap();
        let config = config(2);
        let pools = Pools::open(&config, 0, &meta).unwrap();
        let create = Frame::request(Op::CreateFile, 1, Cred::ROOT, Bytes::new(), Bytes::new());
        let started = std::time::Instant::now();
        let err = rt
            .block_on(async {
                tokio::task::spawn_blocking(move || {
                    pools.ensure(&Request::of(&create, &config), &meta, &[1])
                })
                .await
                .unwrap()
            })
            .unwrap_err();
        assert!(started.elapsed() <= FILL_WAIT + Duration::from_secs(1));
        assert!(err.message.contains("server 1"), "{}", err.message);
    }
}
