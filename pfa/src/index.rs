//! Reading the index: each rank's chain of segment headers (the format is in
//! [`crate::format`]), grouped into stores (one `append` each) and checked.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use crate::format::{chunk_of, owner_of, Header, Kind, SegHeader};

/// One segment found in a rank's chain.
#[derive(Clone, Debug)]
pub struct Segment {
    pub hdr: SegHeader,
    /// File offset of its header page; its data follows.
    pub offset: u64,
}

impl Segment {
    /// "rank R: NAME step S segment I/N", for reports.
    pub fn describe(&self) -> String {
        let h = &self.hdr;
        format!(
            "rank {}: {} step {} segment {}/{}",
            h.rank,
            h.name,
            h.step,
            h.seg_index + 1,
            h.seg_count
        )
    }
}

/// A rank's chain, as far as it is whole.
#[derive(Clone, Debug, Default)]
pub struct Chain {
    pub rank: u32,
    pub segs: Vec<Segment>,
    /// Where the rank writes next: its chunk index and offset in the chunk.
    pub next_chunk: u64,
    pub next_off: u64,
    pub next_seq: u64,
    /// What a writer killed mid-store left behind (not an error: the
    /// container is readable up to the last completed store).
    pub cut: Vec<String>,
    /// Damage: checksums that fail inside the chain, segments lost between
    /// two readable ones.
    pub problems: Vec<String>,
}

/// How much of the data to check while walking a chain.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// Only the last segment's data (enough to find a torn last write).
    Tail,
    /// Every segment's data (`pfa check`).
    All,
}

fn read_page(file: &File, at: u64, page: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < page.len() {
        match file.read_at(&mut page[got..], at + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Reads `len` bytes at `at` and returns their CRC-32, or `None` when the
/// file ends first.
fn data_crc(file: &File, at: u64, len: u64) -> io::Result<Option<u32>> {
    let mut h = crc32fast::Hasher::new();
    let mut buf = vec![0u8; len.min(1 << 20) as usize];
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(buf.len() as u64) as usize;
        let got = read_page(file, at + done, &mut buf[..n])?;
        if got < n {
            return Ok(None);
        }
        h.update(&buf[..n]);
        done += n as u64;
    }
    Ok(Some(h.finalize()))
}

/// Walks rank `rank`'s chain.
pub fn scan_chain(file: &File, h: &Header, rank: u32, verify: Verify) -> io::Result<Chain> {
    let p = u64::from(h.page_size);
    let c = h.chunk_size;
    let file_len = file.metadata()?.len();
    let mut page = vec![0u8; p as usize];
    let mut chain = Chain {
        rank,
        ..Chain::default()
    };
    let (mut k, mut off, mut seq) = (0u64, 0u64, 0u64);
    let mut bad = Vec::new();
    loop {
        if c - off < 2 * p {
            k += 1;
            off = 0;
        }
        let at = chunk_of(h.nranks, rank, k) * c + off;
        let got = read_page(file, at, &mut page)?;
        let hdr = if got == page.len() {
            SegHeader::decode(&page)
        } else {
            None
        };
        let valid = hdr
            .as_ref()
            .filter(|s| s.rank == rank && s.seq == seq && p + s.data_len <= c - off);
        let Some(hdr) = valid else {
            // The end of the chain. Say what stopped it, unless it is a hole
            // or the end of the file (nothing was ever written there).
            let blank = got == 0 || page[..got].iter().all(|&b| b == 0);
            if !blank {
                let what = match &hdr {
                    Some(s) if s.rank == rank && s.seq < seq => {
                        // Stale bytes from before a restart: ended here.
                        None
                    }
                    Some(s) => Some(format!(
                        "rank {rank}: segment header at offset {at} does not follow seq {} (rank {}, seq {})",
                        seq.wrapping_sub(1),
                        s.rank,
                        s.seq
                    )),
                    None if got < page.len() => Some(format!(
                        "rank {rank}: segment header at offset {at} cut short by the end of the file"
                    )),
                    None => Some(format!(
                        "rank {rank}: unreadable segment header at offset {at} (torn write or damage)"
                    )),
                };
                if let Some(w) = what {
                    chain.cut.push(w);
                }
            }
            // Does the rank go on in a later chunk (a damaged header in the
            // middle)? Then continue there and report what was lost.
            if let Some((k2, s2)) = resync(file, h, rank, k + 1, seq, file_len, &mut page)? {
                chain.problems.push(format!(
                    "rank {rank}: segments {seq}..{} lost between offset {at} and chunk {}",
                    s2 - 1,
                    chunk_of(h.nranks, rank, k2)
                ));
                chain.cut.retain(|w| !w.contains(&format!("offset {at} ")));
                k = k2;
                off = 0;
                seq = s2;
                continue;
            }
            break;
        };
        let hdr = hdr.clone();
        let data_ok = match verify {
            Verify::All => data_crc(file, at + p, hdr.data_len)? == Some(hdr.data_crc),
            Verify::Tail => true,
        };
        if !data_ok {
            bad.push(chain.segs.len());
        }
        chain.segs.push(Segment {
            hdr: hdr.clone(),
            offset: at,
        });
        off += p + hdr.data_len;
        seq += 1;
    }
    // The last segment is where a killed writer stops: if its data was not
    // all written, the chain ends before it and the next store goes there.
    if let Some(last) = chain.segs.last().cloned() {
        let ok = match verify {
            Verify::All => bad.last() != Some(&(chain.segs.len() - 1)),
            Verify::Tail => {
                data_crc(file, last.offset + p, last.hdr.data_len)? == Some(last.hdr.data_crc)
            }
        };
        if !ok {
            bad.pop();
            chain.segs.pop();
            chain.cut.push(format!(
                "{} torn at offset {} ({} data bytes not all written)",
                last.describe(),
                last.offset,
                last.hdr.data_len
            ));
            k = owner_of(h.nranks, last.offset / c).1;
            off = last.offset % c;
            seq = last.hdr.seq;
        }
    }
    for i in bad {
        let s = &chain.segs[i];
        chain.problems.push(format!(
            "{}: data checksum mismatch at offset {}",
            s.describe(),
            s.offset + p
        ));
    }
    chain.next_chunk = k;
    chain.next_off = off;
    chain.next_seq = seq;
    Ok(chain)
}

/// Looks for the rank's chain going on at the start of one of its chunks
/// from `from_k`: returns that chunk index and the seq found there.
fn resync(
    file: &File,
    h: &Header,
    rank: u32,
    from_k: u64,
    seq: u64,
    file_len: u64,
    page: &mut [u8],
) -> io::Result<Option<(u64, u64)>> {
    let mut k = from_k;
    loop {
        let at = chunk_of(h.nranks, rank, k) * h.chunk_size;
        if at >= file_len {
            return Ok(None);
        }
        if read_page(file, at, page)? == page.len() {
            if let Some(s) = SegHeader::decode(page) {
                if s.rank == rank && s.seq > seq {
                    return Ok(Some((k, s.seq)));
                }
            }
        }
        k += 1;
    }
}

/// One store (an `append`): the segments that carry one step of one
/// logical file of one rank.
#[derive(Clone, Debug)]
pub struct Store {
    pub name: String,
    pub rank: u32,
    pub step: u64,
    pub kind: Kind,
    pub logical_len: u64,
    pub segs: Vec<Segment>,
    /// All its segments are there (a killed writer may leave fewer).
    pub complete: bool,
}

impl Store {
    pub fn data_bytes(&self) -> u64 {
        self.segs.iter().map(|s| s.hdr.data_len).sum()
    }
}

/// The stores of one chain, by logical name, in step order. A store whose
/// segments are not all there is listed but marked incomplete; a later
/// complete store of the same step (rewritten after a failed write)
/// replaces it.
pub fn stores(chain: &Chain) -> BTreeMap<String, Vec<Store>> {
    let mut by_name: BTreeMap<String, Vec<Store>> = BTreeMap::new();
    let mut i = 0;
    while i < chain.segs.len() {
        let first = &chain.segs[i].hdr;
        let mut segs = vec![chain.segs[i].clone()];
        let mut j = i + 1;
        while j < chain.segs.len()
            && segs.len() < usize::from(first.seg_count)
            && chain.segs[j].hdr.name == first.name
            && chain.segs[j].hdr.step == first.step
            && usize::from(chain.segs[j].hdr.seg_index) == segs.len()
        {
            segs.push(chain.segs[j].clone());
            j += 1;
        }
        let store = Store {
            name: first.name.clone(),
            rank: chain.rank,
            step: first.step,
            kind: first.kind,
            logical_len: first.logical_len,
            complete: first.seg_index == 0 && segs.len() == usize::from(first.seg_count),
            segs,
        };
        let list = by_name.entry(store.name.clone()).or_default();
        match list.last() {
            Some(prev) if prev.step == store.step && !prev.complete => {
                list.pop();
            }
            _ => {}
        }
        list.push(store);
        i = j;
    }
    by_name
}

/// Which stores to apply, in order, to rebuild step `step` of a logical
/// file: the last full image at or before it and the increments after it.
pub fn plan(stores: &[Store], step: u64) -> io::Result<&[Store]> {
    let end = stores
        .iter()
        .position(|s| s.step == step)
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no step {step}")))?;
    let base = stores[..=end]
        .iter()
        .rposition(|s| s.kind == Kind::Full)
        .ok_or_else(|| {
            crate::format::corrupt(format!("step {step} has no full image before it"))
        })?;
    let path = &stores[base..=end];
    for (n, s) in path.iter().enumerate() {
        if !s.complete {
            return Err(crate::format::corrupt(format!(
                "step {} is incomplete (its writer was cut off)",
                s.step
            )));
        }
        if s.step != path[0].step + n as u64 {
            return Err(crate::format::corrupt(format!(
                "step {} is missing between {} and {step}",
                path[0].step + n as u64,
                path[0].step
            )));
        }
    }
    Ok(path)
}

/// Applies one store's pages to `image` (at least its logical length,
/// rounded up to pages), reading them straight into place, and checks
/// their checksums.
pub fn apply(file: &File, page_size: u64, store: &Store, image: &mut [u8]) -> io::Result<()> {
    for seg in &store.segs {
        let mut crc = crc32fast::Hasher::new();
        let mut at = seg.offset + page_size;
        for r in &seg.hdr.runs {
            let from = u64::from(r.first) * page_size;
            let len = u64::from(r.count) * page_size;
            let dst = &mut image[from as usize..(from + len) as usize];
            if read_page(file, at, dst)? < dst.len() {
                return Err(crate::format::corrupt(format!(
                    "{} step {}: data at offset {at} cut short by the end of the container",
                    store.name, store.step
                )));
            }
            crc.update(dst);
            at += len;
        }
        if crc.finalize() != seg.hdr.data_crc {
            return Err(crate::format::corrupt(format!(
                "{} rank {} step {}: data checksum mismatch in the segment at offset {}",
                store.name, store.rank, store.step, seg.offset
            )));
        }
    }
    Ok(())
}
