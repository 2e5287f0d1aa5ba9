//! The storage engine behind a small trait (`engine`: [`KvEngine`]): every
//! piece of a server's metadata (objects, directory entries, inline file
//! bytes, xattrs, counters) is a key in one ordered KV store. The key layout
//! is in `keys.rs`.
//!
//! Writes are split in two on purpose: [`KvEngine::apply`] makes a batch visible
//! at once, [`KvEngine::sync`] makes everything applied so far durable. The commit
//! queue decides how many applies share one sync.
//!
//! A server runs redb (`redb_engine`) behind a write-ahead log (`wal`): an
//! apply is a non-durable redb commit plus a log record, a sync is one
//! append and fdatasync of the log, and redb's own (costlier) durable commit
//! happens only at log checkpoints.

mod engine;
mod mem_engine;
mod memtable;
mod redb_engine;
mod wal;
mod wal_log;

pub use engine::{Batch, BatchOp, KvEngine, Pair};
pub use mem_engine::MemEngine;
pub use redb_engine::RedbEngine;
pub use wal::WalEngine;

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
}
