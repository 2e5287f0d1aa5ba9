//! Ping, statfs and statistics (and the refusal of a recall).

use shoal_proto::error::{Result, ShoalError};
use shoal_proto::handle;
use shoal_proto::msg::{Empty, PingReply, RecallRequest, StatfsReply, StatsReply};

use crate::disk;
use crate::request::Request;
use crate::service::{Reply, Service};

pub fn ping(s: &Service) -> Result<Reply<PingReply>> {
    let (low, high) = handle::range_of(s.id);
    Ok(Reply::new(PingReply {
        server_id: s.id,
        handle_low: low,
        handle_high: high,
        root: handle::ROOT,
    }))
}

pub fn statfs(s: &Service) -> Result<Reply<StatfsReply>> {
    let space = disk::space(&s.data_dir)?;
    Ok(Reply::new(StatfsReply {
        total_bytes: space.total,
        free_bytes: space.free,
        avail_bytes: space.avail,
        objects: s.meta.object_count(),
    }))
}

/// A recall goes from a server to a client, never the other way.
pub fn recall(_s: &Service, _r: &Request, _q: RecallRequest) -> Result<Reply<Empty>> {
    Err(ShoalError::invalid(
        "recall is sent by servers to clients; a server takes none",
    ))
}

pub fn stats(s: &Service) -> Result<Reply<StatsReply>> {
    let leases = s.leases.counts();
    let locks = s.locks.counts();
    let count = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    Ok(Reply::new(StatsReply {
        server_id: s.id,
        ops: s.stats.snapshot(),
        kv_syncs: count(&s.stats.kv_syncs),
        commit_stalls: count(&s.stats.commit_stalls),
        cached_replies: count(&s.stats.cached_replies),
        replies_held: s.replies.len() as u64,
        applied_seq: s.meta.applied_seq(),
        durable_seq: s.meta.durable_seq(),
        replay_flushes: count(&s.stats.replay_flushes),
        replayed: count(&s.stats.replayed),
        replays_failed: count(&s.stats.replays_failed),
        leases_held: leases.held,
        lease_recalls: leases.recalls,
        lease_recall_timeouts: leases.recall_timeouts,
        user_connections: count(&s.stats.user_connections),
        identity_refusals: count(&s.stats.identity_refusals),
        lock_holders: locks.holders,
        lock_waits: locks.waits,
        lock_waits_withdrawn: locks.withdrawn,
        delegations_held: s.meta.delegations.held(),
        uptime_ms: s.started.elapsed().as_millis() as u64,
    }))
}
