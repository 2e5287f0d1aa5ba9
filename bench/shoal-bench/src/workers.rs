//! Worker processes and the barrier before each phase, after the
//! microbenchmark method of [Carns 2009] (its Algorithm 1): every worker
//! waits at a barrier and times its own phase. The phase time is from the
//! first worker's start to the last one's end. Under MPI, whose barrier
//! releases every rank at once, that is the study's maximum of the workers'
//! own times. Here the go lines reach the workers one after another, and on
//! a machine with fewer cores than workers one can finish a phase of a few
//! milliseconds before the last has started: the maximum of own times would
//! count that as parallel work. The workers' clock is the machine's
//! monotonic one, which every process reads alike.
//!
//! Workers are copies of this executable started with a hidden `--worker K`
//! flag. Processes, not threads, so each has its own file table and its own
//! kernel and FUSE context, as the paper's MPI ranks had. The barrier runs
//! over each child's stdin and stdout, one line per message:
//!
//! ```text
//! worker -> parent   ready <phase>             waiting at the barrier
//! parent -> worker   go                        sent once every worker is ready
//! worker -> parent   done <start> <end>        its phase's start and end (monotonic ns)
//! worker -> parent   error <errno> <message>   instead of either; it then exits
//! ```
//!
//! A worker must therefore never print anything else on stdout; stderr is the
//! parent's, for diagnostics.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, StdinLock, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use shoal_proto::error::{Errno, Result, ShoalError};

use crate::report::{phase_seconds, Phase};

/// Runs one benchmark run: `procs` workers of `shoal bench BENCH --worker K
/// --dir RUN_DIR EXTRA...`, every phase behind the barrier, each worker's time
/// recorded per phase.
pub fn run_phases(
    bench: &str,
    procs: usize,
    run_dir: &std::path::Path,
    extra: &[String],
    phases: &mut [Phase],
) -> Result<()> {
    run_phases_with(bench, procs, run_dir, extra, &Launch::default(), phases)
}

/// `run_phases` with `env` added to the workers' environment (e.g.
/// `LD_PRELOAD`, to run them through libshoal_preload.so).
pub fn run_phases_with(
    bench: &str,
    procs: usize,
    run_dir: &std::path::Path,
    extra: &[String],
    launch: &Launch,
    phases: &mut [Phase],
) -> Result<()> {
    let mut workers = Workers::spawn_with(procs, launch, |k| {
        let mut args: Vec<OsString> = ["bench", bench, "--worker"]
            .iter()
            .map(OsString::from)
            .collect();
        args.push(k.to_string().into());
        args.push("--dir".into());
        args.push(run_dir.into());
        args.extend(extra.iter().map(OsString::from));
        args
    })?;
    for phase in phases.iter_mut() {
        let timed = workers.phase(&phase.name)?;
        phase.worker_spans.push(timed.worker_spans);
        phase.cpu_seconds.extend(timed.cpu_seconds);
        phase.watched_cpu_seconds.extend(timed.watched_cpu_seconds);
        phase.worker_cpu_seconds.extend(timed.worker_cpu_seconds);
    }
    workers.finish()
}

/// How workers start: what they get added to their environment, and the
/// user they run as (None: this process's); and the processes besides them
/// whose CPU time each phase notes (`watch`: the servers).
#[derive(Clone, Debug, Default)]
pub struct Launch {
    pub env: Vec<(String, OsString)>,
    pub uid: Option<u32>,
    pub watch: Vec<u32>,
}

/// What one phase took.
pub struct Timed {
    /// Each worker's start and end, in seconds after the first start.
    pub worker_spans: Vec<(f64, f64)>,
    /// The machine's busy CPU time from the release of the workers to the
    /// last one's report (every process's, `machine_cpu`), if known.
    pub cpu_seconds: Option<f64>,
    /// The CPU time the watched processes spent meanwhile, if any are.
    pub watched_cpu_seconds: Option<f64>,
    /// The CPU time the workers spent meanwhile (the clients' side, for
    /// native workers, whose client runs in them), if known.
    pub worker_cpu_seconds: Option<f64>,
}

impl Timed {
    pub fn seconds(&self) -> f64 {
        phase_seconds(&self.worker_spans)
    }
}

/// The parent's side: the running workers of one run.
pub struct Workers {
    children: Vec<Worker>,
    /// Processes whose CPU time each phase notes (`Launch::watch`).
    watch: Vec<u32>,
}

struct Worker {
    id: usize,
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Workers {
    /// Starts `count` copies of this executable, worker K with `args(K)`.
    pub fn spawn(count: usize, args: impl Fn(usize) -> Vec<OsString>) -> Result<Workers> {
        Workers::spawn_with(count, &Launch::default(), args)
    }

    /// `spawn`, the workers started as `launch` says.
    pub fn spawn_with(
        count: usize,
        launch: &Launch,
        args: impl Fn(usize) -> Vec<OsString>,
    ) -> Result<Workers> {
        let exe = std::env::current_exe()
            .map_err(|e| ShoalError::from(e).context("finding the shoal executable"))?;
        let mut workers = Workers {
            children: Vec::with_capacity(count),
            watch: launch.watch.clone(),
        };
        for id in 0..count {
            let mut command = Command::new(&exe);
            if let Some(uid) = launch.uid {
                use std::os::unix::process::CommandExt;
                // From root, std drops the supplementary groups too.
                command.uid(uid).gid(uid);
            }
            let mut child = command
                .args(args(id))
                .envs(launch.env.iter().map(|(k, v)| (k, v)))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|e| {
                    ShoalError::from(e).context(format!("starting worker {id} ({})", exe.display()))
                })?;
            let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
                // Cannot happen with piped stdio; still no panic.
                let _ = child.kill();
                let _ = child.wait();
                return Err(ShoalError::io(format!("worker {id}: no pipes")));
            };
            workers.children.push(Worker {
                id,
                child,
                stdin: Some(stdin),
                stdout: BufReader::new(stdout),
            });
        }
        Ok(workers)
    }

    /// Runs one phase: waits until every worker is at the barrier for
    /// `phase`, releases them all, and returns when each worker started and
    /// ended and the CPU the machine spent meanwhile.
    pub fn phase(&mut self, phase: &str) -> Result<Timed> {
        for w in &mut self.children {
            let line = w.read_line(phase)?;
            if line != format!("ready {phase}") {
                return Err(w.unexpected(phase, &line));
            }
        }
        // Release them back to back: the go lines cost microseconds, and each
        // worker notes its start when it reads its go.
        let cpu_before = crate::machine_cpu::busy();
        let watched_before = self.watched_cpu();
        let workers_before = self.workers_cpu();
        for w in &mut self.children {
            let sent = match w.stdin.as_mut() {
                Some(stdin) => stdin.write_all(b"go\n"),
                None => Err(std::io::ErrorKind::BrokenPipe.into()),
            };
            sent.map_err(|e| {
                ShoalError::from(e).context(format!("worker {}: releasing it for {phase}", w.id))
            })?;
        }
        let mut spans = Vec::with_capacity(self.children.len());
        for w in &mut self.children {
            let line = w.read_line(phase)?;
            match line.strip_prefix("done ").and_then(parse_span) {
                Some(span) => spans.push(span),
                None => return Err(w.unexpected(phase, &line)),
            }
        }
        let cpu_after = crate::machine_cpu::busy();
        let spent = |b: Option<std::time::Duration>, a: Option<std::time::Duration>| {
            b.zip(a).map(|(b, a)| a.saturating_sub(b).as_secs_f64())
        };
        Ok(Timed {
            worker_spans: relative_to_first_start(&spans),
            cpu_seconds: spent(cpu_before, cpu_after),
            watched_cpu_seconds: spent(watched_before, self.watched_cpu()),
            worker_cpu_seconds: spent(workers_before, self.workers_cpu()),
        })
    }

    /// The workers' CPU time so far.
    fn workers_cpu(&self) -> Option<std::time::Duration> {
        let pids: Vec<u32> = self.children.iter().map(|w| w.child.id()).collect();
        crate::machine_cpu::of_processes(&pids)
    }

    /// The watched processes' CPU time so far; None if none are watched.
    fn watched_cpu(&self) -> Option<std::time::Duration> {
        if self.watch.is_empty() {
            return None;
        }
        crate::machine_cpu::of_processes(&self.watch)
    }

    /// Lets the workers exit (they have run their last phase) and checks that
    /// each one did so cleanly.
    pub fn finish(mut self) -> Result<()> {
        for mut w in std::mem::take(&mut self.children) {
            w.stdin = None;
            let status = w.child.wait()?;
            if !status.success() {
                return Err(ShoalError::io(format!(
                    "worker {} ended with {status} after its last phase",
                    w.id
                )));
            }
        }
        Ok(())
    }
}

impl Drop for Workers {
    /// On an error the remaining workers are ours to stop: kill and reap them
    /// so none is left running against the directory.
    fn drop(&mut self) {
        for w in &mut self.children {
            let _ = w.child.kill();
            let _ = w.child.wait();
        }
    }
}

impl Worker {
    /// The next protocol line, turning a reported error or an early exit into
    /// an error naming this worker.
    fn read_line(&mut self, phase: &str) -> Result<String> {
        let mut line = String::new();
        let n = self.stdout.read_line(&mut line).map_err(|e| {
            ShoalError::from(e).context(format!("worker {}: reading its report", self.id))
        })?;
        if n == 0 {
            let status = match self.child.wait() {
                Ok(s) => s.to_string(),
                Err(e) => e.to_string(),
            };
            return Err(ShoalError::io(format!(
                "worker {} exited during phase {phase} ({status})",
                self.id
            )));
        }
        let line = line.trim_end().to_string();
        if let Some(rest) = line.strip_prefix("error ") {
            return Err(parse_error(rest).context(format!("worker {}, phase {phase}", self.id)));
        }
        Ok(line)
    }

    fn unexpected(&self, phase: &str, line: &str) -> ShoalError {
        ShoalError::protocol(format!(
            "worker {}: expected its report for phase {phase}, got {line:?} \
             (was the shoal binary replaced during the run?)",
            self.id
        ))
    }
}

/// Decodes `<start> <end>` as sent by [`Barrier::phase`].
fn parse_span(rest: &str) -> Option<(u64, u64)> {
    let (start, end) = rest.split_once(' ')?;
    let (start, end) = (start.parse::<u64>().ok()?, end.parse::<u64>().ok()?);
    (start <= end).then_some((start, end))
}

/// Monotonic (start, end) pairs in nanoseconds as seconds after the
/// earliest start.
fn relative_to_first_start(spans: &[(u64, u64)]) -> Vec<(f64, f64)> {
    let first = spans.iter().map(|s| s.0).min().unwrap_or(0);
    let secs = |t: u64| (t - first) as f64 / 1e9;
    spans.iter().map(|&(a, b)| (secs(a), secs(b))).collect()
}

/// The machine's monotonic clock in nanoseconds: one clock for every
/// process, so workers' starts and ends compare.
fn monotonic_ns() -> u64 {
    // SAFETY: a plain C struct; all zeroes is valid, and the kernel fills it.
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a valid clock id and a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Decodes `<errno> <message>` as sent by [`report_error`].
fn parse_error(rest: &str) -> ShoalError {
    let (code, message) = rest.split_once(' ').unwrap_or((rest, ""));
    match code.parse::<i32>() {
        Ok(errno) => ShoalError::new(Errno(errno), message),
        Err(_) => ShoalError::io(rest),
    }
}

/// The worker's side: waits at the barrier and reports times.
pub struct Barrier {
    input: StdinLock<'static>,
}

impl Barrier {
    pub fn new() -> Barrier {
        // If the parent dies (a timeout killed it), stop rather than run on
        // against the directory unobserved.
        // SAFETY: prctl with PR_SET_PDEATHSIG only sets a flag on this process.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        }
        Barrier {
            input: std::io::stdin().lock(),
        }
    }

    /// Waits at the barrier for `phase`, runs `work`, and reports its
    /// duration. An error is returned (not reported): the worker's entry point
    /// reports every error once, with [`report_error`].
    pub fn phase<T>(&mut self, phase: &str, work: impl FnOnce() -> Result<T>) -> Result<T> {
        send(&format!("ready {phase}"))?;
        let mut line = String::new();
        self.input.read_line(&mut line)?;
        if line.trim_end() != "go" {
            return Err(ShoalError::protocol(format!(
                "expected go for phase {phase}, got {:?} (is this run by shoal bench?)",
                line.trim_end()
            )));
        }
        let start = monotonic_ns();
        let out = work()?;
        send(&format!("done {start} {}", monotonic_ns()))?;
        Ok(out)
    }
}

fn send(line: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

/// Reports a worker's error to the parent, on one line.
pub fn report_error(e: &ShoalError) {
    let message = e.message.replace('\n', " ");
    let _ = send(&format!("error {} {message}", e.errno.0));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_count_from_the_first_start() {
        assert_eq!(parse_span("100 250"), Some((100, 250)));
        assert_eq!(parse_span("250 100"), None, "ends before it starts");
        assert_eq!(parse_span("1.5"), None, "the old form");
        let spans = relative_to_first_start(&[
            (2_000_000_000, 3_000_000_000),
            (1_500_000_000, 1_750_000_000),
        ]);
        assert_eq!(spans, [(0.5, 1.5), (0.0, 0.25)]);
        assert_eq!(phase_seconds(&spans), 1.5);
    }

    #[test]
    fn error_lines_keep_errno_and_message() {
        let e = parse_error("2 /x/p0/f1: No such file or directory");
        assert_eq!(e.errno, Errno::ENOENT);
        assert_eq!(e.message, "/x/p0/f1: No such file or directory");
        let e = parse_error("garbage");
        assert_eq!(e.errno, Errno::EIO);
    }
}
