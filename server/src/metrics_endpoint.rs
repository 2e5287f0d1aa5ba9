//! `/metrics` for Prometheus, on the server's `metrics_addr`: what `shoal
//! stats` shows of this server (`handlers::admin::stats` builds both, so
//! they never differ), read at each scrape. Every metric carries the label
//! `server` (the id); per-operation ones `op` too, named as `shoal stats`
//! names operations. docs/operations.md lists them.

use std::fmt;
use std::sync::Arc;

use shoal_metrics::exposition::{
    by_label, counter, counters, gauge, Collector, DescriptorEncoder, HistogramReading, Registry,
    Unit,
};
use shoal_proto::msg::{OpStats, StatsReply};

use crate::handlers::admin;
use crate::service::Service;

/// The latency buckets a scrape shows: up to 2^25 µs (33.6 s), the rest
/// counted under +Inf only; powers of two, as the server keeps them.
const SHOWN_BUCKETS: usize = 25;

/// The registry a server's endpoint serves.
pub fn registry(service: Arc<Service>) -> Registry {
    let server = [("server".into(), service.id.to_string().into())];
    let mut registry = Registry::with_prefix_and_labels("shoal", server.into_iter());
    registry.register_collector(Box::new(ServerMetrics(service)));
    registry
}

struct ServerMetrics(Arc<Service>);

impl fmt::Debug for ServerMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ServerMetrics({})", self.0.id)
    }
}

impl Collector for ServerMetrics {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let stats = admin::stats(&self.0).map_err(|_| fmt::Error)?.message;
        encode(&mut enc, &stats)
    }
}

/// `stats` as metric families.
fn encode(enc: &mut DescriptorEncoder, r: &StatsReply) -> fmt::Result {
    let per_op = |f: fn(&OpStats) -> u64| r.ops.iter().map(move |o| (o.op.as_str(), f(o)));
    let bytes = Some(&Unit::Bytes);
    by_label(
        enc,
        "requests",
        "Requests received, by operation.",
        None,
        "op",
        counters(per_op(|o| o.requests)),
    )?;
    by_label(
        enc,
        "request_errors",
        "Requests answered with an error, by operation.",
        None,
        "op",
        counters(per_op(|o| o.errors)),
    )?;
    by_label(
        enc,
        "request_received",
        "Bytes of requests received, frames and payloads, by operation.",
        bytes,
        "op",
        counters(per_op(|o| o.bytes_in)),
    )?;
    by_label(
        enc,
        "request_sent",
        "Bytes of replies sent, frames and payloads, by operation.",
        bytes,
        "op",
        counters(per_op(|o| o.bytes_out)),
    )?;
    by_label(
        enc,
        "request_syncs",
        "Syncs of the KV store requests waited for, by operation.",
        None,
        "op",
        counters(per_op(|o| o.syncs)),
    )?;
    by_label(
        enc,
        "request_duration",
        "Time from a request's arrival to its reply, by operation.",
        Some(&Unit::Seconds),
        "op",
        r.ops.iter().map(|o| (o.op.as_str(), reading(o))),
    )?;
    counter(enc, "kv_syncs", "Syncs of the KV store.", None, r.kv_syncs)?;
    counter(
        enc,
        "commit_stalls",
        "Coalesced syncs forced by the stall limit.",
        None,
        r.commit_stalls,
    )?;
    counter(
        enc,
        "cached_replies",
        "Requests sent again answered from the reply cache.",
        None,
        r.cached_replies,
    )?;
    gauge(
        enc,
        "replies_held",
        "Replies the reply cache holds.",
        None,
        r.replies_held,
    )?;
    gauge(
        enc,
        "commit_sequence_applied",
        "The commit sequence's last change applied.",
        None,
        r.applied_seq,
    )?;
    gauge(
        enc,
        "commit_sequence_durable",
        "The commit sequence's last change made durable.",
        None,
        r.durable_seq,
    )?;
    gauge(
        enc,
        "kept_changes",
        "Changes answered and not yet durable, which their clients keep to replay (sync = replay).",
        None,
        r.applied_seq.saturating_sub(r.durable_seq),
    )?;
    counter(
        enc,
        "replay_flushes",
        "Group flushes (sync = replay).",
        None,
        r.replay_flushes,
    )?;
    counter(
        enc,
        "kept_changes_replayed",
        "Kept changes clients replayed after a restart.",
        None,
        r.replayed,
    )?;
    counter(
        enc,
        "kept_changes_replay_failures",
        "Replayed kept changes that failed.",
        None,
        r.replays_failed,
    )?;
    gauge(
        enc,
        "leases_held",
        "Leases clients hold.",
        None,
        r.leases_held,
    )?;
    counter(
        enc,
        "lease_recalls",
        "Recalls of leases and delegations sent to clients.",
        None,
        r.lease_recalls,
    )?;
    counter(
        enc,
        "lease_recall_timeouts",
        "Recalls a client did not answer within lease_recall_ms.",
        None,
        r.lease_recall_timeouts,
    )?;
    gauge(
        enc,
        "delegations_held",
        "Directory delegations clients hold.",
        None,
        r.delegations_held,
    )?;
    counter(
        enc,
        "user_connections",
        "Connections opened with a user credential.",
        None,
        r.user_connections,
    )?;
    counter(
        enc,
        "identity_refusals",
        "Requests refused for acting as another user.",
        None,
        r.identity_refusals,
    )?;
    gauge(
        enc,
        "lock_holders",
        "Owners holding locks of a file.",
        None,
        r.lock_holders,
    )?;
    gauge(
        enc,
        "lock_waits",
        "Lock requests waiting.",
        None,
        r.lock_waits,
    )?;
    counter(
        enc,
        "lock_waits_withdrawn",
        "Lock waits withdrawn when their callers were interrupted.",
        None,
        r.lock_waits_withdrawn,
    )?;
    gauge(
        enc,
        "uptime",
        "Time since the server started.",
        Some(&Unit::Seconds),
        r.uptime_ms as f64 / 1e3,
    )
}

/// An operation's latencies as Prometheus reads them: bucket i of the
/// server's holds latencies under 2^(i+1) µs.
fn reading(o: &OpStats) -> HistogramReading {
    let shown = o.latency_buckets.len().min(SHOWN_BUCKETS);
    let mut buckets: Vec<(f64, u64)> = o.latency_buckets[..shown]
        .iter()
        .enumerate()
        .map(|(i, n)| ((1u64 << (i + 1)) as f64 / 1e6, *n))
        .collect();
    buckets.push((f64::INFINITY, o.latency_buckets[shown..].iter().sum()));
    HistogramReading {
        sum: o.latency_sum_us as f64 / 1e6,
        count: o.requests,
        buckets,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stats_reply_becomes_labelled_families() {
        let mut latency_buckets = vec![0; 40];
        latency_buckets[3] = 2; // 8 to 16 µs
        latency_buckets[39] = 1; // far past the last shown bound
        let r = StatsReply {
            server_id: 2,
            ops: vec![OpStats {
                op: "lookup".into(),
                requests: 3,
                errors: 1,
                latency_buckets,
                latency_sum_us: 1_500_000,
                ..OpStats::default()
            }],
            kv_syncs: 4,
            applied_seq: 10,
            durable_seq: 7,
            ..StatsReply::default()
        };
        #[derive(Debug)]
        struct Fixed(StatsReply);
        impl Collector for Fixed {
            fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
                encode(&mut enc, &self.0)
            }
        }
        let mut registry =
            Registry::with_prefix_and_labels("shoal", [("server".into(), "2".into())].into_iter());
        registry.register_collector(Box::new(Fixed(r)));
        let text = shoal_metrics::exposition::text(&registry).unwrap();
        for line in [
            "shoal_requests_total{server=\"2\",op=\"lookup\"} 3",
            "shoal_request_errors_total{server=\"2\",op=\"lookup\"} 1",
            "shoal_request_duration_seconds_bucket{server=\"2\",op=\"lookup\",le=\"8e-06\"} 0",
            "shoal_request_duration_seconds_bucket{server=\"2\",op=\"lookup\",le=\"1.6e-05\"} 2",
            "shoal_request_duration_seconds_bucket{server=\"2\",op=\"lookup\",le=\"+Inf\"} 3",
            "shoal_request_duration_seconds_sum{server=\"2\",op=\"lookup\"} 1.5",
            "shoal_request_duration_seconds_count{server=\"2\",op=\"lookup\"} 3",
            "shoal_kv_syncs_total{server=\"2\"} 4",
            "shoal_kept_changes{server=\"2\"} 3",
        ] {
            assert!(text.contains(&format!("{line}\n")), "{line} in:\n{text}");
        }
    }
}
