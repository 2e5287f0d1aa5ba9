//! Request handlers, one module per family of operations, and how one
//! request frame becomes one reply frame ([`Service::handle`]: the operation
//! table below picks the handler). Each handler decodes its body, checks its
//! arguments, changes the stores (`Service::change`), and for a modifying
//! request waits on the commit queue before it replies.

pub(crate) mod admin;
mod attrs;
mod create_file;
mod create_files;
mod delegate_dir;
pub(crate) mod gather;
mod hints;
mod io;
mod links;
mod listattr;
mod locks;
mod namespace;
mod recover;
mod remove_files;
mod scan;

use std::time::{Duration, Instant};

use prost::Message;
use shoal_proto::cluster::SyncMode;
use shoal_proto::frame::{Commit, Frame};
use shoal_proto::msg::{Allocations, ErrorReply};
use shoal_proto::{ops, Op, Operation, ShoalError};

use std::sync::atomic::Ordering;

use bytes::Bytes;

use crate::commit::Ticket;
use crate::delegations::{Met, Stop};
use crate::replay::Kept;
use crate::reply_cache;
use crate::request::{Request, Result};
use crate::service::{Encoded, Reply, Service};
use crate::stats::Sample;

/// The server's side of the operation table (`shoal_proto::op`), one row
/// per operation: its handler, whether the handler reads the request body
/// (`decoded`: it gets the body as its operation's request message, and
/// must return its reply message, so a handler wired to the wrong operation
/// does not compile), and whether it stays in memory (see
/// [`stays_in_memory`]): `always`, `never`, or `(a check of the request)`.
/// Both matches are exhaustive: an operation added to the table and missing
/// here does not compile.
macro_rules! handlers {
    ($($op:ident => $handler:path, $body:ident, $memory:tt;)*) => {
        /// Runs request `r`'s handler.
        fn dispatch(s: &Service, r: &Request) -> Result<Encoded> {
            match r.header.op {
                $(Op::$op => handlers!(@call $body, $handler, $op, s, r),)*
            }
        }

        /// Whether request `r` only reads or changes memory: the KV store's
        /// reads and its in-memory table, not local files, syncs or other
        /// servers. A read or write of a datafile whose bytes are in the KV
        /// store qualifies (writes of file data are durable on fsync only),
        /// unless the write would move them to a local file; so does a
        /// metadata change answered before its sync
        /// (`Service::answers_before_sync`) that needs no local file and no
        /// other server. A recall such a change makes is waited for all the
        /// same (`leases::Leases::changed`).
        fn stays_in_memory(s: &Service, r: &Request) -> bool {
            match r.header.op {
                $(Op::$op => handlers!(@memory $memory, s, r),)*
            }
        }
    };
    (@call decoded, $handler:path, $op:ident, $s:ident, $r:ident) => {{
        let reply: Reply<<ops::$op as Operation>::Reply> =
            $handler($s, $r, $r.decode::<ops::$op>()?)?;
        Ok(reply.encode())
    }};
    (@call unread, $handler:path, $op:ident, $s:ident, $r:ident) => {{
        let reply: Reply<<ops::$op as Operation>::Reply> = $handler($s)?;
        Ok(reply.encode())
    }};
    (@memory always, $s:ident, $r:ident) => {
        true
    };
    (@memory never, $s:ident, $r:ident) => {
        false
    };
    (@memory ($check:path), $s:ident, $r:ident) => {
        $check($s, $r)
    };
}

handlers! {
    Ping => admin::ping, unread, always;
    Lookup => namespace::lookup, decoded, always;
    GetAttr => attrs::getattr, decoded, always;
    SetAttr => attrs::setattr, decoded, (Service::answers_before_sync);
    CreateObject => namespace::create_object, decoded, (Service::answers_before_sync);
    CreateDatafiles => namespace::create_datafiles, decoded, never;
    SetDist => namespace::set_dist, decoded, never;
    CrDirEnt => namespace::crdirent, decoded, (namespace::adds_in_memory);
    RmDirEnt => namespace::rmdirent, decoded, (namespace::removes_in_memory);
    RenameEntry => namespace::rename_entry, decoded, (namespace::renames_in_memory);
    Readdir => namespace::readdir, decoded, always;
    Remove => namespace::remove, decoded, never;
    RmdirPrepare => namespace::rmdir_prepare, decoded, never;
    RmdirAbort => namespace::rmdir_abort, decoded, never;
    SetParent => namespace::set_parent, decoded, never;
    Read => io::read, decoded, (io::reads_in_memory);
    Write => io::write, decoded, (io::writes_in_memory);
    Truncate => io::truncate, decoded, never;
    Fsync => io::fsync, decoded, never;
    GetSizes => io::get_sizes, decoded, never;
    SetXattr => attrs::setxattr, decoded, never;
    GetXattr => attrs::getxattr, decoded, always;
    ListXattr => attrs::listxattr, decoded, always;
    RemoveXattr => attrs::removexattr, decoded, never;
    Statfs => admin::statfs, unread, never;
    Stats => admin::stats, unread, always;
    CreateFile => create_file::create_file, decoded, (create_file::creates_in_memory);
    Unstuff => create_file::unstuff, decoded, never;
    ListAttr => listattr::listattr, decoded, never;
    Rendezvous => io::rendezvous, decoded, always;
    Scan => scan::scan, decoded, never;
    Link => links::link, decoded, never;
    GatherWrite => gather::gather_write, decoded, never;
    GatherCommit => gather::gather_commit, decoded, never;
    WriteExtents => io::write_extents, decoded, never;
    Recover => recover::recover, decoded, never;
    Commit => recover::commit, decoded, never;
    Recall => admin::recall, decoded, always;
    Lock => locks::lock, decoded, always;
    TestLock => locks::test_lock, decoded, always;
    CreateFiles => create_files::create_files, decoded, (create_files::creates_in_memory);
    DelegateDir => delegate_dir::delegate_dir, decoded, never;
    RemoveFiles => remove_files::remove_files, decoded, (remove_files::removes_in_memory);
    WithdrawLock => locks::withdraw_lock, decoded, always;
    PutPartition => crate::partitions::put_partition, decoded, never;
    AddPartition => crate::partitions::add_partition, decoded, never;
}

impl Service {
    /// The reply cached for request `key`: its first copy was applied.
    fn cached_reply(&self, key: reply_cache::RequestKey) -> Option<Bytes> {
        match self.replies.cached(self.meta.kv(), key) {
            Ok(found) => found,
            Err(e) => {
                // The request is then done again, as without a cache.
                tracing::warn!("reading the reply cache failed: {e}");
                None
            }
        }
    }

    /// Handles a request that holds `ticket`, its place in the commit
    /// queue's scheduling queue (taken by the listener when the frame
    /// arrived). The request carries the ticket (`Request`) to the commit
    /// queue, which takes it once the request's changes are applied; if the
    /// handler never gets there, the ticket is given back when this
    /// returns, so that the queue never counts a request that is gone.
    ///
    /// While the server recovers (`recovery`), a client's request waits
    /// here for the end of it; its `recover` does not, nor do other
    /// servers' requests and the questions of an operator.
    pub fn handle_scheduled(&self, frame: &Frame, ticket: Option<Ticket>) -> Frame {
        let h = &frame.header;
        if self.recovery.active()
            && h.client.client != 0
            && !matches!(h.op, Op::Recover | Op::Ping | Op::Stats | Op::Statfs)
        {
            self.wait_for_recovery();
        }
        self.handle_holding(frame, ticket)
    }

    /// Whether `frame` can be answered without waiting on a disk, a sync or
    /// another server, so that handing it to another thread would cost more
    /// than answering it (see [`stays_in_memory`]). Nothing is while the
    /// server recovers: requests wait for that on the blocking pool.
    pub fn stays_in_memory(&self, frame: &Frame) -> bool {
        !self.recovery.active() && stays_in_memory(self, &Request::of(frame, &self.config))
    }

    /// Handles one request frame and builds its reply; never panics on bad
    /// input. With `sync = "replay"`, a change a client's request makes
    /// may be answered before it is durable: the reply then says where it
    /// stands in the commit sequence, and carries the handles it took (an
    /// `Allocations` as its payload), which the client keeps with the
    /// request until a later reply says the change is durable.
    ///
    /// A request that meets a directory delegated to another client
    /// (`delegations`) runs again once the delegation is recalled: its
    /// first attempt read nothing it acted on and changed nothing.
    pub fn handle(&self, frame: &Frame) -> Frame {
        self.handle_holding(frame, None)
    }

    /// [`Service::handle`] of a request that holds `ticket`, which passes
    /// from each attempt to the next.
    fn handle_holding(&self, frame: &Frame, ticket: Option<Ticket>) -> Frame {
        let mut ticket = ticket;
        self.until_answered(|| {
            let r = self.request(frame, ticket.take());
            let attempt = self.handle_once(frame, &r);
            ticket = r.into_ticket();
            attempt
        })
    }

    /// Runs `attempt`s at a request until one is answered, recalling the
    /// delegation each other one met.
    fn until_answered(&self, mut attempt: impl FnMut() -> Result<Frame, Met>) -> Frame {
        loop {
            match attempt() {
                Ok(reply) => return reply,
                Err(met) => self.recall_delegation(met),
            }
        }
    }

    /// An attempt at the request `frame` holds, holding `ticket`; with
    /// `sync = "replay"`, a client's change is kept (`replay`).
    fn request<'a>(&self, frame: &'a Frame, ticket: Option<Ticket>) -> Request<'a> {
        let h = &frame.header;
        let client = h.client.client;
        let kept = (self.config.settings.sync == SyncMode::Replay
            && client != 0
            && h.op.modifies_metadata())
        .then(|| Kept::first(client));
        Request::of(frame, &self.config).handled(ticket, kept, self.leases.answer(client))
    }

    /// Recalls a delegation a request met (the holder sends its unsent
    /// changes, then answers) and ends it.
    pub fn recall_delegation(&self, met: Met) {
        self.leases.recall_delegation(met.dir, met.holder);
        self.meta.delegations.end(met.dir, met.holder);
    }

    /// Handles a request that stays in memory (see [`stays_in_memory`]) on
    /// the connection's own task; Err: it met a directory delegation. Its
    /// recall must not be waited for there: the holder's answer, or the
    /// creates it sends first, may have to come in over this very
    /// connection (two holders reading each other's directory), so the
    /// caller recalls it and runs the request again where waiting is safe
    /// ([`Service::recall_delegation`], `handle_scheduled`).
    pub fn handle_in_memory(&self, frame: &Frame) -> Result<Frame, Met> {
        self.handle_once(frame, &self.request(frame, None))
    }

    /// One attempt at request `r`, which `frame` holds: its reply, or the
    /// delegation it met (it then has none).
    fn handle_once(&self, frame: &Frame, r: &Request) -> Result<Frame, Met> {
        if self.config.settings.sync != SyncMode::Replay {
            return self.answer(frame, r);
        }
        let mut reply = self.answer(frame, r)?;
        let (seq, handles) = r.kept().map(Kept::finish).unwrap_or_default();
        let commit = Commit {
            seq: if reply.header.status == 0 { seq } else { 0 },
            flushed: self.meta.durable_seq(),
        };
        if commit.pending() {
            assert!(
                reply.payload.is_empty(),
                "a change's reply carries no payload"
            );
            reply.payload = Bytes::from(Allocations { handles }.encode_to_vec());
        }
        Ok(reply.with_commit(commit))
    }

    /// The reply that refuses `frame`'s request with `e` before any handler
    /// saw it (`auth::user_peers`); counted as a failed request of its op.
    pub fn refusal(&self, frame: &Frame, e: ShoalError) -> Frame {
        let body = Reply::new(ErrorReply { message: e.message }).encode().body;
        let out = Frame::reply_to(&frame.header, e.errno.0, body, Bytes::new());
        self.stats.record(
            frame.header.op,
            &Sample {
                ok: false,
                bytes_in: frame.wire_len(),
                bytes_out: out.wire_len(),
                syncs: 0,
                latency: Duration::ZERO,
            },
        );
        out
    }

    /// Answers request `r`, which `frame` holds: from the reply cache if it
    /// is a copy of one applied, else by its handler; Err: the handler met
    /// a delegation, and nothing answers this attempt.
    fn answer(&self, frame: &Frame, r: &Request) -> Result<Frame, Met> {
        let started = Instant::now();
        let key = reply_cache::key_of(&frame.header);
        let _running = key.map(|k| self.replies.begin(k));
        let resent = key.filter(|_| frame.header.client.resent);
        if let Some(body) = resent.and_then(|k| self.cached_reply(k)) {
            self.stats.cached_replies.fetch_add(1, Ordering::Relaxed);
            return Ok(Frame::reply_to(&frame.header, 0, body, Bytes::new()));
        }
        let (status, reply) = match dispatch(self, r) {
            Ok(reply) => (0, reply),
            Err(Stop::Met(met)) => return Err(met),
            Err(Stop::Failed(e)) => {
                tracing::debug!(
                    op = frame.header.op.name(),
                    errno = e.errno.0,
                    "{}",
                    e.message
                );
                (
                    e.errno.0,
                    Reply::new(ErrorReply { message: e.message }).encode(),
                )
            }
        };
        let mut out = Frame::reply_to(&frame.header, status, reply.body, reply.payload);
        if status == 0 && self.leases.grant(&r.leasing()) {
            out = out.leased();
        }
        self.stats.record(
            frame.header.op,
            &Sample {
                ok: status == 0,
                bytes_in: frame.wire_len(),
                bytes_out: out.wire_len(),
                syncs: reply.syncs,
                latency: started.elapsed(),
            },
        );
        Ok(out)
    }
}
