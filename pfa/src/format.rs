//! The container format: one shared file per output set.
//!
//! All integers are little-endian. `P` is the page size recorded in the
//! header (the writer's page size, 4096 on x86-64 Linux); `C` is the chunk
//! size, a multiple of both `P` and the file system's strip.
//!
//! ```text
//! offset 0            chunk 0: the container header (one page), rest reserved
//! offset C * n        chunk n >= 1: owned by rank (n - 1) % nranks
//! ```
//!
//! **Container header** (page 0, [`HEADER_LEN`] bytes used):
//!
//! | bytes  | field                                                  |
//! |--------|--------------------------------------------------------|
//! | 0..8   | magic `SHOALPFA`                                       |
//! | 8..12  | format version (1)                                     |
//! | 12..16 | nranks: how many ranks share the container             |
//! | 16..24 | chunk size C                                           |
//! | 24..32 | strip size the chunk was aligned to                    |
//! | 32..36 | page size P                                            |
//! | 36..44 | creation time (ns since the epoch)                     |
//! | 44..48 | CRC-32 of bytes 0..44                                  |
//!
//! **Chunks and who owns them.** Chunk space is claimed without locks and
//! without any shared counter: rank `r`'s `k`-th chunk is chunk
//! `1 + k * nranks + r` ([`chunk_of`]). The map `(r, k) -> 1 + k*N + r` is a
//! bijection from `{0..N} x N` onto the chunks `>= 1` (its inverse is
//! `r = (n-1) % N, k = (n-1) / N`), so two ranks can never be handed the same
//! chunk, whatever the timing, on any file system, with no atomic operation
//! at all. A rank fills its own chunks in order, so it alone writes into them.
//!
//! **Segments** are what a rank writes into its chunks: a header page
//! followed by page-sized data. A store ([`crate::PfaBuf::append`]) writes one
//! or more segments, each with a single `pwritev` of the header page and the
//! buffer's pages straight from the mapped buffer. Segments are packed from
//! the start of a chunk; one that does not fit in what is left of the chunk
//! goes to the rank's next chunk (a store larger than a chunk is split into
//! several segments). Segment header (one page):
//!
//! | bytes    | field                                                   |
//! |----------|---------------------------------------------------------|
//! | 0..8     | magic `PFASEG01`                                        |
//! | 8..12    | CRC-32 of bytes 12..P of this page                      |
//! | 12       | kind: 1 full image, 2 increment (pages changed since the previous step) |
//! | 13..16   | zero                                                    |
//! | 16..20   | rank                                                    |
//! | 20..22   | index of this segment within its store                  |
//! | 22..24   | segments in this store                                  |
//! | 24..32   | seq: the rank's segment sequence number, 0, 1, 2, ... with no gap |
//! | 32..40   | step of the logical file (0 for its first store)        |
//! | 40..48   | logical length of the file at this step                 |
//! | 48..56   | data bytes following this page (pages x P)              |
//! | 56..60   | CRC-32 of those data bytes                              |
//! | 60..62   | name length (1..=255)                                   |
//! | 62..64   | runs                                                    |
//! | 64..320  | logical name (UTF-8, no NUL)                            |
//! | 320..    | runs: (first page u32, pages u32) of the logical file, in order; the data holds those pages in that order |
//!
//! **The index** mapping (logical name, rank, step) to extents is the chain
//! of segment headers of each rank: rank `r`'s chain starts at its first
//! chunk and goes from segment to segment (the next one starts where the
//! previous one's data ends, or at the rank's next chunk when what is left
//! of the chunk cannot hold a header and a page). A header belongs to the
//! chain only if its CRC, rank and seq (one more than the previous) are
//! right, so stale bytes, holes and torn writes end the chain and can never
//! be mistaken for data. The last segment's data CRC tells whether the last
//! write was completed; a store is readable when all its segments are.
//! Each rank's index is written only by that rank, in its own chunks, in the
//! same write as the data it describes: there is nothing to lock and no
//! second file to keep consistent.

use std::io;

pub const MAGIC: &[u8; 8] = b"SHOALPFA";
pub const SEG_MAGIC: &[u8; 8] = b"PFASEG01";
pub const VERSION: u32 = 1;
/// Bytes of page 0 the container header uses.
pub const HEADER_LEN: usize = 48;
pub const NAME_MAX: usize = 255;
const NAME_AT: usize = 64;
const RUNS_AT: usize = NAME_AT + 256;
/// The largest number of ranks a container may have.
pub const MAX_RANKS: u32 = 1 << 20;

/// A format error: the container is not what it claims to be.
pub fn corrupt(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Chunk number of rank `rank`'s `k`-th chunk (see the module docs).
pub fn chunk_of(nranks: u32, rank: u32, k: u64) -> u64 {
    debug_assert!(rank < nranks);
    1 + k * u64::from(nranks) + u64::from(rank)
}

/// The rank that owns chunk `n` (>= 1), and which of its chunks it is.
pub fn owner_of(nranks: u32, n: u64) -> (u32, u64) {
    debug_assert!(n >= 1);
    (
        ((n - 1) % u64::from(nranks)) as u32,
        (n - 1) / u64::from(nranks),
    )
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub nranks: u32,
    pub chunk_size: u64,
    pub strip: u64,
    pub page_size: u32,
    pub created_ns: u64,
}

impl Header {
    pub fn encode(&self, page: &mut [u8]) {
        page[..HEADER_LEN].fill(0);
        page[0..8].copy_from_slice(MAGIC);
        put32(page, 8, VERSION);
        put32(page, 12, self.nranks);
        put64(page, 16, self.chunk_size);
        put64(page, 24, self.strip);
        put32(page, 32, self.page_size);
        put64(page, 36, self.created_ns);
        let crc = crc32fast::hash(&page[0..44]);
        put32(page, 44, crc);
    }

    pub fn decode(page: &[u8]) -> io::Result<Header> {
        if page.len() < HEADER_LEN {
            return Err(corrupt(format!(
                "container header cut short: {} bytes of {HEADER_LEN}",
                page.len()
            )));
        }
        if &page[0..8] != MAGIC {
            return Err(corrupt("not a PFA container (bad magic)"));
        }
        if get32(page, 44) != crc32fast::hash(&page[0..44]) {
            return Err(corrupt("container header checksum mismatch"));
        }
        let version = get32(page, 8);
        if version != VERSION {
            return Err(corrupt(format!(
                "container format version {version}, this build reads {VERSION}"
            )));
        }
        let h = Header {
            nranks: get32(page, 12),
            chunk_size: get64(page, 16),
            strip: get64(page, 24),
            page_size: get32(page, 32),
            created_ns: get64(page, 36),
        };
        let p = u64::from(h.page_size);
        if h.nranks == 0
            || h.nranks > MAX_RANKS
            || !(512..=1 << 21).contains(&p)
            || !p.is_power_of_two()
            || h.chunk_size < 2 * p
            || !h.chunk_size.is_multiple_of(p)
            || h.strip == 0
            || !h.chunk_size.is_multiple_of(h.strip)
        {
            return Err(corrupt(format!(
                "container header has impossible values: {h:?}"
            )));
        }
        Ok(h)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Full = 1,
    Increment = 2,
}

/// A run of pages of a logical file: `count` pages from page `first`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub first: u32,
    pub count: u32,
}

/// One segment header (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegHeader {
    pub kind: Kind,
    pub rank: u32,
    pub seg_index: u16,
    pub seg_count: u16,
    pub seq: u64,
    pub step: u64,
    pub logical_len: u64,
    pub data_len: u64,
    pub data_crc: u32,
    pub name: String,
    pub runs: Vec<Run>,
}

/// How many runs fit in one segment header page.
pub fn max_runs(page_size: usize) -> usize {
    (page_size - RUNS_AT) / 8
}

impl SegHeader {
    pub fn pages(&self) -> u64 {
        self.runs.iter().map(|r| u64::from(r.count)).sum()
    }

    pub fn encode(&self, page: &mut [u8]) {
        assert!(self.runs.len() <= max_runs(page.len()));
        assert!(!self.name.is_empty() && self.name.len() <= NAME_MAX);
        page.fill(0);
        page[0..8].copy_from_slice(SEG_MAGIC);
        page[12] = self.kind as u8;
        put32(page, 16, self.rank);
        put16(page, 20, self.seg_index);
        put16(page, 22, self.seg_count);
        put64(page, 24, self.seq);
        put64(page, 32, self.step);
        put64(page, 40, self.logical_len);
        put64(page, 48, self.data_len);
        put32(page, 56, self.data_crc);
        put16(page, 60, self.name.len() as u16);
        put16(page, 62, self.runs.len() as u16);
        page[NAME_AT..NAME_AT + self.name.len()].copy_from_slice(self.name.as_bytes());
        for (i, r) in self.runs.iter().enumerate() {
            put32(page, RUNS_AT + 8 * i, r.first);
            put32(page, RUNS_AT + 8 * i + 4, r.count);
        }
        let crc = crc32fast::hash(&page[12..]);
        put32(page, 8, crc);
    }

    /// Decodes a header page; `None` when the page holds no valid header
    /// (zeros, stale or torn bytes): the end of a chain.
    pub fn decode(page: &[u8]) -> Option<SegHeader> {
        let p = page.len();
        if &page[0..8] != SEG_MAGIC || get32(page, 8) != crc32fast::hash(&page[12..]) {
            return None;
        }
        let kind = match page[12] {
            1 => Kind::Full,
            2 => Kind::Increment,
            _ => return None,
        };
        let name_len = usize::from(get16(page, 60));
        let nruns = usize::from(get16(page, 62));
        if name_len == 0 || name_len > NAME_MAX || nruns > max_runs(p) {
            return None;
        }
        let name = std::str::from_utf8(&page[NAME_AT..NAME_AT + name_len])
            .ok()?
            .to_string();
        let runs = (0..nruns)
            .map(|i| Run {
                first: get32(page, RUNS_AT + 8 * i),
                count: get32(page, RUNS_AT + 8 * i + 4),
            })
            .collect();
        let h = SegHeader {
            kind,
            rank: get32(page, 16),
            seg_index: get16(page, 20),
            seg_count: get16(page, 22),
            seq: get64(page, 24),
            step: get64(page, 32),
            logical_len: get64(page, 40),
            data_len: get64(page, 48),
            data_crc: get32(page, 56),
            name,
            runs,
        };
        // Internal consistency: the runs are in order, inside the logical
        // file, and add up to the data.
        let file_pages = h.logical_len.div_ceil(p as u64);
        let mut next = 0u64;
        for r in &h.runs {
            let first = u64::from(r.first);
            if r.count == 0 || first < next || first + u64::from(r.count) > file_pages {
                return None;
            }
            next = first + u64::from(r.count);
        }
        if h.seg_count == 0 || h.seg_index >= h.seg_count || h.pages() * p as u64 != h.data_len {
            return None;
        }
        Some(h)
    }
}

/// Checks a logical name: 1..=255 bytes, no NUL, no `..` component and not
/// absolute (so `extract` can turn it into a path under its directory).
pub fn check_name(name: &str) -> io::Result<()> {
    let bad = name.is_empty()
        || name.len() > NAME_MAX
        || name.contains('\0')
        || name.starts_with('/')
        || name
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..");
    if bad {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad logical name {name:?}: 1 to {NAME_MAX} bytes, a relative path without empty, . or .. components"),
        ));
    }
    Ok(())
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
fn get16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().unwrap())
}
fn get32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn get64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_numbering_is_a_bijection() {
        for n in 1..=7u32 {
            let mut seen = std::collections::HashSet::new();
            for r in 0..n {
                for k in 0..50 {
                    let c = chunk_of(n, r, k);
                    assert!(c >= 1);
                    assert!(seen.insert(c), "chunk {c} handed out twice");
                    assert_eq!(owner_of(n, c), (r, k));
                }
            }
            // and every chunk up to the last is someone's
            assert!((1..=u64::from(n) * 50).all(|c| seen.contains(&c)));
        }
    }

    #[test]
    fn headers_round_trip_and_reject_damage() {
        let h = Header {
            nranks: 8,
            chunk_size: 1 << 20,
            strip: 65536,
            page_size: 4096,
            created_ns: 42,
        };
        let mut page = vec![0u8; 4096];
        h.encode(&mut page);
        assert_eq!(Header::decode(&page).unwrap(), h);
        page[20] ^= 1;
        assert!(Header::decode(&page).is_err());

        let s = SegHeader {
            kind: Kind::Increment,
            rank: 3,
            seg_index: 0,
            seg_count: 1,
            seq: 9,
            step: 2,
            logical_len: 737_534,
            data_len: 3 * 4096,
            data_crc: 7,
            name: "out/foo.txt".into(),
            runs: vec![
                Run { first: 1, count: 2 },
                Run {
                    first: 10,
                    count: 1,
                },
            ],
        };
        s.encode(&mut page);
        assert_eq!(SegHeader::decode(&page).unwrap(), s);
        for at in [0, 9, 30, 70, 330] {
            let mut bad = page.clone();
            bad[at] ^= 0x40;
            assert!(SegHeader::decode(&bad).is_none(), "byte {at}");
        }
        assert!(SegHeader::decode(&vec![0u8; 4096]).is_none());
    }

    #[test]
    fn names() {
        assert!(check_name("a/b.txt").is_ok());
        for bad in ["", "/etc", "a/../b", "a//b", ".", "x\0y"] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
