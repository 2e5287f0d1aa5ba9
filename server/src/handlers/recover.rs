//! Replayed commits, the server's side (`sync = "replay"`): a client's
//! first request on a new connection (`recover`, which replays what it
//! keeps if this server restarted and lost it: `recovery`), a replayed
//! request run again (`Service::replay`), and `commit` (make everything
//! durable now).

use std::sync::atomic::Ordering;

use shoal_proto::error::{Result, ShoalError};
use shoal_proto::frame::{ClientRef, Frame};
use shoal_proto::msg::{CommitRequest, Empty, RecoverReply, RecoverRequest, Replayed};
use shoal_proto::{Cred, Op};

use crate::recovery::Outcome;
use crate::replay::Kept;
use crate::request::Request;
use crate::service::{Reply, Service};

fn client_of(r: &Request) -> Result<u64> {
    match r.header.client.client {
        0 => Err(ShoalError::invalid(format!(
            "{} from a request without a client id",
            r.header.op.name()
        ))),
        c => Ok(c),
    }
}

pub fn recover(s: &Service, r: &Request, q: RecoverRequest) -> Result<Reply<RecoverReply>> {
    let client = client_of(r)?;
    if q.boot == s.verifier {
        // Same start: nothing was lost; the client keeps what it keeps
        // until the group flush covers it.
        return Ok(Reply::new(RecoverReply {
            verifier: s.verifier,
            replayed: false,
            errnos: Vec::new(),
            listed: s.clients.knows(client),
        }));
    }
    let count = q.items.len();
    let errnos = s.recovery.recover(
        client,
        q.boot,
        q.items,
        |c, item| s.replay(c, item),
        || s.make_replays_durable(),
    )?;
    debug_assert!(errnos.len() == count || count == 0);
    Ok(Reply::new(RecoverReply {
        verifier: s.verifier,
        replayed: true,
        errnos,
        listed: s.clients.knows(client),
    }))
}

pub fn commit(s: &Service, _r: &Request, _q: CommitRequest) -> Result<Reply<Empty>> {
    let syncs = s.commit.sync_now(&s.meta, &s.stats)?;
    Ok(Reply::new(Empty {}).with_syncs(syncs))
}

impl Service {
    /// Waits until this server has recovered; past the window, this thread
    /// replays what the clients sent (see `Recovery::wait`).
    pub fn wait_for_recovery(&self) {
        self.recovery.wait(
            |c, item| self.replay(c, item),
            || self.make_replays_durable(),
        );
    }

    fn make_replays_durable(&self) -> Result<()> {
        self.commit.sync_now(&self.meta, &self.stats).map(drop)
    }

    /// Runs `client`'s kept change `item` again, with the handles its first
    /// copy took (as many times as it meets a delegation, which is
    /// recalled first, as `handle` does); returns its errno (0: done).
    pub fn replay(&self, client: u64, item: &Replayed) -> Outcome {
        let Some(op) = u16::try_from(item.op).ok().and_then(Op::from_code) else {
            return shoal_proto::Errno::EINVAL.0;
        };
        let Some(cred) = Cred::from_wire(item.uid, item.gid, &item.groups) else {
            return shoal_proto::Errno::EINVAL.0;
        };
        if !op.modifies_metadata() {
            return shoal_proto::Errno::EINVAL.0;
        }
        let frame = Frame::request(op, item.id, cred, item.body.clone(), item.payload.clone())
            .from_client(ClientRef {
                client,
                acked: 0,
                resent: false,
            });
        let reply = self.until_answered(|| {
            let kept = Kept::replay(client, item.allocated.clone());
            let r = Request::of(&frame, &self.config).handled(
                None,
                Some(kept),
                self.leases.answer(client),
            );
            self.answer(&frame, &r)
        });
        self.stats.replayed.fetch_add(1, Ordering::Relaxed);
        if reply.header.status != 0 {
            self.stats.replays_failed.fetch_add(1, Ordering::Relaxed);
            tracing::error!(
                "replaying {} {} of client {client:#x} failed: errno {}",
                op.name(),
                item.id,
                reply.header.status
            );
        }
        reply.header.status
    }
}
