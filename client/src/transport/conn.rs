//! One TCP connection to one server, shared by every request of the process and
//! multiplexed by request id: callers send concurrently and each waits only for
//! its own reply. A caller writes its request itself (`FrameSink`: no hand-off
//! to another task unless the socket is full); a reader task routes replies.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::transport::authority::Proving;
use bytes::Bytes;
use prost::Message;
use shoal_net::sink::FrameSink;
use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::frame::{read_frame_head, ClientRef, Frame, FrameError, FrameHead, Kind};
use shoal_proto::msg::{ErrorReply, RecallRequest};
use shoal_proto::{Cred, Op};
use tokio::io::{AsyncRead, BufReader};
use tokio::sync::{oneshot, Notify, Semaphore};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

use crate::transport::landing::{Landing, Lent};

type Pending = Arc<Mutex<HashMap<u64, Waiter>>>;

/// A caller waiting for its reply, with the memory its payload may land in.
/// Dropped without an arrival (a reader that panicked), it tells its caller
/// the reply is lost and gives the landing back.
struct Waiter {
    /// None once the arrival is sent.
    reply: Option<oneshot::Sender<Arrival>>,
    landing: Option<Box<dyn Landing>>,
}

/// What a waiter gets: its reply (None: the connection ended first), and
/// its landing back, holding `landed` bytes of the reply's payload if the
/// payload went there (the reply's own payload is then empty).
struct Arrival {
    reply: Option<Frame>,
    landing: Option<Box<dyn Landing>>,
    landed: Option<usize>,
}

impl Waiter {
    /// Reads the rest of the reply `head` from `r`, its payload into the
    /// waiter's landing if it has one with room for it and the reply
    /// succeeded, and hands it over. An error ends the connection; the
    /// waiter then learns it lost the reply, and gets its landing back.
    async fn receive<R: AsyncRead + Unpin>(
        mut self,
        head: FrameHead,
        r: &mut R,
    ) -> std::result::Result<(), FrameError> {
        let n = head.payload_len;
        let room = self.landing.as_mut().map_or(0, |l| l.space().len());
        let fits = head.header.status == 0 && n <= room;
        let read = match self.landing.as_mut().filter(|_| fits) {
            Some(l) => head
                .read_payload_into(r, &mut l.space()[..n])
                .await
                .map(|frame| (frame, Some(n))),
            _ => head.read_payload(r).await.map(|frame| (frame, None)),
        };
        match read {
            Ok((frame, landed)) => {
                self.arrive(Some(frame), landed);
                Ok(())
            }
            Err(e) => {
                self.arrive(None, None);
                Err(e)
            }
        }
    }

    fn arrive(mut self, reply: Option<Frame>, landed: Option<usize>) {
        self.send(reply, landed);
    }

    fn send(&mut self, reply: Option<Frame>, landed: Option<usize>) {
        if let Some(tx) = self.reply.take() {
            // A caller that gave up drops what arrives, its landing with it.
            let _ = tx.send(Arrival {
                reply,
                landing: self.landing.take(),
                landed,
            });
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.send(None, None);
    }
}

/// What a server's lease recall asks of the client (see `leases`): drop
/// what it caches of some objects, or, when the connection ended, of every
/// object that server leased it.
pub enum Recalled {
    Objects(Vec<shoal_proto::Handle>),
    Everything,
    /// This client's own change outdated what an answer said of these
    /// objects' attributes (see `leases`): the front end drops the
    /// attributes it passed on, not the names. Never sent by a server.
    Attributes(Vec<shoal_proto::Handle>),
    /// Directory delegations (`delegations`): the client's own
    /// business, never handed to a front end's hook.
    Delegations(Vec<shoal_proto::Handle>),
}

/// Carries out a recall and resolves once it is done; the connection
/// answers the server then.
pub type OnRecall = Arc<dyn Fn(Recalled) -> futures::future::BoxFuture<'static, ()> + Send + Sync>;

pub struct Connection {
    server: u32,
    addr: SocketAddr,
    sink: Arc<FrameSink>,
    pending: Pending,
    permits: Semaphore,
    alive: Arc<AtomicBool>,
    /// Which start of the server this connection reaches (its verifier,
    /// learned by the pool's `recover` with `sync = "replay"`; else 0).
    boot: AtomicU64,
    /// Signalled once when the connection ends (see [`Connection::ended`]).
    ended: Arc<Notify>,
    /// Lease recalls received so far: a reply that grants a lease while a
    /// recall arrived is not trusted with it (the grant may predate the
    /// change the recall is for).
    recalls: Arc<AtomicU64>,
    credential_expires_s: Option<u64>,
}

impl Connection {
    /// Connects to `server` at `addr` and proves what `proving` holds (the
    /// secret, a user credential, or nothing) before any request (a refusal
    /// is EACCES).
    pub async fn connect(
        server: u32,
        addr: SocketAddr,
        max_inflight: usize,
        proving: &Proving,
        on_recall: OnRecall,
    ) -> Result<Connection> {
        let proof = proving.proof();
        let stream = shoal_net::connect::connect(server, addr, CONNECT_TIMEOUT, proof).await?;
        let (read_half, write_half) = stream.into_split();
        let sink = Arc::new(FrameSink::new(write_half));
        let pending: Pending = Arc::default();
        let alive = Arc::new(AtomicBool::new(true));
        let ended = Arc::new(Notify::new());
        let recalls = Arc::new(AtomicU64::new(0));
        tokio::spawn(flush_queued(sink.clone(), alive.clone()));
        let reader = Reader {
            pending: pending.clone(),
            alive: alive.clone(),
            sink: sink.clone(),
            addr,
            ended: ended.clone(),
            recalls: recalls.clone(),
            on_recall,
        };
        tokio::spawn(reader.route(BufReader::with_capacity(
            shoal_net::receive::RECEIVE_BUFFER,
            read_half,
        )));
        Ok(Connection {
            server,
            addr,
            sink,
            pending,
            permits: Semaphore::new(max_inflight),
            alive,
            boot: AtomicU64::new(0),
            ended,
            recalls,
            credential_expires_s: proving.expires_s(),
        })
    }

    /// When the user credential this connection was opened with expires
    /// (its server ends it then), if it was opened with one.
    pub fn credential_expires_s(&self) -> Option<u64> {
        self.credential_expires_s
    }

    /// Resolves once the connection has ended (the server closed it, died
    /// or restarted), whether or not anyone was calling on it then. Holds
    /// no reference to the connection, so a watcher can outlive it.
    pub fn ended(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let ended = self.ended.clone();
        async move { ended.notified().await }
    }

    pub fn boot(&self) -> u64 {
        self.boot.load(Ordering::Relaxed)
    }

    pub fn set_boot(&self, verifier: u64) {
        self.boot.store(verifier, Ordering::Relaxed);
    }

    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }

    /// Sends one request, `id` (unique among the requests in flight on this
    /// connection) from `client`, and waits for its reply; a failed reply
    /// becomes the error it carries. A reply's lease counts only if no
    /// recall arrived while the request was out. With `lent`, the reply's
    /// payload lands in the caller's memory if it fits (see `landing`; the
    /// landing is back in `lent` when this returns).
    #[allow(clippy::too_many_arguments)]
    pub async fn call(
        &self,
        op: Op,
        id: u64,
        client: ClientRef,
        cred: Cred,
        body: Bytes,
        payload: Bytes,
        lent: Option<&Lent>,
    ) -> Result<Frame> {
        // A request that may wait at the server (a lock another process
        // holds) takes no slot: enough waiters would leave none for the
        // unlock they wait for.
        let _permit = if op.may_wait() {
            None
        } else {
            Some(self.permits.acquire().await.map_err(|_| self.lost())?)
        };
        let recalls = self.recalls.load(Ordering::SeqCst);
        let (reply_tx, reply_rx) = oneshot::channel();
        let waiter = Waiter {
            reply: Some(reply_tx),
            landing: lent.and_then(Lent::take),
        };
        let clash = self.pending.lock().unwrap().insert(id, waiter);
        assert!(clash.is_none(), "request id {id} sent twice at once");
        let frame = Frame::request(op, id, cred, body, payload).from_client(client);
        if self.sink.send(&frame).is_err() {
            if let Some(waiter) = self.pending.lock().unwrap().remove(&id) {
                waiter.arrive(None, None);
            }
        }
        let arrival = reply_rx.await.map_err(|_| self.lost())?;
        if let (Some(lent), Some(landing)) = (lent, arrival.landing) {
            lent.give_back(landing, arrival.landed);
        }
        let mut reply = arrival.reply.ok_or_else(|| self.lost())?;
        if reply.header.leased && self.recalls.load(Ordering::SeqCst) != recalls {
            reply.header.leased = false;
        }
        if reply.header.status != 0 {
            let message = ErrorReply::decode(reply.body.clone())
                .map(|e| e.message)
                .unwrap_or_default();
            let errno = Errno(reply.header.status);
            let message = if message.is_empty() {
                errno.describe()
            } else {
                message
            };
            return Err(ShoalError::new(errno, message));
        }
        Ok(reply)
    }

    fn lost(&self) -> ShoalError {
        self.alive.store(false, Ordering::Relaxed);
        ShoalError::new(
            Errno::EIO,
            format!(
                "connection to server {} at {} was lost",
                self.server, self.addr
            ),
        )
    }
}

impl Drop for Connection {
    /// A client dropped (or a connection replaced) ends its connection at
    /// once: the server then forgets its leases instead of recalling them.
    fn drop(&mut self) {
        self.sink.shut_down();
    }
}

async fn flush_queued(sink: Arc<FrameSink>, alive: Arc<AtomicBool>) {
    let _ = sink.flush_queued().await;
    alive.store(false, Ordering::Relaxed);
}

/// The reading half of a connection: routes replies to their callers and
/// carries out the server's lease recalls.
struct Reader {
    pending: Pending,
    alive: Arc<AtomicBool>,
    sink: Arc<FrameSink>,
    addr: SocketAddr,
    ended: Arc<Notify>,
    recalls: Arc<AtomicU64>,
    on_recall: OnRecall,
}

impl Reader {
    async fn route<R: tokio::io::AsyncRead + Unpin>(self, mut r: R) {
        let addr = self.addr;
        loop {
            let head = match read_frame_head(&mut r).await {
                Ok(head) => head,
                Err(e) => {
                    tracing::debug!("connection to {addr} ended: {e}");
                    break;
                }
            };
            let read = match head.header.kind {
                Kind::Reply => {
                    let waiter = self.pending.lock().unwrap().remove(&head.header.id);
                    match waiter {
                        Some(waiter) => waiter.receive(head, &mut r).await,
                        // Its caller gave up: read past it.
                        None => head.read_payload(&mut r).await.map(drop),
                    }
                }
                Kind::Request if head.header.op == Op::Recall => {
                    match head.read_payload(&mut r).await {
                        Ok(frame) => {
                            if let Err(e) = self.recall(frame) {
                                tracing::warn!("server at {addr} sent a bad recall ({e}); closing");
                                break;
                            }
                            Ok(())
                        }
                        Err(e) => Err(e),
                    }
                }
                Kind::Request => {
                    let op = head.header.op.name();
                    tracing::warn!("server at {addr} sent a {op} request; closing");
                    break;
                }
            };
            if let Err(e) = read {
                tracing::debug!("connection to {addr} ended: {e}");
                break;
            }
        }
        self.alive.store(false, Ordering::Relaxed);
        self.sink.close();
        // Every waiter learns its reply is lost, and gets its landing back.
        let waiters: Vec<Waiter> = {
            let mut pending = self.pending.lock().unwrap();
            pending.drain().map(|(_, w)| w).collect()
        };
        for waiter in waiters {
            waiter.arrive(None, None);
        }
        // The server forgets this client's leases with the connection.
        tokio::spawn((self.on_recall)(Recalled::Everything));
        // One watcher at most (the pool's): notify_one keeps the wake-up for
        // it even if it starts waiting only later.
        self.ended.notify_one();
    }

    /// Counts the recall (before any reply that follows it is routed), and
    /// answers it once the caches are dropped, on a task of its own so that
    /// replies keep flowing meanwhile.
    fn recall(&self, frame: Frame) -> Result<()> {
        let request = RecallRequest::decode(frame.body.clone())
            .map_err(|e| ShoalError::protocol(format!("recall body: {e}")))?;
        self.recalls.fetch_add(1, Ordering::SeqCst);
        let objects = (self.on_recall)(Recalled::Objects(request.handles));
        let delegations = (!request.delegations.is_empty())
            .then(|| (self.on_recall)(Recalled::Delegations(request.delegations)));
        let sink = self.sink.clone();
        tokio::spawn(async move {
            objects.await;
            if let Some(sent) = delegations {
                sent.await;
            }
            let answer = Frame::reply_to(&frame.header, 0, Bytes::new(), Bytes::new());
            let _ = sink.send(&answer);
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::landing::Memory;
    use shoal_proto::frame::write_frame;

    /// A read reply's bytes on the wire, with `status` and `payload`.
    async fn wire(status: i32, payload: &[u8]) -> Vec<u8> {
        let request = Frame::request(Op::Read, 9, Cred::new(0, 0), Bytes::new(), Bytes::new());
        let reply = Frame::reply_to(
            &request.header,
            status,
            Bytes::from_static(b"body"),
            Bytes::copy_from_slice(payload),
        );
        let mut w = Vec::new();
        write_frame(&mut w, &reply).await.unwrap();
        w
    }

    /// What a waiter with a landing of `room` bytes gets from `wire`, cut
    /// after `cut` bytes.
    async fn arrive(wire: &[u8], room: usize, cut: usize) -> (bool, Arrival) {
        let (tx, rx) = oneshot::channel();
        let waiter = Waiter {
            reply: Some(tx),
            landing: Some(Box::new(Memory(vec![b'.'; room]))),
        };
        let mut r = &wire[..cut];
        let head = read_frame_head(&mut r).await.unwrap();
        let ok = waiter.receive(head, &mut r).await.is_ok();
        (ok, rx.await.unwrap())
    }

    fn landed_bytes(a: Arrival) -> Vec<u8> {
        let any: Box<dyn std::any::Any> = a.landing.expect("the landing comes back");
        any.downcast::<Memory>().unwrap().0
    }

    #[tokio::test]
    async fn a_reply_payload_lands_where_it_fits() {
        let w = wire(0, b"hello").await;
        let (ok, a) = arrive(&w, 8, w.len()).await;
        assert!(ok);
        assert_eq!(a.landed, Some(5));
        let frame = a.reply.as_ref().unwrap();
        assert!(
            frame.payload.is_empty(),
            "a landed payload is not also in the frame"
        );
        assert_eq!(&frame.body[..], b"body");
        assert_eq!(landed_bytes(a), b"hello...");
    }

    #[tokio::test]
    async fn a_payload_too_large_or_an_error_stays_in_the_reply() {
        let w = wire(0, b"hello").await;
        let (ok, a) = arrive(&w, 4, w.len()).await;
        assert!(ok);
        assert_eq!(a.landed, None);
        assert_eq!(&a.reply.as_ref().unwrap().payload[..], b"hello");
        assert_eq!(landed_bytes(a), b"....", "the landing is untouched");

        let w = wire(Errno::EIO.0, b"").await;
        let (ok, a) = arrive(&w, 4, w.len()).await;
        assert!(ok);
        assert_eq!(a.landed, None, "a failed reply lands nothing");
        assert_eq!(a.reply.unwrap().header.status, Errno::EIO.0);
    }

    #[tokio::test]
    async fn a_connection_lost_mid_payload_gives_the_landing_back() {
        let w = wire(0, b"hello").await;
        let (ok, a) = arrive(&w, 8, w.len() - 2).await;
        assert!(!ok, "a cut frame ends the connection");
        assert!(a.reply.is_none(), "the waiter learns its reply is lost");
        assert_eq!(a.landed, None);
        assert_eq!(
            landed_bytes(a).len(),
            8,
            "and has its landing back, to send again"
        );
    }

    #[tokio::test]
    async fn a_waiter_dropped_unanswered_gives_its_landing_back() {
        let (tx, rx) = oneshot::channel();
        drop(Waiter {
            reply: Some(tx),
            landing: Some(Box::new(Memory(vec![1; 3]))),
        });
        let a = rx.await.expect("an arrival, not a dropped channel");
        assert!(a.reply.is_none());
        assert_eq!(landed_bytes(a), [1, 1, 1]);
    }
}
