//! POSIX record locks and flock locks (`crate::locks` holds them). A lock request arrives
//! through the listener, which hands it its connection
//! ([`Service::serve_lock`]), so that one that must wait is answered over
//! it once granted; the operation table's entry serves a request that
//! comes any other way (no connection to wait on: a conflict is EAGAIN).

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use prost::Message;
use shoal_net::sink::FrameSink;
use shoal_proto::error::ShoalError;
use shoal_proto::frame::Frame;
use shoal_proto::msg::{
    Empty, ErrorReply, LockKind, LockReply, TestLockReply, TestLockRequest, WithdrawLockRequest,
};
use shoal_proto::ops;
use shoal_proto::record_locks::Range;

use crate::delegations::Stop;
use crate::locks::{Ask, Owner, Space, Taken};
use crate::request::{Request, Result};
use crate::service::{Reply, Service};
use crate::stats::Sample;

/// The connection a lock request came on, where a waiting one's reply goes.
struct Via<'a> {
    conn: u64,
    sink: &'a Arc<FrameSink>,
}

pub fn lock(
    s: &Service,
    r: &Request,
    q: shoal_proto::msg::LockRequest,
) -> Result<Reply<LockReply>> {
    match take(s, r, q, None)? {
        Taken::Granted(write_epoch) => Ok(Reply::new(LockReply { write_epoch })),
        Taken::Waiting => unreachable!("a request with no connection never waits"),
    }
}

pub fn test_lock(s: &Service, r: &Request, q: TestLockRequest) -> Result<Reply<TestLockReply>> {
    let ask = checked(
        s,
        r,
        Space {
            file: q.file,
            flock: false,
        },
        q.owner,
        q.kind,
        q.start,
        q.end,
        0,
        0,
    )?;
    if ask.kind == LockKind::LockUnlock {
        return Err(ShoalError::invalid("F_GETLK of an unlock").into());
    }
    Ok(Reply::new(match s.locks.test(&ask)? {
        None => TestLockReply::default(),
        Some(c) => TestLockReply {
            conflict: true,
            kind: c.held.kind as i32,
            start: c.held.range.start,
            end: c.held.range.end,
            pid: c.pid,
        },
    }))
}

/// Withdraws the asking client's owner's waiting requests (its caller was
/// interrupted): each is answered EINTR.
pub fn withdraw_lock(s: &Service, r: &Request, q: WithdrawLockRequest) -> Result<Reply<Empty>> {
    let owner = Owner {
        client: r.header.client.client,
        owner: q.owner,
    };
    let space = Space {
        file: q.file,
        flock: q.flock,
    };
    let n = s.locks.withdraw(space, owner);
    tracing::debug!(
        "withdrew {n} waiting lock requests of {owner:?} on {:#x}",
        q.file
    );
    Ok(Reply::new(Empty {}))
}

/// Takes, changes or drops the lock `q` asks for; with a connection to
/// answer on (`via`), a conflict waits if `q` says so.
fn take(
    s: &Service,
    r: &Request,
    q: shoal_proto::msg::LockRequest,
    via: Option<Via>,
) -> Result<Taken> {
    let conn = via.as_ref().map_or(0, |v| v.conn);
    let space = Space {
        file: q.file,
        flock: q.flock,
    };
    let mut ask = checked(s, r, space, q.owner, q.kind, q.start, q.end, q.pid, conn)?;
    ask.reclaim = q.reclaim;
    match via {
        Some(via) if q.wait => Ok(s.locks.take_or_wait(ask, *r.header, via.sink.clone())?),
        _ => Ok(s.locks.take(&ask).map(Taken::Granted)?),
    }
}

/// The request as the lock table takes it, once its file is known here.
#[allow(clippy::too_many_arguments)]
fn checked(
    s: &Service,
    r: &Request,
    space: Space,
    owner: u64,
    kind: i32,
    start: u64,
    end: u64,
    pid: u32,
    conn: u64,
) -> Result<Ask> {
    let kind = LockKind::try_from(kind).map_err(|_| {
        ShoalError::invalid(format!("lock kind {kind} is none of unlock, read, write"))
    })?;
    let range = Range::new(start, end).ok_or_else(|| {
        ShoalError::invalid(format!("lock range {start}..={end} ends before it starts"))
    })?;
    // Exists and lives here (ENOENT, EINVAL otherwise).
    s.meta.get(r, space.file)?;
    Ok(Ask {
        space,
        owner: Owner {
            client: r.header.client.client,
            owner,
        },
        kind,
        range,
        pid,
        conn,
        reclaim: false,
    })
}

impl Service {
    /// Serves the lock request `frame` that came on connection `conn`,
    /// whose replies go out over `sink`: its reply now, or `None` if it
    /// waits (the lock table answers it once granted).
    pub fn serve_lock(&self, frame: &Frame, sink: &Arc<FrameSink>, conn: u64) -> Option<Frame> {
        let started = Instant::now();
        // Before it is handled: the read of the file meets no delegation
        // (none could be recalled on the connection's task), and a lock
        // needs none recalled: it reads no directory's entries.
        let r = Request::of(frame, &self.config);
        let taken = r
            .decode::<ops::Lock>()
            .map_err(Stop::from)
            .and_then(|q| take(self, &r, q, Some(Via { conn, sink })));
        let reply = match taken {
            Ok(Taken::Waiting) => None,
            Ok(Taken::Granted(write_epoch)) => {
                let body = Bytes::from(LockReply { write_epoch }.encode_to_vec());
                Some(Frame::reply_to(&frame.header, 0, body, Bytes::new()))
            }
            Err(Stop::Met(met)) => {
                unreachable!("a lock served on its connection's task met {met:?}")
            }
            Err(Stop::Failed(e)) => {
                let body = ErrorReply { message: e.message }.encode_to_vec();
                Some(Frame::reply_to(
                    &frame.header,
                    e.errno.0,
                    Bytes::from(body),
                    Bytes::new(),
                ))
            }
        };
        self.stats.record(
            frame.header.op,
            &Sample {
                ok: reply.as_ref().is_none_or(|f| f.header.status == 0),
                bytes_in: frame.wire_len(),
                bytes_out: reply.as_ref().map_or(0, Frame::wire_len),
                syncs: 0,
                latency: started.elapsed(),
            },
        );
        reply
    }
}
