//! The engine's contract, which every engine implements and its users
//! write against: [`KvEngine`], the [`Batch`] it applies and the [`Pair`]s
//! its scans return. It lives apart from `kv/mod.rs`, which declares the
//! engines and re-exports them, so that imports point one way: the engines
//! import this file, and it imports none of them.

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
pub(super) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
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

    #[test]
    fn prefix_end_is_the_next_key() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(&[1, 0xff]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xff, 0xff]), None);
    }
}
