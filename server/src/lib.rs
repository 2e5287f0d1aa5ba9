//! The Shoal server: one process per server id, both metadata server and I/O
//! server. Start with [`run`]; the pieces, from the socket inwards:
//! `listener` (connections, frames) -> `handlers` (the operation table and
//! one module per family of operations, `Service::handle`) -> `service`
//! (the server's state, and the shell of a change) -> `meta_store` /
//! `data_store` (typed storage) -> `kv` (the embedded engine), with `commit`
//! deciding when changes are durable, `pools` and `peers` asking the other
//! servers for datafiles and records, `gathering` merging clients' small
//! writes into large ones, `auth` holding who may do what (POSIX
//! rules, capabilities) and `stats` counting everything. Imports point
//! inwards only: `scripts/import-graph` shows them, and that none go round.

pub mod auth;
pub mod commit;
pub mod data_store;
pub mod disk;
pub mod gathering;
mod handlers;
pub mod keys;
pub mod kv;
pub mod listener;
pub mod meta_store;
pub mod peers;
pub mod pools;
pub mod service;
pub mod stats;

use std::sync::Arc;

use shoal_proto::cluster::ClusterConfig;
use shoal_proto::error::{Result, ShoalError};
use tokio::net::TcpListener;

pub use service::Service;

/// Runs server `id` of `config` until SIGTERM or SIGINT, then syncs and returns.
pub fn run(config: ClusterConfig, id: u32) -> Result<()> {
    let entry = config.server(id)?.clone();
    let secret = config.secret()?;
    if secret.is_none() {
        tracing::warn!("the cluster file names no secret_file: connections are not authenticated");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("shoal-server")
        .build()?;
    runtime.block_on(async move {
        let listener = TcpListener::bind(entry.addr).await.map_err(|e| {
            ShoalError::from(e).context(format!("server {id}: cannot listen on {}", entry.addr))
        })?;
        let service = Arc::new(
            tokio::task::spawn_blocking(move || Service::open(config, id))
                .await
                .map_err(|e| ShoalError::io(e.to_string()))??,
        );
        tracing::info!(
            "server {id} listening on {} with data in {}",
            entry.addr,
            entry.data.display()
        );
        eprintln!("shoal server {id} listening on {}", entry.addr);
        let serving = tokio::spawn(listener::serve(listener, service.clone(), secret));
        service.pools.start(&service.meta);
        let writing_out = tokio::spawn(handlers::gather::write_out_loop(service.clone()));
        wait_for_shutdown().await;
        serving.abort();
        writing_out.abort();
        tracing::info!("server {id} stopping");
        let s = service.clone();
        tokio::task::spawn_blocking(move || {
            // What clients gathered here goes where it belongs, durably.
            handlers::gather::commit_everything(&s);
            s.meta.kv().sync()
        })
        .await
        .map_err(|e| ShoalError::io(e.to_string()))??;
        Ok(())
    })
}

async fn wait_for_shutdown() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("install SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("install SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}
