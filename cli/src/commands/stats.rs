//! `shoal stats`: per-server, per-operation counters (requests, errors, bytes,
//! KV syncs, latency percentiles), as a table or JSON.

use shoal_proto::error::Result;
use shoal_proto::msg::StatsReply;

use crate::target::{connect, locate, runtime, ConfigArg};

pub fn to_json(replies: &[StatsReply]) -> serde_json::Value {
    serde_json::json!({
        "servers": replies.iter().map(|r| serde_json::json!({
            "server": r.server_id,
            "kv_syncs": r.kv_syncs,
            "commit_stalls": r.commit_stalls,
            "cached_replies": r.cached_replies,
            "replies_held": r.replies_held,
            "applied_seq": r.applied_seq,
            "durable_seq": r.durable_seq,
            "replay_flushes": r.replay_flushes,
            "replayed": r.replayed,
            "replays_failed": r.replays_failed,
            "user_connections": r.user_connections,
            "identity_refusals": r.identity_refusals,
            "lock_holders": r.lock_holders,
            "lock_waits": r.lock_waits,
            "lock_waits_withdrawn": r.lock_waits_withdrawn,
            "leases_held": r.leases_held,
            "lease_recalls": r.lease_recalls,
            "lease_recall_timeouts": r.lease_recall_timeouts,
            "delegations_held": r.delegations_held,
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
            println!(
                "{:>6} {:<16} {:>10}   (requests sent again, answered from the reply cache; {} held)",
                r.server_id, "cached_replies", r.cached_replies, r.replies_held
            );
            println!(
                "{:>6} {:<16} {:>10}   (sync = replay: group flushes; changes {} applied, {} durable)",
                r.server_id, "replay_flushes", r.replay_flushes, r.applied_seq, r.durable_seq
            );
            println!(
                "{:>6} {:<16} {:>10}   (kept changes replayed after a restart; {} failed)",
                r.server_id, "replayed", r.replayed, r.replays_failed
            );
            println!(
                "{:>6} {:<16} {:>10}   (connections opened with a user credential; {} requests refused for acting as another)",
                r.server_id, "user_conns", r.user_connections, r.identity_refusals
            );
            println!(
                "{:>6} {:<16} {:>10}   (owners holding locks of a file; {} waits now, {} withdrawn when interrupted)",
                r.server_id, "lock_holders", r.lock_holders, r.lock_waits, r.lock_waits_withdrawn
            );
            println!(
                "{:>6} {:<16} {:>10}   (leases clients hold; {} recalls sent, {} unanswered in time; {} directory delegations held)",
                r.server_id, "leases_held", r.leases_held, r.lease_recalls, r.lease_recall_timeouts, r.delegations_held
            );
        }
        Ok(())
    })
}

/// The xattr of a mount's root whose value is the mount's table
/// (`shoal_fuse`'s stats module); setting it to `reset` zeroes the counts.
const MOUNT_XATTR: &std::ffi::CStr = c"user.shoal.stats";

/// `shoal stats --mount DIR`: the table the mount at `dir` keeps of its
/// requests, read from the mount itself.
pub fn mount(dir: &std::path::Path, reset: bool, json: bool) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let fail = |what: &str| {
        let e = std::io::Error::last_os_error();
        let hint = match e.raw_os_error() {
            Some(libc::ENODATA) | Some(libc::ENOTSUP) => {
                " (is it a Shoal mount, and its root? a mount older than `shoal stats --mount` has no counters)"
            }
            _ => "",
        };
        shoal_proto::ShoalError::from(e).context(format!("{what} {}{hint}", dir.display()))
    };
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| shoal_proto::ShoalError::invalid("a mount path with a NUL byte"))?;
    if reset {
        let value = b"reset";
        // SAFETY: valid NUL-terminated strings and a buffer of the given length.
        let rc = unsafe {
            libc::setxattr(
                path.as_ptr(),
                MOUNT_XATTR.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        };
        return if rc == 0 {
            Ok(())
        } else {
            Err(fail("resetting the counts of"))
        };
    }
    // Larger than any table (31 rows of 46 bytes); xattr values stop at 64 KiB.
    let mut buf = vec![0u8; 64 << 10];
    // SAFETY: as above; the kernel writes at most buf.len() bytes.
    let n = unsafe {
        libc::getxattr(
            path.as_ptr(),
            MOUNT_XATTR.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(fail("reading the counts of"));
    }
    let text = String::from_utf8_lossy(&buf[..n as usize]).into_owned();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&mount_json(&text)).unwrap_or_default()
        );
    } else {
        print!("{text}");
    }
    Ok(())
}

/// The mount's table as JSON: `{"ops": {op: {count, mean_us, p99_us}}}`.
fn mount_json(text: &str) -> serde_json::Value {
    let mut ops = serde_json::Map::new();
    for line in text.lines().filter(|l| !l.starts_with('#')).skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let [op, count, mean, p99] = f[..] {
            ops.insert(
                op.to_string(),
                serde_json::json!({
                    "count": count.parse::<u64>().unwrap_or(0),
                    "mean_us": mean.parse::<f64>().unwrap_or(0.0),
                    "p99_us": p99.parse::<f64>().unwrap_or(0.0),
                }),
            );
        }
    }
    serde_json::json!({ "ops": ops })
}

#[cfg(test)]
mod tests {
    #[test]
    fn mount_table_as_json() {
        let t = "# shoal mount\nop count mean_us p99_us\nlookup 3 10.5 12.0\ntotal 3 10.5 12.0\n";
        let j = super::mount_json(t);
        assert_eq!(j["ops"]["lookup"]["count"], 3);
        assert_eq!(j["ops"]["total"]["p99_us"], 12.0);
    }
}
