//! Changes applied since the last checkpoint, in memory and in key order: a
//! put's value or a delete's tombstone. Reads look here, newest table first,
//! before the checkpointed store; [`merged_scan`] merges the layers.

use std::collections::BTreeMap;
use std::iter::Peekable;
use std::ops::Bound;

use shoal_proto::error::Result;

use super::engine::{prefix_end, Batch, BatchOp, KvEngine, Pair};

#[derive(Default)]
pub struct MemTable {
    map: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
}

impl MemTable {
    pub fn apply(&mut self, batch: Batch) {
        for op in batch.ops {
            match op {
                BatchOp::Put(k, v) => self.map.insert(k, Some(v)),
                BatchOp::Delete(k) => self.map.insert(k, None),
            };
        }
    }

    /// `Some(None)` if the key was deleted here, `None` if this table does
    /// not know it.
    pub fn get(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        self.map.get(key).map(|v| v.as_deref())
    }

    /// Everything in this table as one batch, in key order.
    pub fn to_batch(&self) -> Batch {
        let mut b = Batch::default();
        for (k, v) in &self.map {
            match v {
                Some(v) => b.put(k.clone(), v.clone()),
                None => b.delete(k.clone()),
            }
        }
        b
    }

    fn range<'a>(
        &'a self,
        start: Bound<&'a [u8]>,
        end: Bound<&'a [u8]>,
    ) -> impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)> + 'a {
        self.map
            .range::<[u8], _>((start, end))
            .map(|(k, v)| (k.as_slice(), v.as_deref()))
    }
}

/// Up to `limit` live pairs whose keys start with `prefix` and sort after
/// `after`, in key order: `layers` (newest first) over `inner`. A key takes
/// its value from the newest layer that has it; a tombstone hides it.
pub fn merged_scan(
    layers: &[&MemTable],
    inner: &dyn KvEngine,
    prefix: &[u8],
    after: Option<&[u8]>,
    limit: usize,
) -> Result<Vec<Pair>> {
    let end_key = prefix_end(prefix);
    let start = match after {
        Some(a) if a >= prefix => Bound::Excluded(a),
        _ => Bound::Included(prefix),
    };
    let end = end_key.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
    let mut mem: Vec<Peekable<_>> = layers
        .iter()
        .map(|t| t.range(start, end).peekable())
        .collect();
    let mut below = Below::new(inner, prefix, after, limit);
    let mut out = Vec::new();
    while out.len() < limit {
        // The smallest key any layer holds next.
        let mut next: Option<&[u8]> = below.peek()?.map(|(k, _)| k.as_slice());
        for it in &mut mem {
            if let Some((k, _)) = it.peek() {
                if next.is_none_or(|n| *k < n) {
                    next = Some(k);
                }
            }
        }
        let Some(key) = next.map(<[u8]>::to_vec) else {
            break;
        };
        // The newest layer's word on it; every layer moves past it.
        let mut value: Option<Option<Vec<u8>>> = None;
        for it in &mut mem {
            if it.peek().is_some_and(|(k, _)| *k == key.as_slice()) {
                let (_, v) = it.next().expect("peeked");
                value.get_or_insert_with(|| v.map(<[u8]>::to_vec));
            }
        }
        if below.peek()?.is_some_and(|(k, _)| *k == key) {
            let (_, v) = below.next().expect("peeked");
            value.get_or_insert(Some(v));
        }
        if let Some(Some(v)) = value {
            out.push((key, v));
        }
    }
    Ok(out)
}

/// The inner engine's pairs under a prefix, fetched in chunks as the merge
/// needs them (tombstones above may hide any number of them).
struct Below<'a> {
    inner: &'a dyn KvEngine,
    prefix: &'a [u8],
    after: Option<Vec<u8>>,
    chunk: usize,
    buf: std::collections::VecDeque<Pair>,
    done: bool,
}

impl<'a> Below<'a> {
    fn new(inner: &'a dyn KvEngine, prefix: &'a [u8], after: Option<&[u8]>, limit: usize) -> Self {
        Below {
            inner,
            prefix,
            after: after.map(<[u8]>::to_vec),
            chunk: limit.clamp(64, 4096),
            buf: Default::default(),
            done: false,
        }
    }

    fn peek(&mut self) -> Result<Option<&Pair>> {
        if self.buf.is_empty() && !self.done {
            let got = self
                .inner
                .scan(self.prefix, self.after.as_deref(), self.chunk)?;
            self.done = got.len() < self.chunk;
            if let Some((k, _)) = got.last() {
                self.after = Some(k.clone());
            }
            self.buf.extend(got);
        }
        Ok(self.buf.front())
    }

    fn next(&mut self) -> Option<Pair> {
        self.buf.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::mem_engine::MemEngine;

    fn table(ops: &[(&str, Option<&str>)]) -> MemTable {
        let mut t = MemTable::default();
        let mut b = Batch::default();
        for (k, v) in ops {
            match v {
                Some(v) => b.put(k.as_bytes().to_vec(), v.as_bytes().to_vec()),
                None => b.delete(k.as_bytes().to_vec()),
            }
        }
        t.apply(b);
        t
    }

    fn names(pairs: &[Pair]) -> Vec<String> {
        pairs
            .iter()
            .map(|(k, v)| {
                format!(
                    "{}={}",
                    String::from_utf8_lossy(k),
                    String::from_utf8_lossy(v)
                )
            })
            .collect()
    }

    #[test]
    fn the_newest_layer_wins_and_tombstones_hide() {
        let inner = MemEngine::default();
        let mut b = Batch::default();
        for k in ["d/a", "d/b", "d/c", "d/d", "e/x"] {
            b.put(k.as_bytes().to_vec(), b"inner".to_vec());
        }
        inner.apply(b).unwrap();
        let frozen = table(&[
            ("d/b", None),
            ("d/c", Some("frozen")),
            ("d/e", Some("frozen")),
        ]);
        let active = table(&[
            ("d/c", Some("active")),
            ("d/d", None),
            ("d/b", Some("active")),
        ]);
        let all = merged_scan(&[&active, &frozen], &inner, b"d/", None, 100).unwrap();
        assert_eq!(
            names(&all),
            ["d/a=inner", "d/b=active", "d/c=active", "d/e=frozen"]
        );
        let page = merged_scan(&[&active, &frozen], &inner, b"d/", Some(b"d/b"), 2).unwrap();
        assert_eq!(names(&page), ["d/c=active", "d/e=frozen"]);
    }

    #[test]
    fn tombstones_over_many_inner_keys_do_not_cut_the_scan_short() {
        let inner = MemEngine::default();
        let mut b = Batch::default();
        let mut dead = Vec::new();
        for i in 0..1000 {
            let k = format!("k{i:04}");
            b.put(k.clone().into_bytes(), b"v".to_vec());
            if i < 990 {
                dead.push((k, None));
            }
        }
        inner.apply(b).unwrap();
        let dead: Vec<(&str, Option<&str>)> = dead.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        let t = table(&dead);
        let live = merged_scan(&[&t], &inner, b"k", None, 5).unwrap();
        assert_eq!(live.len(), 5);
        assert_eq!(live[0].0, b"k0990".to_vec());
    }
}
