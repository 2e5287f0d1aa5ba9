//! Byte extents of one file, joined where they touch: what a client's
//! gathering buffer holds and what a gathering server merges from every
//! client [Hildebrand 2006], and how a `gather_write` carries them (offsets
//! and lengths in the body, the bytes one after the other in the payload).
//!
//! Invariants, checked in debug builds: extents are non-empty, sorted and
//! disjoint, and `bytes` is the sum of their lengths. A write joins the
//! extents it overlaps and the one it continues, so a stream of small
//! sequential writes is one growing extent, and 10 writers of one file's
//! disjoint pieces are at most 10; a write that ends just where a later
//! extent starts stays apart from it (joining would copy that extent, and a
//! writer going backwards in small pieces would cost quadratic copying).

use std::collections::BTreeMap;

use bytes::{Bytes, BytesMut};

use crate::dist::MAX_FILE_SIZE;
use crate::error::{Result, ShoalError};
use crate::msg::GatherWriteRequest;

/// Most extents one `gather_write` may carry.
pub const MAX_PER_REQUEST: usize = 65536;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Extents {
    map: BTreeMap<u64, Vec<u8>>,
    bytes: usize,
}

impl Extents {
    /// Joins `data` at `offset` with every extent it overlaps and the one it
    /// continues; newer bytes win. Returns how many bytes the set grew by.
    pub fn join(&mut self, offset: u64, data: &[u8]) -> usize {
        if data.is_empty() {
            return 0;
        }
        let end = offset + data.len() as u64;
        // The extent before `offset` that reaches it, if any: the usual case
        // of a sequential stream, which grows in place.
        let before = self
            .map
            .range(..=offset)
            .next_back()
            .filter(|(s, v)| **s + v.len() as u64 >= offset)
            .map(|(s, _)| *s);
        let start = before.unwrap_or(offset);
        let touched: Vec<u64> = self.map.range(start..end).map(|(s, _)| *s).collect();
        let old: usize = touched.iter().map(|s| self.map[s].len()).sum();
        let mut merged = match before {
            Some(s) => self.map.remove(&s).unwrap_or_default(),
            None => Vec::with_capacity(data.len()),
        };
        for s in touched.iter().filter(|s| Some(**s) != before) {
            let v = self.map.remove(s).unwrap_or_default();
            let at = (*s - start) as usize;
            if merged.len() < at + v.len() {
                merged.resize(at + v.len(), 0);
            }
            merged[at..at + v.len()].copy_from_slice(&v);
        }
        let at = (offset - start) as usize;
        if merged.len() < at + data.len() {
            merged.resize(at + data.len(), 0);
        }
        merged[at..at + data.len()].copy_from_slice(data);
        let grown = merged.len() - old;
        self.map.insert(start, merged);
        self.bytes += grown;
        self.check();
        grown
    }

    /// Writes `data` at `offset` over the bytes already here, and only
    /// there: a resend copy stays the newest without growing.
    pub fn overlay(&mut self, offset: u64, data: &[u8]) {
        let end = offset + data.len() as u64;
        let first = self
            .map
            .range(..=offset)
            .next_back()
            .map_or(offset, |(s, _)| *s);
        for (s, v) in self.map.range_mut(first..end) {
            let from = offset.max(*s);
            let to = end.min(s + v.len() as u64);
            if from < to {
                v[(from - s) as usize..(to - s) as usize]
                    .copy_from_slice(&data[(from - offset) as usize..(to - offset) as usize]);
            }
        }
    }

    /// Whether any byte of `offset..end` is here.
    pub fn overlaps(&self, offset: u64, end: u64) -> bool {
        let before = self.map.range(..offset).next_back();
        before.is_some_and(|(s, v)| s + v.len() as u64 > offset)
            || self.map.range(offset..end).next().is_some()
    }

    /// Drops every byte at or past `size` (the file was truncated).
    pub fn cut(&mut self, size: u64) {
        let past: Vec<u64> = self.map.range(size..).map(|(s, _)| *s).collect();
        for s in past {
            self.bytes -= self.map.remove(&s).map_or(0, |v| v.len());
        }
        if let Some((s, v)) = self.map.range_mut(..size).next_back() {
            let keep = (size - s) as usize;
            if v.len() > keep {
                self.bytes -= v.len() - keep;
                v.truncate(keep);
            }
        }
        self.check();
    }

    /// Takes every extent out, in offset order.
    pub fn take(&mut self) -> Vec<(u64, Vec<u8>)> {
        self.bytes = 0;
        std::mem::take(&mut self.map).into_iter().collect()
    }

    pub fn iter(&self) -> impl Iterator<Item = (u64, &[u8])> {
        self.map.iter().map(|(s, v)| (*s, v.as_slice()))
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// How many extents.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The end of the last extent (0 if none).
    pub fn end(&self) -> u64 {
        self.map
            .last_key_value()
            .map_or(0, |(s, v)| s + v.len() as u64)
    }

    fn check(&self) {
        if cfg!(debug_assertions) {
            let mut last_end = None;
            for (s, v) in &self.map {
                assert!(!v.is_empty(), "an empty extent at {s}");
                assert!(last_end.is_none_or(|e| e <= *s), "extents overlap at {s}");
                last_end = Some(s + v.len() as u64);
            }
            let sum: usize = self.map.values().map(Vec::len).sum();
            assert_eq!(sum, self.bytes, "the byte count");
        }
    }
}

/// The `gather_write` of `extents` to file `handle`: its body and payload.
pub fn to_request<'a>(
    handle: u64,
    extents: impl Iterator<Item = (u64, &'a [u8])>,
) -> (GatherWriteRequest, Bytes) {
    let mut q = GatherWriteRequest {
        handle,
        ..Default::default()
    };
    let mut payload = BytesMut::new();
    for (offset, data) in extents {
        q.offsets.push(offset);
        q.lengths.push(data.len() as u32);
        payload.extend_from_slice(data);
    }
    (q, payload.freeze())
}

/// `extents` (in order, not overlapping) cut into requests' worth: each at
/// most `max_bytes` of payload and [`MAX_PER_REQUEST`] extents, an extent
/// longer than `max_bytes` cut into pieces.
pub fn batches<'a>(
    extents: impl Iterator<Item = (u64, &'a [u8])>,
    max_bytes: usize,
) -> Vec<Vec<(u64, &'a [u8])>> {
    assert!(max_bytes > 0, "a batch must hold something");
    let mut out: Vec<Vec<(u64, &[u8])>> = vec![Vec::new()];
    let mut bytes = 0;
    for (offset, data) in extents {
        for (i, piece) in data.chunks(max_bytes).enumerate() {
            let full = bytes + piece.len() > max_bytes
                || out.last().map_or(0, Vec::len) == MAX_PER_REQUEST;
            if full && bytes > 0 {
                out.push(Vec::new());
                bytes = 0;
            }
            bytes += piece.len();
            if let Some(batch) = out.last_mut() {
                batch.push((offset + (i * max_bytes) as u64, piece));
            }
        }
    }
    out.retain(|b| !b.is_empty());
    out
}

/// The extents a `gather_write` carries, checked: as many lengths as
/// offsets, in order and not overlapping (as [`Extents::take`] gives them:
/// joining them then never copies), no empty extent, none past the largest
/// file size, and the lengths adding up to the payload exactly.
pub fn from_request(q: &GatherWriteRequest, payload: &Bytes) -> Result<Vec<(u64, Bytes)>> {
    if q.offsets.len() != q.lengths.len() || q.offsets.len() > MAX_PER_REQUEST {
        return Err(ShoalError::invalid(format!(
            "gather_write with {} offsets and {} lengths (at most {MAX_PER_REQUEST})",
            q.offsets.len(),
            q.lengths.len()
        )));
    }
    let mut at = 0usize;
    let mut last_end = 0u64;
    let mut out = Vec::with_capacity(q.offsets.len());
    for (offset, len) in q.offsets.iter().zip(&q.lengths) {
        if *offset < last_end {
            return Err(ShoalError::invalid(format!(
                "gather_write extent at {offset} is out of order or overlaps the one before"
            )));
        }
        let len = *len as usize;
        let fits = offset
            .checked_add(len as u64)
            .is_some_and(|e| e <= MAX_FILE_SIZE);
        if len == 0 || !fits || at + len > payload.len() {
            return Err(ShoalError::invalid(format!(
                "gather_write extent of {len} bytes at {offset} is empty, past the largest \
                 file size or past the payload"
            )));
        }
        out.push((*offset, payload.slice(at..at + len)));
        at += len;
        last_end = offset + len as u64;
    }
    if at != payload.len() {
        return Err(ShoalError::invalid(format!(
            "gather_write payload of {} bytes, extents of {at}",
            payload.len()
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(e: &Extents) -> Vec<(u64, Vec<u8>)> {
        e.iter().map(|(s, v)| (s, v.to_vec())).collect()
    }

    #[test]
    fn joins_keep_the_newest_bytes_and_never_copy_backwards() {
        let mut e = Extents::default();
        for i in 0..100u64 {
            e.join(i * 16, &[i as u8; 16]);
        }
        assert_eq!((e.len(), e.bytes(), e.end()), (1, 1600, 1600));
        let mut e = Extents::default();
        e.join(0, b"aaaa");
        e.join(10, b"bbbb");
        assert_eq!(e.len(), 2);
        assert_eq!(e.join(2, b"cccccccccc"), 6);
        assert_eq!(all(&e), vec![(0, b"aaccccccccccbb".to_vec())]);
        e.join(14, b"d");
        assert_eq!(e.len(), 1, "a write continuing an extent joins it");
        e.join(20, b"x");
        e.join(19, b"y");
        assert_eq!(
            e.len(),
            3,
            "one ending where a later one starts stays apart"
        );
        e.join(18, b"zzz");
        assert_eq!(all(&e)[1], (18, b"zzz".to_vec()), "an overlap joins");
        assert_eq!(e.bytes(), 18);
    }

    #[test]
    fn overlay_writes_only_over_what_is_there_and_cut_drops_the_tail() {
        let mut e = Extents::default();
        e.join(0, b"aaaa");
        e.join(10, b"bbbb");
        e.overlay(2, b"XXXXXXXXXXXXXXXX");
        assert_eq!(all(&e), vec![(0, b"aaXX".to_vec()), (10, b"XXXX".to_vec())]);
        assert_eq!(e.bytes(), 8);
        assert!(e.overlaps(3, 4) && e.overlaps(13, 20) && e.overlaps(0, 1));
        assert!(!e.overlaps(4, 10) && !e.overlaps(14, 99) && !e.overlaps(4, 4));
        e.cut(12);
        assert_eq!(all(&e), vec![(0, b"aaXX".to_vec()), (10, b"XX".to_vec())]);
        e.cut(3);
        assert_eq!((all(&e), e.bytes()), (vec![(0, b"aaX".to_vec())], 3));
        e.cut(0);
        assert!(e.is_empty() && e.bytes() == 0);
    }

    #[test]
    fn batches_keep_to_their_bounds_and_lose_nothing() {
        let big = [7u8; 10];
        let small = [1u8; 3];
        let input = [(0u64, &big[..]), (20, &small[..]), (30, &small[..])];
        let out = batches(input.into_iter(), 4);
        let flat: Vec<(u64, usize)> = out.iter().flatten().map(|(o, d)| (*o, d.len())).collect();
        assert_eq!(flat, vec![(0, 4), (4, 4), (8, 2), (20, 3), (30, 3)]);
        assert!(out
            .iter()
            .all(|b| b.iter().map(|(_, d)| d.len()).sum::<usize>() <= 4));
        assert!(batches(std::iter::empty(), 4).is_empty());
    }

    #[test]
    fn requests_round_trip_and_bad_ones_are_refused() {
        let mut e = Extents::default();
        e.join(0, b"abc");
        e.join(100, b"defg");
        let (q, payload) = to_request(7, e.iter());
        let back = from_request(&q, &payload).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!((back[1].0, &back[1].1[..]), (100, &b"defg"[..]));
        let short = payload.slice(..6);
        assert!(from_request(&q, &short).is_err());
        let mut long = q.clone();
        long.lengths[1] = 3;
        assert!(from_request(&long, &payload).is_err(), "payload left over");
        let mut odd = q.clone();
        odd.offsets.pop();
        assert!(from_request(&odd, &payload).is_err());
        let mut far = q.clone();
        far.offsets[0] = u64::MAX - 1;
        assert!(from_request(&far, &payload).is_err());
        let mut backwards = q;
        backwards.offsets = vec![100, 0];
        assert!(from_request(&backwards, &payload).is_err());
    }
}
