//! The connections of one client process: exactly one per server, opened on
//! first use, reopened on the next call after it breaks (e.g. a server
//! restart). A server that cannot be reached is waited for, up to the
//! cluster's `restart_wait_ms`, and a request whose connection broke under
//! it is sent again, under the same client id and request id: the server
//! answers a create, rename, unlink or link it had applied from its reply
//! cache (`Op::reply_cached`), so a restart of a server is not seen by
//! applications. Each request says which of this client's cached replies
//! the server may forget (`ClientRef::acked`).
//!
//! With `sync = "replay"`, a server answers a change before it is durable;
//! the pool keeps each such request (`kept_changes`) until a later reply
//! says the server's durable sequence passed it, and the first request on
//! every new connection is a `recover` that hands them back, so that a
//! server that restarted and lost them replays them before it serves
//! anything else. A client that keeps changes for a server, or may still
//! be in its client table, does not wait for its next call to learn that
//! the connection broke: a watcher opens a new one at once (`watch`), so
//! an idle client never keeps a restarted server (and every other client
//! of it) waiting for its recovery window, nor loses what it kept.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::transport::authority::Authority;
use bytes::Bytes;
use prost::Message;
use shoal_proto::cluster::{ClusterConfig, SyncMode};
use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::frame::{ClientRef, NO_LEASES};
use shoal_proto::msg::{CommitRequest, LockRequest, RecoverRequest};
use shoal_proto::{ops, Op, Operation};
use tokio::sync::Mutex;

use crate::consistency::kept_changes::KeptChanges;
use crate::locks::held::HeldLocks;
use crate::transport::conn::{Connection, OnRecall};
use crate::transport::landing::{Lent, ReadData};
use crate::types::Cred;

/// The first pause before connecting again to a server that was
/// unreachable; each later one doubles, up to [`LONGEST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(20);
const LONGEST_PAUSE: Duration = Duration::from_millis(500);

/// How often a request whose connection broke under it goes again: a
/// server that dies this often while one request is in flight (perhaps of
/// that very request) is not coming back for it.
const MAX_REQUEST_RESENDS: u32 = 4;

/// Whether a failed connect says the server is not there (refused, no
/// answer in time, or the connection cut in the middle of the handshake or
/// of the `recover` that follows it, as a server that is dying or not yet
/// serving does), rather than that it refused us (EACCES).
fn unreachable(e: &ShoalError) -> bool {
    [Errno::EHOSTUNREACH, Errno::ETIMEDOUT, Errno::EIO].contains(&e.errno)
}

/// Before a request is sent: what it must wait for, if anything.
pub type Fence = Arc<dyn Fn() -> Option<futures::future::BoxFuture<'static, ()>> + Send + Sync>;

pub struct Pool {
    config: ClusterConfig,
    /// What each new connection proves: the secret, or a credential.
    authority: Authority,
    slots: Vec<Mutex<Option<Arc<Connection>>>>,
    /// This client's id in every request (random, never 0: 0 is "none").
    client: u64,
    /// The next request id; ids are unique in this client, whatever the
    /// server, so that a request sent again keeps its id.
    next_id: AtomicU64,
    /// Per server, the ids of the requests whose replies the server caches
    /// and this client has not received yet.
    awaited: Vec<std::sync::Mutex<BTreeSet<u64>>>,
    /// Per server, the changes it answered and has not made durable
    /// (`sync = "replay"`; empty otherwise).
    kept: Vec<KeptChanges>,
    /// Per server, the record locks this client holds there, taken again
    /// on every new connection.
    held_locks: Vec<HeldLocks>,
    /// This pool, for the watchers of its connections (`watch`).
    me: Weak<Pool>,
    /// What the client does when a server recalls its leases.
    on_recall: OnRecall,
    /// What every request waits for before it is sent (the creates the
    /// client answered itself: `delegations`).
    fence: std::sync::OnceLock<Fence>,
    /// How long a lease lasts from the sending of the request it answers
    /// (`lease_ms`; the server counts from its reply, later).
    lease: Duration,
    /// Bumped when a metadata change is sent and again when it is answered
    /// (or fails): a batch read ahead while it stood still saw every change
    /// this client made (`listings_ahead`).
    changes: AtomicU64,
}

/// A metadata change in flight: bumps the count at its start and end.
struct Changing<'a>(&'a AtomicU64);

impl<'a> Changing<'a> {
    fn start(count: &'a AtomicU64) -> Changing<'a> {
        count.fetch_add(1, Ordering::AcqRel);
        Changing(count)
    }
}

impl Drop for Changing<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
}

/// A cached request's place among those awaited from its server; it leaves
/// when dropped (its reply arrived, or it failed for good).
struct Awaited<'a> {
    set: &'a std::sync::Mutex<BTreeSet<u64>>,
    id: u64,
}

impl Drop for Awaited<'_> {
    fn drop(&mut self) {
        lock(self.set).remove(&self.id);
    }
}

fn lock(m: &std::sync::Mutex<BTreeSet<u64>>) -> std::sync::MutexGuard<'_, BTreeSet<u64>> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Pool {
    pub fn new(config: ClusterConfig, authority: Authority, on_recall: OnRecall) -> Arc<Pool> {
        let slots = config.servers.iter().map(|_| Mutex::new(None)).collect();
        let awaited = config.servers.iter().map(|_| Default::default()).collect();
        let kept = config.servers.iter().map(|_| Default::default()).collect();
        let held_locks = config.servers.iter().map(|_| Default::default()).collect();
        Arc::new_cyclic(|me| Pool {
            slots,
            client: match config.settings.lease_ms {
                // A client that takes no leases says so in its id.
                0 => rand::random::<u64>() | NO_LEASES,
                _ => (rand::random::<u64>() & !NO_LEASES).max(1),
            },
            next_id: AtomicU64::new(1),
            awaited,
            kept,
            held_locks,
            me: me.clone(),
            on_recall,
            fence: std::sync::OnceLock::new(),
            lease: Duration::from_millis(config.settings.lease_ms as u64),
            changes: AtomicU64::new(0),
            authority,
            config,
        })
    }

    /// Sets the fence every request waits behind (once).
    pub fn set_fence(&self, fence: Fence) {
        assert!(self.fence.set(fence).is_ok(), "a second fence");
    }

    /// How many times metadata changes were sent or answered (see
    /// `changes`).
    pub fn metadata_changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// What request `id` of `op` to `server` says of this client: its id,
    /// and whether this is a copy sent again; a request whose reply is
    /// cached also says the lowest id of one still awaiting its reply (every
    /// lower one has it). The server reads `acked` only when it stores a
    /// reply, so the other requests, reads and writes among them, say
    /// nothing (0) and never take the lock.
    fn client_ref(&self, server: u32, op: Op, id: u64, resent: bool) -> ClientRef {
        let acked = if op.reply_cached() {
            let awaited = lock(&self.awaited[server as usize]);
            awaited.first().copied().unwrap_or(id).min(id)
        } else {
            0
        };
        ClientRef {
            client: self.client,
            acked,
            resent,
        }
    }

    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// Whom the pool's own requests (a recover, locks taken again) act
    /// for: root, or with a user credential the one user it may.
    pub fn own_cred(&self) -> Cred {
        self.authority.user().unwrap_or(Cred::ROOT)
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    async fn connection(&self, server: u32) -> Result<Arc<Connection>> {
        let slot = self.slots.get(server as usize).ok_or_else(|| {
            ShoalError::invalid(format!(
                "server {server} is not in the cluster ({} servers)",
                self.slots.len()
            ))
        })?;
        let mut slot = slot.lock().await;
        let fresh = |c: &&Arc<Connection>| {
            c.is_alive() && !self.authority.expiring(c.credential_expires_s())
        };
        if let Some(c) = slot.as_ref().filter(fresh) {
            return Ok(c.clone());
        }
        let wait = Duration::from_millis(self.config.settings.restart_wait_ms as u64);
        let started = Instant::now();
        let mut pause = FIRST_PAUSE;
        let c = loop {
            match self.open(server).await {
                Ok(c) => break c,
                // Down or restarting (or dying again while we set up the
                // connection): wait for it, as long as the cluster says.
                Err(e) if unreachable(&e) && started.elapsed() + pause <= wait => {
                    if pause == FIRST_PAUSE {
                        tracing::info!("server {server} unreachable, waiting for it: {e}");
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(LONGEST_PAUSE);
                }
                Err(e) => return Err(e),
            }
        };
        *slot = Some(c.clone());
        Ok(c)
    }

    /// Opens a connection to `server` and, with `sync = "replay"`, hands
    /// back what this client keeps for it (the connection's first request)
    /// and watches it.
    async fn open(&self, server: u32) -> Result<Arc<Connection>> {
        let addr = self.config.servers[server as usize].addr;
        let inflight = self.config.settings.max_inflight as usize;
        let on_recall = self.on_recall.clone();
        let proving = self.authority.proving()?;
        let c = Arc::new(Connection::connect(server, addr, inflight, &proving, on_recall).await?);
        if self.config.settings.sync == SyncMode::Replay {
            self.recover(server, &c).await?;
        }
        self.take_locks_again(server, &c).await?;
        self.watch(server, &c);
        Ok(c)
    }

    /// The record locks this client holds on `server`'s files.
    pub fn held_locks(&self, server: u32) -> Result<&HeldLocks> {
        self.held_locks.get(server as usize).ok_or_else(|| {
            ShoalError::invalid(format!(
                "server {server} is not in the cluster ({} servers)",
                self.held_locks.len()
            ))
        })
    }

    /// On a new connection to `server`, before anything else: takes again
    /// every lock this client held there (the server dropped them with the
    /// old connection, or lost them in a restart). One another client took
    /// meanwhile is lost, and said so.
    async fn take_locks_again(&self, server: u32, c: &Connection) -> Result<()> {
        let held = &self.held_locks[server as usize];
        for (file, holder, lock) in held.all() {
            let request = LockRequest {
                file,
                owner: holder.owner,
                flock: holder.flock,
                kind: lock.kind as i32,
                start: lock.range.start,
                end: lock.range.end,
                wait: false,
                pid: 0,
                reclaim: true,
            };
            match self.call_on::<ops::Lock>(c, server, &request).await {
                Ok(_) => {}
                Err(e) if e.errno == Errno::EAGAIN || e.errno == Errno::ENOENT => {
                    tracing::error!(
                        "a lock on bytes {}..={} of {file:#x} was lost while server {server} was away: {}",
                        lock.range.start,
                        lock.range.end,
                        e.message
                    );
                    held.lost(file, holder, lock);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Once connection `c` to `server` ends, opens a new one at once if
    /// the server may have this client in its client table (changes are
    /// kept for it, which its `recover` hands back, or a change was made
    /// there since the last recover) or locks are held there (taken again
    /// on it): a restarted server waits for every client in its table, and
    /// one that made no further call would keep it, and every other
    /// client, waiting its whole recovery window, and lose what it kept;
    /// and it takes back locks only for a short grace
    /// period, after which an idle holder's range would go to others.
    fn watch(&self, server: u32, c: &Connection) {
        let ended = c.ended();
        let pool = self.me.clone();
        tokio::spawn(async move {
            ended.await;
            let Some(pool) = pool.upgrade() else {
                return;
            };
            let s = server as usize;
            let replayed = pool.config.settings.sync == SyncMode::Replay;
            // Locks are tried for as long as they are held: a holder that
            // gave up would find them taken when the server came back.
            while (replayed && pool.kept[s].owes_recover()) || pool.held_locks[s].any() {
                match pool.connection(server).await {
                    Ok(_) => return,
                    Err(e) => {
                        if pool.kept[s].holds_any() || pool.held_locks[s].any() {
                            tracing::error!(
                                "server {server}: handing back the changes it answered and the locks held: {e}"
                            );
                        } else {
                            // Nothing lost: it was only to be told so.
                            tracing::info!("server {server} did not come back: {e}");
                        }
                        if !pool.held_locks[s].any() {
                            return;
                        }
                    }
                }
            }
        });
    }

    /// The first request on a new connection to `server` with `sync =
    /// "replay"`: hands back the changes kept for it, which the server
    /// replays if it restarted and lost them, and learns which start of the
    /// server this connection reaches.
    async fn recover(&self, server: u32, c: &Connection) -> Result<()> {
        let kept = &self.kept[server as usize];
        let (boot, items) = kept.to_recover();
        let count = items.len();
        let request = RecoverRequest { boot, items };
        let reply = match self.call_on::<ops::Recover>(c, server, &request).await {
            Ok(r) => r,
            Err(e) if e.errno == Errno::ESTALE => {
                // The server recovered without us: what we kept is lost.
                // Learn its start (nothing to hand back) and go on.
                tracing::error!("server {server}: {}", e.message);
                kept.lost(count);
                let empty = RecoverRequest {
                    boot: 0,
                    items: Vec::new(),
                };
                self.call_on::<ops::Recover>(c, server, &empty).await?
            }
            Err(e) => return Err(e),
        };
        kept.recovered(reply.verifier, reply.listed, reply.replayed, &reply.errnos);
        c.set_boot(reply.verifier);
        Ok(())
    }

    /// Sends `request` as operation `O` on connection `c` (no resending:
    /// the caller is setting the connection up) and decodes its reply.
    async fn call_on<O: Operation>(
        &self,
        c: &Connection,
        server: u32,
        request: &O::Request,
    ) -> Result<O::Reply> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let client = self.client_ref(server, O::OP, id, false);
        let body = Bytes::from(request.encode_to_vec());
        let reply = c
            .call(O::OP, id, client, self.own_cred(), body, Bytes::new(), None)
            .await?;
        O::Reply::decode(reply.body).map_err(|e| {
            ShoalError::protocol(format!("{} reply from server {server}: {e}", O::OP.name()))
        })
    }

    /// Makes every change this client kept durable on the servers that hold
    /// them (the metadata half of an fsync with `sync = "replay"`).
    pub async fn commit_kept(&self, cred: Cred) -> Result<()> {
        let servers = (0..self.kept.len() as u32).filter(|s| self.kept[*s as usize].holds_any());
        let calls = servers.map(|s| self.call::<ops::Commit>(s, cred, &CommitRequest {}));
        futures::future::try_join_all(calls).await?;
        Ok(())
    }

    /// Sends operation `O` with `request` to `server` and decodes its reply.
    pub async fn call<O: Operation>(
        &self,
        server: u32,
        cred: Cred,
        request: &O::Request,
    ) -> Result<O::Reply> {
        Ok(self
            .call_with_payload::<O>(server, cred, request, Bytes::new())
            .await?
            .0)
    }

    /// Sends operation `O` with `request` and raw `payload` (file data) to
    /// `server`; returns the decoded reply and the reply's payload.
    pub async fn call_with_payload<O: Operation>(
        &self,
        server: u32,
        cred: Cred,
        request: &O::Request,
        payload: Bytes,
    ) -> Result<(O::Reply, Bytes)> {
        let (reply, payload, _) = self.send::<O>(server, cred, request, payload, None).await?;
        Ok((reply, payload))
    }

    /// [`call`](Self::call), with the reply's payload landing in the memory
    /// `lent` if it fits there (`landing`): returns the decoded reply and
    /// where its payload is.
    pub(crate) async fn call_landing<O: Operation>(
        &self,
        server: u32,
        cred: Cred,
        request: &O::Request,
        lent: &Lent,
    ) -> Result<(O::Reply, ReadData)> {
        let (reply, payload, _) = self
            .send::<O>(server, cred, request, Bytes::new(), Some(lent))
            .await?;
        let data = match lent.landed() {
            Some(n) => ReadData::Landed(n),
            None => ReadData::Bytes(payload),
        };
        Ok((reply, data))
    }

    /// How long a lease lasts from the sending of the request it answers.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// [`call`](Self::call), and until when the reply's lease on what it
    /// names lasts, if it grants one (`leases`).
    pub async fn call_leasing<O: Operation>(
        &self,
        server: u32,
        cred: Cred,
        request: &O::Request,
    ) -> Result<(O::Reply, Option<Instant>)> {
        let (reply, _, lease) = self
            .send::<O>(server, cred, request, Bytes::new(), None)
            .await?;
        Ok((reply, lease))
    }

    /// Sends operation `O` with `request` and raw `payload` (see the module
    /// doc for resending); returns the decoded reply, its payload and until
    /// when its lease lasts, if it grants one. With `lent`, the payload may
    /// land there instead (`Connection::call`).
    async fn send<O: Operation>(
        &self,
        server: u32,
        cred: Cred,
        request: &O::Request,
        payload: Bytes,
        lent: Option<&Lent>,
    ) -> Result<(O::Reply, Bytes, Option<Instant>)> {
        if let Some(wait) = self.fence.get().and_then(|fence| fence()) {
            wait.await;
        }
        let sent_at = Instant::now();
        let op = O::OP;
        let _changing = op
            .modifies_metadata()
            .then(|| Changing::start(&self.changes));
        let body = Bytes::from(request.encode_to_vec());
        let conn = self.connection(server).await?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let _awaited = op.reply_cached().then(|| {
            let set = &self.awaited[server as usize];
            lock(set).insert(id);
            Awaited { set, id }
        });
        let sent = (body.clone(), payload.clone());
        let mut conn = conn;
        let mut resends = 0;
        let (reply, boot) = loop {
            let client = self.client_ref(server, op, id, resends > 0);
            if op.modifies_metadata() {
                // After the connection's `recover`, which says whether the
                // server lists this client: this change may enter it.
                self.kept[server as usize].sending_change();
            }
            match conn
                .call(op, id, client, cred, body.clone(), payload.clone(), lent)
                .await
            {
                // The connection broke (the server died or restarted): the
                // request goes again, once the server is back, as the same
                // request (see the module doc), also if it dies again
                // meanwhile, up to MAX_REQUEST_RESENDS times.
                Err(lost) if !conn.is_alive() && resends < MAX_REQUEST_RESENDS => {
                    tracing::debug!("sending {} again on a new connection: {lost}", op.name());
                    resends += 1;
                    // If the server does not come back, the caller learns
                    // that the request was lost in flight (EIO: it may have
                    // been applied), not merely that the server is away.
                    conn = self.connection(server).await.map_err(|e| {
                        ShoalError::new(lost.errno, format!("{}; {}", lost.message, e.message))
                    })?;
                }
                other => break (other?, conn.boot()),
            }
        };
        let reply = self.kept[server as usize].note(op, id, cred, sent, boot, reply)?;
        let lease = reply.header.leased.then(|| sent_at + self.lease);
        let decoded = O::Reply::decode(reply.body).map_err(|e| {
            ShoalError::protocol(format!("{} reply from server {server}: {e}", op.name()))
        })?;
        Ok((decoded, reply.payload, lease))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client_id(lease_ms: u32) -> u64 {
        use futures::FutureExt;
        use shoal_proto::cluster::{ClusterConfig, ServerEntry, Settings};
        let config = ClusterConfig {
            secret_file: None,
            broker_socket: None,
            loaded_from: None,
            settings: Settings {
                lease_ms,
                ..Default::default()
            },
            servers: vec![ServerEntry {
                id: 0,
                addr: "127.0.0.1:1".parse().unwrap(),
                data: std::path::PathBuf::from("/nonexistent"),
                metrics_addr: None,
            }],
        };
        let on_recall: OnRecall = Arc::new(|_| futures::future::ready(()).boxed());
        Pool::new(config, Authority::Open, on_recall).client
    }

    #[test]
    fn a_client_without_leases_says_so_in_its_id() {
        assert_ne!(client_id(0) & NO_LEASES, 0);
        assert_eq!(client_id(30_000) & NO_LEASES, 0);
        assert_ne!(client_id(30_000), 0);
    }
}
