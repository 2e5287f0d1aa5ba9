//! Recovery after a restart with `sync = "replay"` (Lustre's recovery
//! window): the server answered changes before they were durable, so a
//! crash may have lost some that clients were told were done. Those clients
//! kept them. Before the restarted server serves anything new, every client
//! in its table (`client_table`) sends what it keeps (`Recover`); once all
//! have, or the window has passed, the server replays every kept change of
//! every client in the order of its original place in the commit sequence,
//! makes the result durable, and opens.
//!
//! Replaying in the original order makes each request find the store as it
//! did the first time, for every change that was acknowledged; a change
//! that was applied and lost but never acknowledged (its reply died with
//! the server) is not replayed, and its client sends it again, as a new
//! request, once the server opens. A client that does not come back within
//! the window cannot replay afterwards (its changes would land out of
//! order): it is told its changes are lost (ESTALE).
//!
//! Requests from clients wait while the server recovers (`Recovery::wait`);
//! requests from other servers do not (their precreates and write-outs
//! touch nothing a replay needs, and a restarted server moves its handle
//! counter past every handle it may have handed out before: see
//! `MetaStore::skip_handles`).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::msg::Replayed;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
    /// Waiting for the clients in the table to send what they keep.
    Collecting,
    /// One thread replays everything collected.
    Replaying,
    /// Open: serving as usual.
    Done,
}

struct State {
    phase: Phase,
    /// Clients in the table that have not sent what they keep.
    awaited: HashSet<u64>,
    /// What the clients sent: (client, kept change).
    kept: Vec<(u64, Replayed)>,
    /// Each replayed request's errno, per client, in the order it sent them.
    outcomes: HashMap<u64, Vec<i32>>,
}

pub struct Recovery {
    /// Not `Done` yet: every client request must wait (`wait`).
    active: AtomicBool,
    /// The verifier of the server's previous start: what a client's kept
    /// changes must come from to be replayed.
    previous: u64,
    /// The last change in the store at start: kept changes up to it
    /// survived the crash (a killed process's last writes can reach the
    /// disk without a sync) and are not replayed.
    survived: u64,
    deadline: Instant,
    state: Mutex<State>,
    changed: Condvar,
}

/// How a replayed request went: its errno (0: done again).
pub type Outcome = i32;

impl Recovery {
    /// A server with nothing to recover: open at once.
    pub fn none() -> Recovery {
        Recovery::awaiting(Vec::new(), 0, 0, Duration::ZERO)
    }

    /// A server restarted after its previous start `previous`, with every
    /// change up to `survived` in its store, whose table names `clients`:
    /// it waits for them for at most `window`.
    pub fn awaiting(clients: Vec<u64>, previous: u64, survived: u64, window: Duration) -> Recovery {
        let phase = if clients.is_empty() {
            Phase::Done
        } else {
            tracing::info!(
                "recovering: waiting up to {window:?} for {} clients to replay what they keep",
                clients.len()
            );
            Phase::Collecting
        };
        Recovery {
            active: AtomicBool::new(phase != Phase::Done),
            previous,
            survived,
            deadline: Instant::now() + window,
            state: Mutex::new(State {
                phase,
                awaited: clients.into_iter().collect(),
                kept: Vec::new(),
                outcomes: HashMap::new(),
            }),
            changed: Condvar::new(),
        }
    }

    /// Whether the server is still recovering.
    pub fn active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until the server is open. If the window passes first, this
    /// thread replays what was collected (`replay`, then `sync`).
    pub fn wait(
        &self,
        replay: impl Fn(u64, &Replayed) -> Outcome,
        sync: impl FnOnce() -> Result<()>,
    ) {
        if !self.active() {
            return;
        }
        let st = self.lock();
        drop(self.wait_done(st, replay, sync));
    }

    /// Client `client`'s kept changes `items`, made under the server's
    /// start `boot` (which is not the current one): they wait for the
    /// other clients', are replayed with them, and their outcomes returned.
    pub fn recover(
        &self,
        client: u64,
        boot: u64,
        items: Vec<Replayed>,
        replay: impl Fn(u64, &Replayed) -> Outcome,
        sync: impl FnOnce() -> Result<()>,
    ) -> Result<Vec<Outcome>> {
        let mut st = self.lock();
        let late = st.phase != Phase::Collecting || boot != self.previous;
        if late {
            // Changes of the previous start that its store held (all of
            // them after a clean stop) are not lost.
            let lost = if boot == self.previous {
                items.iter().filter(|i| i.seq > self.survived).count()
            } else {
                items.len()
            };
            if lost == 0 {
                return Ok(vec![0; items.len()]);
            }
            tracing::error!(
                "client {client:#x} came back too late to replay {lost} changes this server \
                 answered before it restarted: they are lost"
            );
            return Err(ShoalError::new(
                Errno::ESTALE,
                format!(
                    "the server restarted and ended its recovery before this client came \
                     back: {lost} changes it had answered are lost"
                ),
            ));
        }
        st.awaited.remove(&client);
        st.outcomes.insert(client, Vec::new());
        st.kept.extend(items.into_iter().map(|i| (client, i)));
        let mut st = if st.awaited.is_empty() {
            self.replay_all(st, replay, sync)
        } else {
            self.wait_done(st, replay, sync)
        };
        Ok(st.outcomes.remove(&client).unwrap_or_default())
    }

    fn wait_done<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        replay: impl Fn(u64, &Replayed) -> Outcome,
        sync: impl FnOnce() -> Result<()>,
    ) -> MutexGuard<'a, State> {
        loop {
            match st.phase {
                Phase::Done => return st,
                Phase::Collecting if Instant::now() >= self.deadline => {
                    tracing::warn!(
                        "recovery window over; {} clients did not come back to replay",
                        st.awaited.len()
                    );
                    return self.replay_all(st, replay, sync);
                }
                _ => {
                    let left = self.deadline.saturating_duration_since(Instant::now());
                    let wait = left.max(Duration::from_millis(10));
                    st = self
                        .changed
                        .wait_timeout(st, wait)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            }
        }
    }

    /// Replays every collected request in its original order (the store
    /// lock is not held meanwhile: other clients wait in `wait`), makes
    /// them durable, and opens the server.
    fn replay_all<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        replay: impl Fn(u64, &Replayed) -> Outcome,
        sync: impl FnOnce() -> Result<()>,
    ) -> MutexGuard<'a, State> {
        assert_eq!(st.phase, Phase::Collecting, "replayed twice");
        st.phase = Phase::Replaying;
        let mut kept = std::mem::take(&mut st.kept);
        drop(st);
        // Stable: one client's requests of one change keep their order.
        kept.sort_by_key(|(_, item)| item.seq);
        let outcomes: Vec<(u64, Outcome)> = kept
            .iter()
            .map(|(client, item)| match item.seq <= self.survived {
                true => (*client, 0),
                false => (*client, replay(*client, item)),
            })
            .collect();
        let synced = sync();
        let mut st = self.lock();
        for (client, outcome) in outcomes {
            let outcome = match &synced {
                Ok(()) => outcome,
                Err(_) => Errno::EIO.0,
            };
            st.outcomes.entry(client).or_default().push(outcome);
        }
        if let Err(e) = synced {
            tracing::error!("making the replayed changes durable failed: {e}");
        }
        tracing::info!(
            "recovery done: {} changes kept by clients, those after {} replayed",
            kept.len(),
            self.survived
        );
        st.phase = Phase::Done;
        self.active.store(false, Ordering::Release);
        self.changed.notify_all();
        st
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(seq: u64) -> Replayed {
        Replayed {
            seq,
            id: seq,
            ..Default::default()
        }
    }

    #[test]
    fn kept_changes_replay_in_their_order_and_survivors_are_skipped() {
        // Two clients; the store held every change up to 3 at the restart.
        let r = Recovery::awaiting(vec![1, 2], 77, 3, Duration::from_secs(60));
        assert!(r.active());
        let order = Mutex::new(Vec::new());
        let replay = |c: u64, i: &Replayed| {
            order.lock().unwrap().push((c, i.seq));
            0
        };
        std::thread::scope(|s| {
            let first = s.spawn(|| r.recover(1, 77, vec![item(2), item(6)], replay, || Ok(())));
            while r.lock().awaited.len() == 2 {
                std::thread::yield_now();
            }
            let second = r.recover(2, 77, vec![item(5), item(4)], replay, || Ok(()));
            assert_eq!(second.unwrap(), vec![0, 0]);
            assert_eq!(first.join().unwrap().unwrap(), vec![0, 0]);
        });
        assert_eq!(*order.lock().unwrap(), vec![(2, 4), (2, 5), (1, 6)]);
        assert!(!r.active());
        // Too late: kept changes are refused, nothing is replayed.
        let late = r.recover(3, 77, vec![item(9)], replay, || Ok(()));
        assert_eq!(late.unwrap_err().errno, Errno::ESTALE);
        assert_eq!(r.recover(3, 77, vec![], replay, || Ok(())).unwrap(), vec![]);
    }

    #[test]
    fn late_changes_the_store_held_are_not_lost() {
        // A clean stop: no client awaited, every change up to 9 durable.
        let r = Recovery::awaiting(Vec::new(), 77, 9, Duration::from_secs(60));
        assert!(!r.active());
        let held = r.recover(1, 77, vec![item(8), item(9)], |_, _| 1, || Ok(()));
        assert_eq!(held.unwrap(), vec![0, 0]);
        let e = r.recover(1, 77, vec![item(9), item(10)], |_, _| 1, || Ok(()));
        assert_eq!(e.unwrap_err().errno, Errno::ESTALE);
    }

    #[test]
    fn changes_of_an_older_start_are_refused() {
        let r = Recovery::awaiting(vec![1], 77, 0, Duration::from_secs(60));
        let e = r.recover(1, 76, vec![item(1)], |_, _| 0, || Ok(()));
        assert_eq!(e.unwrap_err().errno, Errno::ESTALE);
    }

    #[test]
    fn past_the_window_a_waiting_request_replays_what_came() {
        let r = Recovery::awaiting(vec![1], 77, 0, Duration::from_millis(10));
        let replayed = Mutex::new(0);
        r.wait(
            |_, _| {
                *replayed.lock().unwrap() += 1;
                0
            },
            || Ok(()),
        );
        assert!(!r.active());
        assert_eq!(*replayed.lock().unwrap(), 0, "nobody sent anything");
    }
}
