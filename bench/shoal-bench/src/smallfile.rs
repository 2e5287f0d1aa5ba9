//! The small-file microbenchmark of [Carns 2009]: P processes, each in its own
//! subdirectory, run nine phases separated by barriers: (1) mkdir, (2) create
//! N files (kept open), (3) readdir + stat each, (4) write M bytes to each,
//! (5) read and verify them, (6) readdir + stat again, (7) close, (8) unlink,
//! (9) rmdir. Works on any POSIX directory: a Shoal mount, tmpfs, a disk.
//! With `--shared`, all processes work in one directory (`smallfile_layout`).

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde_json::json;
use shoal_proto::error::{Result, ShoalError};

use crate::fsops::{self, at};
use crate::pattern;
use crate::report::{self, Phase, Report, Unit};
use crate::smallfile_layout::Layout;
use crate::workers::{run_phases_with, Barrier, Launch};

/// The phases, in order, and whether each counts one operation per process
/// (mkdir, rmdir) rather than one per file.
pub const PHASES: [(&str, bool); 9] = [
    ("mkdir", true),
    ("create", false),
    ("readdir+stat", false),
    ("write", false),
    ("read", false),
    ("readdir+stat-2", false),
    (CLOSE, false),
    ("unlink", false),
    ("rmdir", true),
];

/// The phase that closes the descriptors the create phase left open.
const CLOSE: &str = "close";

/// Most worker processes a run may start: far beyond what one machine gains
/// from, low enough that a typo does not fork-bomb it.
pub const MAX_PROCS: usize = 1024;

#[derive(Clone, Debug)]
pub struct SmallfileOptions {
    /// Directory to run in; each run works in a fresh subdirectory of it.
    pub dir: PathBuf,
    /// Processes (P).
    pub procs: usize,
    /// Files per process (N).
    pub files: usize,
    /// Bytes written to and read from each file (M).
    pub size: usize,
    pub runs: usize,
    /// Time the native client instead of POSIX calls (the directory must lie
    /// under a live Shoal mount).
    pub native: bool,
    /// Each phase opens and closes every file it touches (what `cp` and
    /// `cat` do) instead of keeping them open from create to close.
    pub reopen: bool,
    /// Native: files per `create_files` call in the create phase (1: one
    /// `create` each).
    pub create_batch: usize,
    /// Run the POSIX workers with this library as LD_PRELOAD
    /// (libshoal_preload.so).
    pub preload: Option<PathBuf>,
    /// Run the workers as this user (from root; each run's directory is
    /// made theirs). None: as this process.
    pub uid: Option<u32>,
    /// Processes whose CPU time each phase reports (the servers).
    pub watch: Vec<u32>,
    /// Every process's files in one directory (`smallfile_layout`).
    pub shared: bool,
}

impl SmallfileOptions {
    pub fn validate(&self) -> Result<()> {
        if self.procs == 0 || self.procs > MAX_PROCS {
            return Err(ShoalError::invalid(format!(
                "-p must be between 1 and {MAX_PROCS}"
            )));
        }
        if self.files == 0 {
            return Err(ShoalError::invalid("-n must be at least 1"));
        }
        if self.size == 0 {
            return Err(ShoalError::invalid(
                "--size must be at least 1 (the write and read phases need bytes to move)",
            ));
        }
        if self.runs == 0 {
            return Err(ShoalError::invalid("--runs must be at least 1"));
        }
        if self.create_batch == 0 || (self.create_batch > 1 && !self.native) {
            return Err(ShoalError::invalid(
                "--create-batch must be at least 1, and above 1 only with --native",
            ));
        }
        Ok(())
    }
}

/// Runs the benchmark `opts.runs` times and reports the median per phase.
pub fn smallfile(opts: &SmallfileOptions) -> Result<Report> {
    opts.validate()?;
    let dir = canonical_dir(&opts.dir)?;
    // Fail here, with a clear message, rather than in every worker; workers
    // inherit the raised limit.
    fsops::raise_nofile_limit(opts.files)?;
    let per_files = (opts.procs * opts.files) as u64;
    let mut phases: Vec<Phase> = PHASES
        .iter()
        .map(|&(name, per_process)| {
            let ops = if per_process && opts.shared {
                1
            } else if per_process {
                opts.procs as u64
            } else if opts.reopen && name == CLOSE {
                // Every phase closed what it opened: no closes left, no rate.
                0
            } else {
                per_files
            };
            Phase::new(name, ops)
        })
        .collect();
    let context = report::environment(&dir);
    for run in 0..opts.runs {
        eprintln!("smallfile: run {} of {}", run + 1, opts.runs);
        // A fresh directory per run, named so that concurrent invocations and
        // leftovers of an interrupted one never collide.
        let run_dir = dir.join(format!("shoal-smallfile.{}.{run}", std::process::id()));
        fs::create_dir(&run_dir).map_err(|e| at(&run_dir, e))?;
        if let Some(uid) = opts.uid {
            std::os::unix::fs::chown(&run_dir, Some(uid), Some(uid))
                .map_err(|e| at(&run_dir, e))?;
        }
        let result = one_run(opts, &run_dir, &mut phases);
        if result.is_err() {
            // The error names what went wrong; don't leave thousands of files behind.
            let _ = fs::remove_dir_all(&run_dir);
        }
        result?;
        fs::remove_dir(&run_dir).map_err(|e| at(&run_dir, e))?;
    }
    let mut context = context;
    context.insert("procs".into(), json!(opts.procs));
    context.insert("files_per_proc".into(), json!(opts.files));
    context.insert("size".into(), json!(opts.size));
    context.insert("runs".into(), json!(opts.runs));
    context.insert(
        "directory".into(),
        json!(if opts.shared {
            "one shared"
        } else {
            "one per process"
        }),
    );
    if opts.create_batch > 1 {
        context.insert("create_batch".into(), json!(opts.create_batch));
    }
    let interface = match (opts.native, &opts.preload) {
        (true, _) => "native client",
        (false, Some(_)) if opts.uid.is_some() => "POSIX through LD_PRELOAD, as another user",
        (false, Some(_)) => "POSIX through LD_PRELOAD",
        (false, None) => "POSIX",
    };
    let interface = match (opts.reopen, opts.native) {
        (true, false) => format!("{interface}, open+close per phase"),
        (true, true) => format!("{interface}, a flush per file where POSIX closes"),
        (false, _) => interface.to_string(),
    };
    context.insert("interface".into(), json!(interface));
    let title = format!(
        "smallfile on {} ({}, {interface}): {} processes x {} files x {} bytes{}, median of {} run{}",
        dir.display(),
        report::fs_type_of(&context),
        opts.procs,
        opts.files,
        opts.size,
        if opts.shared {
            " in one shared directory"
        } else {
            ""
        },
        opts.runs,
        if opts.runs == 1 { "" } else { "s" }
    );
    let mut notes = vec![
        "phase time = first process's start to last one's end; rate = all processes' \
         operations / that time"
            .into(),
        "before the read phase each file's cached pages are dropped (posix_fadvise \
         DONTNEED, untimed); tmpfs keeps them, so its reads are from memory"
            .into(),
    ];
    if opts.shared {
        notes.push(
            "one shared directory: the first process makes and removes it (mkdir and \
             rmdir count one operation); each readdir+stat phase lists every process's \
             files in every process and stats each file once, in the process that made it"
                .into(),
        );
    }
    if opts.native {
        notes.push(format!(
            "{CLOSE}: the native client keeps no file open, so there is nothing to close \
             and no rate ({})",
            report::NO_RATE
        ));
    }
    Ok(Report {
        benchmark: "smallfile".into(),
        title,
        unit: Unit::Ops,
        context,
        phases,
        notes,
    })
}

fn one_run(opts: &SmallfileOptions, run_dir: &Path, phases: &mut [Phase]) -> Result<()> {
    let mut extra = vec![
        "-n".to_string(),
        opts.files.to_string(),
        "--size".into(),
        opts.size.to_string(),
    ];
    if opts.native {
        extra.push("--native".into());
    }
    if opts.reopen {
        extra.push("--reopen".into());
    }
    if opts.create_batch > 1 {
        extra.extend(["--create-batch".into(), opts.create_batch.to_string()]);
    }
    if opts.shared {
        extra.extend(["--shared".into(), "-p".into(), opts.procs.to_string()]);
    }
    let launch = Launch {
        env: opts
            .preload
            .iter()
            .map(|lib| ("LD_PRELOAD".to_string(), lib.clone().into_os_string()))
            .collect(),
        uid: opts.uid,
        watch: opts.watch.clone(),
    };
    run_phases_with("smallfile", opts.procs, run_dir, &extra, &launch, phases)
}

pub fn canonical_dir(dir: &Path) -> Result<PathBuf> {
    let canonical = fs::canonicalize(dir).map_err(|e| at(dir, e))?;
    if !canonical.is_dir() {
        return Err(ShoalError::invalid(format!(
            "{}: not a directory",
            dir.display()
        )));
    }
    Ok(canonical)
}

/// One worker process: runs the nine phases in its directory of `run_dir`.
pub fn worker(run_dir: &Path, l: Layout, size: usize) -> Result<()> {
    let id = l.id;
    fsops::raise_nofile_limit(l.files)?;
    let dir = run_dir.join(l.dir_name());
    // Paths and buffers are prepared before the barrier so that the phases
    // time file system calls, not allocation.
    let names: Vec<PathBuf> = (0..l.files).map(|i| dir.join(l.file_name(i))).collect();
    let mut want = pattern::base(size, id);
    let mut got = vec![0u8; size];
    check_run_dir(run_dir)?;
    let mut b = Barrier::new();

    b.phase(PHASES[0].0, || make_dir(&l, &dir))?;
    let fds = b.phase(PHASES[1].0, || create_all(&names))?;
    b.phase(PHASES[2].0, || readdir_stat(&l, &dir, 0))?;
    b.phase(PHASES[3].0, || {
        for (i, (f, name)) in fds.iter().zip(&names).enumerate() {
            pattern::stamp(&mut want, pattern::tag(id, i as u64), 0);
            f.write_all_at(&want, 0).map_err(|e| at(name, e))?;
        }
        Ok(())
    })?;
    // Untimed, before the barrier: so that reads reach the file system
    // rather than the pages the writes left in the kernel's cache.
    for f in &fds {
        fsops::drop_cached(f, 0, size as u64);
    }
    b.phase(PHASES[4].0, || {
        for (i, (f, name)) in fds.iter().zip(&names).enumerate() {
            fsops::read_full_at(f, &mut got, 0, name)?;
            pattern::stamp(&mut want, pattern::tag(id, i as u64), 0);
            verify(&got, &want, name)?;
        }
        Ok(())
    })?;
    b.phase(PHASES[5].0, || readdir_stat(&l, &dir, size as u64))?;
    b.phase(PHASES[6].0, || {
        for (f, name) in fds.into_iter().zip(&names) {
            fsops::close(f, name)?;
        }
        Ok(())
    })?;
    remove_phases(&mut b, &l, &names, &dir)
}

/// One worker process in the open+close form: every phase opens each file
/// it touches and closes it again (no descriptor lives across phases), as
/// `cp`, `cat` and most tools do. The close phase has nothing to do.
pub fn reopen_worker(run_dir: &Path, l: Layout, size: usize) -> Result<()> {
    let id = l.id;
    let dir = run_dir.join(l.dir_name());
    let names: Vec<PathBuf> = (0..l.files).map(|i| dir.join(l.file_name(i))).collect();
    let mut want = pattern::base(size, id);
    let mut got = vec![0u8; size];
    check_run_dir(run_dir)?;
    let mut b = Barrier::new();
    let open = |name: &PathBuf, write: bool| {
        OpenOptions::new()
            .read(!write)
            .write(write)
            .open(name)
            .map_err(|e| at(name, e))
    };

    b.phase(PHASES[0].0, || make_dir(&l, &dir))?;
    b.phase(PHASES[1].0, || {
        for name in &names {
            let f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(name)
                .map_err(|e| at(name, e))?;
            fsops::close(f, name)?;
        }
        Ok(())
    })?;
    b.phase(PHASES[2].0, || readdir_stat(&l, &dir, 0))?;
    b.phase(PHASES[3].0, || {
        for (i, name) in names.iter().enumerate() {
            pattern::stamp(&mut want, pattern::tag(id, i as u64), 0);
            let f = open(name, true)?;
            f.write_all_at(&want, 0).map_err(|e| at(name, e))?;
            fsops::close(f, name)?;
        }
        Ok(())
    })?;
    for name in &names {
        fsops::drop_cached_range(name, 0, size as u64);
    }
    b.phase(PHASES[4].0, || {
        for (i, name) in names.iter().enumerate() {
            let f = open(name, false)?;
            fsops::read_full_at(&f, &mut got, 0, name)?;
            fsops::close(f, name)?;
            pattern::stamp(&mut want, pattern::tag(id, i as u64), 0);
            verify(&got, &want, name)?;
        }
        Ok(())
    })?;
    b.phase(PHASES[5].0, || readdir_stat(&l, &dir, size as u64))?;
    b.phase(PHASES[6].0, || Ok(()))?;
    remove_phases(&mut b, &l, &names, &dir)
}

/// The mkdir phase: the worker's directory, if it makes one.
fn make_dir(l: &Layout, dir: &Path) -> Result<()> {
    if !l.makes_dir() {
        return Ok(());
    }
    fs::DirBuilder::new()
        .mode(0o755)
        .create(dir)
        .map_err(|e| at(dir, e))
}

/// `got` is what was written (`want`), or an error naming the file.
fn verify(got: &[u8], want: &[u8], name: &Path) -> Result<()> {
    match pattern::first_mismatch(got, want, true) {
        None => Ok(()),
        Some(pos) => Err(ShoalError::io(format!(
            "{}: content differs from what was written, {}",
            name.display(),
            pattern::describe_mismatch(got, want, pos)
        ))),
    }
}

fn create_all(names: &[PathBuf]) -> Result<Vec<File>> {
    let mut fds = Vec::with_capacity(names.len());
    for name in names {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(name)
            .map_err(|e| at(name, e))?;
        fds.push(f);
    }
    Ok(fds)
}

/// Untimed, before the first barrier: the run directory must be a directory.
/// Through the preload library this is also the process's first call into
/// Shoal: it reads the cluster file and connects to the servers that path
/// needs (the native worker pings every server before its barrier), which
/// the mkdir phase would otherwise time.
fn check_run_dir(run_dir: &Path) -> Result<()> {
    let meta = fs::metadata(run_dir).map_err(|e| at(run_dir, e))?;
    if !meta.is_dir() {
        return Err(ShoalError::invalid(format!(
            "{}: not a directory",
            run_dir.display()
        )));
    }
    Ok(())
}

/// Lists `dir` and stats every entry of this worker's (as `ls -l` does),
/// checking the listing's count and that each is a regular file of `size`
/// bytes: a wrong listing or size is a file system bug the benchmark must
/// not time as success.
fn readdir_stat(l: &Layout, dir: &Path, size: u64) -> Result<()> {
    let (mut seen, mut own) = (0, 0);
    for entry in fs::read_dir(dir).map_err(|e| at(dir, e))? {
        let entry = entry.map_err(|e| at(dir, e))?;
        seen += 1;
        if !entry.file_name().to_str().is_some_and(|n| l.owns(n)) {
            continue;
        }
        own += 1;
        let path = entry.path();
        let meta = fs::symlink_metadata(&path).map_err(|e| at(&path, e))?;
        if !meta.is_file() || meta.len() != size {
            return Err(ShoalError::io(format!(
                "{}: stat says {} of {} bytes, expected a regular file of {size} bytes",
                path.display(),
                if meta.is_file() {
                    "a file"
                } else {
                    "not a file"
                },
                meta.len()
            )));
        }
    }
    l.check_listing(&dir.display().to_string(), seen, own)
        .map_err(ShoalError::io)
}

/// The last two phases of both forms: unlink every file, then the directory
/// (the worker that made it).
fn remove_phases(b: &mut Barrier, l: &Layout, names: &[PathBuf], dir: &Path) -> Result<()> {
    b.phase(PHASES[7].0, || {
        for name in names {
            fs::remove_file(name).map_err(|e| at(name, e))?;
        }
        Ok(())
    })?;
    b.phase(PHASES[8].0, || match l.makes_dir() {
        true => fs::remove_dir(dir).map_err(|e| at(dir, e)),
        false => Ok(()),
    })
}
