//! Client-side instrumentation in the form of Table 2 of [Vilayannur 2004]:
//! per operation type, how many calls this process made on Shoal and the
//! mean and p99 time the caller waited for each. Recording costs two clock
//! reads and three relaxed atomic adds, and only when `SHOAL_STATS` is set.
//! The histograms and the table are `shoal_metrics`', shared with the mount.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use shoal_metrics::Histogram;

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
    Lock,
}

impl Op {
    pub const ALL: [Op; 27] = [
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
        Op::Lock,
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
            Op::Lock => "lock",
        }
    }
}

/// One histogram per operation type, for the life of the process.
static COUNTERS: [Histogram; Op::ALL.len()] = [const { Histogram::new() }; Op::ALL.len()];
static ON: AtomicBool = AtomicBool::new(false);

pub fn enable() {
    ON.store(true, Ordering::Relaxed);
}

pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Forgets every count (a forked child starts its own table).
pub extern "C" fn reset() {
    crate::unwind::guarded(
        || (),
        || {
            for c in &COUNTERS {
                c.reset();
            }
            LEFT_TO_THE_MOUNT.store(0, Ordering::Relaxed);
        },
    )
}

/// Calls on Shoal paths passed to the mount because libshoal could not
/// connect (no readable secret, no broker): counted whether or not the
/// table is on, as they are rare and the reason a program is slower.
static LEFT_TO_THE_MOUNT: AtomicU64 = AtomicU64::new(0);

pub fn left_to_the_mount() {
    LEFT_TO_THE_MOUNT.fetch_add(1, Ordering::Relaxed);
}

pub fn calls_left_to_the_mount() -> u64 {
    LEFT_TO_THE_MOUNT.load(Ordering::Relaxed)
}

/// Calls counted so far.
pub fn calls() -> u64 {
    COUNTERS.iter().map(Histogram::calls).sum()
}

/// When a call started, if calls are being counted.
pub fn start() -> Option<Instant> {
    enabled().then(Instant::now)
}

/// Counts a call of type `op` that started at `t0`.
pub fn record(op: Op, t0: Option<Instant>) {
    if let Some(t0) = t0 {
        let ns = t0.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
        COUNTERS[op as usize].record(ns);
    }
}

/// The table: a header naming the process, then one row per operation type
/// used (count, mean and p99 wait in microseconds) and a total row.
pub fn table(who: &str) -> String {
    let rows: Vec<(&str, _)> = Op::ALL
        .iter()
        .map(|&op| (op.name(), COUNTERS[op as usize].snapshot()))
        .collect();
    shoal_metrics::table(
        &format!("libshoal_preload: {who}: time a caller waited per call (us)"),
        &rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table() {
        enable();
        let t0 = start();
        record(Op::Mkdir, t0);
        let t = table("pid 1 (test)");
        assert!(t.contains("mkdir"), "{t}");
        assert!(t.lines().last().unwrap().starts_with("total"), "{t}");
    }
}
