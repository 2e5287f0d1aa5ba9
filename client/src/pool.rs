//! The connections of one client process: exactly one per server, opened on
//! first use, reopened on the next call after it breaks (e.g. a server restart).

use std::sync::Arc;

use bytes::Bytes;
use prost::Message;
use shoal_proto::cluster::ClusterConfig;
use shoal_proto::error::{Result, ShoalError};
use shoal_proto::frame::Frame;
use shoal_proto::Op;
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

    /// Sends a raw request to `server`.
    pub async fn call_raw(
        &self,
        server: u32,
        cred: Cred,
        op: Op,
        body: Bytes,
        payload: Bytes,
    ) -> Result<Frame> {
        let conn = self.connection(server).await?;
        match conn.call(op, cred, body.clone(), payload.clone()).await {
            // A request that only reads can safely go again on a fresh connection.
            Err(e) if !conn.is_alive() && !op.modifies_metadata() && op != Op::Write => {
                tracing::debug!("retrying {} on a new connection: {e}", op.name());
                let conn = self.connection(server).await?;
                conn.call(op, cred, body, payload).await
            }
            other => other,
        }
    }

    /// Sends `request` to `server` and decodes the reply body as `R`.
    pub async fn call<R: Message + Default>(
        &self,
        server: u32,
        cred: Cred,
        op: Op,
        request: &impl Message,
    ) -> Result<R> {
        let reply = self
            .call_raw(
                server,
                cred,
                op,
                Bytes::from(request.encode_to_vec()),
                Bytes::new(),
            )
            .await?;
        R::decode(reply.body).map_err(|e| {
            ShoalError::protocol(format!("{} reply from server {server}: {e}", op.name()))
        })
    }
}
