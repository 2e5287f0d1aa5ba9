//! Client-side instrumentation in the form of Table 2 of [Vilayannur 2004]:
//! per operation type, how many calls were made and the mean and p99 time a
//! caller waited for each. Shared by the FUSE mount (`shoal stats --mount`)
//! and `libshoal_preload.so` (`SHOAL_STATS`).
//!
//! A [`Histogram`] is a fixed array of relaxed atomic counters: recording is
//! three atomic adds, takes no lock and allocates nothing (the preload
//! library records from any thread, possibly one a signal interrupted), and
//! it can live in a `static`. Waits go into log-linear buckets, 16 per power
//! of two of nanoseconds, so a percentile is within 1/16 of the true value;
//! 1,024 buckets cover every `u64` of nanoseconds.
//!
//! No crate is used for this: `hdrhistogram` needs `&mut` to record (a lock
//! per call on a path shared by all threads) and allocates, which the preload
//! library must not do inside an interposed call.
//!
//! With the `exporter` feature, the `/metrics` endpoint servers and mounts
//! serve to Prometheus (`endpoint`) and what their collectors share
//! (`exposition`).

#[cfg(feature = "exporter")]
pub mod endpoint;
#[cfg(feature = "exporter")]
pub mod exposition;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// Buckets per power of two.
const SUB: u64 = 16;
/// Buckets in all: enough for `u64::MAX` nanoseconds.
pub const BUCKETS: usize = 1024;

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

/// The waits of one operation type: count, sum and distribution.
pub struct Histogram {
    calls: AtomicU64,
    total_ns: AtomicU64,
    hist: [AtomicU64; BUCKETS],
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new()
    }
}

impl Histogram {
    pub const fn new() -> Histogram {
        Histogram {
            calls: AtomicU64::new(0),
            total_ns: AtomicU64::new(0),
            hist: [const { AtomicU64::new(0) }; BUCKETS],
        }
    }

    /// Counts one call whose caller waited `ns` nanoseconds.
    pub fn record(&self, ns: u64) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.total_ns.fetch_add(ns, Ordering::Relaxed);
        self.hist[bucket_of(ns)].fetch_add(1, Ordering::Relaxed);
    }

    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Forgets every call.
    pub fn reset(&self) {
        self.calls.store(0, Ordering::Relaxed);
        self.total_ns.store(0, Ordering::Relaxed);
        for b in &self.hist {
            b.store(0, Ordering::Relaxed);
        }
    }

    /// A copy of the counters (taken while others may still record: each
    /// counter is exact, the three may differ by the calls in between).
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            calls: self.calls(),
            total_ns: self.total_ns.load(Ordering::Relaxed),
            hist: self
                .hist
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
        }
    }
}

/// The counters of a [`Histogram`] at one moment, or of several merged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub calls: u64,
    pub total_ns: u64,
    pub hist: Vec<u64>,
}

impl Default for Snapshot {
    fn default() -> Self {
        Snapshot {
            calls: 0,
            total_ns: 0,
            hist: vec![0; BUCKETS],
        }
    }
}

impl Snapshot {
    /// Adds `other`'s calls to these.
    pub fn merge(&mut self, other: &Snapshot) {
        self.calls += other.calls;
        self.total_ns += other.total_ns;
        for (a, b) in self.hist.iter_mut().zip(&other.hist) {
            *a += b;
        }
    }

    pub fn mean_ns(&self) -> f64 {
        if self.calls == 0 {
            0.0
        } else {
            self.total_ns as f64 / self.calls as f64
        }
    }

    /// The wait (ns) below which a fraction `q` of the calls fell: the floor
    /// of the bucket holding that call.
    pub fn percentile(&self, q: f64) -> u64 {
        let total: u64 = self.hist.iter().sum();
        if total == 0 {
            return 0;
        }
        let rank = ((total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.hist.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return bucket_floor(i);
            }
        }
        bucket_floor(self.hist.len() - 1)
    }
}

/// The table: a `# header` line, a column header, one row per operation
/// type with calls (count, mean and p99 wait in microseconds; types with no
/// call are left out) and a `total` row. Parsable: whitespace-separated
/// columns, `#` starts a comment.
pub fn table(header: &str, rows: &[(&str, Snapshot)]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# {header}");
    let _ = writeln!(
        out,
        "{:<12} {:>10} {:>10} {:>10}",
        "op", "count", "mean_us", "p99_us"
    );
    let mut all = Snapshot::default();
    let mut row = |name: &str, s: &Snapshot| {
        let _ = writeln!(
            out,
            "{:<12} {:>10} {:>10.1} {:>10.1}",
            name,
            s.calls,
            s.mean_ns() / 1000.0,
            s.percentile(0.99) as f64 / 1000.0
        );
    };
    for (name, s) in rows {
        if s.calls == 0 {
            continue;
        }
        row(name, s);
        all.merge(s);
    }
    row("total", &all);
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
        assert!(bucket_of(u64::MAX) < BUCKETS);
    }

    #[test]
    fn percentiles_means_and_the_table() {
        let h = Histogram::new();
        for _ in 0..99 {
            h.record(1_000);
        }
        h.record(1_000_000);
        let s = h.snapshot();
        assert_eq!(s.calls, 100);
        assert_eq!(s.percentile(0.5), bucket_floor(bucket_of(1_000)));
        assert_eq!(s.percentile(0.99), bucket_floor(bucket_of(1_000)));
        assert_eq!(s.percentile(1.0), bucket_floor(bucket_of(1_000_000)));
        assert!((s.mean_ns() - 10_990.0).abs() < 1e-6);
        let t = table("test", &[("mkdir", s), ("rmdir", Snapshot::default())]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "# test");
        assert!(
            lines[2].starts_with("mkdir") && lines[2].contains(" 100 "),
            "{t}"
        );
        assert!(!t.contains("rmdir"), "{t}");
        assert!(lines[3].starts_with("total"), "{t}");
        h.reset();
        assert_eq!(h.snapshot(), Snapshot::default());
    }
}
