//! The storage engine behind a small trait: every piece of a server's metadata
//! (objects, directory entries, inline file bytes, xattrs, counters) is a key in
//! one ordered KV store. The key layout is in `keys.rs`.
//!
//! Writes are split in two on purpose: [`KvEngine::apply`] makes a batch visible
//! at once, [`KvEngine::sync`] makes everything applied so far durable. The commit
//! queue decides how many applies share one sync.
//!
//! A server runs redb (`redb_engine`) behind a write-ahead log (`wal`): an
//! apply is a non-durable redb commit plus a log record, a sync is one
//! append and fdatasync of the log, and redb's own (costlier) durable commit
//! happens only at log checkpoints.

mod mem_engine;
mod memtable;
mod redb_engine;
mod wal;
mod wal_log;

pub use mem_engine::MemEngine;
pub use redb_engine::RedbEngine;
pub use wal::WalEngine;

use shoal_proto::error::Result;

/// One atomic group of changes.
#[derive(Default, Debug)]
pub struct Batch {
    pub ops: Vec<BatchOp>,
}

#[derive(Debug)]
pub enum BatchOp {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
}

impl Batch {
    pub fn put(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.ops.push(BatchOp::Put(key, value));
    }
    pub fn delete(&mut self, key: Vec<u8>) {
        self.ops.push(BatchOp::Delete(key));
    }
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// A key and its value, as returned by scans.
pub type Pair = (Vec<u8>, Vec<u8>);

pub trait KvEngine: Send + Sync + 'static {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>>;
    /// What [`get`](KvEngine::get) of each key returns, index-aligned: an
    /// engine with a per-read cost (redb's read transaction) pays it once for
    /// the lot, as a listattr of hundreds of records wants.
    fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        keys.iter().map(|k| self.get(k)).collect()
    }
    /// Up to `limit` pairs whose keys start with `prefix` and sort strictly after
    /// `after` (when given), in key order.
    fn scan(&self, prefix: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Vec<Pair>>;
    /// Applies `batch` atomically; readers see it at once; durable after `sync`.
    fn apply(&self, batch: Batch) -> Result<()>;
    /// Makes every batch applied so far durable.
    fn sync(&self) -> Result<()>;
}

/// The smallest key strictly greater than every key that starts with `prefix`,
/// or None if there is none (prefix of all 0xff).
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The contract every engine must meet, run against each of them.
    fn engine_contract(kv: &dyn KvEngine) {
        let mut b = Batch::default();
        for name in ["b", "a", "c", "d"] {
            b.put(format!("E1/{name}").into_bytes(), name.as_bytes().to_vec());
        }
        b.put(b"E2/x".to_vec(), b"x".to_vec());
        b.put(b"E0/z".to_vec(), b"z".to_vec());
        kv.apply(b).unwrap();
        assert_eq!(kv.get(b"E1/a").unwrap(), Some(b"a".to_vec()));
        assert_eq!(kv.get(b"E1/zz").unwrap(), None);

        let all = kv.scan(b"E1/", None, 100).unwrap();
        let names: Vec<_> = all.iter().map(|(_, v)| v.clone()).collect();
        assert_eq!(
            names,
            vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec(), b"d".to_vec()]
        );
        let page = kv.scan(b"E1/", Some(b"E1/b"), 2).unwrap();
        assert_eq!(page.len(), 2);
        assert_eq!(page[0].0, b"E1/c".to_vec());

        let mut d = Batch::default();
        d.delete(b"E1/a".to_vec());
        d.put(b"E1/b".to_vec(), b"B".to_vec());
        kv.apply(d).unwrap();
        kv.sync().unwrap();
        assert_eq!(kv.get(b"E1/a").unwrap(), None);
        assert_eq!(kv.get(b"E1/b").unwrap(), Some(b"B".to_vec()));
        assert_eq!(kv.scan(b"E1/", None, 100).unwrap().len(), 3);

        // Present, deleted, never written, changed, repeated.
        let keys: [&[u8]; 5] = [b"E1/c", b"E1/a", b"E9/q", b"E1/b", b"E1/c"];
        let one_by_one: Vec<_> = keys.iter().map(|k| kv.get(k).unwrap()).collect();
        assert_eq!(kv.get_many(&keys).unwrap(), one_by_one);
        assert_eq!(one_by_one[3], Some(b"B".to_vec()));
        assert_eq!(kv.get_many(&[]).unwrap(), Vec::<Option<Vec<u8>>>::new());
    }

    #[test]
    fn mem_engine_meets_the_contract() {
        engine_contract(&MemEngine::default());
    }

    #[test]
    fn redb_engine_meets_the_contract_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let kv = RedbEngine::open(dir.path()).unwrap();
            engine_contract(&kv);
        }
        let kv = RedbEngine::open(dir.path()).unwrap();
        assert_eq!(kv.get(b"E1/b").unwrap(), Some(b"B".to_vec()));
        assert_eq!(kv.get(b"E2/x").unwrap(), Some(b"x".to_vec()));
    }

    #[test]
    fn logged_redb_engine_meets_the_contract_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let open = || WalEngine::open(RedbEngine::open(dir.path()).unwrap(), dir.path()).unwrap();
        engine_contract(&open());
        let kv = open();
        assert_eq!(kv.get(b"E1/b").unwrap(), Some(b"B".to_vec()));
        assert_eq!(kv.get(b"E2/x").unwrap(), Some(b"x".to_vec()));
    }

    #[test]
    fn prefix_end_is_the_next_key() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(&[1, 0xff]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xff, 0xff]), None);
    }
}
