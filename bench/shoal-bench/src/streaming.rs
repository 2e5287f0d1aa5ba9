//! Streaming bandwidth: P processes each write SIZE bytes in BLOCK-sized
//! transfers and fsync (the write phase), then read them back and verify
//! them (the read phase); either a file per process or one shared file in
//! which each process owns a contiguous region (the N-N and N-1 patterns).

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use serde_json::json;
use shoal_proto::error::{Result, ShoalError};

use crate::fsops::{self, at};
use crate::pattern;
use crate::report::{self, Phase, Report, Unit};
use crate::smallfile::{canonical_dir, MAX_PROCS};
use crate::workers::{run_phases, Barrier};

const MIB: u64 = 1 << 20;
const KIB: u64 = 1 << 10;

/// Largest transfer: one buffer of this size per process is held in memory.
const MAX_BLOCK_KIB: u64 = 1 << 20;

/// Every this many blocks (and the last) is compared in full on read; of the
/// others only the page stamps (writer and offset) are. Comparing everything
/// would add a memory pass that tmpfs reads are not much slower than.
const VERIFY_EVERY: u64 = 16;

/// Free space left beyond the data, so the benchmark does not fill a disk.
const SPACE_MARGIN: u64 = 64 * MIB;

#[derive(Clone, Debug)]
pub struct StreamingOptions {
    pub dir: PathBuf,
    pub procs: usize,
    /// Data per process, MiB.
    pub size_mib: u64,
    /// Transfer size, KiB.
    pub block_kib: u64,
    /// One shared file instead of a file per process.
    pub shared: bool,
    pub runs: usize,
}

impl StreamingOptions {
    pub fn validate(&self) -> Result<()> {
        if self.procs == 0 || self.procs > MAX_PROCS {
            return Err(ShoalError::invalid(format!(
                "-p must be between 1 and {MAX_PROCS}"
            )));
        }
        if self.size_mib == 0 {
            return Err(ShoalError::invalid("--size-mib must be at least 1"));
        }
        if self.block_kib == 0 || self.block_kib > MAX_BLOCK_KIB {
            return Err(ShoalError::invalid(format!(
                "--block-kib must be between 1 and {MAX_BLOCK_KIB}"
            )));
        }
        if self.runs == 0 {
            return Err(ShoalError::invalid("--runs must be at least 1"));
        }
        self.total_bytes().map(|_| ())
    }

    /// Bytes written by all processes together.
    fn total_bytes(&self) -> Result<u64> {
        self.size_mib
            .checked_mul(MIB)
            .and_then(|s| s.checked_mul(self.procs as u64))
            .filter(|&t| t <= i64::MAX as u64)
            .ok_or_else(|| ShoalError::invalid("--size-mib times -p is too large"))
    }
}

/// Runs the benchmark `opts.runs` times and reports the median write and read
/// bandwidth.
pub fn streaming(opts: &StreamingOptions) -> Result<Report> {
    opts.validate()?;
    let dir = canonical_dir(&opts.dir)?;
    let total = opts.total_bytes()?;
    if let Some(avail) = fsops::available_bytes(&dir) {
        if avail < total + SPACE_MARGIN {
            return Err(ShoalError::invalid(format!(
                "{}: the run writes {} MiB but only {} MiB are free; lower --size-mib or -p",
                dir.display(),
                total / MIB,
                avail / MIB
            )));
        }
    }
    let amount = opts.size_mib * opts.procs as u64;
    let mut phases = vec![Phase::new("write", amount), Phase::new("read", amount)];
    let context = report::environment(&dir);
    for run in 0..opts.runs {
        eprintln!("streaming: run {} of {}", run + 1, opts.runs);
        let run_dir = dir.join(format!("shoal-streaming.{}.{run}", std::process::id()));
        fs::create_dir(&run_dir).map_err(|e| at(&run_dir, e))?;
        let result = one_run(opts, &run_dir, &mut phases);
        // Gigabytes must not stay behind, whatever happened.
        let cleanup = fs::remove_dir_all(&run_dir).map_err(|e| at(&run_dir, e));
        result?;
        cleanup?;
    }
    let mut context = context;
    context.insert("procs".into(), json!(opts.procs));
    context.insert("size_mib_per_proc".into(), json!(opts.size_mib));
    context.insert("block_kib".into(), json!(opts.block_kib));
    context.insert("shared_file".into(), json!(opts.shared));
    context.insert("runs".into(), json!(opts.runs));
    let title = format!(
        "streaming on {} ({}): {} processes x {} MiB in {} KiB transfers, {}, median of {} run{}",
        dir.display(),
        report::fs_type_of(&context),
        opts.procs,
        opts.size_mib,
        opts.block_kib,
        if opts.shared {
            "one shared file"
        } else {
            "file per process"
        },
        opts.runs,
        if opts.runs == 1 { "" } else { "s" }
    );
    Ok(Report {
        benchmark: "streaming".into(),
        title,
        unit: Unit::MiB,
        context,
        phases,
        notes: vec![
            "the write phase includes fsync and close".into(),
            "page cache not dropped between write and read (a FUSE mount cannot be made \
             to reliably); each process only asks the kernel to (posix_fadvise DONTNEED), \
             so reads may be served from memory, and on tmpfs always are"
                .into(),
        ],
    })
}

fn one_run(opts: &StreamingOptions, run_dir: &Path, phases: &mut [Phase]) -> Result<()> {
    if opts.shared {
        // Created once by the parent, as a rank 0 would, so the workers time
        // data transfer and not a create race on one name.
        let shared = run_dir.join("shared");
        File::create(&shared).map_err(|e| at(&shared, e))?;
    }
    let mut extra = vec![
        "--size-mib".to_string(),
        opts.size_mib.to_string(),
        "--block-kib".into(),
        opts.block_kib.to_string(),
    ];
    if opts.shared {
        extra.push("--shared".into());
    }
    run_phases("streaming", opts.procs, run_dir, &extra, phases)
}

/// One worker process: writes its data, then reads and verifies it.
pub fn worker(
    run_dir: &Path,
    id: usize,
    size_mib: u64,
    block_kib: u64,
    shared: bool,
) -> Result<()> {
    StreamingOptions {
        dir: run_dir.to_path_buf(),
        procs: id + 1,
        size_mib,
        block_kib,
        shared,
        runs: 1,
    }
    .validate()?;
    let size = size_mib * MIB;
    let block = (block_kib * KIB) as usize;
    let (path, start) = if shared {
        (run_dir.join("shared"), id as u64 * size)
    } else {
        (run_dir.join(format!("p{id}")), 0)
    };
    // One pattern per worker, restamped per block with its offset (see
    // pattern.rs): no data generation inside the timed phases.
    let mut buf = pattern::base(block, id);
    let tag = pattern::tag(id, 0);
    let mut got = vec![0u8; block];
    let blocks = size.div_ceil(block as u64);
    let extent = |i: u64| {
        let off = i * block as u64;
        (start + off, (size - off).min(block as u64) as usize)
    };
    let mut b = Barrier::new();

    b.phase("write", || {
        let f = OpenOptions::new()
            .write(true)
            .create(!shared)
            .truncate(!shared)
            .open(&path)
            .map_err(|e| at(&path, e))?;
        for i in 0..blocks {
            let (off, len) = extent(i);
            pattern::stamp(&mut buf[..len], tag, off);
            f.write_all_at(&buf[..len], off).map_err(|e| at(&path, e))?;
        }
        f.sync_all().map_err(|e| at(&path, e))?;
        fsops::close(f, &path)
    })?;
    fsops::drop_cached_range(&path, start, size);
    b.phase("read", || {
        let f = File::open(&path).map_err(|e| at(&path, e))?;
        for i in 0..blocks {
            let (off, len) = extent(i);
            let got = &mut got[..len];
            fsops::read_full_at(&f, got, off, &path)?;
            // The writer's buffer, restamped, is exactly what this block must hold.
            let want = &mut buf[..len];
            pattern::stamp(want, tag, off);
            let full = i % VERIFY_EVERY == 0 || i + 1 == blocks;
            if let Some(pos) = pattern::first_mismatch(got, want, full) {
                return Err(ShoalError::io(format!(
                    "{}: the block at offset {off} differs from what was written, {}",
                    path.display(),
                    pattern::describe_mismatch(got, want, pos)
                )));
            }
        }
        fsops::close(f, &path)
    })?;
    Ok(())
}
