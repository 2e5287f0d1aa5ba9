//! Server-to-server requests: the small client a server uses to ask its peers
//! for datafiles (precreate pool refills, and unstuffing when precreate is
//! off), for the record of an object a permission check needs (the owner
//! of an entry's object in a sticky directory), and to write out and sync
//! the bytes it gathered (`gathering`). A few connections per peer
//! ([`CONNS_PER_PEER`]), each opened on first use and dropped on any error,
//! each carrying one request at a time: a call takes a free one, or waits
//! for one; every call is bounded by a timeout so a dead peer never hangs a
//! caller.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use shoal_proto::auth::{Proof, Secret};
use shoal_proto::cluster::ClusterConfig;
use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::frame::{read_frame, write_frame, Frame, Kind};
use shoal_proto::handle::{server_of, Handle};
use shoal_proto::msg::{ErrorReply, GetAttrRequest, ObjectRecord};
use shoal_proto::{ops, Cred, Operation};
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::Mutex;

/// How long connecting to a peer may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a peer may take to answer for an object's record.
const RECORD_WAIT: Duration = Duration::from_secs(5);
const BUFFER: usize = 64 << 10;
/// Connections to each peer: how many requests to it may be under way at
/// once (write-outs of gathered bytes go several at a time).
pub const CONNS_PER_PEER: usize = 4;

struct PeerConn {
    reader: BufReader<OwnedReadHalf>,
    writer: BufWriter<OwnedWriteHalf>,
}

pub struct Peers {
    id: u32,
    addrs: Vec<SocketAddr>,
    conns: Vec<[Mutex<Option<PeerConn>>; CONNS_PER_PEER]>,
    next_id: AtomicU64,
    /// The cluster secret each connection proves, if the cluster has one.
    secret: Option<Secret>,
}

impl Peers {
    /// The peers of server `id` in `config` (no connection is opened yet).
    pub fn new(config: &ClusterConfig, id: u32, secret: Option<Secret>) -> Peers {
        Peers {
            id,
            secret,
            addrs: config.servers.iter().map(|s| s.addr).collect(),
            conns: config
                .servers
                .iter()
                .map(|_| std::array::from_fn(|_| Mutex::new(None)))
                .collect(),
            next_id: AtomicU64::new(1),
        }
    }

    /// Sends `request` to server `peer` and decodes its reply; fails with
    /// ETIMEDOUT if the whole exchange (connecting included) takes longer
    /// than `timeout`, and with the peer's errno if it answers with an error.
    pub async fn call<O: Operation>(
        &self,
        peer: u32,
        request: &O::Request,
        timeout: Duration,
    ) -> Result<O::Reply> {
        self.call_with_payload::<O>(peer, request, Bytes::new(), timeout)
            .await
    }

    /// [`Peers::call`] with raw bytes after the request (file data).
    pub async fn call_with_payload<O: Operation>(
        &self,
        peer: u32,
        request: &O::Request,
        payload: Bytes,
        timeout: Duration,
    ) -> Result<O::Reply> {
        let op = O::OP;
        if peer == self.id {
            return Err(ShoalError::invalid("a server does not call itself"));
        }
        let (slots, addr) = match (self.conns.get(peer as usize), self.addrs.get(peer as usize)) {
            (Some(slots), Some(addr)) => (slots, *addr),
            _ => return Err(ShoalError::invalid(format!("no server {peer}"))),
        };
        let body = Bytes::from(request.encode_to_vec());
        let exchange = async {
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let free = slots.iter().find_map(|s| s.try_lock().ok());
            let mut slot = match free {
                Some(s) => s,
                None => slots[id as usize % CONNS_PER_PEER].lock().await,
            };
            // Taken out while in use: if this future is cancelled (timeout)
            // half way, the connection is dropped rather than reused mid-frame.
            let mut conn = match slot.take() {
                Some(c) => c,
                None => connect(peer, addr, self.secret.as_ref()).await?,
            };
            // Servers ask as root: nothing they ask for needs a right (and
            // under root squash they get none).
            let frame = Frame::request(op, id, Cred::ROOT, body, payload);
            let reply = exchange(&mut conn, &frame).await.map_err(|e| {
                ShoalError::new(
                    Errno::EHOSTUNREACH,
                    format!("server {peer} at {addr}: {} failed: {e}", op.name()),
                )
            })?;
            *slot = Some(conn);
            Ok::<Frame, ShoalError>(reply)
        };
        let reply = tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| {
                ShoalError::new(
                    Errno::ETIMEDOUT,
                    format!(
                        "server {peer} at {addr} did not answer {} within {timeout:?}",
                        op.name()
                    ),
                )
            })??;
        if reply.header.status != 0 {
            let errno = Errno(reply.header.status);
            let message = ErrorReply::decode(reply.body.clone())
                .map(|e| e.message)
                .unwrap_or_else(|_| errno.describe());
            return Err(ShoalError::new(
                errno,
                format!("server {peer}: {} failed: {message}", op.name()),
            ));
        }
        O::Reply::decode(reply.body).map_err(|e| {
            ShoalError::protocol(format!("{} reply from server {peer}: {e}", op.name()))
        })
    }
}

impl Peers {
    /// The record of object `h` as the server holding it has it. For
    /// handlers, which run on the blocking threads of the server's runtime.
    pub fn record(&self, h: Handle) -> Result<ObjectRecord> {
        let rt = tokio::runtime::Handle::try_current()
            .map_err(|_| ShoalError::io("server peers are used outside the server's runtime"))?;
        let reply = rt.block_on(self.call::<ops::GetAttr>(
            server_of(h),
            &GetAttrRequest { handle: h },
            RECORD_WAIT,
        ))?;
        reply.object.ok_or_else(|| {
            ShoalError::protocol(format!("server {} sent no record for {h:#x}", server_of(h)))
        })
    }
}

async fn connect(peer: u32, addr: SocketAddr, secret: Option<&Secret>) -> Result<PeerConn> {
    let stream =
        shoal_net::connect::connect(peer, addr, CONNECT_TIMEOUT, secret.map(Proof::Secret)).await?;
    let (r, w) = stream.into_split();
    Ok(PeerConn {
        reader: BufReader::with_capacity(BUFFER, r),
        writer: BufWriter::with_capacity(BUFFER, w),
    })
}

/// Writes one request and reads frames until its reply arrives.
async fn exchange(conn: &mut PeerConn, frame: &Frame) -> std::result::Result<Frame, String> {
    write_frame(&mut conn.writer, frame)
        .await
        .map_err(|e| e.to_string())?;
    conn.writer.flush().await.map_err(|e| e.to_string())?;
    loop {
        let reply = read_frame(&mut conn.reader)
            .await
            .map_err(|e| e.to_string())?;
        if reply.header.kind != Kind::Reply {
            return Err("peer sent a request frame".into());
        }
        if reply.header.id == frame.header.id {
            return Ok(reply);
        }
    }
}
