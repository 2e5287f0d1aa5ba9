//! Memory given back after the kernel forgets many inodes (a drop of its
//! caches, a large unlink): FORGET drops what is cached of each inode at once
//! (`Shared::forgotten`), but that alone leaves the tables' own storage at
//! its largest, directories' names voided rather than freed, and glibc's
//! heap holding the freed chunks. So after every [`BURST`] inodes forgotten
//! a sweep runs, [`AFTER`] later (one for all the batches of one drop): the
//! client's caches are rebuilt at their size and their void entries
//! dropped, what the kernel was given under leases that have ended is
//! forgotten, and the heap is trimmed (`malloc_trim`). Off the request
//! path: on the blocking pool, at most one at a time.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::shared::Shared;

/// Inodes forgotten since the last sweep that call for another.
const BURST: usize = 4096;
/// How long after the burst the sweep runs.
const AFTER: Duration = Duration::from_secs(1);

#[derive(Default)]
pub struct Sweeps {
    forgotten: AtomicUsize,
    scheduled: AtomicBool,
}

impl Sweeps {
    /// `n` inodes were just forgotten: schedules a sweep if they make a
    /// burst and none is scheduled.
    pub fn forgotten(shared: &Arc<Shared>, rt: &tokio::runtime::Handle, n: usize) {
        let me = &shared.sweeps;
        if me.forgotten.fetch_add(n, Ordering::Relaxed) + n < BURST
            || me.scheduled.swap(true, Ordering::SeqCst)
        {
            return;
        }
        let shared = shared.clone();
        rt.spawn(async move {
            tokio::time::sleep(AFTER).await;
            shared.sweeps.forgotten.store(0, Ordering::Relaxed);
            let swept = shared.clone();
            let _ = tokio::task::spawn_blocking(move || sweep(&swept)).await;
            shared.sweeps.scheduled.store(false, Ordering::SeqCst);
        });
    }
}

fn sweep(shared: &Shared) {
    shared.client.compact();
    shared.leases.sweep();
    trim_heap();
}

/// Returns the heap's free pages to the system.
#[cfg(target_env = "gnu")]
fn trim_heap() {
    // SAFETY: malloc_trim only walks glibc's own arenas, under their locks.
    unsafe { libc::malloc_trim(0) };
}

#[cfg(not(target_env = "gnu"))]
fn trim_heap() {}
