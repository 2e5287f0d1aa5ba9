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

use shoal_client::Client;

use crate::kernel_leases::KernelLeases;

/// Inodes forgotten since the last sweep that call for another.
const BURST: usize = 4096;
/// How long after the burst the sweep runs.
const AFTER: Duration = Duration::from_secs(1);

/// The inodes forgotten since the last sweep, and what a sweep compacts:
/// the client's caches and what the kernel was given under leases.
pub struct Sweeps {
    client: Client,
    leases: Arc<KernelLeases>,
    forgotten: AtomicUsize,
    scheduled: AtomicBool,
}

impl Sweeps {
    pub fn new(client: Client, leases: Arc<KernelLeases>) -> Arc<Sweeps> {
        Arc::new(Sweeps {
            client,
            leases,
            forgotten: AtomicUsize::new(0),
            scheduled: AtomicBool::new(false),
        })
    }

    /// `n` inodes were just forgotten: schedules a sweep if they make a
    /// burst and none is scheduled.
    pub fn forgotten(self: &Arc<Self>, rt: &tokio::runtime::Handle, n: usize) {
        if self.forgotten.fetch_add(n, Ordering::Relaxed) + n < BURST
            || self.scheduled.swap(true, Ordering::SeqCst)
        {
            return;
        }
        let me = self.clone();
        rt.spawn(async move {
            tokio::time::sleep(AFTER).await;
            me.forgotten.store(0, Ordering::Relaxed);
            let swept = me.clone();
            let _ = tokio::task::spawn_blocking(move || swept.sweep()).await;
            me.scheduled.store(false, Ordering::SeqCst);
        });
    }

    fn sweep(&self) {
        self.client.compact();
        self.leases.sweep();
        trim_heap();
    }
}

/// Returns the heap's free pages to the system.
#[cfg(target_env = "gnu")]
fn trim_heap() {
    // SAFETY: malloc_trim only walks glibc's own arenas, under their locks.
    unsafe { libc::malloc_trim(0) };
}

#[cfg(not(target_env = "gnu"))]
fn trim_heap() {}
