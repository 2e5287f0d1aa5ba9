//! The Shoal server: one process per server id, both metadata server and I/O
//! server. Start with [`run`]; the pieces, from the socket inwards:
//! `listener` (connections, frames) -> `handlers` (the operation table and
//! one module per family of operations, `Service::handle`; each handler
//! gets a `request`, which carries the context of its handling to whatever
//! needs it) -> `service`
//! (the server's state, and the shell of a change) -> `meta_store` /
//! `data_store` (typed storage; `local_file` is a large datafile's file)
//! -> `kv` (the embedded engine), with `commit` deciding when changes are
//! durable, `pools` and `peers` asking the other servers for datafiles and
//! records, `gathering` merging clients' small writes into large ones,
//! `auth` holding who may do what (POSIX rules, capabilities), `stats`
//! counting everything and `metrics_endpoint` serving the counts to
//! Prometheus. Imports point inwards only: `scripts/import-graph`
//! shows them, and that none go round.

pub mod auth;
pub mod client_table;
pub mod commit;
pub mod data_store;
pub mod delegations;
pub mod disk;
pub mod gathering;
mod handlers;
pub mod keys;
pub mod kv;
pub mod leases;
pub mod listener;
pub mod local_file;
pub mod locks;
pub mod meta_store;
pub mod metrics_endpoint;
pub mod partitions;
pub mod peers;
pub mod pools;
pub mod recovery;
pub mod replay;
pub mod reply_cache;
pub mod request;
pub mod service;
pub mod split_queue;
pub mod stats;
pub mod uncached;

use std::sync::Arc;
use std::time::Duration;

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
        let metrics_listener = match entry.metrics_addr {
            Some(addr) => Some(shoal_metrics::endpoint::bind(addr).await.map_err(|e| {
                ShoalError::from(e).context(format!(
                    "server {id}: cannot serve metrics on {addr} (its metrics_addr)"
                ))
            })?),
            None => None,
        };
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
        let scrapes = metrics_listener.map(|l| {
            if let Ok(addr) = l.local_addr() {
                eprintln!("shoal server {id} serves metrics on http://{addr}/metrics");
            }
            let registry = Arc::new(metrics_endpoint::registry(service.clone()));
            tokio::spawn(shoal_metrics::endpoint::serve(l, registry))
        });
        service.pools.start(&service.meta);
        let writing_out = tokio::spawn(handlers::gather::write_out_loop(service.clone()));
        let flushing = tokio::spawn(flush_loop(service.clone()));
        let group_flushing = tokio::spawn(group_flush_loop(service.clone()));
        let splitting = tokio::spawn(partitions::split_loop(service.clone()));
        wait_for_shutdown().await;
        splitting.abort();
        serving.abort();
        writing_out.abort();
        flushing.abort();
        group_flushing.abort();
        if let Some(scrapes) = scrapes {
            scrapes.abort();
        }
        tracing::info!("server {id} stopping");
        let s = service.clone();
        tokio::task::spawn_blocking(move || {
            // What clients gathered here goes where it belongs, durably.
            handlers::gather::commit_everything(&s);
            s.stop_durably()
        })
        .await
        .map_err(|e| ShoalError::io(e.to_string()))??;
        Ok(())
    })
}

/// Every `data_flush_ms`, makes durable what the store applied and nobody
/// synced (file data held in the store, which is durable on fsync): a
/// server killed, or its machine crashing, loses at most this much of the
/// data written to it and not fsynced, as a local file system's commit
/// interval bounds it; with `sync = "none"`, metadata changes too. With
/// `sync = "full"` those are synced before their replies, and with `sync =
/// "replay"` within `replay_flush_ms` of them (`group_flush_loop`): then
/// this loop only expires cached replies.
async fn flush_loop(s: Arc<Service>) {
    let every = Duration::from_millis(s.config.settings.data_flush_ms as u64);
    // The first tick one interval after the start, not at once: a store
    // just opened holds nothing unsynced.
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let service = s.clone();
        let flush = move || {
            service.forget_old_replies()?;
            // With replayed commits the group flush does this, sooner
            // (and only it may: see `crash_points::GROUP_FLUSH`).
            if service.config.settings.sync == shoal_proto::cluster::SyncMode::Replay {
                return Ok(());
            }
            service.meta.sync()
        };
        match tokio::task::spawn_blocking(flush).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!("flushing unsynced data failed: {e}"),
            Err(e) => tracing::error!("the data flush failed: {e}"),
        }
    }
}

/// With `sync = "replay"`: the group flush (`Service::group_flush`) every
/// `replay_flush_ms`; clients learn what it made durable from the
/// `flushed` of their next replies.
async fn group_flush_loop(s: Arc<Service>) {
    if s.config.settings.sync != shoal_proto::cluster::SyncMode::Replay {
        return;
    }
    let bound = Duration::from_millis(s.config.settings.replay_flush_ms as u64);
    // The first flush one bound after the start, not at once: the loop
    // task may first run after the listener has served a change (a loaded
    // machine), and an immediate tick would then flush it at an instant no
    // setting controls (what the crash tests arm).
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + bound, bound);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut durable = 0;
    loop {
        tick.tick().await;
        // An idle server stays idle: no blocking-pool round every few
        // milliseconds for a flush with nothing to do (group_flush checks
        // again, under its own terms).
        if s.meta.durable_seq() >= s.meta.applied_seq() {
            continue;
        }
        let service = s.clone();
        let flush = move || {
            let flushed = service.group_flush(durable);
            (flushed, service.meta.durable_seq())
        };
        match tokio::task::spawn_blocking(flush).await {
            Ok((Ok(_), now)) => durable = now,
            Ok((Err(e), _)) => tracing::warn!("the group flush failed: {e}"),
            Err(e) => tracing::error!("the group flush failed: {e}"),
        }
    }
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
