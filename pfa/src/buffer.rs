//! The mapped buffer of one logical file of one rank: `pfa_mmap` makes it,
//! `pfa_append` stores it, `pfa_seek` and `pfa_eof` read steps back,
//! `pfa_munmap` ends it.

use std::io;

use crate::container::Container;
use crate::dirty::{page_size, Tracker};
use crate::format::{self, Kind, Run};
use crate::index::{self, Store, Verify};

/// What a buffer is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Each `append` stores the whole image.
    Write,
    /// Each `append` after the first stores only the pages written since
    /// the previous one (incremental logging, [Kato 2011]).
    WriteIncremental,
    /// `seek` fills the buffer with a stored step.
    Read,
}

/// A buffer mapped for one logical file of one rank.
pub struct PfaBuf {
    container: Container,
    name: String,
    rank: u32,
    mode: Mode,
    ptr: *mut u8,
    size: usize,
    cap: usize,
    tracker: Option<Tracker>,
    /// The next store must be a full image (first store, or after an error).
    need_full: bool,
    /// Read mode: the stores of this file and the step in the buffer.
    stores: Vec<Store>,
    step: u64,
    loaded: Option<u64>,
}

// SAFETY: the mapping is owned by the PfaBuf alone.
unsafe impl Send for PfaBuf {}

impl Container {
    /// `pfa_mmap`: maps a zeroed buffer of `size` bytes for logical file
    /// `name` of `rank`. To write, fill it and [`PfaBuf::append`]; to read,
    /// it holds step 0 (if any) and [`PfaBuf::seek`] moves to others.
    #[doc(alias = "pfa_mmap")]
    pub fn mmap(&self, name: &str, size: usize, rank: u32, mode: Mode) -> io::Result<PfaBuf> {
        format::check_name(name)?;
        let h = self.header();
        if rank >= h.nranks {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("rank {rank}: the container has {} ranks", h.nranks),
            ));
        }
        let p = page_size();
        if h.page_size as usize != p {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "container written with {}-byte pages, this machine has {p}",
                    h.page_size
                ),
            ));
        }
        if size == 0 || size > 1 << 40 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "size must be 1 byte to 1 TiB",
            ));
        }
        let cap = size.div_ceil(p) * p;
        // SAFETY: a fresh anonymous mapping.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                cap,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mut buf = PfaBuf {
            container: self.clone(),
            name: name.to_string(),
            rank,
            mode,
            ptr: ptr as *mut u8,
            size,
            cap,
            tracker: None,
            need_full: true,
            stores: Vec::new(),
            step: 0,
            loaded: None,
        };
        match mode {
            Mode::Read => {
                let chain = self.chain(rank, Verify::Tail)?;
                buf.stores = index::stores(&chain).remove(name).unwrap_or_default();
                // Only the steps readable from the start count: a cut last
                // store is not a step.
                let readable = buf.stores.iter().take_while(|s| s.complete).count();
                buf.stores.truncate(readable);
                if !buf.eof() {
                    buf.load(0)?;
                }
            }
            Mode::Write | Mode::WriteIncremental => {
                self.inner.claim_name(rank, name)?;
                if mode == Mode::WriteIncremental {
                    match Tracker::new(buf.ptr, cap / p) {
                        Ok(t) => buf.tracker = Some(t),
                        Err(e) => {
                            self.inner.release_name(rank, name);
                            return Err(e);
                        }
                    }
                }
            }
        }
        Ok(buf)
    }
}

impl PfaBuf {
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: size bytes mapped readable for our lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr, self.size) }
    }

    /// The buffer to fill (writes fault once per page per store interval in
    /// incremental mode, which is how changed pages are found).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: size bytes mapped for our lifetime, uniquely borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.size) }
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub fn size(&self) -> usize {
        self.size
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// Incremental mode: declares `len` bytes from `offset` written, for data
    /// put there by a system call (`read(2)` into a write-protected page
    /// fails with EFAULT instead of faulting). Call it before such a call.
    pub fn touch(&mut self, offset: usize, len: usize) -> io::Result<()> {
        if let Some(t) = &self.tracker {
            let end = offset
                .checked_add(len)
                .filter(|&e| e <= self.size)
                .ok_or_else(|| {
                    io::Error::new(io::ErrorKind::InvalidInput, "range outside the buffer")
                })?;
            let p = page_size();
            if len > 0 {
                t.touch(offset / p, end.div_ceil(p) - offset / p)?;
            }
        }
        Ok(())
    }

    /// `pfa_append`: stores the first `len` bytes of the buffer as the next
    /// step of the logical file (the whole image, or in incremental mode the
    /// pages written since the previous store) and returns that step.
    #[doc(alias = "pfa_append")]
    pub fn append(&mut self, len: usize) -> io::Result<u64> {
        if self.mode == Mode::Read {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "buffer mapped for reading",
            ));
        }
        if len > self.size {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("append of {len} bytes from a {}-byte buffer", self.size),
            ));
        }
        let p = page_size();
        let pages = len.div_ceil(p);
        let (kind, runs) = match (&self.tracker, self.need_full) {
            (Some(t), false) => (Kind::Increment, dirty_runs(t, pages)),
            _ => (
                Kind::Full,
                if pages == 0 {
                    vec![]
                } else {
                    vec![Run {
                        first: 0,
                        count: pages as u32,
                    }]
                },
            ),
        };
        // SAFETY: cap bytes mapped; the store only reads them.
        let all = unsafe { std::slice::from_raw_parts(self.ptr, self.cap) };
        let result = self
            .container
            .inner
            .store(self.rank, &self.name, kind, len as u64, all, &runs);
        match result {
            Ok(step) => {
                if let Some(t) = &self.tracker {
                    for r in &runs {
                        t.clean(r.first as usize, r.count as usize)?;
                    }
                }
                self.need_full = false;
                Ok(step)
            }
            Err(e) => {
                self.need_full = true;
                Err(e)
            }
        }
    }

    /// Read mode: how many steps there are.
    pub fn steps(&self) -> u64 {
        self.stores.len() as u64
    }

    /// Read mode: the step the buffer holds (or, at the end, the number of
    /// steps).
    pub fn step(&self) -> u64 {
        self.step
    }

    /// Read mode: the logical length of the step in the buffer.
    pub fn len(&self) -> usize {
        self.stores
            .get(self.step as usize)
            .map(|s| s.logical_len as usize)
            .unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `pfa_eof`: read mode, past the last step.
    #[doc(alias = "pfa_eof")]
    pub fn eof(&self) -> bool {
        self.step >= self.stores.len() as u64
    }

    /// `pfa_seek`: moves to a step (counted as `lseek` counts bytes) and
    /// fills the buffer with its image; past the last step, `eof` is true.
    #[doc(alias = "pfa_seek")]
    pub fn seek(&mut self, pos: io::SeekFrom) -> io::Result<u64> {
        if self.mode != Mode::Read {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "buffer mapped for writing",
            ));
        }
        let n = self.stores.len() as i128;
        let to = match pos {
            io::SeekFrom::Start(s) => i128::from(s),
            io::SeekFrom::Current(d) => i128::from(self.step) + i128::from(d),
            io::SeekFrom::End(d) => n + i128::from(d),
        };
        if to < 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "seek before step 0",
            ));
        }
        let to = to.min(n) as u64;
        self.step = to;
        if !self.eof() {
            self.load(to)?;
        }
        Ok(to)
    }

    /// Fills the buffer with step `step`: from the previous step when it is
    /// the one in the buffer and `step` is an increment, else from the last
    /// full image.
    fn load(&mut self, step: u64) -> io::Result<()> {
        let s = &self.stores[step as usize];
        if s.logical_len as usize > self.size {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} step {step} is {} bytes, the buffer {}",
                    self.name, s.logical_len, self.size
                ),
            ));
        }
        let f = &self.container.inner.file;
        let p = u64::from(self.container.header().page_size);
        // SAFETY: cap bytes mapped writable (read mode is never protected).
        let image = unsafe { std::slice::from_raw_parts_mut(self.ptr, self.cap) };
        let from_previous = s.kind == Kind::Increment && step > 0 && self.loaded == Some(step - 1);
        self.loaded = None;
        if from_previous {
            index::apply(f, p, s, image)?;
        } else {
            image.fill(0);
            for st in index::plan(&self.stores, step)? {
                index::apply(f, p, st, image)?;
            }
        }
        self.loaded = Some(step);
        Ok(())
    }

    /// `pfa_munmap`: ends the buffer (stores nothing: `append` first).
    #[doc(alias = "pfa_munmap")]
    pub fn munmap(self) {}
}

impl Drop for PfaBuf {
    fn drop(&mut self) {
        self.tracker = None;
        if self.mode != Mode::Read {
            self.container.inner.release_name(self.rank, &self.name);
        }
        // SAFETY: our mapping, no longer referenced.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.cap) };
    }
}

/// The runs of pages written since the last store, among the first `pages`.
fn dirty_runs(t: &Tracker, pages: usize) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    for n in 0..pages {
        if !t.is_dirty(n) {
            continue;
        }
        match runs.last_mut() {
            Some(r) if (r.first + r.count) as usize == n => r.count += 1,
            _ => runs.push(Run {
                first: n as u32,
                count: 1,
            }),
        }
    }
    runs
}
