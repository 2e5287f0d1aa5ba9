//! The reply cache: the replies of requests that must not be done twice
//! (`Op::reply_cached`: creating, naming, removing, linking), stored in the
//! store under the client's id and the request id, in the same transaction
//! as the change they answer.
//!
//! A client whose connection broke under a request (the server died, or
//! restarted) sends it again, as the same request. If the first copy's
//! change is in the store, so is its reply, and the second copy gets it
//! instead of EEXIST or ENOENT; if the change was lost with the server, so
//! was the reply, and the second copy is done as the first would have been.
//! Lustre's reply reconstruction and NFSv4.1's sessions do the same; this
//! is the form with no slot table to negotiate.
//!
//! A record is forgotten when the client says it has the reply (each
//! request's `acked`: every lower id of that client has its reply), in the
//! next transaction that records one of its replies, or [`TTL`] after it
//! was made (a client that died or went quiet). A copy that arrives while
//! its first copy is still being handled (the connection broke, the server
//! did not) waits for the first and is answered with its reply.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use shoal_proto::error::Result;
use shoal_proto::frame::{ClientRef, Header};

use crate::keys;
use crate::kv::KvEngine;
use crate::meta_store::Txn;

/// How long a reply no client said it has is held: far longer than a
/// client waits for a restarting server (`restart_wait_ms`, a minute by
/// default) before it sends again.
pub const TTL: Duration = Duration::from_secs(15 * 60);

/// Records read per scan when the index is rebuilt at start.
const SCAN_BATCH: usize = 4096;

/// Which request a reply answers: the client's id and the request id.
pub type RequestKey = (u64, u64);

#[derive(Default)]
pub struct ReplyCache {
    /// Per client, its cached replies' request ids and when each was made
    /// (ms since the epoch): what the store holds under `R`, so that
    /// forgetting never scans it.
    index: Mutex<HashMap<u64, BTreeMap<u64, u64>>>,
    /// Requests of cached operations being handled now.
    running: Mutex<HashSet<RequestKey>>,
    finished: Condvar,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn now_ms() -> u64 {
    (shoal_proto::time::now_ns() / 1_000_000).max(0) as u64
}

/// Which request `header` is to the cache, if its reply is cached.
pub fn key_of(header: &Header) -> Option<RequestKey> {
    (header.op.reply_cached() && header.client.client != 0)
        .then_some((header.client.client, header.id))
}

/// A request being handled; the next copy of it may go once this is dropped.
pub struct Running<'a> {
    cache: &'a ReplyCache,
    key: RequestKey,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        lock(&self.cache.running).remove(&self.key);
        self.cache.finished.notify_all();
    }
}

impl ReplyCache {
    /// The cache of the store `kv`: its index rebuilt from the records there.
    pub fn open(kv: &dyn KvEngine) -> Result<ReplyCache> {
        let cache = ReplyCache::default();
        let mut index = lock(&cache.index);
        let mut after: Option<Vec<u8>> = None;
        loop {
            let batch = kv.scan(&[keys::REPLY], after.as_deref(), SCAN_BATCH)?;
            for (k, v) in &batch {
                if let (Some((client, id)), Some(made)) = (keys::decode_reply(k), made_at(v)) {
                    index.entry(client).or_default().insert(id, made);
                }
            }
            match batch.last() {
                Some((k, _)) if batch.len() == SCAN_BATCH => after = Some(k.clone()),
                _ => break,
            }
        }
        drop(index);
        Ok(cache)
    }

    /// Marks request `key` as being handled, first waiting for a copy of it
    /// that is (its reply, if it made one, is then in the store).
    pub fn begin(&self, key: RequestKey) -> Running<'_> {
        let mut running = lock(&self.running);
        while running.contains(&key) {
            running = self
                .finished
                .wait(running)
                .unwrap_or_else(|p| p.into_inner());
        }
        running.insert(key);
        Running { cache: self, key }
    }

    /// The reply body cached for request `key`, if there is one (only a
    /// copy sent again can have one: the caller asks for those only).
    pub fn cached(&self, kv: &dyn KvEngine, key: RequestKey) -> Result<Option<Bytes>> {
        Ok(kv
            .get(&keys::reply(key.0, key.1))?
            .filter(|v| v.len() >= 8)
            .map(|v| Bytes::from(v).slice(8..)))
    }

    /// Puts the reply `body` of request `id` from `client` into `txn` (the
    /// transaction of the change it answers; the caller holds the store
    /// lock), and deletes the replies `client` says it has.
    pub fn record(&self, txn: &mut Txn, client: ClientRef, id: u64, body: &[u8]) {
        debug_assert_ne!(client.client, 0, "key_of admits no client 0");
        // A client holds no reply of a request it is still sending: an
        // `acked` past `id` (a confused client) forgets nothing newer.
        let acked = client.acked.min(id);
        let made = now_ms();
        let mut value = Vec::with_capacity(8 + body.len());
        value.extend_from_slice(&made.to_be_bytes());
        value.extend_from_slice(body);
        txn.batch.put(keys::reply(client.client, id), value);
        let mut index = lock(&self.index);
        let ids = index.entry(client.client).or_default();
        let unacked = ids.split_off(&acked);
        for acked in std::mem::replace(ids, unacked).into_keys() {
            txn.batch.delete(keys::reply(client.client, acked));
        }
        ids.insert(id, made);
    }

    /// Deletes, in `txn`, every reply made longer than [`TTL`] ago.
    pub fn expire(&self, txn: &mut Txn) {
        let before = now_ms().saturating_sub(TTL.as_millis() as u64);
        let mut index = lock(&self.index);
        index.retain(|client, ids| {
            ids.retain(|id, made| {
                let keep = *made >= before;
                if !keep {
                    txn.batch.delete(keys::reply(*client, *id));
                }
                keep
            });
            !ids.is_empty()
        });
    }

    /// Replies cached now (for stats and tests).
    pub fn len(&self) -> usize {
        lock(&self.index).values().map(BTreeMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// When a record's reply was made (its first 8 bytes).
fn made_at(value: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(value.get(..8)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::MemEngine;
    use crate::meta_store::MetaStore;
    use std::sync::Arc;

    fn client(acked: u64) -> ClientRef {
        ClientRef {
            client: 7,
            acked,
            resent: false,
        }
    }

    fn record(meta: &MetaStore, cache: &ReplyCache, c: ClientRef, id: u64, body: &[u8]) {
        let _g = meta.lock();
        let mut txn = Txn::default();
        cache.record(&mut txn, c, id, body);
        meta.apply(txn).unwrap();
    }

    #[test]
    fn replies_are_held_until_acked_and_survive_a_reopen() {
        let kv: Arc<dyn KvEngine> = Arc::new(MemEngine::default());
        let meta = MetaStore::open(kv.clone(), 0).unwrap();
        let cache = ReplyCache::default();
        record(&meta, &cache, client(1), 1, b"one");
        record(&meta, &cache, client(1), 2, b"two");
        assert_eq!(&cache.cached(&*kv, (7, 1)).unwrap().unwrap()[..], b"one");
        assert_eq!(
            cache.cached(&*kv, (8, 1)).unwrap(),
            None,
            "another client's"
        );
        // A later request that says replies below 2 arrived forgets 1 only.
        record(&meta, &cache, client(2), 3, b"three");
        assert_eq!(cache.cached(&*kv, (7, 1)).unwrap(), None);
        assert!(cache.cached(&*kv, (7, 2)).unwrap().is_some());
        assert_eq!(cache.len(), 2);
        // A restarted server finds the same records.
        let again = ReplyCache::open(&*kv).unwrap();
        assert_eq!(again.len(), 2);
        record(&meta, &again, client(4), 4, b"four");
        assert_eq!(again.len(), 1);
        assert_eq!(cache.cached(&*kv, (7, 3)).unwrap(), None);
    }

    #[test]
    fn an_acked_past_the_request_forgets_only_older_replies() {
        let kv: Arc<dyn KvEngine> = Arc::new(MemEngine::default());
        let meta = MetaStore::open(kv.clone(), 0).unwrap();
        let cache = ReplyCache::default();
        record(&meta, &cache, client(1), 1, b"one");
        record(&meta, &cache, client(u64::MAX), 2, b"two");
        assert_eq!(cache.cached(&*kv, (7, 1)).unwrap(), None);
        assert!(cache.cached(&*kv, (7, 2)).unwrap().is_some());
    }

    #[test]
    fn old_replies_expire() {
        let kv: Arc<dyn KvEngine> = Arc::new(MemEngine::default());
        let meta = MetaStore::open(kv.clone(), 0).unwrap();
        let cache = ReplyCache::default();
        record(&meta, &cache, client(1), 1, b"old");
        lock(&cache.index).get_mut(&7).unwrap().insert(1, 0);
        record(&meta, &cache, client(1), 2, b"new");
        let mut txn = Txn::default();
        cache.expire(&mut txn);
        meta.apply(txn).unwrap();
        assert_eq!(cache.cached(&*kv, (7, 1)).unwrap(), None);
        assert!(cache.cached(&*kv, (7, 2)).unwrap().is_some());
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn a_second_copy_waits_for_the_first() {
        let cache = Arc::new(ReplyCache::default());
        let first = cache.begin((7, 1));
        let (tx, rx) = std::sync::mpsc::channel();
        let c = cache.clone();
        let second = std::thread::spawn(move || {
            let _r = c.begin((7, 1));
            tx.send(()).unwrap();
        });
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
        let _other = cache.begin((7, 2));
        drop(first);
        rx.recv_timeout(Duration::from_secs(20)).unwrap();
        second.join().unwrap();
    }
}
