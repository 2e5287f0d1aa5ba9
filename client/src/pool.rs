//! The connections of one client process: exactly one per server, opened on
//! first use, reopened on the next call after it breaks (e.g. a server restart).

use std::sync::Arc;

use bytes::Bytes;
use prost::Message;
use shoal_proto::cluster::ClusterConfig;
use shoal_proto::error::{Result, ShoalError};
use shoal_proto::{Op, Operation};
use tokio::sync::Mutex;

use crate::conn::Connection;
use crate::types::Cred;

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
        let c = Arc::new(
            Connection::connect(
                server,
                entry.addr,
                self.config.settings.max_inflight as usize,
                self.config.secret()?.as_ref(),
            )
            .await?,
        );
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
            // A request that only reads can safely go again on a fresh connection.
            Err(e) if !conn.is_alive() && !op.modifies_metadata() && op != Op::Write => {
                tracing::debug!("retrying {} on a new connection: {e}", op.name());
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
