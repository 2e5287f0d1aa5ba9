//! The directory partitions this server has queued for a split
//! (`partitions`), and the wake-up of the loop that splits them.

use std::collections::HashSet;
use std::sync::Mutex;

use shoal_proto::Handle;

#[derive(Default)]
pub struct Splits {
    queued: Mutex<HashSet<Handle>>,
    wake: tokio::sync::Notify,
}

impl Splits {
    /// Queues partition `dir` (once, however often it is asked).
    pub fn queue(&self, dir: Handle) {
        if self.queued.lock().unwrap().insert(dir) {
            self.wake.notify_one();
        }
    }

    /// The partitions queued, once there are any.
    pub async fn next(&self) -> Vec<Handle> {
        loop {
            let queued: Vec<Handle> = self.queued.lock().unwrap().drain().collect();
            if !queued.is_empty() {
                return queued;
            }
            self.wake.notified().await;
        }
    }
}
