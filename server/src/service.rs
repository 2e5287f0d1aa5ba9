//! A server's state, and how one request frame becomes one reply frame.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use prost::Message;
use shoal_proto::auth::Secret;
use shoal_proto::cluster::ClusterConfig;
use shoal_proto::error::{Result, ShoalError};
use shoal_proto::frame::{Frame, Header};
use shoal_proto::msg::ErrorReply;
use shoal_proto::{Cred, Operation};

use crate::commit::{CommitQueue, Ticket, TicketScope};
use crate::data_store::DataStore;
use crate::handlers;
use crate::kv::{KvEngine, RedbEngine, WalEngine};
use crate::meta_store::MetaStore;
use crate::pools::Pools;
use crate::stats::{Sample, Stats};

pub struct Service {
    pub id: u32,
    pub config: ClusterConfig,
    pub data_dir: std::path::PathBuf,
    pub meta: MetaStore,
    pub data: DataStore,
    pub commit: CommitQueue,
    /// Precreate pools and the connections to the other servers.
    pub pools: Pools,
    pub stats: Stats,
    pub started: Instant,
    /// Drawn at start: file data acknowledged by this process and not yet
    /// fsynced dies with it, and clients tell by a changed verifier.
    pub verifier: u64,
    /// The cluster secret, which signs and checks capabilities; `None` on a
    /// scratch cluster (no capabilities: data requests are not checked).
    pub secret: Option<Secret>,
}

/// One request as a handler sees it.
pub struct Request<'a> {
    pub header: &'a Header,
    /// Who the request acts for: the header's credentials, root-squashed
    /// when the cluster says so. Every permission check uses this.
    pub cred: Cred,
    pub body: &'a Bytes,
    pub payload: &'a Bytes,
}

/// What a handler returns: its reply message `M` (the reply of its
/// operation, see `handlers::dispatch`), raw payload, syncs it took.
#[derive(Default)]
pub struct Reply<M> {
    pub message: M,
    pub payload: Bytes,
    pub syncs: u64,
}

impl<M: Message> Reply<M> {
    pub fn new(message: M) -> Reply<M> {
        Reply {
            message,
            payload: Bytes::new(),
            syncs: 0,
        }
    }
    pub fn with_syncs(mut self, syncs: u64) -> Reply<M> {
        self.syncs = syncs;
        self
    }
    /// The reply as it goes on the wire.
    pub fn encode(self) -> Encoded {
        Encoded {
            body: Bytes::from(self.message.encode_to_vec()),
            payload: self.payload,
            syncs: self.syncs,
        }
    }
}

/// A reply encoded: body, raw payload, syncs it took.
pub struct Encoded {
    pub body: Bytes,
    pub payload: Bytes,
    pub syncs: u64,
}

impl<'a> Request<'a> {
    /// The request `frame` holds, acting for its caller as `config` says.
    /// Root squash is applied here, and only here.
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
        }
    }

    /// The body as the request of operation `O`.
    pub fn decode<O: Operation>(&self) -> Result<O::Request> {
        debug_assert_eq!(self.header.op, O::OP, "a request decoded as another op's");
        O::Request::decode(self.body.clone()).map_err(|e| {
            ShoalError::protocol(format!("{} request body: {e}", self.header.op.name()))
        })
    }
}

impl Service {
    /// Opens server `id` of `config` with its on-disk KV store.
    pub fn open(config: ClusterConfig, id: u32) -> Result<Service> {
        let entry = config.server(id)?.clone();
        let store = RedbEngine::open(&entry.data)?;
        let kv: Arc<dyn KvEngine> = if config.settings.metadata_log {
            Arc::new(WalEngine::open(store, &entry.data)?)
        } else {
            Arc::new(WalEngine::retire(store, &entry.data)?)
        };
        Service::with_engine(config, id, kv, &entry.data)
    }

    pub fn with_engine(
        config: ClusterConfig,
        id: u32,
        kv: Arc<dyn KvEngine>,
        data_dir: &Path,
    ) -> Result<Service> {
        let secret = config.secret()?;
        let meta = MetaStore::open(kv, id)?;
        let data = DataStore::new(data_dir, config.settings.inline_max)?;
        let pools = Pools::open(&config, id, &meta)?;
        Ok(Service {
            pools,
            id,
            commit: CommitQueue::from_settings(&config.settings),
            config,
            data_dir: data_dir.to_path_buf(),
            meta,
            data,
            stats: Stats::default(),
            started: Instant::now(),
            verifier: rand::random(),
            secret,
        })
    }

    /// Handles a request that holds `ticket`, its place in the commit
    /// queue's scheduling queue (taken by the listener when the frame
    /// arrived). The ticket is available to the commit queue while the
    /// handler runs, which gives it back once the request's changes are
    /// applied; if the handler never gets there, the ticket is given back
    /// when this returns, so that the queue never counts a request that is
    /// gone.
    pub fn handle_scheduled(&self, frame: &Frame, ticket: Option<Ticket>) -> Frame {
        let _scope = TicketScope::enter(ticket);
        self.handle(frame)
    }

    /// Whether `frame` can be answered without waiting on a disk, a sync or
    /// another server, so that handing it to another thread would cost more
    /// than answering it (see `handlers::stays_in_memory`).
    pub fn stays_in_memory(&self, frame: &Frame) -> bool {
        handlers::stays_in_memory(self, &Request::of(frame, &self.config))
    }

    /// Handles one request frame and builds its reply; never panics on bad input.
    pub fn handle(&self, frame: &Frame) -> Frame {
        let started = Instant::now();
        let result = handlers::dispatch(self, &Request::of(frame, &self.config));
        let (status, reply) = match result {
            Ok(r) => (0, r),
            Err(e) => {
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
        let out = Frame::reply_to(&frame.header, status, reply.body, reply.payload);
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
        out
    }
}
