//! Accepts connections and serves requests on them concurrently.
//!
//! Per connection: one task reads frames. Requests that stay in memory
//! (`Service::stays_in_memory`) are answered on that task, or, if they
//! change something (and so may wait for other clients' answers to lease
//! recalls, which must never wait behind this client's unread answers), on
//! a task of their own; the others run on
//! the blocking pool (they wait for disk syncs, local files or other
//! servers), as does one of the first kind that meets a directory
//! delegation (it waits for the holder's recall). Replies are
//! written by whoever produced them (`FrameSink`: no hand-off to a writer
//! task unless the socket is full). At most `server_inflight` requests of
//! one connection run at once. A malformed frame closes that connection
//! only.
//!
//! A client's requests name it (`ClientRef`); the connection that carries
//! them also carries the server's lease recalls to it (`leases`), and the
//! client's answers come back as reply frames, the only ones a server takes.
//!
//! Before any frame, a connection proves the cluster secret or a user
//! credential (`auth`); one that does not is closed without a frame read.
//! One opened with a credential acts only for its user (`user_peers`, which
//! refuses any other request alone) and ends when the credential expires.
//! A frame whose first byte has arrived must arrive whole within
//! [`FRAME_TIMEOUT`].

use std::net::SocketAddr;
use std::sync::Arc;

use shoal_net::sink::FrameSink;
use shoal_proto::auth::{server_handshake, Peer, Refusal, Secret};
use shoal_proto::credential::CredentialKey;
use shoal_proto::frame::{read_frame_timeout, Frame, FrameError, Kind};
use shoal_proto::Op;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::io::BufReader;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::auth::user_peers;
use crate::delegations::Met;
use crate::service::Service;

/// How long the rest of a frame may take once its first byte has arrived.
pub const FRAME_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Serves connections; with a `secret`, each must pass the handshake first.
pub async fn serve(listener: TcpListener, service: Arc<Service>, secret: Option<Secret>) {
    let secret = secret.map(|s| {
        let key = CredentialKey::derive(&s);
        Arc::new((s, key))
    });
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                tokio::spawn(serve_connection(
                    stream,
                    peer,
                    service.clone(),
                    secret.clone(),
                ));
            }
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
}

async fn serve_connection(
    mut stream: TcpStream,
    peer: SocketAddr,
    service: Arc<Service>,
    secret: Option<Arc<(Secret, CredentialKey)>>,
) {
    let _ = stream.set_nodelay(true);
    if let Err(e) = shoal_net::keepalive::keep_alive(&stream) {
        tracing::warn!("connection from {peer}: no TCP keepalive: {e}");
    }
    let mut peer_is = Peer::Member;
    if let Some(keys) = &secret {
        match server_handshake(&mut stream, &keys.0, &keys.1).await {
            Ok(p) => peer_is = p,
            Err(Refusal::Closed) => {
                tracing::debug!("connection from {peer} closed before the handshake");
                return;
            }
            Err(e) => {
                tracing::warn!("refused connection from {peer}: {e}");
                return;
            }
        }
    }
    // A user connection: whom it acts for, and until when.
    let user = match peer_is {
        Peer::Member => None,
        Peer::User { cred, expires_s } => {
            service
                .stats
                .user_connections
                .fetch_add(1, Ordering::Relaxed);
            tracing::debug!("connection from {peer} acts for {cred:?}");
            Some((cred, expires_s))
        }
    };
    let (read_half, write_half) = stream.into_split();
    let mut reader = BufReader::with_capacity(shoal_net::receive::RECEIVE_BUFFER, read_half);
    let inflight = service.config.settings.server_inflight as usize;
    let sink = Arc::new(FrameSink::new(write_half));
    let flusher = tokio::spawn({
        let sink = sink.clone();
        async move { sink.flush_queued().await }
    });
    let permits = Arc::new(Semaphore::new(inflight));
    let conn = NEXT_CONNECTION.fetch_add(1, Ordering::Relaxed);
    // The client that sends on this connection, whose lease recalls go
    // back over it (0: none yet, or a server).
    let mut client = 0;
    loop {
        let frame = match read_frame_timeout(&mut reader, FRAME_TIMEOUT).await {
            Ok(f) => f,
            Err(FrameError::Closed) => break,
            Err(e) => {
                tracing::warn!("closing connection from {peer}: {e}");
                break;
            }
        };
        if frame.header.kind == Kind::Reply {
            // The only reply a client sends: its answer to a lease recall.
            if frame.header.op != Op::Recall {
                tracing::warn!(
                    "closing connection from {peer}: a reply frame arrived as a request"
                );
                break;
            }
            service.leases.answered(frame.header.id);
            continue;
        }
        if let Some((cred, expires_s)) = &user {
            if shoal_proto::time::now_s() >= *expires_s {
                tracing::info!("closing connection from {peer}: its user credential expired");
                break;
            }
            if let Err(e) = user_peers::admit(cred, &frame) {
                let before = service
                    .stats
                    .identity_refusals
                    .fetch_add(1, Ordering::Relaxed);
                // Logged, but a flood of them is counted, not written out.
                if before < 100 {
                    tracing::warn!("refused a request from {peer}: {}", e.message);
                }
                if sink.send(&service.refusal(&frame, e)).is_err() {
                    break;
                }
                continue;
            }
        }
        let from = frame.header.client.client;
        if from != 0 && from != client {
            if client != 0 {
                service.disconnected(client, conn);
            }
            client = from;
            service.leases.connected(client, conn, &sink);
        }
        if frame.header.op.may_wait() {
            // A lock: answered now, or (one that waits for another's lock)
            // by the lock table once granted; it holds no slot while it waits.
            if let Some(reply) = service.serve_lock(&frame, &sink, conn) {
                if sink.send(&reply).is_err() {
                    break;
                }
            }
            continue;
        }
        let Ok(permit) = permits.clone().acquire_owned().await else {
            break;
        };
        // A modifying request enters the commit queue's scheduling queue
        // here, once it has a slot to run: from now until its changes are
        // applied it counts as load, and requests applied meanwhile defer
        // their sync to share it with this one (commit coalescing). Counting
        // before the permit would be wrong: a frame waiting for a slot held
        // by deferred requests would keep them waiting for it.
        if !service.stays_in_memory(&frame) {
            run_blocking(service.clone(), sink.clone(), frame, None, permit);
            continue;
        }
        if frame.header.op.modifies_metadata() {
            // A change waits for the answers to the recalls of other
            // clients' leases on what it changed. Waiting on this task
            // would leave this client's own answers to other changes'
            // recalls unread behind it: two clients each removing a file
            // the other leases would each wait for the other's answer
            // until `lease_recall_ms` evicted one. So it runs on a task of
            // its own, as a lookup need not.
            let (service, sink) = (service.clone(), sink.clone());
            // A failed send means the connection is gone; the reader sees it.
            tokio::spawn(async move { run_in_memory(&service, &sink, frame, permit) });
            continue;
        }
        if run_in_memory(&service, &sink, frame, permit).is_err() {
            break;
        }
    }
    service.disconnected(client, conn);
    service.locks.disconnected(client, conn);
    // Requests already running still answer before the connection closes.
    let _ = permits.acquire_many(inflight as u32).await;
    sink.close();
    let _ = flusher.await;
}

/// Answers `frame` from memory on `sink`, or, if it meets a directory
/// delegation, hands it to the blocking pool. Err: the reply could not be
/// sent.
fn run_in_memory(
    service: &Arc<Service>,
    sink: &Arc<FrameSink>,
    frame: Frame,
    permit: OwnedSemaphorePermit,
) -> std::io::Result<()> {
    match service.handle_in_memory(&frame) {
        Ok(reply) => {
            drop(permit);
            sink.send(&reply)
        }
        Err(met) => {
            run_blocking(service.clone(), sink.clone(), frame, Some(met), permit);
            Ok(())
        }
    }
}

/// Runs `frame` on the blocking pool (it waits for disk syncs, local files,
/// other servers, or the recall of the directory delegation it `met`) and
/// sends its reply on `sink`.
fn run_blocking(
    service: Arc<Service>,
    sink: Arc<FrameSink>,
    frame: Frame,
    met: Option<Met>,
    permit: OwnedSemaphorePermit,
) {
    let ticket = service.commit.schedule(frame.header.op);
    tokio::task::spawn_blocking(move || {
        if let Some(met) = met {
            service.recall_delegation(met);
        }
        let reply = service.handle_scheduled(&frame, ticket);
        // A failed send means the connection is gone; the reader sees it.
        let _ = sink.send(&reply);
        drop(permit);
    });
}

/// Numbers connections, so that a client's leases end with the connection
/// that carries its recalls, not with an older one closing late.
static NEXT_CONNECTION: AtomicU64 = AtomicU64::new(1);
