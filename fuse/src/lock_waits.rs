//! The lock requests waiting at their servers through the mount, by the
//! kernel's request id, for the kernel's FUSE_INTERRUPT of one to reach it
//! (`locks`: the wait is then withdrawn and answered EINTR).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use tokio::sync::oneshot;

/// How many interrupts of requests not (yet) waiting are remembered: one
/// can arrive before its lock request is seen, and most are of requests
/// that never wait here (a read a signal cut short).
const EARLY_INTERRUPTS: usize = 64;

/// The lock requests waiting at their servers, by the kernel's request id,
/// for its interrupts to reach.
#[derive(Default)]
pub struct Waits {
    inner: Mutex<WaitsInner>,
}

#[derive(Default)]
struct WaitsInner {
    waiting: HashMap<u64, oneshot::Sender<()>>,
    /// Interrupts that named no waiting request, newest last.
    early: VecDeque<u64>,
}

impl Waits {
    /// Request `unique` waits: the future is ready once it is interrupted
    /// (at once if its interrupt came first).
    pub fn waiting(&self, unique: u64) -> impl std::future::Future<Output = ()> {
        let (tx, rx) = oneshot::channel();
        let mut w = self.inner.lock().unwrap();
        if let Some(i) = w.early.iter().position(|u| *u == unique) {
            w.early.remove(i);
            let _ = tx.send(());
        } else {
            w.waiting.insert(unique, tx);
        }
        async move {
            // A sender dropped unsent (the wait ended) is no interrupt.
            if rx.await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Request `unique` no longer waits (granted, refused or interrupted).
    pub fn done(&self, unique: u64) {
        self.inner.lock().unwrap().waiting.remove(&unique);
    }

    /// FUSE_INTERRUPT of request `unique`.
    pub fn interrupt(&self, unique: u64) {
        let mut w = self.inner.lock().unwrap();
        match w.waiting.remove(&unique) {
            Some(tx) => {
                let _ = tx.send(());
            }
            None => {
                if w.early.len() == EARLY_INTERRUPTS {
                    w.early.pop_front();
                }
                w.early.push_back(unique);
            }
        }
    }
}
