//! `shoal bench pfa`: the experiments of [Kato 2011] on any directories
//! given (a Shoal mount, the local disk, tmpfs), in one run.
//!
//! 1. P ranks (processes) write records of 272,383 bytes each (the paper's
//!    record), one per step, for a fixed time (the paper's form: it wrote for
//!    a minute) or a fixed number of steps, and read them all back, verified,
//!    in each of the three patterns of `pfa_worker`: a file per rank per step (N-N), one
//!    shared file under record locks (naive N-1), one PFA container. Per
//!    pattern: write and read bandwidth (all ranks' bytes over the time
//!    from the first rank's start to the last one's end), files created,
//!    bytes the file system allocated.
//! 2. The checkpoint workload: one rank stores a 737,534-byte image for
//!    CKPT_STEPS steps, about 30% of its pages changed each step, with full
//!    stores and with incremental logging; the bytes each wrote against the
//!    pages that changed, and every step read back byte for byte.
//!
//! Rounds rotate which pattern goes first. Results: `pfa.{md,csv,png}`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::io::SeekFrom;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use shoal_pfa::index::{stores, Verify};
use shoal_pfa::{Container, Mode, Options};
use shoal_proto::error::{Result, ShoalError};

use crate::fsops::at;
use crate::pfa_worker::{
    Length, Pattern, CONTAINER, COUNTER_BYTES, LOGICAL_NAME, PHASES, SHARED_FILE,
};
use crate::report::{self, median, Phase};
use crate::smallfile::canonical_dir;
use crate::workers::run_phases;

/// [Kato 2011]'s record and checkpoint image sizes.
pub const RECORD: usize = 272_383;
pub const CHECKPOINT: usize = 737_534;
const PAGE: usize = 4096;
const MIB: f64 = (1 << 20) as f64;

pub struct PfaOptions {
    /// Directories to run in, each with a label for the tables.
    pub dirs: Vec<PathBuf>,
    pub procs: usize,
    /// The patterns to run (empty: all).
    pub patterns: Vec<Pattern>,
    pub length: Length,
    pub record: usize,
    pub checkpoint_steps: u64,
    pub rounds: usize,
    /// Where pfa.{md,csv,png} go.
    pub out: PathBuf,
    pub command: String,
}

/// Per (directory, pattern): every round's measures.
#[derive(Default)]
struct Measured {
    /// Per round, the records all ranks wrote.
    records: Vec<f64>,
    write_mib_s: Vec<f64>,
    read_mib_s: Vec<f64>,
    /// Per round, files created and the bytes the file system allocated.
    files: Vec<f64>,
    allocated: Vec<f64>,
}

/// Per directory: bytes the checkpoint workload wrote.
struct Checkpoint {
    changed: u64,
    full: u64,
    incremental: u64,
}

pub fn pfa(opts: &PfaOptions) -> Result<()> {
    if opts.procs == 0 || opts.procs > 256 || !opts.length.valid() || opts.record == 0 {
        return Err(ShoalError::invalid(
            "pfa: -p (1 to 256), --steps or --seconds, and --record must be positive",
        ));
    }
    let patterns = if opts.patterns.is_empty() {
        Pattern::ALL.to_vec()
    } else {
        opts.patterns.clone()
    };
    let dirs: Vec<(String, PathBuf)> = opts
        .dirs
        .iter()
        .map(|d| canonical_dir(d).map(|d| (label(&d), d)))
        .collect::<Result<_>>()?;
    let mut measured: BTreeMap<(usize, Pattern), Measured> = BTreeMap::new();
    let mut checkpoints = Vec::new();
    for round in 0..opts.rounds {
        for (i, (name, dir)) in dirs.iter().enumerate() {
            for k in 0..patterns.len() {
                let p = patterns[(k + round) % patterns.len()];
                eprintln!(
                    "bench pfa: round {} of {}: {name}: {}",
                    round + 1,
                    opts.rounds,
                    p.name()
                );
                let m = measured.entry((i, p)).or_default();
                one_run(opts, dir, p, m)?;
            }
            if round == 0 {
                checkpoints.push(checkpoint(dir, opts.checkpoint_steps)?);
            }
        }
    }
    let md = markdown(opts, &dirs, &measured, &checkpoints);
    let csv = csv(&dirs, &measured, &checkpoints);
    fs::create_dir_all(&opts.out).map_err(|e| at(&opts.out, e))?;
    let csv_path = opts.out.join("pfa.csv");
    fs::write(&csv_path, csv).map_err(|e| at(&csv_path, e))?;
    let md_path = opts.out.join("pfa.md");
    fs::write(&md_path, &md).map_err(|e| at(&md_path, e))?;
    print!("{md}");
    crate::ablation::plot("pfa", &csv_path, &opts.out.join("pfa.png"));
    Ok(())
}

/// "shoal" for a Shoal mount, else the file system's type.
fn label(dir: &Path) -> String {
    let fs = report::fs_type_of(&report::environment(dir));
    if fs.contains("shoal") {
        "shoal".into()
    } else {
        fs
    }
}

fn one_run(opts: &PfaOptions, dir: &Path, p: Pattern, m: &mut Measured) -> Result<()> {
    let run_dir = dir.join(format!("shoal-pfa.{}.{}", std::process::id(), p.name()));
    fs::create_dir(&run_dir).map_err(|e| at(&run_dir, e))?;
    let result = (|| {
        match p {
            Pattern::NN => {
                let nn = run_dir.join("nn");
                fs::create_dir(&nn).map_err(|e| at(&nn, e))?;
            }
            Pattern::N1Locked => {
                let f = run_dir.join(SHARED_FILE);
                fs::write(&f, 0u64.to_le_bytes()).map_err(|e| at(&f, e))?;
            }
            Pattern::Pfa => {
                let c = run_dir.join(CONTAINER);
                Container::create(&c, &Options::new(opts.procs as u32))
                    .and_then(Container::close)
                    .map_err(|e| at(&c, e))?;
            }
        }
        let mut phases: Vec<Phase> = PHASES.iter().map(|n| Phase::new(n, 0)).collect();
        let mut extra = vec![
            "--pattern".to_string(),
            p.name().to_string(),
            "--record".to_string(),
            opts.record.to_string(),
        ];
        extra.extend(opts.length.args());
        run_phases("pfa", opts.procs, &run_dir, &extra, &mut phases)?;
        let records = records(&run_dir, p, opts.procs, opts.record)? as f64;
        let bytes = records * opts.record as f64;
        let mib_s = |ph: &Phase| bytes / MIB / ph.seconds().last().copied().unwrap_or(f64::NAN);
        m.write_mib_s.push(mib_s(&phases[0]));
        m.read_mib_s.push(mib_s(&phases[1]));
        m.records.push(records);
        let (files, allocated) = census(&run_dir)?;
        m.files.push(files as f64);
        m.allocated.push(allocated as f64);
        Ok(())
    })();
    let cleanup = fs::remove_dir_all(&run_dir).map_err(|e| at(&run_dir, e));
    result.and(cleanup)
}

/// How many records the ranks of a run wrote (and read back, verified): the
/// run's files, the shared file's claim counter, or the container's stores.
fn records(run_dir: &Path, p: Pattern, procs: usize, record: usize) -> Result<u64> {
    match p {
        Pattern::NN => {
            let nn = run_dir.join("nn");
            Ok(fs::read_dir(&nn).map_err(|e| at(&nn, e))?.count() as u64)
        }
        Pattern::N1Locked => {
            let path = run_dir.join(SHARED_FILE);
            let len = fs::metadata(&path).map_err(|e| at(&path, e))?.len();
            Ok(len.saturating_sub(COUNTER_BYTES) / record as u64)
        }
        Pattern::Pfa => {
            let path = run_dir.join(CONTAINER);
            let c = Container::open_read_only(&path).map_err(|e| at(&path, e))?;
            let mut n = 0;
            for rank in 0..procs as u32 {
                // The ranks read back and verified every record: the headers
                // are enough to count them, not a second read of the data.
                let chain = c.chain(rank, Verify::Tail).map_err(|e| at(&path, e))?;
                n += stores(&chain)
                    .get(LOGICAL_NAME)
                    .map_or(0, |s| s.len() as u64);
            }
            Ok(n)
        }
    }
}

/// Regular files under `dir` and the bytes their blocks take.
fn census(dir: &Path) -> Result<(u64, u64)> {
    let (mut files, mut bytes) = (0, 0);
    for e in fs::read_dir(dir).map_err(|e| at(dir, e))? {
        let e = e.map_err(|e| at(dir, e))?;
        let md = e.metadata().map_err(|err| at(&e.path(), err))?;
        if md.is_dir() {
            let (f, b) = census(&e.path())?;
            files += f;
            bytes += b;
        } else {
            files += 1;
            bytes += md.blocks() * 512;
        }
    }
    Ok((files, bytes))
}

/// The checkpoint workload in `dir`, with full stores and with incremental
/// logging; each step read back and compared.
fn checkpoint(dir: &Path, steps: u64) -> Result<Checkpoint> {
    let path = dir.join(format!("shoal-pfa-ckpt.{}", std::process::id()));
    let mut written = [0u64; 2];
    let mut changed = 0;
    for (i, mode) in [Mode::Write, Mode::WriteIncremental]
        .into_iter()
        .enumerate()
    {
        let result = (|| {
            let c = Container::create(&path, &Options::new(1)).map_err(|e| at(&path, e))?;
            let mut b = c
                .mmap("ckpt", CHECKPOINT, 0, mode)
                .map_err(|e| at(&path, e))?;
            let mut image = crate::pfa_worker::record(0, 0, CHECKPOINT);
            b.as_mut_slice().copy_from_slice(&image);
            let mut images = Vec::new();
            changed = (CHECKPOINT.div_ceil(PAGE) * PAGE) as u64;
            for step in 0..steps {
                if step > 0 {
                    // Only the changed bytes are written into the buffer, as
                    // an application updating its state in place would.
                    for at in changed_bytes(step) {
                        image[at] = image[at].wrapping_add(1);
                        b.as_mut_slice()[at] = image[at];
                    }
                    changed += (changed_bytes(step).count() * PAGE) as u64;
                }
                b.append(CHECKPOINT).map_err(|e| at(&path, e))?;
                images.push(image.clone());
            }
            drop(b);
            let chain = c.chain(0, Verify::All).map_err(|e| at(&path, e))?;
            let data: u64 = stores(&chain)
                .get("ckpt")
                .map(|s| s.iter().map(|s| s.data_bytes()).sum())
                .unwrap_or(0);
            c.close().map_err(|e| at(&path, e))?;
            let c = Container::open_read_only(&path).map_err(|e| at(&path, e))?;
            let mut r = c
                .mmap("ckpt", CHECKPOINT, 0, Mode::Read)
                .map_err(|e| at(&path, e))?;
            for (step, want) in images.iter().enumerate() {
                if r.as_slice()[..r.len()] != want[..] {
                    return Err(ShoalError::io(format!(
                        "{}: checkpoint step {step} reads back different bytes",
                        path.display()
                    )));
                }
                r.seek(SeekFrom::Current(1)).map_err(|e| at(&path, e))?;
            }
            Ok(data)
        })();
        let removed = fs::remove_file(&path).map_err(|e| at(&path, e));
        written[i] = result?;
        removed?;
    }
    Ok(Checkpoint {
        changed,
        full: written[0],
        incremental: written[1],
    })
}

/// One byte in each of about 30% of the image's pages (a different 30% each
/// step).
fn changed_bytes(step: u64) -> impl Iterator<Item = usize> {
    (0..CHECKPOINT.div_ceil(PAGE))
        .filter(move |p| (p * 7 + step as usize) % 10 < 3)
        .map(move |p| (p * PAGE + (step as usize % 97)).min(CHECKPOINT - 1))
}

fn fmt_median(v: &[f64]) -> String {
    median(v).map_or("-".into(), |m| format!("{m:.0}"))
}

fn ratio(a: &[f64], b: &[f64]) -> String {
    match (median(a), median(b)) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "-".into(),
    }
}

fn markdown(
    opts: &PfaOptions,
    dirs: &[(String, PathBuf)],
    measured: &BTreeMap<(usize, Pattern), Measured>,
    checkpoints: &[Checkpoint],
) -> String {
    let mut md = String::new();
    let _ = writeln!(md, "# `shoal bench pfa`\n");
    let _ = writeln!(
        md,
        "[Kato 2011]'s experiments: {} ranks (processes) each write a record of {} bytes per step {}, \
         then read them all back and verify them; bandwidth is all ranks' bytes over the time \
         from the first rank's start to the last one's end (MiB/s, median of {} round{}, \
         patterns rotating which goes first). A write phase ends when its data is durable: N-N \
         fsyncs each file, N-1 its shared file, PFA its container. Records: what all ranks \
         wrote, files and bytes allocated: medians of the rounds. Release build.\n",
        opts.procs,
        opts.record,
        opts.length.describe(),
        opts.rounds,
        if opts.rounds == 1 { "" } else { "s" }
    );
    let _ = writeln!(
        md,
        "| directory | pattern | write MiB/s | read MiB/s | records | files created | bytes allocated | write vs n-n | write vs n-1-locked |"
    );
    let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for (i, (name, dir)) in dirs.iter().enumerate() {
        let of = |p| measured.get(&(i, p));
        for p in Pattern::ALL {
            let Some(m) = of(p) else { continue };
            let vs = |q| of(q).map_or("-".into(), |o| ratio(&m.write_mib_s, &o.write_mib_s));
            let _ = writeln!(
                md,
                "| {name} ({}) | {} | {} | {} | {} | {} | {} | {} | {} |",
                dir.display(),
                p.name(),
                fmt_median(&m.write_mib_s),
                fmt_median(&m.read_mib_s),
                fmt_median(&m.records),
                fmt_median(&m.files),
                fmt_median(&m.allocated),
                vs(Pattern::NN),
                vs(Pattern::N1Locked),
            );
        }
    }
    let _ = writeln!(
        md,
        "\nCheckpoint workload: one rank stores a {CHECKPOINT}-byte image {} times, about 30% \
         of its pages changed each step; bytes written by the stores (headers excluded), every \
         step read back byte for byte:\n",
        opts.checkpoint_steps
    );
    let _ = writeln!(
        md,
        "| directory | changed pages (bytes) | full stores | incremental | incremental / changed |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|");
    for ((name, _), c) in dirs.iter().zip(checkpoints) {
        let _ = writeln!(
            md,
            "| {name} | {} | {} | {} | {:.3} |",
            c.changed,
            c.full,
            c.incremental,
            c.incremental as f64 / c.changed as f64
        );
    }
    let _ = writeln!(md, "\nEvery round (write, read MiB/s):\n");
    for (i, (name, _)) in dirs.iter().enumerate() {
        for p in Pattern::ALL {
            if let Some(m) = measured.get(&(i, p)) {
                let f = |v: &[f64]| {
                    v.iter()
                        .map(|x| format!("{x:.0}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                let _ = writeln!(
                    md,
                    "- {name}, {}: write {}; read {}",
                    p.name(),
                    f(&m.write_mib_s),
                    f(&m.read_mib_s)
                );
            }
        }
    }
    let _ = writeln!(md, "\nCommand:\n\n```sh\n{}\n```", opts.command);
    md
}

/// The interfaces charts' CSV form (bench/plot.py): targets are patterns.
fn csv(
    dirs: &[(String, PathBuf)],
    measured: &BTreeMap<(usize, Pattern), Measured>,
    checkpoints: &[Checkpoint],
) -> String {
    let mut csv = String::from("workload,target,metric,unit,median,rounds\n");
    let all = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.3}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    for (i, (name, _)) in dirs.iter().enumerate() {
        for p in Pattern::ALL {
            let Some(m) = measured.get(&(i, p)) else {
                continue;
            };
            for (what, v) in [("write", &m.write_mib_s), ("read", &m.read_mib_s)] {
                let _ = writeln!(
                    csv,
                    "pfa,{},{name} {what},MiB/s,{:.3},{}",
                    p.name(),
                    median(v).unwrap_or(f64::NAN),
                    all(v)
                );
            }
            let _ = writeln!(
                csv,
                "pfa,{},{name} files,files,{},{}",
                p.name(),
                median(&m.files).unwrap_or(f64::NAN),
                all(&m.files)
            );
            let _ = writeln!(
                csv,
                "pfa,{},{name} records,records,{},{}",
                p.name(),
                median(&m.records).unwrap_or(f64::NAN),
                all(&m.records)
            );
        }
    }
    for ((name, _), c) in dirs.iter().zip(checkpoints) {
        for (target, bytes) in [
            ("changed pages", c.changed),
            ("full stores", c.full),
            ("incremental", c.incremental),
        ] {
            let mib = bytes as f64 / MIB;
            let _ = writeln!(csv, "pfa,{target},{name} checkpoint,MiB,{mib:.3},{mib:.3}");
        }
    }
    csv
}
