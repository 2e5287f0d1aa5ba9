//! Per-operation counters: requests, errors, bytes in and out, KV syncs, and a
//! latency histogram with power-of-two microsecond buckets. Lock-free, so
//! counting costs a few atomic adds per request.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use shoal_proto::msg::OpStats;
use shoal_proto::Op;

const BUCKETS: usize = 40;

struct OpCounters {
    requests: AtomicU64,
    errors: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    syncs: AtomicU64,
    latency: [AtomicU64; BUCKETS],
    /// The latencies' sum, for a Prometheus histogram's `_sum`.
    latency_us: AtomicU64,
}

impl Default for OpCounters {
    fn default() -> Self {
        OpCounters {
            requests: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            latency: std::array::from_fn(|_| AtomicU64::new(0)),
            latency_us: AtomicU64::new(0),
        }
    }
}

pub struct Stats {
    ops: Vec<OpCounters>,
    pub kv_syncs: AtomicU64,
    /// Flushes of the coalescing queue by the safety valve (`commit`).
    pub commit_stalls: AtomicU64,
    /// Requests sent again answered from the reply cache (`reply_cache`).
    pub cached_replies: AtomicU64,
    /// `sync = "replay"`: group flushes, replayed requests, failed replays.
    pub replay_flushes: AtomicU64,
    pub replayed: AtomicU64,
    pub replays_failed: AtomicU64,
    /// Connections opened with a user credential, and their requests
    /// refused for acting for someone else (`auth::user_peers`).
    pub user_connections: AtomicU64,
    pub identity_refusals: AtomicU64,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            ops: (0..Op::ALL.len()).map(|_| OpCounters::default()).collect(),
            kv_syncs: AtomicU64::new(0),
            commit_stalls: AtomicU64::new(0),
            cached_replies: AtomicU64::new(0),
            replay_flushes: AtomicU64::new(0),
            replayed: AtomicU64::new(0),
            replays_failed: AtomicU64::new(0),
            user_connections: AtomicU64::new(0),
            identity_refusals: AtomicU64::new(0),
        }
    }
}

/// What one request cost, recorded when its reply is sent.
pub struct Sample {
    pub ok: bool,
    pub bytes_in: usize,
    pub bytes_out: usize,
    pub syncs: u64,
    pub latency: Duration,
}

fn bucket_of(d: Duration) -> usize {
    let us = d.as_micros().max(1) as u64;
    (63 - us.leading_zeros() as usize).min(BUCKETS - 1)
}

impl Stats {
    pub fn record(&self, op: Op, s: &Sample) {
        let c = &self.ops[op.index()];
        c.requests.fetch_add(1, Ordering::Relaxed);
        if !s.ok {
            c.errors.fetch_add(1, Ordering::Relaxed);
        }
        c.bytes_in.fetch_add(s.bytes_in as u64, Ordering::Relaxed);
        c.bytes_out.fetch_add(s.bytes_out as u64, Ordering::Relaxed);
        c.syncs.fetch_add(s.syncs, Ordering::Relaxed);
        c.latency[bucket_of(s.latency)].fetch_add(1, Ordering::Relaxed);
        c.latency_us
            .fetch_add(s.latency.as_micros() as u64, Ordering::Relaxed);
    }

    /// Counters of every operation that was used at least once.
    pub fn snapshot(&self) -> Vec<OpStats> {
        Op::ALL
            .iter()
            .zip(&self.ops)
            .filter(|(_, c)| c.requests.load(Ordering::Relaxed) > 0)
            .map(|(op, c)| {
                let hist: Vec<u64> = c
                    .latency
                    .iter()
                    .map(|b| b.load(Ordering::Relaxed))
                    .collect();
                OpStats {
                    op: op.name().to_string(),
                    requests: c.requests.load(Ordering::Relaxed),
                    errors: c.errors.load(Ordering::Relaxed),
                    bytes_in: c.bytes_in.load(Ordering::Relaxed),
                    bytes_out: c.bytes_out.load(Ordering::Relaxed),
                    syncs: c.syncs.load(Ordering::Relaxed),
                    latency_p50_us: percentile(&hist, 0.50),
                    latency_p90_us: percentile(&hist, 0.90),
                    latency_p99_us: percentile(&hist, 0.99),
                    latency_max_us: percentile(&hist, 1.0),
                    latency_buckets: hist,
                    latency_sum_us: c.latency_us.load(Ordering::Relaxed),
                }
            })
            .collect()
    }
}

/// Upper bound (µs) of the bucket holding quantile `q`.
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
            return 1u64 << (i + 1);
        }
    }
    1u64 << BUCKETS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_reports_percentiles() {
        let s = Stats::default();
        for us in [10u64, 10, 10, 1000] {
            s.record(
                Op::Lookup,
                &Sample {
                    ok: us < 1000,
                    bytes_in: 5,
                    bytes_out: 7,
                    syncs: 1,
                    latency: Duration::from_micros(us),
                },
            );
        }
        let snap = s.snapshot();
        assert_eq!(snap.len(), 1);
        let l = &snap[0];
        assert_eq!(
            (l.op.as_str(), l.requests, l.errors, l.syncs),
            ("lookup", 4, 1, 4)
        );
        assert_eq!((l.bytes_in, l.bytes_out), (20, 28));
        assert_eq!(l.latency_p50_us, 16);
        assert_eq!(l.latency_max_us, 1024);
        assert_eq!((l.latency_buckets[3], l.latency_buckets[9]), (3, 1));
        assert_eq!(l.latency_sum_us, 1030);
    }
}
