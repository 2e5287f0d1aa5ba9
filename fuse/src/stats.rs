//! The mount's instrumentation, in the form of Table 2 of [Vilayannur 2004]:
//! per request type, how many the kernel sent and the mean and p99 time from
//! the request's arrival to its reply (what the calling process waited,
//! less the kernel's own part). Recorded for every request, by
//! `ShoalFs::run` (which every handler asking a server goes through), the
//! listing tasks and the handlers that answer in place.
//!
//! Read with `shoal stats --mount DIR`, which asks the mount itself: the
//! value of the xattr [`XATTR`] on the mount's root is the table, computed
//! when asked. Through the mount, not a side channel: no socket or file to
//! find, to clean up after a crash or to protect (whoever may read the
//! mount's root may read its counters), nothing written unless asked, and
//! the answer is always this mount's, by construction. Setting the xattr to
//! `reset` starts the counts again (for a benchmark phase).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use shoal_metrics::{Histogram, Snapshot};

/// The xattr of the mount's root that answers with the table.
pub const XATTR: &str = "user.shoal.stats";

/// Every request type the mount answers, in the table's order.
pub const OPS: [&str; 33] = [
    "lookup",
    "getattr",
    "setattr",
    "access",
    "create",
    "mknod",
    "mkdir",
    "symlink",
    "link",
    "unlink",
    "rmdir",
    "rename",
    "open",
    "read",
    "write",
    "flush",
    "fsync",
    "release",
    "getlk",
    "setlk",
    "opendir",
    "readdir",
    "readdirplus",
    "releasedir",
    "fsyncdir",
    "readlink",
    "statfs",
    "getxattr",
    "setxattr",
    "listxattr",
    "removexattr",
    "ioctl",
    "fallocate",
];

pub struct MountStats {
    ops: Vec<Histogram>,
    since: std::sync::Mutex<Instant>,
    /// Read replies sent through io_uring entries (`reads_in_place`):
    /// [landed in place, copied in], each as [replies, bytes].
    ring_reads: [[AtomicU64; 2]; 2],
}

impl Default for MountStats {
    fn default() -> Self {
        MountStats::new()
    }
}

impl MountStats {
    pub fn new() -> MountStats {
        MountStats {
            ops: OPS.iter().map(|_| Histogram::new()).collect(),
            since: std::sync::Mutex::new(Instant::now()),
            ring_reads: Default::default(),
        }
    }

    /// Counts a read reply of `bytes` sent through an io_uring entry, whose
    /// data `landed` there from the socket or was copied in.
    pub fn ring_read(&self, landed: bool, bytes: usize) {
        let [replies, total] = &self.ring_reads[usize::from(!landed)];
        replies.fetch_add(1, Ordering::Relaxed);
        total.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// The read replies sent through io_uring entries, [landed in place,
    /// copied in], each as [replies, bytes].
    pub fn ring_reads(&self) -> [[u64; 2]; 2] {
        self.ring_reads
            .each_ref()
            .map(|c| c.each_ref().map(|n| n.load(Ordering::Relaxed)))
    }

    /// The read replies sent through io_uring entries, as a comment line
    /// under the table.
    pub fn ring_reads_line(&self) -> String {
        let [landed, copied] = self.ring_reads();
        format!(
            "# read replies in io_uring entries: landed in place {} replies {} bytes; \
             copied in {} replies {} bytes\n",
            landed[0], landed[1], copied[0], copied[1]
        )
    }

    /// Counts a request of type `op` that arrived at `t0` and has just been
    /// answered. A name not in [`OPS`] is a bug caught by the tests; it is
    /// not counted.
    pub fn record(&self, op: &str, t0: Instant) {
        if let Some(i) = OPS.iter().position(|o| *o == op) {
            let ns = t0.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
            self.ops[i].record(ns);
        }
    }

    pub fn reset(&self) {
        for h in &self.ops {
            h.reset();
        }
        for n in self.ring_reads.iter().flatten() {
            n.store(0, Ordering::Relaxed);
        }
        *self.since.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    /// Each request type's waits, in [`OPS`]' order.
    pub fn snapshots(&self) -> impl Iterator<Item = (&'static str, Snapshot)> + '_ {
        OPS.iter()
            .zip(&self.ops)
            .map(|(name, h)| (*name, h.snapshot()))
    }

    /// The table (see `shoal_metrics::table`).
    pub fn table(&self) -> String {
        let since = self.since.lock().unwrap_or_else(|e| e.into_inner());
        let rows: Vec<(&str, _)> = self.snapshots().collect();
        shoal_metrics::table(
            &format!(
                "shoal mount: pid {}, last {:.1} s: time a request waited, arrival to reply (us)",
                std::process::id(),
                since.elapsed().as_secs_f64()
            ),
            &rows,
        )
    }
}

/// How many writes and bytes took each path of [Hildebrand 2006] since the
/// mount started, as a comment line under the table.
pub fn write_paths_line(p: &shoal_client::WritePaths) -> String {
    format!("# write paths: {p}\n")
}

/// Each bounded table of the mount and its client, entries held of its
/// bound (the setting that bounds it), as a comment line under the table.
pub fn tables_line(sizes: &[shoal_client::TableSize]) -> String {
    let tables: Vec<String> = sizes
        .iter()
        .map(|t| format!("{} {}/{}", t.name, t.len, t.max))
        .collect();
    format!("# tables (entries/bound): {}\n", tables.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_known_ops_and_resets() {
        let s = MountStats::new();
        let t0 = Instant::now();
        s.record("lookup", t0);
        s.record("lookup", t0);
        s.record("no-such-op", t0);
        let t = s.table();
        let lookup = t.lines().find(|l| l.starts_with("lookup")).unwrap();
        assert_eq!(lookup.split_whitespace().nth(1), Some("2"), "{t}");
        assert!(t.lines().last().unwrap().starts_with("total"));
        s.reset();
        assert!(!s.table().contains("lookup"));
    }

    #[test]
    fn counts_ring_reads_by_how_they_were_filled() {
        let s = MountStats::new();
        s.ring_read(true, 4096);
        s.ring_read(true, 100);
        s.ring_read(false, 7);
        assert_eq!(
            s.ring_reads_line(),
            "# read replies in io_uring entries: landed in place 2 replies 4196 bytes; \
             copied in 1 replies 7 bytes\n"
        );
        s.reset();
        assert!(s
            .ring_reads_line()
            .contains("landed in place 0 replies 0 bytes"));
    }
}
