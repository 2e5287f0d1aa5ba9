//! One request as its handler sees it ([`Request`]): what its frame says,
//! whom it acts for, and the context of its handling, which the handler
//! hands on, explicitly, to whatever needs it: `Service::change` (the
//! commit ticket, the reply to record with the change, the change its
//! client keeps), the store's reads (the client whose reads meet other
//! clients' directory delegations), the precreate pools and peers (the
//! ticket it gives back before it waits on them) and the leases its
//! answer offers.
//!
//! A request is handled in attempts: one that meets a directory delegated
//! to another client stops (`delegations::Stop::Met`), and once the
//! delegation is recalled the request runs again as a new `Request`
//! (`Service::handle`). Everything here belongs to one attempt but the
//! ticket, which passes from each attempt to the next.
//!
//! A handler runs on one thread from start to end, and hands its request
//! on by shared reference (a change's closure reads it too): what changes
//! as it runs is in cells.

use std::cell::{Cell, RefCell, RefMut};

use bytes::Bytes;
use prost::Message;
use shoal_proto::cluster::ClusterConfig;
use shoal_proto::error::ShoalError;
use shoal_proto::frame::{ClientRef, Frame, Header};
use shoal_proto::{Cred, Handle, Operation};

use crate::commit::Ticket;
use crate::delegations::{Delegations, Reader, Stop};
use crate::leases;
use crate::replay::Kept;
use crate::reply_cache;

/// What a handler and what it calls return: a value, or why the request's
/// attempt stopped (an error that answers it, or a delegation it met).
pub type Result<T, E = Stop> = std::result::Result<T, E>;

/// One request, one attempt at it, as a handler sees it.
pub struct Request<'a> {
    pub header: &'a Header,
    /// Who the request acts for: the header's credentials, root-squashed
    /// when the cluster says so. Every permission check uses this.
    pub cred: Cred,
    pub body: &'a Bytes,
    pub payload: &'a Bytes,
    /// The client whose reads of the store meet the directory delegations
    /// other clients hold (0: a server or an operator, who meet them all);
    /// None before the request is handled (see [`Request::of`]).
    asking: Option<u64>,
    /// The request's place in the commit queue's scheduling queue, if it
    /// holds one (`commit`).
    ticket: RefCell<Option<Ticket>>,
    /// Whether the next change records the reply with it: the operation's
    /// replies are cached and none is recorded yet (`reply_cache`).
    reply_unrecorded: Cell<bool>,
    /// What the answer does with leases: the leases it offers, the stamps
    /// of its own changes (`leases`).
    leasing: RefCell<leases::Answer>,
    /// With `sync = "replay"`, the change its client keeps until it is
    /// durable (`replay`).
    kept: Option<Kept>,
}

impl<'a> Request<'a> {
    /// The request `frame` holds, acting for its caller as `config` says
    /// (root squash is applied here, and only here), as it is before it is
    /// handled: sorted (`Service::stays_in_memory`), or served on its
    /// connection's task where no recall could be waited for (a lock,
    /// `Service::serve_lock`). Its reads meet no delegation, and it has no
    /// context of a handling yet ([`Request::handled`]).
    pub fn of(frame: &'a Frame, config: &ClusterConfig) -> Request<'a> {
        let cred = frame.header.cred;
        Request {
            header: &frame.header,
            cred: if config.settings.root_squash {
                cred.squashed()
            } else {
                cred
            },
            body: &frame.body,
            payload: &frame.payload,
            asking: None,
            ticket: RefCell::new(None),
            reply_unrecorded: Cell::new(false),
            leasing: RefCell::default(),
            kept: None,
        }
    }

    /// The request about to be handled (one attempt at it): holding
    /// `ticket`, with its change `kept` by its client (`sync = "replay"`)
    /// and its answer's leases in `leasing`. Its reads meet the directory
    /// delegations other clients hold, and its first change records its
    /// reply if its operation's replies are cached.
    pub fn handled(
        self,
        ticket: Option<Ticket>,
        kept: Option<Kept>,
        leasing: leases::Answer,
    ) -> Request<'a> {
        Request {
            asking: Some(self.header.client.client),
            ticket: RefCell::new(ticket),
            reply_unrecorded: Cell::new(reply_cache::key_of(self.header).is_some()),
            leasing: RefCell::new(leasing),
            kept,
            ..self
        }
    }

    /// The body as the request of operation `O`.
    pub fn decode<O: Operation>(&self) -> Result<O::Request, ShoalError> {
        debug_assert_eq!(self.header.op, O::OP, "a request decoded as another op's");
        O::Request::decode(self.body.clone()).map_err(|e| {
            ShoalError::protocol(format!("{} request body: {e}", self.header.op.name()))
        })
    }

    /// Offers the client a lease on `h`, recalled as `recall_as`, with
    /// this answer (`leases`).
    pub fn offer(&self, h: Handle, recall_as: Handle) {
        self.leasing.borrow_mut().offer(h, recall_as);
    }

    /// What the answer does with leases so far, for `Leases::changed` (a
    /// change of this request's own) and `Leases::grant`.
    pub fn leasing(&self) -> RefMut<'_, leases::Answer> {
        self.leasing.borrow_mut()
    }

    /// For a handler about to wait on something other than this server's
    /// store (a call to a peer: `Pools::ensure`, `Pools::create_remote`,
    /// `access`): leaves the commit queue's scheduling queue now. Requests
    /// deferred behind it would otherwise wait for it, and if the peer's
    /// reply itself waits on a deferred request there, for each other (until
    /// the stall limit). Its later apply then decides like a request that
    /// was never queued. (In PVFS terms, it is no longer waiting for the
    /// storage thread.)
    pub fn leave_scheduling_queue(&self) {
        drop(self.take_ticket());
    }

    /// The request's ticket, for `CommitQueue::make_durable` once its
    /// changes are applied (None after that, or if it left).
    pub fn take_ticket(&self) -> Option<Ticket> {
        self.ticket.take()
    }

    /// The ticket this attempt still holds, for the next attempt.
    pub fn into_ticket(self) -> Option<Ticket> {
        self.ticket.into_inner()
    }

    /// The request whose reply a change records with it (`reply_cache`),
    /// if there is one to record: the first change that asks records it
    /// (a request records one reply).
    pub fn reply_to_record(&self) -> Option<(ClientRef, u64)> {
        self.reply_unrecorded
            .take()
            .then_some((self.header.client, self.header.id))
    }

    /// The change the request's client keeps until it is durable, if it
    /// does (`replay`).
    pub fn kept(&self) -> Option<&Kept> {
        self.kept.as_ref()
    }
}

impl Reader for Request<'_> {
    type Error = Stop;

    fn meet(&self, delegations: &Delegations, h: Handle) -> Result<()> {
        match self.asking {
            Some(client) => Ok(delegations.check(client, h)?),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use shoal_proto::handle::ROOT;
    use shoal_proto::Op;

    use super::*;
    use crate::delegations::{Met, ServerItself};
    use crate::kv::MemEngine;
    use crate::meta_store::MetaStore;

    /// A cluster's settings (a request reads nothing else of it).
    fn config() -> ClusterConfig {
        ClusterConfig {
            secret_file: None,
            broker_socket: None,
            loaded_from: None,
            settings: Default::default(),
            servers: Vec::new(),
        }
    }

    fn from(client: u64) -> Frame {
        Frame::request(Op::Lookup, 9, Cred::ROOT, Bytes::new(), Bytes::new()).from_client(
            ClientRef {
                client,
                acked: 0,
                resent: false,
            },
        )
    }

    #[test]
    fn a_handled_requests_read_stops_at_another_clients_delegation() {
        let meta = MetaStore::open(Arc::new(MemEngine::default()), 0).unwrap();
        assert!(meta.delegations.grant(ROOT, 1));
        let config = config();
        let handled =
            |frame| Request::of(frame, &config).handled(None, None, leases::Answer::default());
        let (holder, other) = (from(1), from(2));
        assert!(meta.get_dir(&handled(&holder), ROOT).is_ok(), "its own");
        match meta.get_dir(&handled(&other), ROOT) {
            Err(Stop::Met(met)) => assert_eq!(
                met,
                Met {
                    dir: ROOT,
                    holder: 1
                }
            ),
            other => panic!("another client's read went on: {other:?}"),
        }
        assert!(
            meta.get_dir(&Request::of(&other, &config), ROOT).is_ok(),
            "not handled yet"
        );
        assert!(meta.get_dir(&ServerItself, ROOT).is_ok());
    }

    #[test]
    fn a_cached_reply_is_recorded_once() {
        let config = config();
        let mut create = from(7);
        create.header.op = Op::CreateObject;
        let r = Request::of(&create, &config).handled(None, None, leases::Answer::default());
        assert_eq!(r.reply_to_record(), Some((create.header.client, 9)));
        assert_eq!(r.reply_to_record(), None, "one reply per request");
        let lookup = from(7);
        let r = Request::of(&lookup, &config).handled(None, None, leases::Answer::default());
        assert_eq!(r.reply_to_record(), None, "a lookup's reply is not cached");
    }
}
