//! `shoal stats`: per-server, per-operation counters (requests, errors, bytes,
//! KV syncs, latency percentiles), as a table or JSON.

use shoal_proto::error::Result;
use shoal_proto::msg::StatsReply;

use crate::target::{connect, locate, runtime};
use crate::ConfigArg;

pub fn to_json(replies: &[StatsReply]) -> serde_json::Value {
    serde_json::json!({
        "servers": replies.iter().map(|r| serde_json::json!({
            "server": r.server_id,
            "kv_syncs": r.kv_syncs,
            "commit_stalls": r.commit_stalls,
            "uptime_ms": r.uptime_ms,
            "ops": r.ops.iter().map(|o| (o.op.clone(), serde_json::json!({
                "requests": o.requests,
                "errors": o.errors,
                "bytes_in": o.bytes_in,
                "bytes_out": o.bytes_out,
                "syncs": o.syncs,
                "latency_us": {
                    "p50": o.latency_p50_us,
                    "p90": o.latency_p90_us,
                    "p99": o.latency_p99_us,
                    "max": o.latency_max_us,
                },
            }))).collect::<serde_json::Map<_, _>>(),
        })).collect::<Vec<_>>(),
    })
}

pub fn run(cfg: &ConfigArg, path: Option<&str>, server: Option<u32>, json: bool) -> Result<()> {
    let (config, _) = locate(cfg, path.unwrap_or("/"))?;
    runtime()?.block_on(async {
        let client = connect(&config).await?;
        let servers: Vec<u32> = match server {
            Some(s) => vec![s],
            None => (0..client.num_servers()).collect(),
        };
        let replies =
            futures::future::try_join_all(servers.iter().map(|s| client.server_stats(*s))).await?;
        if json {
            println!(
                "{}",
                serde_json::to_string_pretty(&to_json(&replies)).unwrap_or_default()
            );
            return Ok(());
        }
        println!(
            "{:>6} {:<16} {:>10} {:>7} {:>12} {:>12} {:>8} {:>8} {:>8}",
            "server",
            "op",
            "requests",
            "errors",
            "bytes_in",
            "bytes_out",
            "syncs",
            "p50_us",
            "p99_us"
        );
        for r in &replies {
            for o in &r.ops {
                println!(
                    "{:>6} {:<16} {:>10} {:>7} {:>12} {:>12} {:>8} {:>8} {:>8}",
                    r.server_id,
                    o.op,
                    o.requests,
                    o.errors,
                    o.bytes_in,
                    o.bytes_out,
                    o.syncs,
                    o.latency_p50_us,
                    o.latency_p99_us
                );
            }
            println!(
                "{:>6} {:<16} {:>10}   (uptime {} s)",
                r.server_id,
                "kv_syncs",
                r.kv_syncs,
                r.uptime_ms / 1000
            );
            println!(
                "{:>6} {:<16} {:>10}   (coalesced syncs forced by the stall limit)",
                r.server_id, "commit_stalls", r.commit_stalls
            );
        }
        Ok(())
    })
}
