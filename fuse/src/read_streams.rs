//! Streamed reads: a large file opened read-only is read past the kernel's
//! page cache (FOPEN_DIRECT_IO), with the read-ahead done here instead.
//!
//! Why: through the page cache, most of a streaming read's CPU here was the
//! kernel copying each reply into freshly allocated page-cache pages
//! (`fuse_copy_folio`: 26% of the machine's CPU in a profile of 4 readers)
//! and putting them on the LRU. Read past it, a reply is copied once, into
//! the reader's own buffer. The FUSE passthrough we compare against
//! (bindfs) is not faster per byte. A prototype against the page cache
//! with its old one-strip readahead window, 4 readers of 512 MiB each, 3
//! rounds alternating: 2,236-2,283 MiB/s against 1,194-1,718. Against
//! the four-strip window, and with files just written (memory colder),
//! it is not ahead: `bench/results/read-streams.md`. So it is off by
//! default.
//!
//! Past the page cache the kernel's readahead is gone too: every read
//! arrives at the reader's own size (4 KiB for some programs), and one
//! server round trip each would be slow. So once a handle reads
//! sequentially, it keeps whole strips ("pieces") fetched ahead of the
//! reader, as many as `stream_reads` bytes, growing with the run as the
//! kernel's window does. Each piece is one read of the client from one
//! server, so no piece is copied to join it; a read that lies inside one
//! piece is answered with a slice of it. A first read, or a read that jumps,
//! is passed on as it is.
//!
//! Only files of at least `stream_reads` bytes stream: a smaller one gains
//! nothing, and keeps the page cache, which serves its re-reads under a
//! lease with no request at all.
//!
//! The price is paid by programs that read a large file in small pieces:
//! each read is then a request to this process (about 20 µs), where the
//! page cache answered most of them in the kernel: 4 KiB reads run at
//! about 0.1x, 8 KiB at 0.15-0.3x. A FUSE passthrough over tmpfs opened
//! the same way does no better (155 MB/s at 4 KiB): it is the cost of a
//! FUSE request. So a file whose streamed reads turn out small
//! ([`SMALL_READ`] on average over its first [`JUDGED_AFTER`]) is not
//! streamed again by this mount: its next opens use the page cache.
//!
//! What a reader sees is what it saw through the page cache:
//! - A write, truncate or other change of the file through this mount drops
//!   every piece of that file, both before and after the change (a piece
//!   fetched while it ran may hold the old bytes). A piece fetched after it
//!   waits for it, as every read of the client waits for the file's writes
//!   in flight.
//! - Another client's changes are seen at the next open (close-to-open), as
//!   with pages cached during an open: pieces live only as long as it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use bytes::{Bytes, BytesMut};
use futures::future::{BoxFuture, FutureExt, Shared};
use shoal_client::Client;
use shoal_proto::error::Result;

/// The first file handle of a streamed open: 0 is any other reader's,
/// 1 a writer's (`fs::WRITER`).
const FIRST_HANDLE: u64 = 2;

/// Bytes that all streams together may hold fetched or being fetched; past
/// this a read is passed on as it is. Bounds the mount's memory for any
/// number of open files.
const MAX_HELD: u64 = 256 << 20;

/// Reads below this size on average make a file a small reader's.
const SMALL_READ: u64 = 32 << 10;

/// Reads of a streamed open after which its average is judged.
const JUDGED_AFTER: u32 = 16;

/// Files remembered as read in small pieces; past this the memory starts
/// afresh (each is judged again at its next streamed open).
const MAX_SMALL_READERS: usize = 4096;

type Fetch = Shared<BoxFuture<'static, Result<Bytes>>>;

/// A strip-aligned range being fetched (or fetched) ahead of the reader.
struct Piece {
    start: u64,
    fetch: Fetch,
}

/// The read-ahead of one open.
struct Stream {
    ino: u64,
    /// Where the next read continues the run.
    next: u64,
    /// Bytes read in this run (since the open or the last jump).
    run: u64,
    /// Consecutive pieces, ascending.
    pieces: VecDeque<Piece>,
    /// Reads and their bytes so far, until judged (`JUDGED_AFTER`).
    reads: u32,
    read_bytes: u64,
}

#[derive(Default)]
struct Table {
    next_handle: u64,
    streams: HashMap<u64, Stream>,
    /// Bytes of all the pieces in `streams`.
    held: u64,
    /// Files whose streamed reads were small: they open through the page
    /// cache.
    small_readers: HashSet<u64>,
}

impl Stream {
    /// Forgets what was fetched ahead, and its count in `held`.
    fn drop_pieces(&mut self, held: &mut u64, piece: u64) {
        *held -= self.pieces.len() as u64 * piece;
        self.pieces.clear();
    }
}

impl Table {
    fn drop_pieces(&mut self, fh: u64, piece: u64) {
        if let Some(st) = self.streams.get_mut(&fh) {
            st.drop_pieces(&mut self.held, piece);
        }
    }
}

/// What a read does, decided under the lock and done outside it.
enum Plan {
    /// Passed on to the client as it is.
    Direct,
    /// Answered from these pieces, which cover the read.
    Pieces(Vec<(u64, Fetch)>),
}

/// The streamed opens of a mount.
pub struct ReadStreams {
    table: Mutex<Table>,
    /// Size of a piece: the cluster's strip, so that a piece is one server's.
    piece: u64,
    /// Bytes a run keeps ahead at most; also the least size of a file that
    /// streams. 0: nothing streams.
    ahead: u64,
    /// The kernel cannot map a file opened past its page cache shared
    /// (before Linux 6.6): then nothing streams, as a program that maps
    /// a file it opened would fail.
    unmappable: AtomicBool,
}

impl ReadStreams {
    pub fn new(strip: u64, stream_reads: u64) -> ReadStreams {
        assert!(strip > 0, "a strip has a size");
        ReadStreams {
            table: Mutex::new(Table {
                next_handle: FIRST_HANDLE,
                ..Table::default()
            }),
            piece: strip,
            ahead: stream_reads,
            unmappable: AtomicBool::new(false),
        }
    }

    /// The kernel did not grant FUSE_DIRECT_IO_ALLOW_MMAP: nothing streams.
    pub fn unmappable(&self) {
        self.unmappable.store(true, Ordering::Relaxed);
    }

    /// Whether anything may stream on this mount.
    fn on(&self) -> bool {
        self.ahead > 0 && !self.unmappable.load(Ordering::Relaxed)
    }

    /// Whether an open for reading of file `ino` streams; `size` gives its
    /// size if known, asked only when streaming is on.
    pub fn streams(&self, ino: u64, size: impl FnOnce() -> Option<u64>) -> bool {
        self.on()
            && size().is_some_and(|size| size >= self.ahead)
            && !self.table.lock().unwrap().small_readers.contains(&ino)
    }

    /// Whether `fh` is a streamed open's handle.
    pub fn is_stream(fh: u64) -> bool {
        fh >= FIRST_HANDLE
    }

    /// A new streamed open of `ino`: its file handle.
    pub fn open(&self, ino: u64) -> u64 {
        let mut t = self.table.lock().unwrap();
        let fh = t.next_handle;
        t.next_handle += 1;
        let stream = Stream {
            ino,
            next: 0,
            run: 0,
            pieces: VecDeque::new(),
            reads: 0,
            read_bytes: 0,
        };
        t.streams.insert(fh, stream);
        fh
    }

    /// The open `fh` was released.
    pub fn close(&self, fh: u64) {
        let mut t = self.table.lock().unwrap();
        t.drop_pieces(fh, self.piece);
        t.streams.remove(&fh);
    }

    /// `ino` is being changed, or was, through this mount: what was fetched
    /// of it may be old.
    pub fn changed(&self, ino: u64) {
        if !self.on() {
            // Nothing streams, so nothing was fetched: every write through
            // the mount comes here.
            return;
        }
        let mut guard = self.table.lock().unwrap();
        let t = &mut *guard;
        for st in t.streams.values_mut().filter(|st| st.ino == ino) {
            st.drop_pieces(&mut t.held, self.piece);
        }
    }

    /// `size` bytes at `offset` of the streamed open `fh` of `ino`; `c` is
    /// the reader's client, which also fetches the pieces ahead of it.
    pub async fn read(
        &self,
        c: &Client,
        fh: u64,
        ino: u64,
        offset: u64,
        size: usize,
    ) -> Result<Bytes> {
        let end = offset + size as u64;
        let plan = self.plan(c, fh, ino, offset, end);
        let Plan::Pieces(pieces) = plan else {
            return c.read(ino, offset, size).await;
        };
        let mut parts = Vec::with_capacity(pieces.len());
        for (start, fetch) in pieces {
            match fetch.await {
                Ok(data) => parts.push((start, data)),
                Err(e) => {
                    // Not this read's business: the read itself reports
                    // what is wrong, if anything still is.
                    tracing::debug!("a read ahead of inode {ino} failed: {e}");
                    self.table.lock().unwrap().drop_pieces(fh, self.piece);
                    return c.read(ino, offset, size).await;
                }
            }
        }
        match self.cut(&parts, offset, end) {
            Some(data) => Ok(data),
            // A piece ended before the read does: the file ended when it was
            // fetched. Ask again, as it may have grown since.
            None => c.read(ino, offset, size).await,
        }
    }

    /// Decides how to answer a read of `offset..end`, fetching ahead of it.
    fn plan(&self, c: &Client, fh: u64, ino: u64, offset: u64, end: u64) -> Plan {
        let piece = self.piece;
        let mut guard = self.table.lock().unwrap();
        let t = &mut *guard;
        let Some(st) = t.streams.get_mut(&fh) else {
            return Plan::Direct;
        };
        if st.reads < JUDGED_AFTER {
            st.reads += 1;
            st.read_bytes += end - offset;
            if st.reads == JUDGED_AFTER && st.read_bytes < SMALL_READ * u64::from(JUDGED_AFTER) {
                if t.small_readers.len() >= MAX_SMALL_READERS {
                    t.small_readers.clear();
                }
                t.small_readers.insert(st.ino);
            }
        }
        if offset != st.next {
            // A jump: the run starts again here.
            st.drop_pieces(&mut t.held, piece);
            st.run = 0;
        }
        st.next = end;
        let first = st.run == 0;
        st.run += end - offset;
        if first {
            return Plan::Direct;
        }
        while st.pieces.front().is_some_and(|p| p.start + piece <= offset) {
            st.pieces.pop_front();
            t.held -= piece;
        }
        // Fetch up to twice the run ahead (at most `ahead`), and not past
        // the end of the file as last seen.
        let mut want = end + (st.run * 2).clamp(piece, self.ahead);
        if let Some(attr) = c.cached_attr(ino) {
            want = want.min(attr.size.max(end));
        }
        let mut from = st
            .pieces
            .back()
            .map_or(offset - offset % piece, |p| p.start + piece);
        while from < want && t.held + piece <= MAX_HELD {
            st.pieces.push_back(Piece {
                start: from,
                fetch: fetch(c, ino, from, piece),
            });
            t.held += piece;
            from += piece;
        }
        let covering: Vec<(u64, Fetch)> = st
            .pieces
            .iter()
            .filter(|p| p.start < end && p.start + piece > offset)
            .map(|p| (p.start, p.fetch.clone()))
            .collect();
        let covered = covering.first().is_some_and(|(s, _)| *s <= offset)
            && covering.last().is_some_and(|(s, _)| s + piece >= end);
        if covered {
            Plan::Pieces(covering)
        } else {
            Plan::Direct
        }
    }

    /// `offset..end` out of consecutive fetched pieces, or None if one of
    /// them is short before `end` (the file ended where it was read).
    fn cut(&self, parts: &[(u64, Bytes)], offset: u64, end: u64) -> Option<Bytes> {
        let slice = |start: u64, data: &Bytes| -> Option<Bytes> {
            let lo = offset.saturating_sub(start) as usize;
            let hi = (end.min(start + self.piece) - start) as usize;
            (hi <= data.len()).then(|| data.slice(lo..hi))
        };
        if let [(start, data)] = parts {
            return slice(*start, data);
        }
        let mut out = BytesMut::with_capacity((end - offset) as usize);
        for (start, data) in parts {
            out.extend_from_slice(&slice(*start, data)?);
        }
        Some(out.freeze())
    }
}

/// Starts fetching `len` bytes at `start` of `ino` in the background.
fn fetch(c: &Client, ino: u64, start: u64, len: u64) -> Fetch {
    let c = c.clone();
    let fetch = async move { c.read(ino, start, len as usize).await }
        .boxed()
        .shared();
    // Runs whether or not a reader waits on it yet; a piece dropped before
    // it lands is simply not used.
    drop(tokio::spawn(fetch.clone()));
    fetch
}
