//! Accepts connections and serves requests on them concurrently.
//!
//! Per connection: one task reads frames, each request runs on the blocking
//! pool (handlers do disk I/O), replies go through a bounded channel to one
//! writer task that batches flushes. At most `server_inflight` requests of one
//! connection run at once. A malformed frame closes that connection only.
//!
//! Before any frame, a connection proves the cluster secret (`auth`); one that
//! does not is closed without a frame read. A frame whose first byte has
//! arrived must arrive whole within [`FRAME_TIMEOUT`].

use std::net::SocketAddr;
use std::sync::Arc;

use shoal_proto::auth::{server_handshake, Refusal, Secret};
use shoal_proto::frame::{read_frame_timeout, write_frame, Frame, FrameError, Kind};
use tokio::io::{AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};

use crate::service::Service;

const READ_BUFFER: usize = 256 << 10;
const WRITE_BUFFER: usize = 256 << 10;
/// How long the rest of a frame may take once its first byte has arrived.
pub const FRAME_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Serves connections; with a `secret`, each must pass the handshake first.
pub async fn serve(listener: TcpListener, service: Arc<Service>, secret: Option<Secret>) {
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
    secret: Option<Secret>,
) {
    let _ = stream.set_nodelay(true);
    if let Some(secret) = &secret {
        match server_handshake(&mut stream, secret).await {
            Ok(()) => {}
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
    let (read_half, write_half) = stream.into_split();
    let mut reader = BufReader::with_capacity(READ_BUFFER, read_half);
    let inflight = service.config.settings.server_inflight as usize;
    let (tx, rx) = mpsc::channel::<Frame>(inflight);
    let writer = tokio::spawn(write_replies(
        BufWriter::with_capacity(WRITE_BUFFER, write_half),
        rx,
    ));
    let permits = Arc::new(Semaphore::new(inflight));
    loop {
        let frame = match read_frame_timeout(&mut reader, FRAME_TIMEOUT).await {
            Ok(f) => f,
            Err(FrameError::Closed) => break,
            Err(e) => {
                tracing::warn!("closing connection from {peer}: {e}");
                break;
            }
        };
        if frame.header.kind != Kind::Request {
            tracing::warn!("closing connection from {peer}: a reply frame arrived as a request");
            break;
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
        let ticket = service.commit.schedule(frame.header.op);
        let service = service.clone();
        let tx = tx.clone();
        tokio::task::spawn_blocking(move || {
            let reply = service.handle_scheduled(&frame, ticket);
            let _ = tx.blocking_send(reply);
            drop(permit);
        });
    }
    drop(tx);
    let _ = writer.await;
}

async fn write_replies<W: tokio::io::AsyncWrite + Unpin>(
    mut w: BufWriter<W>,
    mut rx: mpsc::Receiver<Frame>,
) {
    while let Some(frame) = rx.recv().await {
        if write_frame(&mut w, &frame).await.is_err() {
            return;
        }
        while let Ok(more) = rx.try_recv() {
            if write_frame(&mut w, &more).await.is_err() {
                return;
            }
        }
        if w.flush().await.is_err() {
            return;
        }
    }
}
