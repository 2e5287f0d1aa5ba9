//! One rank of `shoal bench pfa`: writes records of RECORD bytes, one per
//! step, for a fixed time or a fixed number of steps ([`Length`]), in one
//! of the three patterns of [Kato 2011], then reads them all back and
//! verifies them, each phase behind the parent's barrier.
//!
//! - `n-n`: a file per rank per step (`nn/r<rank>.s<step>`), as the
//!   application did before PFA;
//! - `n-1-locked`: one shared file, as an application would share it without
//!   PFA: a byte-range lock on an 8-byte counter at offset 0 claims the next
//!   free extent, then a lock on that extent covers the write (POSIX record
//!   locks, `F_SETLKW`);
//! - `pfa`: one PFA container (made by the parent), the record written into
//!   the rank's mapped buffer and stored with `append`.
//!
//! Each write phase ends when the rank's records are durable: N-N fsyncs
//! each of its files once all are written (or every [`NN_OPEN_MAX`] files,
//! to bound its open descriptors), N-1 the shared file once, PFA
//! syncs the container (its stores went with O_DIRECT where the file system
//! takes it).

use std::fs::{File, OpenOptions};
use std::io::SeekFrom;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use shoal_pfa::{Container, Mode};
use shoal_proto::error::{Result, ShoalError};

use crate::fsops::{self, at};
use crate::pattern;
use crate::workers::Barrier;

pub const PHASES: [&str; 2] = ["write", "read"];

/// Where the shared file's counter lives; records start after it.
pub const COUNTER_BYTES: u64 = 8;

/// How long each rank writes.
#[derive(Clone, Copy, Debug)]
pub enum Length {
    Steps(u64),
    Seconds(f64),
}

impl Length {
    /// `--steps` if given, else `--seconds`.
    pub fn of(steps: Option<u64>, seconds: f64) -> Length {
        steps.map_or(Length::Seconds(seconds), Length::Steps)
    }

    pub fn args(self) -> [String; 2] {
        match self {
            Length::Steps(n) => ["--steps".into(), n.to_string()],
            Length::Seconds(s) => ["--seconds".into(), s.to_string()],
        }
    }

    pub fn valid(self) -> bool {
        match self {
            Length::Steps(n) => n > 0,
            Length::Seconds(s) => s > 0.0 && s.is_finite(),
        }
    }

    pub fn describe(self) -> String {
        match self {
            Length::Steps(n) => format!("for {n} steps"),
            Length::Seconds(s) => format!("for {s} s"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Pattern {
    /// A file per rank per step.
    #[value(name = "n-n")]
    NN,
    /// One shared file, extents claimed and written under record locks.
    #[value(name = "n-1-locked")]
    N1Locked,
    /// One PFA container.
    #[value(name = "pfa")]
    Pfa,
}

impl Pattern {
    pub const ALL: [Pattern; 3] = [Pattern::NN, Pattern::N1Locked, Pattern::Pfa];

    pub fn name(self) -> &'static str {
        match self {
            Pattern::NN => "n-n",
            Pattern::N1Locked => "n-1-locked",
            Pattern::Pfa => "pfa",
        }
    }
}

/// The shared file of `n-1-locked` and the container of `pfa`, in `dir`.
pub const SHARED_FILE: &str = "n1.dat";
pub const CONTAINER: &str = "out.pfa";
/// The logical file name every rank writes into the container.
pub const LOGICAL_NAME: &str = "particles.dat";

/// Rank `rank`'s record of step `step`: the same bytes in every pattern.
pub fn record(rank: usize, step: u64, len: usize) -> Vec<u8> {
    Records::new(rank, len).of(step).to_vec()
}

/// One rank's records, step after step, from its pattern made once: each
/// step only re-stamps its pages. Making the pattern anew each step cost 7%
/// of the machine's CPU in PFA runs, work no application's I/O would carry.
struct Records {
    rank: usize,
    buf: Vec<u8>,
}

impl Records {
    fn new(rank: usize, len: usize) -> Records {
        Records {
            rank,
            buf: pattern::base(len, rank),
        }
    }

    fn of(&mut self, step: u64) -> &[u8] {
        pattern::stamp(&mut self.buf, pattern::tag(self.rank, step), 0);
        &self.buf
    }

    /// Whether `got`, read back from `path`, is this rank's record of `step`.
    fn verify(&mut self, got: &[u8], step: u64, path: &Path) -> Result<()> {
        let rank = self.rank;
        let want = self.of(step);
        if got.len() != want.len() {
            return Err(ShoalError::io(format!(
                "{}: rank {rank} step {step}: read {} bytes",
                path.display(),
                got.len()
            )));
        }
        match pattern::first_mismatch(got, want, true) {
            None => Ok(()),
            Some(pos) => Err(ShoalError::io(format!(
                "{}: rank {rank} step {step} differs at byte {pos}: {}",
                path.display(),
                pattern::describe_mismatch(got, want, pos)
            ))),
        }
    }
}

/// Most files an N-N rank keeps open before it syncs and closes them.
const NN_OPEN_MAX: usize = 512;

/// Makes each of `files` durable and closes it.
fn sync_and_close(files: &mut Vec<(File, std::path::PathBuf)>) -> Result<()> {
    for (f, path) in files.drain(..) {
        f.sync_all().map_err(|e| at(&path, e))?;
        fsops::close(f, &path)?;
    }
    Ok(())
}

fn nn_path(dir: &Path, rank: usize, step: u64) -> std::path::PathBuf {
    dir.join("nn").join(format!("r{rank}.s{step}"))
}

/// The steps of one rank's write phase: `0, 1, 2, ...` until the count or
/// the time is up, the time counted from the phase's start.
fn steps(length: Length) -> impl Iterator<Item = u64> {
    let started = Instant::now();
    let (count, time) = match length {
        Length::Steps(n) => (n, None),
        Length::Seconds(s) => (u64::MAX, Some(Duration::from_secs_f64(s))),
    };
    (0..count).take_while(move |_| time.is_none_or(|t| started.elapsed() < t))
}

pub fn worker(dir: &Path, rank: usize, length: Length, len: usize, p: Pattern) -> Result<()> {
    let mut barrier = Barrier::new();
    match p {
        Pattern::NN => {
            let written = barrier.phase(PHASES[0], || {
                let mut records = Records::new(rank, len);
                let mut files = Vec::new();
                let mut written = 0;
                for step in steps(length) {
                    let path = nn_path(dir, rank, step);
                    let f = File::create(&path).map_err(|e| at(&path, e))?;
                    f.write_all_at(records.of(step), 0)
                        .map_err(|e| at(&path, e))?;
                    files.push((f, path));
                    written += 1;
                    // A timed run makes as many files as the time allows:
                    // they are made durable and closed in batches, so that
                    // a fast file system never runs a rank out of
                    // descriptors.
                    if files.len() == NN_OPEN_MAX {
                        sync_and_close(&mut files)?;
                    }
                }
                sync_and_close(&mut files)?;
                Ok(written)
            })?;
            barrier.phase(PHASES[1], || {
                let mut records = Records::new(rank, len);
                let mut got = vec![0u8; len];
                for step in 0..written {
                    let path = nn_path(dir, rank, step);
                    let f = File::open(&path).map_err(|e| at(&path, e))?;
                    fsops::read_full_at(&f, &mut got, 0, &path)?;
                    records.verify(&got, step, &path)?;
                }
                Ok(())
            })
        }
        Pattern::N1Locked => {
            let path = dir.join(SHARED_FILE);
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .map_err(|e| at(&path, e))?;
            let offsets = barrier.phase(PHASES[0], || {
                let mut records = Records::new(rank, len);
                let mut offsets = Vec::new();
                for step in steps(length) {
                    let off = claim(&f, len as u64, &path)?;
                    lock(&f, libc::F_WRLCK, off, len as u64, &path)?;
                    let wrote = f.write_all_at(records.of(step), off);
                    lock(&f, libc::F_UNLCK, off, len as u64, &path)?;
                    wrote.map_err(|e| at(&path, e))?;
                    offsets.push(off);
                }
                f.sync_all().map_err(|e| at(&path, e))?;
                Ok(offsets)
            })?;
            barrier.phase(PHASES[1], || {
                let mut records = Records::new(rank, len);
                let mut got = vec![0u8; len];
                for (step, off) in offsets.iter().enumerate() {
                    lock(&f, libc::F_RDLCK, *off, len as u64, &path)?;
                    let read = fsops::read_full_at(&f, &mut got, *off, &path);
                    lock(&f, libc::F_UNLCK, *off, len as u64, &path)?;
                    read?;
                    records.verify(&got, step as u64, &path)?;
                }
                Ok(())
            })
        }
        Pattern::Pfa => {
            let path = dir.join(CONTAINER);
            let rank32 = rank as u32;
            let written = barrier.phase(PHASES[0], || {
                let c = Container::open(&path).map_err(|e| at(&path, e))?;
                let mut b = c
                    .mmap(LOGICAL_NAME, len, rank32, Mode::Write)
                    .map_err(|e| at(&path, e))?;
                let mut records = Records::new(rank, len);
                let mut written = 0;
                for step in steps(length) {
                    b.as_mut_slice().copy_from_slice(records.of(step));
                    b.append(len).map_err(|e| at(&path, e))?;
                    written += 1;
                }
                drop(b);
                c.sync()
                    .and_then(|()| c.close())
                    .map_err(|e| at(&path, e))?;
                Ok(written)
            })?;
            barrier.phase(PHASES[1], || {
                let c = Container::open_read_only(&path).map_err(|e| at(&path, e))?;
                let mut b = c
                    .mmap(LOGICAL_NAME, len, rank32, Mode::Read)
                    .map_err(|e| at(&path, e))?;
                let mut records = Records::new(rank, len);
                let mut step = 0;
                while !b.eof() {
                    records.verify(&b.as_slice()[..b.len()], step, &path)?;
                    b.seek(SeekFrom::Current(1)).map_err(|e| at(&path, e))?;
                    step += 1;
                }
                if step != written {
                    return Err(ShoalError::io(format!(
                        "{}: rank {rank} reads {step} steps back, wrote {written}",
                        path.display()
                    )));
                }
                Ok(())
            })
        }
    }
}

/// Claims `len` bytes of the shared file: under a lock on the counter, reads
/// the next free offset and moves it on.
fn claim(f: &File, len: u64, path: &Path) -> Result<u64> {
    lock(f, libc::F_WRLCK, 0, COUNTER_BYTES, path)?;
    let mut counter = [0u8; COUNTER_BYTES as usize];
    let claimed = fsops::read_full_at(f, &mut counter, 0, path).and_then(|_| {
        let next = u64::from_le_bytes(counter).max(COUNTER_BYTES);
        f.write_all_at(&(next + len).to_le_bytes(), 0)
            .map_err(|e| at(path, e))?;
        Ok(next)
    });
    lock(f, libc::F_UNLCK, 0, COUNTER_BYTES, path)?;
    claimed
}

/// A POSIX record lock (or unlock) on `len` bytes at `start`, waiting for it.
fn lock(f: &File, kind: i32, start: u64, len: u64, path: &Path) -> Result<()> {
    // SAFETY: a plain C struct; all zeroes is a valid value.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = kind as i16;
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_start = start as i64;
    fl.l_len = len as i64;
    // SAFETY: an open descriptor and our own struct.
    if unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETLKW, &fl) } < 0 {
        return Err(at(path, std::io::Error::last_os_error()));
    }
    Ok(())
}
