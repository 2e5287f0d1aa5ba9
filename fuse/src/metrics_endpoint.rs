//! `/metrics` for Prometheus, when the mount is asked to serve it (`shoal
//! mount --metrics ADDR`): what `shoal stats --mount` shows, read at each
//! scrape. Every metric is named `shoal_mount_*` and carries the label
//! `mount` (the mount point), so several mounts of one node stay apart;
//! docs/operations.md lists them.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use shoal_metrics::exposition::{
    by_label, counter, counters, gauges, Collector, DescriptorEncoder, Registry, Unit,
};

use crate::shared::Shared;
use crate::stats::MountStats;

/// The registry a mount's endpoint serves.
pub fn registry(stats: Arc<MountStats>, shared: Arc<Shared>, mountpoint: &Path) -> Registry {
    let mount = [("mount".into(), mountpoint.display().to_string().into())];
    let mut registry = Registry::with_prefix_and_labels("shoal_mount", mount.into_iter());
    registry.register_collector(Box::new(MountMetrics { stats, shared }));
    registry
}

struct MountMetrics {
    stats: Arc<MountStats>,
    shared: Arc<Shared>,
}

impl fmt::Debug for MountMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MountMetrics")
    }
}

impl Collector for MountMetrics {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let enc = &mut enc;
        let ops: Vec<_> = self
            .stats
            .snapshots()
            .filter(|(_, s)| s.calls > 0)
            .collect();
        by_label(
            enc,
            "requests",
            "Requests the kernel sent the mount, by type.",
            None,
            "op",
            counters(ops.iter().map(|(op, s)| (*op, s.calls))),
        )?;
        by_label(
            enc,
            "request_duration",
            "Time from a request's arrival to its reply, by type.",
            Some(&Unit::Seconds),
            "op",
            ops.iter().map(|(op, s)| (*op, s.reading())),
        )?;
        let p = self.shared.client.write_paths();
        let paths = |direct, gathered| [("direct", direct), ("gathered", gathered)];
        by_label(
            enc,
            "writes",
            "Writes, by the path they took (direct, or gathered and sent later).",
            None,
            "path",
            counters(paths(p.direct_writes, p.gathered_writes)),
        )?;
        by_label(
            enc,
            "written",
            "Bytes written, by the path they took.",
            Some(&Unit::Bytes),
            "path",
            counters(paths(p.direct_bytes, p.gathered_bytes)),
        )?;
        counter(
            enc,
            "gathered_sends",
            "Writes the gathering path sent to the servers.",
            None,
            p.gathered_sends,
        )?;
        let [landed, copied] = self.stats.ring_reads();
        let filled = |i: usize| [("landed", landed[i]), ("copied", copied[i])];
        by_label(
            enc,
            "ring_read_replies",
            "Read replies sent through io_uring entries, by how their data got there.",
            None,
            "filled",
            counters(filled(0)),
        )?;
        by_label(
            enc,
            "ring_read",
            "Bytes of read replies sent through io_uring entries, by how they got there.",
            Some(&Unit::Bytes),
            "filled",
            counters(filled(1)),
        )?;
        let tables = self.shared.table_sizes();
        by_label(
            enc,
            "table_entries",
            "Entries each bounded table of the mount holds (leases: the client's).",
            None,
            "table",
            gauges(tables.iter().map(|t| (t.name, t.len as u64))),
        )?;
        by_label(
            enc,
            "table_bound",
            "Entries each bounded table of the mount keeps at most.",
            None,
            "table",
            gauges(tables.iter().map(|t| (t.name, t.max as u64))),
        )
    }
}
