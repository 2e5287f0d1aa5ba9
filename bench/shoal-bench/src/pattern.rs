//! The bytes the benchmarks write and later verify. A buffer holds a
//! per-worker pseudo-random pattern, generated once before the timed phases,
//! and every 4 KiB page of it starts with a stamp naming the worker, the item
//! (file) and the byte offset. Restamping a buffer for the next file or block
//! rewrites 16 bytes per page in place, so the timed loops do system calls
//! and memcmp, not data generation (which matters in debug builds); and a
//! read that returns another file's bytes, a misplaced page, or zeros is
//! caught and described rather than timed.

/// Stamps are placed at the head of every page of this size.
pub const PAGE: usize = 4096;

/// Bytes of one stamp: a tag (magic, worker, item), then the byte offset.
pub const STAMP_LEN: usize = 16;

/// Marks a tag as a stamp (read as "SH" in a hex dump of the high bytes).
const MAGIC: u64 = 0x5348;

/// The splitmix64 finaliser: a fast, well-mixed function of its input, so the
/// pattern of one worker shares no runs with another's.
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A buffer of `len` bytes of worker `worker`'s pattern (unstamped).
pub fn base(len: usize, worker: usize) -> Vec<u8> {
    let start = mix(worker as u64);
    let mut buf = vec![0u8; len];
    let mut words = buf.chunks_exact_mut(8);
    let mut w = 0u64;
    for chunk in &mut words {
        chunk.copy_from_slice(&mix(start.wrapping_add(w)).to_le_bytes());
        w += 1;
    }
    let tail = words.into_remainder();
    let last = mix(start.wrapping_add(w)).to_le_bytes();
    tail.copy_from_slice(&last[..tail.len()]);
    buf
}

/// The tag of one item of one worker: 16 bits of magic, 16 of worker, 32 of
/// item, readable back with [`untag`] for error messages.
pub fn tag(worker: usize, item: u64) -> u64 {
    (MAGIC << 48) | ((worker as u64 & 0xFFFF) << 32) | (item & 0xFFFF_FFFF)
}

/// (worker, item) of a tag, or None if it is not one (zeros, foreign bytes).
pub fn untag(tag: u64) -> Option<(u64, u64)> {
    (tag >> 48 == MAGIC).then_some(((tag >> 32) & 0xFFFF, tag & 0xFFFF_FFFF))
}

/// Stamps every page of `buf`, which will be stored at byte `offset` of its
/// file, with `tag` and the page's own offset. Pages too short for a stamp
/// (the tail of a buffer) keep the pattern.
pub fn stamp(buf: &mut [u8], tag: u64, offset: u64) {
    for p in (0..buf.len()).step_by(PAGE) {
        if let Some(s) = buf.get_mut(p..p + STAMP_LEN) {
            s[..8].copy_from_slice(&tag.to_le_bytes());
            s[8..].copy_from_slice(&(offset + p as u64).to_le_bytes());
        }
    }
}

/// The (tag, offset) of the stamp at the head of `page`, if it holds one.
fn read_stamp(page: &[u8]) -> Option<(u64, u64)> {
    let s = page.get(..STAMP_LEN)?;
    let mut t = [0u8; 8];
    let mut o = [0u8; 8];
    t.copy_from_slice(&s[..8]);
    o.copy_from_slice(&s[8..]);
    Some((u64::from_le_bytes(t), u64::from_le_bytes(o)))
}

/// The first byte where `got` differs from `want` (the stamped buffer that
/// was written): everywhere if `full`, else only in the stamps, which is
/// enough to catch misplaced or missing pages at a fraction of the cost.
pub fn first_mismatch(got: &[u8], want: &[u8], full: bool) -> Option<usize> {
    if got.len() != want.len() {
        return Some(got.len().min(want.len()));
    }
    if full {
        if got == want {
            return None;
        }
        return got.iter().zip(want).position(|(a, b)| a != b);
    }
    (0..got.len()).step_by(PAGE).find_map(|p| {
        let end = (p + STAMP_LEN).min(got.len());
        (got[p..end] != want[p..end]).then(|| {
            p + got[p..end]
                .iter()
                .zip(&want[p..end])
                .position(|(a, b)| a != b)
                .unwrap_or(0)
        })
    })
}

/// Says, for a person, what was read instead at `pos`: whose page it is
/// (from its stamp), or that it reads as zeros.
pub fn describe_mismatch(got: &[u8], want: &[u8], pos: usize) -> String {
    let page = pos / PAGE * PAGE;
    let (Some(g), Some(w)) = (got.get(pos), want.get(pos)) else {
        return format!("{} bytes read, {} expected", got.len(), want.len());
    };
    let mut what = format!("first at byte {pos}: read {g:#04x}, wrote {w:#04x}");
    let page_end = (page + PAGE).min(got.len());
    if got[page..page_end].iter().all(|&b| b == 0) {
        what.push_str("; that page reads as zeros");
    } else if read_stamp(&got[page..]) != read_stamp(&want[page..]) {
        match read_stamp(&got[page..]).and_then(|(t, o)| Some((untag(t)?, o))) {
            Some(((worker, item), off)) => what.push_str(&format!(
                "; that page carries the stamp of worker {worker}, item {item}, offset {off}"
            )),
            None => what.push_str("; that page carries no stamp of this benchmark"),
        }
    }
    what
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_is_deterministic_and_per_worker() {
        let a = base(8195, 1);
        assert_eq!(a, base(8195, 1));
        assert_ne!(a, base(8195, 2));
        // The tail after the last whole word is filled too.
        assert!(a[8192..].iter().any(|&x| x != 0));
    }

    #[test]
    fn stamps_every_page_and_round_trips() {
        let mut buf = base(2 * PAGE + 10, 3);
        stamp(&mut buf, tag(3, 7), 1 << 40);
        assert_eq!(read_stamp(&buf), Some((tag(3, 7), 1 << 40)));
        assert_eq!(
            read_stamp(&buf[PAGE..]),
            Some((tag(3, 7), (1 << 40) + PAGE as u64))
        );
        assert_eq!(untag(tag(3, 7)), Some((3, 7)));
        assert_eq!(untag(0), None);
    }

    #[test]
    fn mismatches_found_and_described() {
        let mut want = base(2 * PAGE, 0);
        stamp(&mut want, tag(0, 1), 0);
        assert_eq!(first_mismatch(&want, &want, true), None);
        assert_eq!(first_mismatch(&want[..10], &want, true), Some(10));

        // Another file's page: caught by stamps alone.
        let mut got = want.clone();
        stamp(&mut got[PAGE..], tag(0, 2), PAGE as u64);
        assert_eq!(first_mismatch(&got, &want, false), Some(PAGE));
        let d = describe_mismatch(&got, &want, PAGE);
        assert!(d.contains("worker 0, item 2, offset 4096"), "{d}");

        // A flipped byte mid-page: only the full comparison sees it.
        let mut got = want.clone();
        got[100] ^= 1;
        assert_eq!(first_mismatch(&got, &want, false), None);
        assert_eq!(first_mismatch(&got, &want, true), Some(100));

        let zeros = vec![0u8; want.len()];
        assert!(describe_mismatch(&zeros, &want, 0).contains("zeros"));
    }
}
