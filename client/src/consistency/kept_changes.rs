//! The changes a server answered before they were durable (`sync =
//! "replay"`), which this client keeps, per server, until a later reply
//! says they are: if the server crashes first, it gets them back from here
//! (`Pool::recover`) and replays them.
//!
//! Bounded by the group flush: every reply says how far the server's
//! durable sequence got, and the server flushes within `replay_flush_ms`,
//! so what is kept is what the client changed on that server in the last
//! few milliseconds before its latest reply from it.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use bytes::Bytes;
use prost::Message;
use shoal_proto::error::{Result, ShoalError};
use shoal_proto::frame::Frame;
use shoal_proto::msg::{Allocations, Replayed};
use shoal_proto::{Cred, Op};

#[derive(Default)]
pub struct KeptChanges {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The server's start (its verifier) the kept changes were made under
    /// (0: not known yet).
    boot: u64,
    /// Kept changes by their place in the server's commit sequence.
    changes: BTreeMap<u64, Replayed>,
    /// The server may have this client in its client table, even when
    /// nothing is kept (it takes a client out only at a flush after the
    /// one that made its changes durable, and flushes only when there are
    /// changes to make durable): restarted, it then waits for this client
    /// before it serves anyone. Set as a change is sent (its reply may die
    /// with the server), and to what the server says at each `recover`.
    listed: bool,
}

impl KeptChanges {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes note of `reply`, which answers request `id` (operation `op`,
    /// acting as `cred`, `sent` its body and payload) on a connection to
    /// the server's start `boot`: keeps the request if its change is not
    /// durable, and forgets those the reply says are. Returns the reply
    /// without the handles it carried for keeping.
    pub fn note(
        &self,
        op: Op,
        id: u64,
        cred: Cred,
        sent: (Bytes, Bytes),
        boot: u64,
        mut reply: Frame,
    ) -> Result<Frame> {
        let commit = reply.header.commit;
        if commit == Default::default() {
            return Ok(reply);
        }
        let mut st = self.lock();
        if commit.pending() {
            let allocated = Allocations::decode(reply.payload.clone())
                .map_err(|e| ShoalError::protocol(format!("{} reply's handles: {e}", op.name())))?
                .handles;
            reply.payload = Bytes::new();
            if boot != st.boot {
                // Answered by a start of the server whose recovery is over
                // (this task ran that late): nothing can replay it now.
                tracing::error!(
                    "{} {id} was answered just before its server restarted and may be lost",
                    op.name()
                );
                return Ok(reply);
            }
            let (body, payload) = sent;
            st.changes.insert(
                commit.seq,
                Replayed {
                    op: op as u32,
                    id,
                    uid: cred.uid,
                    gid: cred.gid,
                    groups: cred.groups().to_vec(),
                    body,
                    payload,
                    seq: commit.seq,
                    allocated,
                },
            );
        }
        if boot == st.boot {
            st.changes = st.changes.split_off(&(commit.flushed + 1));
        }
        Ok(reply)
    }

    /// What a new connection hands back: the server's start the changes
    /// were made under, and the changes in their order.
    pub fn to_recover(&self) -> (u64, Vec<Replayed>) {
        let st = self.lock();
        (st.boot, st.changes.values().cloned().collect())
    }

    /// A change is about to be sent to the server, which may enter this
    /// client in its table with it.
    pub fn sending_change(&self) {
        self.lock().listed = true;
    }

    /// The server's answer to [`KeptChanges::to_recover`]: it is start
    /// `verifier`, and has this client in its table if `listed`; with
    /// `replayed`, it replayed the changes (each one's errno in `errnos`)
    /// and made them durable.
    pub fn recovered(&self, verifier: u64, listed: bool, replayed: bool, errnos: &[i32]) {
        let mut st = self.lock();
        st.boot = verifier;
        st.listed = listed;
        if !replayed {
            return;
        }
        let failed = errnos.iter().filter(|e| **e != 0).count();
        if failed > 0 {
            tracing::error!(
                "a restarted server could not replay {failed} of {} changes it had answered",
                errnos.len()
            );
        } else if !st.changes.is_empty() {
            tracing::info!(
                "a restarted server replayed {} changes it had answered",
                st.changes.len()
            );
        }
        st.changes.clear();
    }

    /// The server could not replay the kept changes (it recovered without
    /// this client): they are gone.
    pub fn lost(&self, count: usize) {
        let mut st = self.lock();
        tracing::error!("{count} changes answered by a restarted server are lost");
        st.changes.clear();
        st.boot = 0;
    }

    pub fn holds_any(&self) -> bool {
        !self.lock().changes.is_empty()
    }

    /// Whether a new start of the server may wait for this client: it
    /// keeps changes for it, or it may be in its table all the same.
    pub fn owes_recover(&self) -> bool {
        let st = self.lock();
        st.listed || !st.changes.is_empty()
    }
}
