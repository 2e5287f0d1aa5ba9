//! Ping, statfs and statistics.

use shoal_proto::error::{Result, ShoalError};
use shoal_proto::handle;
use shoal_proto::msg::{PingReply, StatfsReply, StatsReply};

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
    let path = std::ffi::CString::new(s.data_dir.as_os_str().as_encoded_bytes())
        .map_err(|_| ShoalError::invalid("data directory path contains NUL"))?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a valid C string and `st` a valid out-pointer.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    let frsize = st.f_frsize as u64;
    Ok(Reply::new(StatfsReply {
        total_bytes: st.f_blocks as u64 * frsize,
        free_bytes: st.f_bfree as u64 * frsize,
        avail_bytes: st.f_bavail as u64 * frsize,
        objects: s.meta.object_count(),
    }))
}

pub fn stats(s: &Service) -> Result<Reply<StatsReply>> {
    Ok(Reply::new(StatsReply {
        server_id: s.id,
        ops: s.stats.snapshot(),
        kv_syncs: s.stats.kv_syncs.load(std::sync::atomic::Ordering::Relaxed),
        commit_stalls: s
            .stats
            .commit_stalls
            .load(std::sync::atomic::Ordering::Relaxed),
        uptime_ms: s.started.elapsed().as_millis() as u64,
    }))
}
