//! An in-memory engine for unit tests: same contract, no disk.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::RwLock;

use shoal_proto::error::Result;

use super::engine::{prefix_end, Batch, BatchOp, KvEngine, Pair};

#[derive(Default)]
pub struct MemEngine {
    map: RwLock<BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl KvEngine for MemEngine {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.map.read().unwrap().get(key).cloned())
    }

    fn scan(&self, prefix: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Vec<Pair>> {
        let map = self.map.read().unwrap();
        let start = match after {
            Some(a) => Bound::Excluded(a.to_vec()),
            None => Bound::Included(prefix.to_vec()),
        };
        let end = match prefix_end(prefix) {
            Some(e) => Bound::Excluded(e),
            None => Bound::Unbounded,
        };
        Ok(map
            .range((start, end))
            .filter(|(k, _)| k.starts_with(prefix))
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }

    fn apply(&self, batch: Batch) -> Result<()> {
        let mut map = self.map.write().unwrap();
        for op in batch.ops {
            match op {
                BatchOp::Put(k, v) => {
                    map.insert(k, v);
                }
                BatchOp::Delete(k) => {
                    map.remove(&k);
                }
            }
        }
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        Ok(())
    }
}
