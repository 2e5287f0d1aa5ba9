//! A container open in this process: its header, the file, the write state
//! of each rank this process writes for, and how a store reaches the disk.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::dirty::page_size;
use crate::format::{self, chunk_of, max_runs, Header, Kind, Run, SegHeader};
use crate::index::{self, Chain, Verify};

/// The chunk size when none is asked for: the smallest multiple of the strip
/// of at least this many bytes.
pub const DEFAULT_CHUNK: u64 = 4 << 20;

/// How to create a container.
#[derive(Clone, Debug)]
pub struct Options {
    /// How many ranks write into it (fixed: chunk ownership depends on it).
    pub nranks: u32,
    /// Chunk size; rounded up to a multiple of the strip and the page.
    pub chunk_size: u64,
    /// Write with O_DIRECT where the file system takes it.
    pub direct_io: bool,
}

impl Options {
    pub fn new(nranks: u32) -> Options {
        Options {
            nranks,
            chunk_size: DEFAULT_CHUNK,
            direct_io: true,
        }
    }
}

/// Where a rank's next segment goes, and its next seq and steps.
struct RankState {
    chunk: u64,
    off: u64,
    seq: u64,
    /// Next step of each logical file, and whether its next store must be a
    /// full image (after a failed write, or a new session).
    next_step: HashMap<String, u64>,
    /// Logical files with a write buffer mapped (one at a time).
    mapped: std::collections::HashSet<String>,
}

pub(crate) struct Inner {
    pub path: PathBuf,
    pub header: Header,
    /// Buffered handle: reads, the header.
    pub file: File,
    /// The handle stores go through: O_DIRECT when the file system has it.
    write: Mutex<Option<Arc<File>>>,
    /// Why direct I/O is not used, when it is not.
    pub direct_note: Mutex<Option<String>>,
    direct_io: bool,
    ranks: Mutex<HashMap<u32, Arc<Mutex<RankState>>>>,
}

/// A PFA container: one shared file holding many ranks' logical files.
///
/// Each process (rank) opens it; [`Container::mmap`] (`pfa_mmap`) gives a
/// buffer whose contents [`crate::PfaBuf::append`] stores as the next step of a
/// logical file, or which [`crate::PfaBuf::seek`] fills with a stored step.
#[derive(Clone)]
pub struct Container {
    pub(crate) inner: Arc<Inner>,
}

/// The strip of the file system at `dir`: `st_blksize` of a file there (on
/// a Shoal mount, the strip size of files created in that directory).
fn strip_of(file: &File) -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(file.metadata()?.blksize().max(512))
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl Container {
    /// Creates a container at `path` (an error if it exists). The file
    /// appears whole: it is written under a temporary name and linked into
    /// place, so a rank that opens it never sees it half made.
    pub fn create(path: impl AsRef<Path>, opts: &Options) -> io::Result<Container> {
        let path = path.as_ref();
        if opts.nranks == 0 || opts.nranks > format::MAX_RANKS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("nranks must be 1 to {}", format::MAX_RANKS),
            ));
        }
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
        let dir = dir.unwrap_or(Path::new("."));
        let name = path.file_name().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "container path has no file name",
            )
        })?;
        let tmp = dir.join(format!(
            ".{}.pfa-new.{}",
            name.to_string_lossy(),
            std::process::id()
        ));
        let result = (|| {
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&tmp)?;
            let strip = strip_of(&f)?;
            let p = page_size() as u64;
            let unit = strip / gcd(strip, p) * p;
            let chunk = opts.chunk_size.max(2 * p).div_ceil(unit) * unit;
            let header = Header {
                nranks: opts.nranks,
                chunk_size: chunk,
                strip,
                page_size: p as u32,
                created_ns: now_ns(),
            };
            let mut page = vec![0u8; p as usize];
            header.encode(&mut page);
            f.write_all_at(&page, 0)?;
            f.sync_all()?;
            std::fs::hard_link(&tmp, path)
        })();
        let _ = std::fs::remove_file(&tmp);
        result?;
        Container::open_with(path, opts.direct_io)
    }

    /// Opens an existing container for reading and writing.
    pub fn open(path: impl AsRef<Path>) -> io::Result<Container> {
        Container::open_with(path.as_ref(), true)
    }

    /// Opens the container, creating it first when it does not exist (the
    /// ranks of a job may all call this: one creates, the others open).
    pub fn open_or_create(path: impl AsRef<Path>, opts: &Options) -> io::Result<Container> {
        match Container::create(path.as_ref(), opts) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let c = Container::open_with(path.as_ref(), opts.direct_io)?;
                if c.header().nranks != opts.nranks {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "{} has {} ranks, not {}",
                            path.as_ref().display(),
                            c.header().nranks,
                            opts.nranks
                        ),
                    ));
                }
                Ok(c)
            }
            r => r,
        }
    }

    /// Opens read-only (the tools).
    pub fn open_read_only(path: impl AsRef<Path>) -> io::Result<Container> {
        let path = path.as_ref();
        let file = File::open(path)?;
        Container::from_file(path, file, false)
    }

    fn open_with(path: &Path, direct_io: bool) -> io::Result<Container> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        Container::from_file(path, file, direct_io)
    }

    fn from_file(path: &Path, file: File, direct_io: bool) -> io::Result<Container> {
        let mut page = vec![0u8; format::HEADER_LEN];
        let mut got = 0;
        while got < page.len() {
            match file.read_at(&mut page[got..], got as u64)? {
                0 => break,
                n => got += n,
            }
        }
        page.truncate(got);
        let header = Header::decode(&page).map_err(|e| with_path(e, path))?;
        Ok(Container {
            inner: Arc::new(Inner {
                path: path.to_path_buf(),
                header,
                file,
                write: Mutex::new(None),
                direct_note: Mutex::new(None),
                direct_io,
                ranks: Mutex::new(HashMap::new()),
            }),
        })
    }

    pub fn header(&self) -> &Header {
        &self.inner.header
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Why stores are not written with direct I/O, if they are not (known
    /// after the first store).
    pub fn direct_io_note(&self) -> Option<String> {
        self.inner.direct_note.lock().unwrap().clone()
    }

    /// Flushes every store made so far to stable storage (`pfa_sync`).
    pub fn sync(&self) -> io::Result<()> {
        let w = self.inner.write.lock().unwrap().clone();
        if let Some(w) = w {
            w.sync_data()?;
        }
        self.inner.file.sync_data()
    }

    /// Syncs and closes this process's handle (`pfa_close`); buffers still
    /// mapped keep the container open until they are unmapped.
    pub fn close(self) -> io::Result<()> {
        self.sync()
    }

    /// Walks one rank's chain (see [`crate::format`]).
    pub fn chain(&self, rank: u32, verify: Verify) -> io::Result<Chain> {
        if rank >= self.inner.header.nranks {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "rank {rank}: the container has {} ranks",
                    self.inner.header.nranks
                ),
            ));
        }
        index::scan_chain(&self.inner.file, &self.inner.header, rank, verify)
    }
}

fn with_path(e: io::Error, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

impl Inner {
    /// The state of `rank`'s writer, found by walking its chain the first
    /// time this process writes for it.
    fn rank_state(&self, rank: u32) -> io::Result<Arc<Mutex<RankState>>> {
        let mut ranks = self.ranks.lock().unwrap();
        if let Some(s) = ranks.get(&rank) {
            return Ok(s.clone());
        }
        let chain = index::scan_chain(&self.file, &self.header, rank, Verify::Tail)?;
        let mut next_step = HashMap::new();
        for (name, stores) in index::stores(&chain) {
            if let Some(last) = stores.iter().rev().find(|s| s.complete) {
                next_step.insert(name, last.step + 1);
            }
        }
        let s = Arc::new(Mutex::new(RankState {
            chunk: chain.next_chunk,
            off: chain.next_off,
            seq: chain.next_seq,
            next_step,
            mapped: Default::default(),
        }));
        ranks.insert(rank, s.clone());
        Ok(s)
    }

    pub(crate) fn claim_name(&self, rank: u32, name: &str) -> io::Result<()> {
        let st = self.rank_state(rank)?;
        let mut st = st.lock().unwrap();
        if !st.mapped.insert(name.to_string()) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{name} of rank {rank} is already mapped for writing"),
            ));
        }
        Ok(())
    }

    pub(crate) fn release_name(&self, rank: u32, name: &str) {
        if let Some(st) = self.ranks.lock().unwrap().get(&rank) {
            st.lock().unwrap().mapped.remove(name);
        }
    }

    fn writer(&self) -> io::Result<Arc<File>> {
        let mut w = self.write.lock().unwrap();
        if let Some(f) = w.as_ref() {
            return Ok(f.clone());
        }
        let mut opts = OpenOptions::new();
        opts.write(true);
        let f = if self.direct_io {
            match opts.clone().custom_flags(libc::O_DIRECT).open(&self.path) {
                Ok(f) => f,
                Err(e) => {
                    *self.direct_note.lock().unwrap() = Some(format!(
                        "the file system refuses O_DIRECT ({e}): stores go through the page cache"
                    ));
                    opts.open(&self.path)?
                }
            }
        } else {
            *self.direct_note.lock().unwrap() = Some("direct I/O turned off".into());
            opts.open(&self.path)?
        };
        let f = Arc::new(f);
        *w = Some(f.clone());
        Ok(f)
    }

    /// A direct write was refused at write time (alignment the file system
    /// wants bigger than a page, or no O_DIRECT after all): go buffered.
    fn fall_back(&self, e: &io::Error) -> io::Result<Arc<File>> {
        *self.direct_note.lock().unwrap() = Some(format!(
            "a direct write failed ({e}): stores go through the page cache"
        ));
        let f = Arc::new(OpenOptions::new().write(true).open(&self.path)?);
        *self.write.lock().unwrap() = Some(f.clone());
        Ok(f)
    }

    /// Stores the pages `runs` of `buf` (which holds the logical file's
    /// image) as step `next` of `name` for `rank`: one or more segments, each
    /// written with one `pwritev` of its header page and the buffer's pages
    /// in place. Returns the step stored.
    pub(crate) fn store(
        &self,
        rank: u32,
        name: &str,
        kind: Kind,
        logical_len: u64,
        buf: &[u8],
        runs: &[Run],
    ) -> io::Result<u64> {
        let p = u64::from(self.header.page_size);
        let c = self.header.chunk_size;
        let st = self.rank_state(rank)?;
        let mut st = st.lock().unwrap();
        let step = st.next_step.get(name).copied().unwrap_or(0);
        if kind == Kind::Increment && step == 0 {
            return Err(io::Error::other(
                "an increment needs a full image before it",
            ));
        }
        // Plan the segments: where each goes and which pages it carries.
        let mut plan: Vec<(u64, u64, Vec<Run>)> = Vec::new(); // (chunk, off, runs)
        let (mut chunk, mut off) = (st.chunk, st.off);
        let mut todo: std::collections::VecDeque<Run> = runs.iter().copied().collect();
        loop {
            if c - off < 2 * p {
                chunk += 1;
                off = 0;
            }
            let room = (c - off) / p - 1;
            let mut segruns = Vec::new();
            let mut pages = 0u64;
            while let Some(r) = todo.front_mut() {
                if pages == room || segruns.len() == max_runs(p as usize) {
                    break;
                }
                let take = u64::from(r.count).min(room - pages) as u32;
                segruns.push(Run {
                    first: r.first,
                    count: take,
                });
                pages += u64::from(take);
                if take == r.count {
                    todo.pop_front();
                } else {
                    r.first += take;
                    r.count -= take;
                }
            }
            plan.push((chunk, off, segruns));
            off += (pages + 1) * p;
            if todo.is_empty() {
                break;
            }
        }
        let count = u16::try_from(plan.len()).map_err(|_| {
            io::Error::other(format!(
                "a store of {} segments: more than {} (use a larger chunk size)",
                plan.len(),
                u16::MAX
            ))
        })?;
        let mut hpage = HeaderPage::new(p as usize)?;
        for (i, (chunk, off, segruns)) in plan.iter().enumerate() {
            if i > 0 {
                // Crash point for tests (`FAILPOINTS=pfa::store::between_segments=
                // N*off->return`): the process aborts as if SIGKILLed mid-store.
                fail::fail_point!("pfa::store::between_segments", |_| std::process::abort());
            }
            let slices: Vec<&[u8]> = segruns
                .iter()
                .map(|r| {
                    &buf[(u64::from(r.first) * p) as usize
                        ..(u64::from(r.first + r.count) * p) as usize]
                })
                .collect();
            let mut crc = crc32fast::Hasher::new();
            slices.iter().for_each(|s| crc.update(s));
            let data_len: u64 = slices.iter().map(|s| s.len() as u64).sum();
            SegHeader {
                kind,
                rank,
                seg_index: i as u16,
                seg_count: count,
                seq: st.seq,
                step,
                logical_len,
                data_len,
                data_crc: crc.finalize(),
                name: name.to_string(),
                runs: segruns.clone(),
            }
            .encode(hpage.as_mut());
            let at = chunk_of(self.header.nranks, rank, *chunk) * c + off;
            let mut iov = Vec::with_capacity(slices.len() + 1);
            iov.push(hpage.as_ref());
            iov.extend(slices);
            if let Err(e) = self.pwritev_all(&iov, at) {
                // What was written stays in the chain (a cut store that
                // readers skip); the step is written again, in full.
                st.next_step.insert(name.to_string(), step);
                return Err(e);
            }
            st.seq += 1;
            st.chunk = *chunk;
            st.off = off + p + data_len;
        }
        st.next_step.insert(name.to_string(), step + 1);
        Ok(step)
    }

    fn pwritev_all(&self, iov: &[&[u8]], at: u64) -> io::Result<()> {
        let mut f = self.writer()?;
        let mut vecs: Vec<libc::iovec> = iov
            .iter()
            .map(|s| libc::iovec {
                iov_base: s.as_ptr() as *mut libc::c_void,
                iov_len: s.len(),
            })
            .collect();
        let total: usize = iov.iter().map(|s| s.len()).sum();
        let (mut done, mut first) = (0usize, 0usize);
        let mut fell_back = false;
        while done < total {
            use std::os::fd::AsRawFd;
            let n = vecs.len().min(first + 1024) - first;
            // SAFETY: the iovecs point into live slices for this call.
            let rc = unsafe {
                libc::pwritev(
                    f.as_raw_fd(),
                    vecs[first..].as_ptr(),
                    n as libc::c_int,
                    (at + done as u64) as libc::off_t,
                )
            };
            if rc < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                if e.raw_os_error() == Some(libc::EINVAL) && !fell_back {
                    fell_back = true;
                    f = self.fall_back(&e)?;
                    continue;
                }
                return Err(e);
            }
            if rc == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "pwritev wrote nothing",
                ));
            }
            // Advance past what was written.
            let mut left = rc as usize;
            done += left;
            while left > 0 {
                let v = &mut vecs[first];
                if left >= v.iov_len {
                    left -= v.iov_len;
                    first += 1;
                } else {
                    // SAFETY: stays inside the same slice.
                    v.iov_base = unsafe { (v.iov_base as *mut u8).add(left) } as *mut libc::c_void;
                    v.iov_len -= left;
                    left = 0;
                }
            }
        }
        Ok(())
    }
}

/// A page-aligned page for segment headers (direct I/O wants aligned
/// memory): metadata the library writes, never a copy of the data.
struct HeaderPage {
    ptr: *mut u8,
    len: usize,
}

impl HeaderPage {
    fn new(len: usize) -> io::Result<HeaderPage> {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: posix_memalign with a power-of-two alignment.
        if unsafe { libc::posix_memalign(&mut ptr, len, len) } != 0 {
            return Err(io::Error::from(io::ErrorKind::OutOfMemory));
        }
        Ok(HeaderPage {
            ptr: ptr as *mut u8,
            len,
        })
    }
}

impl AsRef<[u8]> for HeaderPage {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: len bytes allocated in new.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl AsMut<[u8]> for HeaderPage {
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: len bytes allocated in new, uniquely borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for HeaderPage {
    fn drop(&mut self) {
        // SAFETY: allocated by posix_memalign.
        unsafe { libc::free(self.ptr as *mut libc::c_void) }
    }
}
