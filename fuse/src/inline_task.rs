//! Running a request's task: its first step on the FUSE loop thread that
//! received the request, the rest on the tokio runtime.
//!
//! Why: `Runtime::spawn` from the loop thread hands the task to a worker
//! thread, which must be woken: a context switch before the request has
//! even been sent to a server. Most requests do a little work and then wait
//! for one reply, so the loop thread polls the task once itself: it sends
//! the request (the client writes straight to the socket) and goes back to
//! reading `/dev/fuse`. When the reply arrives, the runtime thread that
//! read it is the one that wakes the task, and the task continues there,
//! queued locally (no other thread to wake). A task that finishes in its
//! first poll (an answer from the client's caches) costs no hand-off at all.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

type BoxedTask = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A task polled once on the calling thread and, if not done, handed to the
/// runtime when it is first woken.
struct FirstPoll {
    task: Mutex<Option<BoxedTask>>,
    rt: tokio::runtime::Handle,
}

impl Wake for FirstPoll {
    fn wake(self: Arc<Self>) {
        let rt = self.rt.clone();
        rt.spawn(async move {
            // Taken once: a second wake-up finds nothing left to run. If the
            // first poll is still running, this waits for it (briefly).
            let task = self.task.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(task) = task {
                task.await;
            }
        });
    }
}

/// Polls `task` once here (inside `rt`'s context, so timers and sockets
/// work), then lets the runtime finish it.
pub fn spawn(rt: &tokio::runtime::Handle, task: impl Future<Output = ()> + Send + 'static) {
    let first = Arc::new(FirstPoll {
        task: Mutex::new(Some(Box::pin(task))),
        rt: rt.clone(),
    });
    let waker = Waker::from(first.clone());
    let _context = rt.enter();
    let mut slot = first.task.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(task) = slot.as_mut() {
        if let Poll::Ready(()) = task.as_mut().poll(&mut Context::from_waker(&waker)) {
            *slot = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn a_ready_task_finishes_on_the_caller_and_a_waiting_one_on_the_runtime() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let here = std::thread::current().id();
        let (tx, rx) = std::sync::mpsc::channel();
        let tx2 = tx.clone();
        spawn(rt.handle(), async move {
            tx2.send(std::thread::current().id()).unwrap();
        });
        assert_eq!(rx.recv().unwrap(), here, "ran to completion in place");

        let (go, wait) = tokio::sync::oneshot::channel::<()>();
        let polls = Arc::new(AtomicUsize::new(0));
        let p = polls.clone();
        spawn(rt.handle(), async move {
            p.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            wait.await.unwrap();
            tx.send(std::thread::current().id()).unwrap();
        });
        assert_eq!(polls.load(Ordering::SeqCst), 1, "first step done in place");
        go.send(()).unwrap();
        let finished_on = rx.recv().unwrap();
        assert_ne!(finished_on, here, "the rest ran on the runtime");
    }
}
