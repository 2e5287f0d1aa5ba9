//! Server write gathering's requests and write-outs (`gathering` holds the
//! state): a client's scattered small writes of a file, merged with every
//! other client's, written out split at strips to the servers holding them,
//! and the commit that writes them out and makes them durable. Only the
//! file's own server gathers for it, and checks the caller's right to write
//! it from the record it holds: no capability is needed. Write-outs run on
//! blocking threads of the server's runtime (handlers and [`write_out_loop`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use shoal_proto::capability::WRITE;
use shoal_proto::dist;
use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::extents::{self, Extents};
use shoal_proto::handle::{server_of, Handle};
use shoal_proto::msg::*;
use shoal_proto::{ops, ObjectKind};

use crate::auth::perms;
use crate::data_store::datafile;
use crate::delegations::{ServerItself, Stop};
use crate::gathering::lock;
use crate::peers::CONNS_PER_PEER;
use crate::request::Request;
use crate::service::{Reply, Service};

/// How long a server holding a strip may take to take a write-out or a
/// sync.
const PEER_WAIT: Duration = Duration::from_secs(30);
/// Bytes of one `write_extents` of a write-out.
const WRITE_OUT_BATCH: usize = 4 << 20;

pub fn gather_write(
    s: &Service,
    r: &Request,
    q: GatherWriteRequest,
) -> Result<Reply<GatherWriteReply>, Stop> {
    let dist = may_write(s, r, q.handle)?;
    let extents = extents::from_request(&q, r.payload)?;
    let end = extents.iter().map(|(o, d)| o + d.len() as u64).max();
    if dist.stuffed && end.is_some_and(|e| e > dist.strip_size) {
        return Err(ShoalError::invalid(format!(
            "file {:#x} is stuffed: unstuff it before gathering writes past its first strip",
            q.handle
        ))
        .into());
    }
    // Read before the bytes are put: if any of them is lost after this,
    // the epoch a later commit answers under is another.
    let epoch = s.gathering.epoch(s.verifier);
    let buffer = s.config.settings.gather_buffer as usize;
    if s.gathering.put(q.handle, &extents, buffer) {
        if s.gathering.over_bound() {
            // Too much held: this writer waits while it goes. The bytes of
            // this request are held whatever becomes of others' write-outs
            // (a failed one changed the epoch), so the reply is the epoch.
            for h in s.gathering.due(Duration::MAX, buffer) {
                if let Err(e) = commit(s, h, false) {
                    tracing::warn!("writing out gathered bytes of {h:#x} failed: {e}");
                }
            }
        } else {
            // The file's are written out while its writers go on.
            s.gathering.wake_writer_out();
        }
    }
    Ok(Reply::new(GatherWriteReply { epoch }))
}

pub fn gather_commit(
    s: &Service,
    r: &Request,
    q: GatherCommitRequest,
) -> Result<Reply<GatherCommitReply>, Stop> {
    may_write(s, r, q.handle)?;
    commit(s, q.handle, q.durable)?;
    Ok(Reply::new(GatherCommitReply {
        epoch: s.gathering.epoch(s.verifier),
    }))
}

/// The layout of file `h` if `r`'s caller may write it; EACCES if not.
fn may_write(s: &Service, r: &Request, h: Handle) -> Result<Distribution, Stop> {
    s.check_handle(h)?;
    let rec = s.meta.get(r, h)?;
    let dist = layout_of(&rec)?;
    let cred = &r.cred;
    if perms::data_rights(cred, &rec) & WRITE == 0 {
        return Err(ShoalError::new(
            Errno::EACCES,
            format!("file {h:#x}: uid {} may not write it", cred.uid),
        )
        .into());
    }
    Ok(dist)
}

/// The layout file `h`'s bytes are written out to (see [`layout_of`]),
/// read by the server itself: a write-out is no request's, and reads a
/// file whose gathered bytes a request's [`may_write`] let in.
fn layout(s: &Service, h: Handle) -> Result<Distribution> {
    layout_of(&s.meta.get(&ServerItself, h)?)
}

/// The layout a file's bytes are written out to, from its record: its
/// metafile's, or for a file without a metafile its own one datafile.
fn layout_of(rec: &ObjectRecord) -> Result<Distribution> {
    let h = rec.handle;
    match rec.kind() {
        ObjectKind::Metafile => rec
            .dist
            .clone()
            .filter(|d| !d.datafiles.is_empty())
            .ok_or_else(|| ShoalError::io(format!("file {h:#x} has no layout"))),
        ObjectKind::Datafile if rec.parent != 0 => Ok(Distribution::single(h)),
        _ => Err(ShoalError::new(
            Errno::EINVAL,
            format!("{h:#x} is not a regular file: nothing to gather"),
        )),
    }
}

/// Writes out what is held of file `h` and, with `durable`, syncs every
/// datafile written since its last durable commit.
pub fn commit(s: &Service, h: Handle, durable: bool) -> Result<()> {
    let g = &s.gathering;
    let Some(gate) = g.gate(h) else {
        return Ok(());
    };
    let result = {
        let _one_at_a_time = lock(&gate);
        write_out(s, h).and_then(|()| {
            if durable || g.too_many_unsynced() {
                sync(s, h)
            } else {
                Ok(())
            }
        })
    };
    drop(gate);
    g.tidy(h);
    result
}

/// Writes what is held of `h` to the servers holding its strips (the
/// caller holds the file's gate).
fn write_out(s: &Service, h: Handle) -> Result<()> {
    let g = &s.gathering;
    let taken = g.take(h);
    if taken.is_empty() {
        return Ok(());
    }
    let dist = match layout(s, h) {
        Ok(d) => d,
        // The file is gone, and its bytes with it.
        Err(e) if e.errno == Errno::ENOENT => return Ok(()),
        Err(e) => {
            g.lost(&e.message);
            return Err(e);
        }
    };
    // Every piece, joined per datafile (the strips of one datafile lie end
    // to end in it); the datafiles are written in parallel.
    let mut per_datafile: HashMap<Handle, Extents> = HashMap::new();
    for (offset, data) in taken {
        for p in dist::split(dist.strip_size.max(1), dist.width(), offset, data.len()) {
            per_datafile
                .entry(dist.datafiles[p.datafile])
                .or_default()
                .join(p.local_offset, &data[p.buf_offset..p.buf_offset + p.len]);
        }
    }
    let written: Vec<Handle> = per_datafile.keys().copied().collect();
    let rt = tokio::runtime::Handle::current();
    let done = rt.block_on(futures::future::try_join_all(
        per_datafile
            .into_iter()
            .map(|(d, pieces)| write_pieces(s, d, pieces)),
    ));
    if let Err(e) = done {
        g.lost(&e.message);
        return Err(e);
    }
    g.written(h, written);
    Ok(())
}

/// Writes `joined`, pieces of datafile `d` at its own offsets, here or on
/// its server, where they go as a few `write_extents` of up to
/// [`WRITE_OUT_BATCH`] bytes each, several at a time: however scattered the
/// clients' writes, a write-out costs each server holding strips about one
/// message.
async fn write_pieces(s: &Service, d: Handle, joined: Extents) -> Result<()> {
    let peer = server_of(d);
    if peer == s.id {
        for (offset, data) in joined.iter() {
            s.data.write(&s.meta, d, offset, data)?;
        }
        return Ok(());
    }
    let batches = extents::batches(joined.iter(), WRITE_OUT_BATCH);
    let sends = batches.into_iter().map(|batch| {
        let (q, payload) = extents::to_request(d, batch.into_iter());
        async move {
            let reply = again_if_unreachable(|| {
                let peers = &s.pools.peers;
                peers.call_with_payload::<ops::WriteExtents>(peer, &q, payload.clone(), PEER_WAIT)
            })
            .await?;
            s.gathering.saw(peer, reply.verifier);
            Ok::<(), ShoalError>(())
        }
    });
    futures::stream::iter(sends)
        .buffer_unordered(CONNS_PER_PEER)
        .try_collect::<()>()
        .await
}

/// Syncs the datafiles of `h` written since its last durable commit (the
/// caller holds the file's gate).
fn sync(s: &Service, h: Handle) -> Result<()> {
    let unsynced = s.gathering.take_unsynced(h);
    let rt = tokio::runtime::Handle::current();
    let done = rt.block_on(futures::future::try_join_all(
        unsynced.iter().map(|d| sync_datafile(s, *d)),
    ));
    if let Err(e) = done {
        s.gathering.lost(&e.message);
        return Err(e);
    }
    Ok(())
}

async fn sync_datafile(s: &Service, d: Handle) -> Result<()> {
    let peer = server_of(d);
    if peer == s.id {
        // Gone since: nothing of it to keep.
        let Ok(rec) = datafile(&s.meta, &ServerItself, d) else {
            return Ok(());
        };
        s.data.fsync(&rec)?;
        s.commit.sync_now(&s.meta, &s.stats)?;
        return Ok(());
    }
    let q = FsyncRequest {
        handle: d,
        cap: None,
    };
    let reply = again_if_unreachable(|| s.pools.peers.call::<ops::Fsync>(peer, &q, PEER_WAIT));
    match reply.await {
        Ok(reply) => {
            s.gathering.saw(peer, reply.verifier);
            Ok(())
        }
        Err(e) if e.errno == Errno::ENOENT => Ok(()),
        Err(e) => Err(e),
    }
}

/// Runs `call` (a write or sync: the same again changes nothing), and once
/// more if the peer was unreachable: a connection left from before the
/// peer restarted fails once, and the next call connects afresh (its new
/// verifier then tells what the restart lost).
async fn again_if_unreachable<T, F: std::future::Future<Output = Result<T>>>(
    call: impl Fn() -> F,
) -> Result<T> {
    match call().await {
        Err(e) if e.errno == Errno::EHOSTUNREACH => call().await,
        done => done,
    }
}

/// Writes out, every `gather_delay_ms`, the files whose bytes waited that
/// long or fill several clients' buffers.
pub async fn write_out_loop(s: Arc<Service>) {
    let settings = &s.config.settings;
    let delay = Duration::from_millis(settings.gather_delay_ms as u64);
    let buffer = settings.gather_buffer as usize;
    let mut tick = tokio::time::interval(delay.max(Duration::from_millis(2)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = s.gathering.woken() => {}
        }
        let due = s.gathering.due(delay, buffer);
        if due.is_empty() {
            continue;
        }
        let service = s.clone();
        let done = tokio::task::spawn_blocking(move || {
            for h in due {
                if let Err(e) = commit(&service, h, false) {
                    tracing::warn!("writing out gathered bytes of {h:#x} failed: {e}");
                }
            }
        })
        .await;
        if let Err(e) = done {
            tracing::error!("the write-out of gathered bytes failed: {e}");
        }
    }
}

/// Writes out and syncs everything gathered here: at shutdown.
pub fn commit_everything(s: &Service) {
    for h in s.gathering.held() {
        if let Err(e) = commit(s, h, true) {
            tracing::warn!("writing out gathered bytes of {h:#x} failed: {e}");
        }
    }
}
