//! One TCP connection to one server, shared by every request of the process and
//! multiplexed by request id: callers send concurrently and each waits only for
//! its own reply. A caller writes its request itself (`FrameSink`: no hand-off
//! to another task unless the socket is full); a reader task routes replies.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use prost::Message;
use shoal_net::sink::FrameSink;
use shoal_proto::auth::Secret;
use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::frame::{read_frame, ClientRef, Frame, Kind};
use shoal_proto::msg::{ErrorReply, RecallRequest};
use shoal_proto::{Cred, Op};
use tokio::io::BufReader;
use tokio::sync::{oneshot, Notify, Semaphore};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const BUFFER: usize = 256 << 10;

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Frame>>>>;

/// What a server's lease recall asks of the client (see `leases`): drop
/// what it caches of some objects, or, when the connection ended, of every
/// object that server leased it.
pub enum Recalled {
    Objects(Vec<shoal_proto::Handle>),
    Everything,
    /// Directory delegations (`delegated_creates`): the client's own
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
}

impl Connection {
    /// Connects to `server` at `addr` and, with a `secret`, proves it before
    /// any request (a refusal is EACCES).
    pub async fn connect(
        server: u32,
        addr: SocketAddr,
        max_inflight: usize,
        secret: Option<&Secret>,
        on_recall: OnRecall,
    ) -> Result<Connection> {
        let stream = shoal_net::connect::connect(server, addr, CONNECT_TIMEOUT, secret).await?;
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
        tokio::spawn(reader.route(BufReader::with_capacity(BUFFER, read_half)));
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
        })
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
    /// becomes the error it carries. A reply's lease is kept only if no
    /// recall arrived while the request was out.
    pub async fn call(
        &self,
        op: Op,
        id: u64,
        client: ClientRef,
        cred: Cred,
        body: Bytes,
        payload: Bytes,
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
        let clash = self.pending.lock().unwrap().insert(id, reply_tx);
        assert!(clash.is_none(), "request id {id} sent twice at once");
        let frame = Frame::request(op, id, cred, body, payload).from_client(client);
        if self.sink.send(&frame).is_err() {
            self.pending.lock().unwrap().remove(&id);
            return Err(self.lost());
        }
        let mut reply = reply_rx.await.map_err(|_| self.lost())?;
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
            match read_frame(&mut r).await {
                Ok(frame) if frame.header.kind == Kind::Reply => {
                    let waiter = self.pending.lock().unwrap().remove(&frame.header.id);
                    if let Some(waiter) = waiter {
                        let _ = waiter.send(frame);
                    }
                }
                Ok(frame) if frame.header.op == Op::Recall => {
                    if let Err(e) = self.recall(frame) {
                        tracing::warn!("server at {addr} sent a bad recall ({e}); closing");
                        break;
                    }
                }
                Ok(frame) => {
                    let op = frame.header.op.name();
                    tracing::warn!("server at {addr} sent a {op} request; closing");
                    break;
                }
                Err(e) => {
                    tracing::debug!("connection to {addr} ended: {e}");
                    break;
                }
            }
        }
        self.alive.store(false, Ordering::Relaxed);
        self.sink.close();
        // Dropping the senders wakes every waiter with an error.
        self.pending.lock().unwrap().clear();
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
