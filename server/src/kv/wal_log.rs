//! The metadata log on disk: two preallocated files written in turns, and
//! the record format. See `wal` for why and how the log is used.
//!
//! Record layout (little-endian): `len: u32` (body bytes), `crc: u32`
//! (CRC-32 of `seq` and the body), `seq: u64`, then the body: per operation
//! a tag byte (`1` put, `2` delete), `key_len: u32`, the key, and for a put
//! `value_len: u32` and the value.
//!
//! Sequence numbers grow by one per record and never restart. A file is
//! written from offset 0 each time the log turns to it, over what an older
//! turn left there, so reading a file stops at the first record that is
//! torn (short, or a bad checksum) or does not follow its predecessor.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use shoal_proto::error::{Result, ShoalError};

use super::engine::{Batch, BatchOp};

/// The two log files, beside the inner engine's files.
pub const LOG_FILES: [&str; 2] = ["meta.wal.0", "meta.wal.1"];

const HEADER: usize = 16;
const PUT: u8 = 1;
const DELETE: u8 = 2;
/// Largest body a record may claim when read back (a bound against a
/// garbage length; a batch is far smaller).
const MAX_BODY: usize = 1 << 30;
/// Zero-filling writes this much at a time.
const FILL_CHUNK: usize = 1 << 20;

pub fn io_err(what: &str, path: &Path, e: std::io::Error) -> ShoalError {
    ShoalError::from(e).context(format!("metadata log {}: {what}", path.display()))
}

/// Direct writes cover whole blocks of this size, aligned to it (a multiple
/// of the logical block size of the disks here).
const BLOCK: usize = 4096;

/// One of the log files, open for durable writes.
pub struct LogFile {
    file: File,
    pub path: PathBuf,
    /// Written with `O_DIRECT`, which takes whole aligned blocks only; false
    /// on file systems without it (tmpfs).
    direct: bool,
    /// Direct mode: where the last write ended, and the bytes from the start
    /// of its last block up to there, which the next write (the next records
    /// of the log) rewrites with what follows.
    last_end: u64,
    last_block: Vec<u8>,
    buf: AlignedBuf,
}

impl LogFile {
    /// Opens (creating) the file at `path`, at least `len` bytes of written
    /// zeros, so that writes overwrite allocated blocks and do not change
    /// the file's size or extents (which would add a journal commit to
    /// every write). Writes through it are durable when they return
    /// (`O_DSYNC`): one system call and one device flush per sync,
    /// measurably quicker here than a write followed by fdatasync. Where the
    /// file system allows, they also bypass the page cache (`O_DIRECT`):
    /// the log is never read back while the server runs, and the copy and
    /// writeback of cached pages cost CPU on every sync.
    pub fn open(path: &Path, len: u64) -> Result<LogFile> {
        let plain = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| io_err("open", path, e))?;
        fill(&plain, path, len)?;
        let open = |flags| {
            OpenOptions::new()
                .write(true)
                .custom_flags(flags)
                .open(path)
        };
        let (file, direct) = match open(libc::O_DSYNC | libc::O_DIRECT) {
            Ok(f) => (f, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => (
                open(libc::O_DSYNC).map_err(|e| io_err("open", path, e))?,
                false,
            ),
            Err(e) => return Err(io_err("open", path, e)),
        };
        Ok(LogFile {
            file,
            path: path.to_path_buf(),
            direct,
            last_end: 0,
            last_block: Vec::new(),
            buf: AlignedBuf::default(),
        })
    }

    /// Writes `bytes` at `at`, which is where the previous write ended or
    /// the start of the file (a new turn of the log); durable when it
    /// returns. After a failure the same write may be tried again.
    pub fn write_at(&mut self, bytes: &[u8], at: u64) -> Result<()> {
        if !self.direct {
            return self
                .file
                .write_all_at(bytes, at)
                .map_err(|e| io_err("write", &self.path, e));
        }
        if at != self.last_end {
            if !at.is_multiple_of(BLOCK as u64) {
                return Err(ShoalError::io(format!(
                    "metadata log {}: a write at {at} follows nothing written",
                    self.path.display()
                )));
            }
            self.last_block.clear();
            self.last_end = at;
        }
        let start = self.last_end - self.last_block.len() as u64;
        let len = self.last_block.len() + bytes.len();
        let padded = len.div_ceil(BLOCK) * BLOCK;
        let buf = self.buf.bytes(padded);
        buf[..self.last_block.len()].copy_from_slice(&self.last_block);
        buf[self.last_block.len()..len].copy_from_slice(bytes);
        // Past the end of the log: zeros, over whatever an older turn left.
        buf[len..].fill(0);
        self.file
            .write_all_at(buf, start)
            .map_err(|e| io_err("write", &self.path, e))?;
        let tail = len % BLOCK;
        self.last_block = buf[len - tail..len].to_vec();
        self.last_end = at + bytes.len() as u64;
        Ok(())
    }
}

/// A buffer whose start is aligned to [`BLOCK`], as `O_DIRECT` needs.
#[derive(Default)]
struct AlignedBuf(Vec<Block>);

#[derive(Clone, Copy)]
#[repr(C, align(4096))]
struct Block([u8; BLOCK]);

impl AlignedBuf {
    /// The first `len` bytes, a multiple of [`BLOCK`] (grown as needed).
    fn bytes(&mut self, len: usize) -> &mut [u8] {
        debug_assert_eq!(len % BLOCK, 0);
        let blocks = len / BLOCK;
        if self.0.len() < blocks {
            self.0.resize(blocks, Block([0; BLOCK]));
        }
        // SAFETY: `Block` is plain bytes with no padding (size == BLOCK), the
        // vector holds at least `blocks` of them contiguously, and the slice
        // borrows `self` mutably for its whole life.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast::<u8>(), len) }
    }
}

fn fill(file: &File, path: &Path, len: u64) -> Result<()> {
    let have = file.metadata().map_err(|e| io_err("stat", path, e))?.len();
    if have >= len {
        return Ok(());
    }
    let zeros = vec![0u8; FILL_CHUNK];
    let mut at = have;
    while at < len {
        let n = (len - at).min(FILL_CHUNK as u64) as usize;
        file.write_all_at(&zeros[..n], at)
            .map_err(|e| io_err("allocate", path, e))?;
        at += n as u64;
    }
    file.sync_all().map_err(|e| io_err("allocate", path, e))
}

/// The records a log file holds: the run of whole records from offset 0
/// whose sequence numbers follow each other.
pub fn read_run(path: &Path) -> Result<Vec<(u64, Batch)>> {
    let mut data = Vec::new();
    match File::open(path) {
        Ok(mut f) => {
            f.read_to_end(&mut data)
                .map_err(|e| io_err("read", path, e))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err("open", path, e)),
    }
    let mut run: Vec<(u64, Batch)> = Vec::new();
    let mut at = 0;
    while let Some((seq, body, next)) = record_at(&data, at) {
        if run.last().is_some_and(|(prev, _)| seq != prev + 1) {
            break;
        }
        let Some(batch) = decode_body(body) else {
            break;
        };
        run.push((seq, batch));
        at = next;
    }
    Ok(run)
}

/// Appends `batch` as record `seq` to `out`.
pub fn encode(out: &mut Vec<u8>, seq: u64, batch: &Batch) {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER]);
    for op in &batch.ops {
        match op {
            BatchOp::Put(k, v) => {
                out.push(PUT);
                put_bytes(out, k);
                put_bytes(out, v);
            }
            BatchOp::Delete(k) => {
                out.push(DELETE);
                put_bytes(out, k);
            }
        }
    }
    let body_len = out.len() - start - HEADER;
    let mut crc = crc32fast::Hasher::new();
    crc.update(&seq.to_le_bytes());
    crc.update(&out[start + HEADER..]);
    let header = &mut out[start..start + HEADER];
    header[0..4].copy_from_slice(&(body_len as u32).to_le_bytes());
    header[4..8].copy_from_slice(&crc.finalize().to_le_bytes());
    header[8..16].copy_from_slice(&seq.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// The record at `at`: its sequence number, body and the offset after it;
/// None if it is short or its checksum is wrong.
pub fn record_at(data: &[u8], at: usize) -> Option<(u64, &[u8], usize)> {
    let header = data.get(at..at.checked_add(HEADER)?)?;
    let len = u32::from_le_bytes(header[0..4].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(header[4..8].try_into().ok()?);
    let seq = u64::from_le_bytes(header[8..16].try_into().ok()?);
    if len > MAX_BODY {
        return None;
    }
    let end = at + HEADER + len;
    let body = data.get(at + HEADER..end)?;
    let mut h = crc32fast::Hasher::new();
    h.update(&seq.to_le_bytes());
    h.update(body);
    (h.finalize() == crc).then_some((seq, body, end))
}

fn decode_body(mut body: &[u8]) -> Option<Batch> {
    let mut batch = Batch::default();
    while let Some((&tag, rest)) = body.split_first() {
        body = rest;
        let key = take_bytes(&mut body)?;
        match tag {
            PUT => {
                let value = take_bytes(&mut body)?;
                batch.put(key, value);
            }
            DELETE => batch.delete(key),
            _ => return None,
        }
    }
    Some(batch)
}

fn take_bytes(body: &mut &[u8]) -> Option<Vec<u8>> {
    let len = u32::from_le_bytes(body.get(0..4)?.try_into().ok()?) as usize;
    let bytes = body.get(4..4 + len)?.to_vec();
    *body = &body[4 + len..];
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(k: &str, v: &str) -> Batch {
        let mut b = Batch::default();
        b.put(k.as_bytes().to_vec(), v.as_bytes().to_vec());
        b
    }

    fn seqs(run: &[(u64, Batch)]) -> Vec<u64> {
        run.iter().map(|(s, _)| *s).collect()
    }

    #[test]
    fn a_run_ends_at_a_torn_record_or_a_break_in_sequence() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let mut bytes = Vec::new();
        for seq in [7, 8, 9] {
            encode(&mut bytes, seq, &put("k", &format!("v{seq}")));
        }
        let ends: Vec<usize> = {
            let mut at = 0;
            std::iter::from_fn(|| {
                let (_, _, next) = record_at(&bytes, at)?;
                at = next;
                Some(next)
            })
            .collect()
        };
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(seqs(&read_run(&path).unwrap()), [7, 8, 9]);

        // Torn: the last record's final bytes never made it.
        let mut torn = bytes.clone();
        torn[ends[2] - 2..ends[2]].fill(0);
        std::fs::write(&path, &torn).unwrap();
        assert_eq!(seqs(&read_run(&path).unwrap()), [7, 8]);

        // A flipped bit in a body.
        let mut flipped = bytes.clone();
        flipped[ends[1] - 1] ^= 0x10;
        std::fs::write(&path, &flipped).unwrap();
        assert_eq!(seqs(&read_run(&path).unwrap()), [7]);

        // A newer turn wrote seq 20 over the first record, exactly as long:
        // the older records after it are not its successors.
        let mut newer = Vec::new();
        encode(&mut newer, 20, &put("k", "v2"));
        assert_eq!(newer.len(), ends[0]);
        let mut mixed = newer.clone();
        mixed.extend_from_slice(&bytes[ends[0]..]);
        std::fs::write(&path, &mixed).unwrap();
        assert_eq!(seqs(&read_run(&path).unwrap()), [20]);

        // Zeros (a fresh file) hold no record; a missing file neither.
        std::fs::write(&path, vec![0u8; 4096]).unwrap();
        assert!(read_run(&path).unwrap().is_empty());
        assert!(read_run(&dir.path().join("none")).unwrap().is_empty());
    }

    #[test]
    fn records_round_trip_puts_and_deletes() {
        let mut b = put("a", "1");
        b.delete(b"b".to_vec());
        b.put(Vec::new(), Vec::new());
        let mut bytes = Vec::new();
        encode(&mut bytes, 1, &b);
        let (seq, body, end) = record_at(&bytes, 0).unwrap();
        assert_eq!((seq, end), (1, bytes.len()));
        let back = decode_body(body).unwrap();
        assert_eq!(format!("{:?}", back.ops), format!("{:?}", b.ops));
    }

    #[test]
    fn appends_land_where_they_belong_whatever_their_alignment() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, vec![7u8; 20_000]).unwrap();
        let mut f = LogFile::open(&path, 20_000).unwrap();
        let mut want = Vec::new();
        for (i, n) in [10usize, 4086, 1, 5000, 3].iter().enumerate() {
            let bytes = vec![i as u8 + 1; *n];
            f.write_at(&bytes, want.len() as u64).unwrap();
            want.extend_from_slice(&bytes);
        }
        let back = std::fs::read(&path).unwrap();
        assert_eq!(&back[..want.len()], &want[..]);
        // A new turn starts at 0 again.
        f.write_at(b"again", 0).unwrap();
        assert_eq!(&std::fs::read(&path).unwrap()[..5], b"again");
        // Anything else is refused rather than written out of place.
        assert!(f.write_at(b"x", 100).is_err() || !f.direct);
    }

    #[test]
    fn an_opened_log_file_is_preallocated_with_zeros() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        LogFile::open(&path, 10_000).unwrap();
        let zeros = std::fs::read(&path).unwrap();
        assert_eq!(zeros.len(), 10_000);
        assert!(zeros.iter().all(|b| *b == 0));
        LogFile::open(&path, 100).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            10_000,
            "never shrunk"
        );
    }
}
