//! The connections of one client process: exactly one per server, opened on
//! first use, reopened on the next call after it breaks (e.g. a server
//! restart). A server that cannot be reached is waited for, up to the
//! cluster's `restart_wait_ms`, and a request whose connection broke under
//! it is sent again if it may be (`Op::resendable`): a restart of a server
//! is then not seen by applications.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use prost::Message;
use shoal_proto::cluster::ClusterConfig;
use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::Operation;
use tokio::sync::Mutex;

use crate::conn::Connection;
use crate::types::Cred;

/// The first pause before connecting again to a server that was
/// unreachable; each later one doubles, up to [`LONGEST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(20);
const LONGEST_PAUSE: Duration = Duration::from_millis(500);

/// Whether a failed connect says the server is not there (refused, or no
/// answer in time), rather than that it refused us.
fn unreachable(e: &ShoalError) -> bool {
    e.errno == Errno::EHOSTUNREACH || e.errno == Errno::ETIMEDOUT
}

pub struct Pool {
    config: ClusterConfig,
    slots: Vec<Mutex<Option<Arc<Connection>>>>,
}

impl Pool {
    pub fn new(config: ClusterConfig) -> Pool {
        let slots = config.servers.iter().map(|_| Mutex::new(None)).collect();
        Pool { config, slots }
    }

    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    async fn connection(&self, server: u32) -> Result<Arc<Connection>> {
        let slot = self.slots.get(server as usize).ok_or_else(|| {
            ShoalError::invalid(format!(
                "server {server} is not in the cluster ({} servers)",
                self.slots.len()
            ))
        })?;
        let mut slot = slot.lock().await;
        if let Some(c) = slot.as_ref().filter(|c| c.is_alive()) {
            return Ok(c.clone());
        }
        let entry = &self.config.servers[server as usize];
        let secret = self.config.secret()?;
        let wait = Duration::from_millis(self.config.settings.restart_wait_ms as u64);
        let started = Instant::now();
        let mut pause = FIRST_PAUSE;
        let c = loop {
            let inflight = self.config.settings.max_inflight as usize;
            match Connection::connect(server, entry.addr, inflight, secret.as_ref()).await {
                Ok(c) => break Arc::new(c),
                // Down or restarting: wait for it, as long as the cluster says.
                Err(e) if unreachable(&e) && started.elapsed() + pause <= wait => {
                    if pause == FIRST_PAUSE {
                        tracing::info!("server {server} unreachable, waiting for it: {e}");
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(LONGEST_PAUSE);
                }
                Err(e) => return Err(e),
            }
        };
        *slot = Some(c.clone());
        Ok(c)
    }

    /// Sends operation `O` with `request` to `server` and decodes its reply.
    pub async fn call<O: Operation>(
        &self,
        server: u32,
        cred: Cred,
        request: &O::Request,
    ) -> Result<O::Reply> {
        Ok(self
            .call_with_payload::<O>(server, cred, request, Bytes::new())
            .await?
            .0)
    }

    /// Sends operation `O` with `request` and raw `payload` (file data) to
    /// `server`; returns the decoded reply and the reply's payload.
    pub async fn call_with_payload<O: Operation>(
        &self,
        server: u32,
        cred: Cred,
        request: &O::Request,
        payload: Bytes,
    ) -> Result<(O::Reply, Bytes)> {
        let op = O::OP;
        let body = Bytes::from(request.encode_to_vec());
        let conn = self.connection(server).await?;
        let reply = match conn.call(op, cred, body.clone(), payload.clone()).await {
            // The connection broke (the server died or restarted): a request
            // that may be done twice goes again, once the server is back.
            Err(e) if !conn.is_alive() && op.resendable() => {
                tracing::debug!("sending {} again on a new connection: {e}", op.name());
                let conn = self.connection(server).await?;
                conn.call(op, cred, body, payload).await
            }
            other => other,
        }?;
        let decoded = O::Reply::decode(reply.body).map_err(|e| {
            ShoalError::protocol(format!("{} reply from server {server}: {e}", op.name()))
        })?;
        Ok((decoded, reply.payload))
    }
}
