//! Client-side instrumentation in the form of Table 2 of [Vilayannur 2004]:
//! per operation type, how many calls this process made on Shoal and the
//! mean and p99 time the caller waited for each. Recording costs two clock
//! reads and three relaxed atomic adds, and only when `SHOAL_STATS` is set.
//!
//! The wait times go into a log-linear histogram (16 buckets per power of
//! two of nanoseconds, so a percentile is within 1/16 of the true value).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// The operation types of the table (the POSIX calls, grouped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Open,
    Create,
    Close,
    Read,
    Write,
    Seek,
    Stat,
    /// A stat answered from the attributes a readdirplus brought.
    StatCached,
    Access,
    Opendir,
    Readdir,
    Mkdir,
    Rmdir,
    Unlink,
    Rename,
    Link,
    Symlink,
    Readlink,
    Setattr,
    Truncate,
    Fsync,
    Xattr,
    Statfs,
    Chdir,
    Dup,
    Mmap,
}

impl Op {
    pub const ALL: [Op; 26] = [
        Op::Open,
        Op::Create,
        Op::Close,
        Op::Read,
        Op::Write,
        Op::Seek,
        Op::Stat,
        Op::StatCached,
        Op::Access,
        Op::Opendir,
        Op::Readdir,
        Op::Mkdir,
        Op::Rmdir,
        Op::Unlink,
        Op::Rename,
        Op::Link,
        Op::Symlink,
        Op::Readlink,
        Op::Setattr,
        Op::Truncate,
        Op::Fsync,
        Op::Xattr,
        Op::Statfs,
        Op::Chdir,
        Op::Dup,
        Op::Mmap,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Op::Open => "open",
            Op::Create => "create",
            Op::Close => "close",
            Op::Read => "read",
            Op::Write => "write",
            Op::Seek => "lseek",
            Op::Stat => "stat",
            Op::StatCached => "stat-cached",
            Op::Access => "access",
            Op::Opendir => "opendir",
            Op::Readdir => "readdir",
            Op::Mkdir => "mkdir",
            Op::Rmdir => "rmdir",
            Op::Unlink => "unlink",
            Op::Rename => "rename",
            Op::Link => "link",
            Op::Symlink => "symlink",
            Op::Readlink => "readlink",
            Op::Setattr => "setattr",
            Op::Truncate => "truncate",
            Op::Fsync => "fsync",
            Op::Xattr => "xattr",
            Op::Statfs => "statfs",
            Op::Chdir => "chdir",
            Op::Dup => "dup",
            Op::Mmap => "mmap",
        }
    }
}

const SUB: u64 = 16;
const BUCKETS: usize = 1024;

/// The bucket of a wait of `ns` nanoseconds.
pub fn bucket_of(ns: u64) -> usize {
    if ns < SUB {
        return ns as usize;
    }
    let e = 63 - u64::from(ns.leading_zeros());
    let idx = (e - 3) * SUB + ((ns >> (e - 4)) - SUB);
    (idx as usize).min(BUCKETS - 1)
}

/// The smallest wait that falls into bucket `idx`.
pub fn bucket_floor(idx: usize) -> u64 {
    let idx = idx as u64;
    if idx < SUB {
        return idx;
    }
    let e = idx / SUB + 3;
    (idx % SUB + SUB) << (e - 4)
}

struct Counters {
    calls: AtomicU64,
    total_ns: AtomicU64,
    hist: [AtomicU64; BUCKETS],
}

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicU64 = AtomicU64::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const NONE: Counters = Counters {
    calls: ZERO,
    total_ns: ZERO,
    hist: [ZERO; BUCKETS],
};

static COUNTERS: [Counters; Op::ALL.len()] = [NONE; Op::ALL.len()];
static ON: AtomicBool = AtomicBool::new(false);

pub fn enable() {
    ON.store(true, Ordering::Relaxed);
}

pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Forgets every count (a forked child starts its own table).
pub extern "C" fn reset() {
    for c in &COUNTERS {
        c.calls.store(0, Ordering::Relaxed);
        c.total_ns.store(0, Ordering::Relaxed);
        for b in &c.hist {
            b.store(0, Ordering::Relaxed);
        }
    }
}

/// Calls counted so far.
pub fn calls() -> u64 {
    COUNTERS
        .iter()
        .map(|c| c.calls.load(Ordering::Relaxed))
        .sum()
}

/// When a call started, if calls are being counted.
pub fn start() -> Option<Instant> {
    enabled().then(Instant::now)
}

/// Counts a call of type `op` that started at `t0`.
pub fn record(op: Op, t0: Option<Instant>) {
    if let Some(t0) = t0 {
        let ns = t0.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
        let c = &COUNTERS[op as usize];
        c.calls.fetch_add(1, Ordering::Relaxed);
        c.total_ns.fetch_add(ns, Ordering::Relaxed);
        c.hist[bucket_of(ns)].fetch_add(1, Ordering::Relaxed);
    }
}

/// The wait (ns) below which a fraction `q` of the calls in `hist` fell:
/// the floor of the bucket holding that call.
fn percentile(hist: &[u64], q: f64) -> u64 {
    let total: u64 = hist.iter().sum();
    if total == 0 {
        return 0;
    }
    let rank = ((total as f64) * q).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, n) in hist.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return bucket_floor(i);
        }
    }
    bucket_floor(hist.len() - 1)
}

/// The table: a header naming the process, then one row per operation type
/// used (count, mean and p99 wait in microseconds) and a total row.
pub fn table(who: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# libshoal_preload: {who}: time a caller waited per call (us)"
    );
    let _ = writeln!(
        out,
        "{:<12} {:>10} {:>10} {:>10}",
        "op", "count", "mean_us", "p99_us"
    );
    let mut all = vec![0u64; BUCKETS];
    let (mut calls, mut total_ns) = (0u64, 0u64);
    for op in Op::ALL {
        let c = &COUNTERS[op as usize];
        let n = c.calls.load(Ordering::Relaxed);
        if n == 0 {
            continue;
        }
        let ns = c.total_ns.load(Ordering::Relaxed);
        let hist: Vec<u64> = c.hist.iter().map(|b| b.load(Ordering::Relaxed)).collect();
        for (a, h) in all.iter_mut().zip(&hist) {
            *a += h;
        }
        calls += n;
        total_ns += ns;
        let _ = writeln!(
            out,
            "{:<12} {:>10} {:>10.1} {:>10.1}",
            op.name(),
            n,
            ns as f64 / n as f64 / 1000.0,
            percentile(&hist, 0.99) as f64 / 1000.0
        );
    }
    let mean = if calls == 0 {
        0.0
    } else {
        total_ns as f64 / calls as f64 / 1000.0
    };
    let _ = writeln!(
        out,
        "{:<12} {:>10} {:>10.1} {:>10.1}",
        "total",
        calls,
        mean,
        percentile(&all, 0.99) as f64 / 1000.0
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ordered_and_within_a_sixteenth() {
        let mut last = 0;
        for ns in (0..100_000u64).chain([1 << 20, 123_456_789, u64::MAX / 3]) {
            let b = bucket_of(ns);
            assert!(b >= last || ns > 100_000);
            last = b;
            let floor = bucket_floor(b);
            assert!(floor <= ns, "{ns}: floor {floor}");
            assert!(ns - floor <= ns / 16, "{ns}: floor {floor}");
        }
    }

    #[test]
    fn percentiles_and_the_table() {
        let mut hist = vec![0u64; BUCKETS];
        hist[bucket_of(1_000)] = 99;
        hist[bucket_of(1_000_000)] = 1;
        assert_eq!(percentile(&hist, 0.5), bucket_floor(bucket_of(1_000)));
        assert_eq!(percentile(&hist, 0.99), bucket_floor(bucket_of(1_000)));
        assert_eq!(percentile(&hist, 1.0), bucket_floor(bucket_of(1_000_000)));
        enable();
        let t0 = start();
        record(Op::Mkdir, t0);
        let t = table("pid 1 (test)");
        assert!(t.contains("mkdir"), "{t}");
        assert!(t.lines().last().unwrap().starts_with("total"), "{t}");
    }
}
