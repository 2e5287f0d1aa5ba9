//! Striped file data: a request is split at strip boundaries and every piece
//! goes straight to the server holding it, all in parallel; pieces larger than
//! `max_transfer` are split again so large transfers are pipelined.
//!
//! Eager I/O ([Carns 2009]): a transfer of at most `eager_limit` bytes carries its
//! data inside the write request or the read reply, one round trip. Larger
//! ones, and every one with `eager` off, first make a rendezvous (the server
//! checks the datafile and says it is ready), then move the data.
//!
//! Stuffing ([Carns 2009]): a stuffed file has only datafile 0, which holds its
//! first strip. A write past the first strip, or a truncate beyond it, first
//! sends `unstuff` (idempotent) and uses the distribution it returns; a read
//! past it re-reads the layout (another client may have unstuffed the file)
//! and, if the file is still stuffed, stops at the first strip, where a
//! stuffed file always ends.
//!
//! Every piece carries the caller's capability for the file (`caps`), which
//! the datafile's server checks.

use bytes::{Bytes, BytesMut};
use shoal_proto::capability::{ANY, READ, WRITE};
use shoal_proto::cluster::SyncMode;
use shoal_proto::dist;
use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::handle::{server_of, Handle};
use shoal_proto::msg::*;
use shoal_proto::{ops, ObjectKind};

use crate::client::Client;
use crate::data::uncommitted_writes::{Change, Changes, Verdict};
use crate::data::write::Settle;
use crate::transport::landing::{Landing, Lent, ReadData};

/// One transfer to one datafile.
struct Chunk {
    datafile: Handle,
    local_offset: u64,
    buf_offset: usize,
    len: usize,
}

/// How many times an fsync sends a file's unsynced changes again before it
/// gives up (each time a server restarted again, or the file changed while
/// they were sent).
const SEND_AGAIN_ROUNDS: usize = 4;
/// Files whose changes go again at once after a server restarted.
const SEND_AGAIN_FILES: usize = 16;

impl Client {
    fn chunks(&self, dist: &Distribution, offset: u64, len: usize) -> Vec<Chunk> {
        let max = self.config().settings.max_transfer as usize;
        dist::split(dist.strip_size.max(1), dist.width(), offset, len)
            .into_iter()
            .flat_map(|p| {
                (0..p.len).step_by(max).map(move |at| Chunk {
                    datafile: dist.datafiles[p.datafile],
                    local_offset: p.local_offset + at as u64,
                    buf_offset: p.buf_offset + at,
                    len: max.min(p.len - at),
                })
            })
            .collect()
    }

    /// Whether a transfer of `len` bytes travels eagerly.
    fn is_eager(&self, len: usize) -> bool {
        let s = &self.config().settings;
        s.eager && len <= s.eager_limit as usize
    }

    /// The rendezvous before a non-eager transfer; returns the bytes the
    /// server is ready to move.
    async fn rendezvous(&self, c: &Chunk, write: bool, cap: &Option<Capability>) -> Result<u64> {
        let reply: RendezvousReply = self
            .pool()
            .call::<ops::Rendezvous>(
                server_of(c.datafile),
                self.cred,
                &RendezvousRequest {
                    handle: c.datafile,
                    offset: c.local_offset,
                    length: c.len as u64,
                    write,
                    cap: cap.clone(),
                },
            )
            .await?;
        Ok(reply.ready)
    }

    /// Stuffing: gives file `h` all its datafiles (nothing to do if another
    /// client did already) and returns its distribution from now on.
    pub(crate) async fn unstuff(&self, h: Handle) -> Result<Distribution> {
        let reply: UnstuffReply = self
            .pool()
            .call::<ops::Unstuff>(server_of(h), self.cred, &UnstuffRequest { handle: h })
            .await?;
        self.remember_cap(reply.cap);
        let dist = reply
            .dist
            .filter(|d| !d.datafiles.is_empty() && !d.stuffed)
            .ok_or_else(|| ShoalError::protocol("unstuff reply without a distribution"))?;
        self.inner.dists.put(h, dist.clone());
        Ok(dist)
    }

    /// The distribution of file `h` as its metafile's server has it now (a
    /// file without a metafile is its own one datafile: it never stripes).
    pub(crate) async fn fresh_distribution(&self, h: Handle) -> Result<Distribution> {
        let rec = self.get_record(h).await?;
        let dist = match rec.kind() {
            ObjectKind::Metafile => rec.dist.unwrap_or_default(),
            ObjectKind::Datafile => Distribution::single(h),
            kind => {
                return Err(ShoalError::new(
                    if kind == ObjectKind::Directory {
                        Errno::EISDIR
                    } else {
                        Errno::EINVAL
                    },
                    format!("object {h:#x} is not a regular file"),
                ))
            }
        };
        if dist.datafiles.is_empty() {
            return Err(ShoalError::io(format!("file {h:#x} has no distribution")));
        }
        self.inner.dists.put(h, dist.clone());
        Ok(dist)
    }

    /// The distribution for reading or writing file `h` up to byte `end`.
    /// Within the first strip any stuffed layout this client saw will do.
    pub(crate) async fn dist_upto(&self, h: Handle, end: u64) -> Result<Distribution> {
        match self.inner.dists.stuffed_layout(&h) {
            Some(d) if end <= d.strip_size => Ok(d),
            _ => self.distribution(h).await,
        }
    }

    /// Sends a write of `data` at `offset` (ending at `end`) of file `h`
    /// straight to the servers holding its strips, all in parallel: the
    /// direct path (`data::write` decides which path a write takes).
    pub(crate) async fn write_direct(&self, h: Handle, offset: u64, data: &Bytes) -> Result<()> {
        let end = offset + data.len() as u64;
        self.with_capability(h, WRITE, |cap| self.write_with(h, offset, data, end, cap))
            .await
    }

    /// A write of `data` at `offset` (ending at `end`) with capability `cap`.
    async fn write_with(
        &self,
        h: Handle,
        offset: u64,
        data: &Bytes,
        end: u64,
        mut cap: Option<Capability>,
    ) -> Result<()> {
        let mut dist = self.dist_upto(h, end).await?;
        if dist.stuffed && end > dist.strip_size {
            dist = self.unstuff(h).await?;
            // The unstuff reply brought one that names the new datafiles.
            cap = self.capability(h, WRITE).await?;
        }
        let chunks = self.chunks(&dist, offset, data.len());
        let cap = &cap;
        futures::future::try_join_all(chunks.iter().map(|c| {
            let payload = data.slice(c.buf_offset..c.buf_offset + c.len);
            async move {
                let change = Change::Write {
                    offset: c.local_offset,
                    data: payload.clone(),
                };
                let copied = self.inner.uncommitted_writes.keep(h, c.datafile, change);
                match self.send_write(c, payload, cap).await {
                    Ok(verifier) => self.changed(h, c.datafile, verifier, cap).await,
                    Err(e) => {
                        self.inner.uncommitted_writes.unkeep(h, copied);
                        Err(e)
                    }
                }
            }
        }))
        .await?;
        Ok(())
    }

    /// Writes `payload` as chunk `c`; returns the verifier it was
    /// acknowledged under.
    async fn send_write(&self, c: &Chunk, payload: Bytes, cap: &Option<Capability>) -> Result<u64> {
        if !self.is_eager(c.len) {
            self.rendezvous(c, true, cap).await?;
        }
        let (reply, _) = self
            .pool()
            .call_with_payload::<ops::Write>(
                server_of(c.datafile),
                self.cred,
                &WriteRequest {
                    handle: c.datafile,
                    offset: c.local_offset,
                    cap: cap.clone(),
                },
                payload,
            )
            .await?;
        Ok(reply.verifier)
    }

    /// Sets datafile `d`'s local size; returns the verifier it was
    /// acknowledged under.
    async fn send_truncate(&self, d: Handle, size: u64, cap: &Option<Capability>) -> Result<u64> {
        let reply: TruncateReply = self
            .pool()
            .call::<ops::Truncate>(
                server_of(d),
                self.cred,
                &TruncateRequest {
                    handle: d,
                    size,
                    cap: cap.clone(),
                },
            )
            .await?;
        Ok(reply.verifier)
    }

    /// Reads up to `len` bytes at `offset` of file `h`; short only at the end
    /// of the file. Holes read as zeros.
    pub async fn read(&self, h: Handle, offset: u64, len: usize) -> Result<Bytes> {
        match self.read_lent(h, offset, len, None).await? {
            ReadData::Bytes(data) => Ok(data),
            ReadData::Landed(_) => unreachable!("a read with no landing lent lands nowhere"),
        }
    }

    /// [`read`](Self::read), with the data landing in `landing` (whose
    /// space holds `len` bytes) where it comes from one server: received
    /// there straight from the socket (see `landing`). Gives `landing` back,
    /// whatever the outcome.
    pub async fn read_into<L: Landing>(
        &self,
        h: Handle,
        offset: u64,
        len: usize,
        landing: L,
    ) -> (L, Result<ReadData>) {
        let lent = Lent::new(Box::new(landing));
        let read = self.read_lent(h, offset, len, Some(&lent)).await;
        (lent.into_inner(), read)
    }

    async fn read_lent(
        &self,
        h: Handle,
        offset: u64,
        mut len: usize,
        lent: Option<&Lent>,
    ) -> Result<ReadData> {
        // Nothing lies past the largest file size: that is end of file.
        if len == 0 || offset >= dist::MAX_FILE_SIZE {
            return Ok(ReadData::Bytes(Bytes::new()));
        }
        len = len.min((dist::MAX_FILE_SIZE - offset) as usize);
        self.settle_for_read(h, offset).await?;
        self.with_capability(h, READ, |cap| self.read_with(h, offset, len, cap, lent))
            .await
    }

    /// A read of `len` bytes at `offset` with capability `cap`, landing in
    /// `lent` if it is one piece from one server.
    async fn read_with(
        &self,
        h: Handle,
        offset: u64,
        mut len: usize,
        mut cap: Option<Capability>,
        lent: Option<&Lent>,
    ) -> Result<ReadData> {
        let end = offset + len as u64;
        let mut dist = self.dist_upto(h, end).await?;
        if dist.stuffed && end > dist.strip_size {
            // Past the first strip of a layout seen stuffed: look again
            // (the getattr brings a capability naming the datafiles too).
            dist = self.fresh_distribution(h).await?;
            cap = self.capability(h, READ).await?;
            if dist.stuffed {
                if offset >= dist.strip_size {
                    return Ok(ReadData::Bytes(Bytes::new()));
                }
                len = len.min((dist.strip_size - offset) as usize);
            }
        }
        let chunks = self.chunks(&dist, offset, len);
        let cap = &cap;
        // Only a read of one piece lands: pieces from several servers are
        // joined here, which is a copy anyway.
        let lent = lent.filter(|_| chunks.len() == 1);
        let parts = futures::future::try_join_all(chunks.iter().map(|c| async move {
            if !self.is_eager(c.len) && self.rendezvous(c, false, cap).await? == 0 {
                return Ok(ReadData::Bytes(Bytes::new()));
            }
            let server = server_of(c.datafile);
            let request = ReadRequest {
                handle: c.datafile,
                offset: c.local_offset,
                length: c.len as u64,
                cap: cap.clone(),
            };
            let data = match lent {
                Some(lent) => {
                    let pool = self.pool();
                    pool.call_landing::<ops::Read>(server, self.cred, &request, lent)
                        .await?
                        .1
                }
                None => {
                    let pool = self.pool();
                    let call = pool.call_with_payload::<ops::Read>(
                        server,
                        self.cred,
                        &request,
                        Bytes::new(),
                    );
                    ReadData::Bytes(call.await?.1)
                }
            };
            if data.len() > c.len {
                return Err(ShoalError::protocol("read reply longer than asked"));
            }
            Ok(data)
        }))
        .await?;
        let all_full = chunks.iter().zip(&parts).all(|(c, p)| p.len() == c.len);
        if all_full && parts.len() == 1 {
            return Ok(parts.into_iter().next().expect("one part"));
        }
        // Where a piece came back short, the file has a hole or ends: zeros up to
        // the file size, nothing past it.
        let mut end = offset + len as u64;
        if !all_full {
            let furthest = chunks
                .iter()
                .zip(&parts)
                .filter(|(_, p)| !p.is_empty())
                .map(|(c, p)| offset + (c.buf_offset + p.len()) as u64)
                .max()
                .unwrap_or(offset);
            let size = self.getattr(h).await?.size.max(furthest);
            end = end.min(size);
            if end <= offset {
                return Ok(ReadData::Bytes(Bytes::new()));
            }
        }
        let want = (end - offset) as usize;
        if let (Some(lent), [ReadData::Landed(n)]) = (lent, &parts[..]) {
            // One short piece, in place: zeros after it, up to the end.
            lent.with_space(|space| space[(*n).min(want)..want].fill(0));
            return Ok(ReadData::Landed(want));
        }
        let mut out = BytesMut::zeroed(want);
        for (c, p) in chunks.iter().zip(&parts) {
            let ReadData::Bytes(p) = p else {
                unreachable!("only a read of one piece lands");
            };
            let room = out.len().saturating_sub(c.buf_offset);
            let n = p.len().min(room);
            if n > 0 {
                out[c.buf_offset..c.buf_offset + n].copy_from_slice(&p[..n]);
            }
        }
        Ok(ReadData::Bytes(out.freeze()))
    }

    /// Sets the size of file `h`: every datafile gets the local size that
    /// makes the file exactly `size` bytes (n messages). A file seen stuffed
    /// is looked at again first (truncate sets every datafile, so a layout
    /// another client has just unstuffed must not be missed), and unstuffed
    /// if `size` goes past its first strip.
    pub async fn truncate(&self, h: Handle, size: u64) -> Result<()> {
        if size > dist::MAX_FILE_SIZE {
            return Err(ShoalError::new(
                Errno::EFBIG,
                format!(
                    "size {size} is over the largest file size ({} bytes)",
                    dist::MAX_FILE_SIZE
                ),
            ));
        }
        self.inner.write_behind.settle(h).await;
        self.settle(h, Settle::Push).await?;
        self.with_capability(h, WRITE, |cap| self.truncate_with(h, size, cap))
            .await?;
        self.buffered_truncated(h, size);
        self.inner.changed_here(h);
        let now = shoal_proto::time::now_ns();
        self.inner.attrs.update(&h, |a| {
            a.size = size;
            a.mtime_ns = now;
            a.ctime_ns = now;
        });
        Ok(())
    }

    /// Sets every datafile's local size for a file of `size` bytes, with
    /// capability `cap`.
    async fn truncate_with(&self, h: Handle, size: u64, mut cap: Option<Capability>) -> Result<()> {
        let mut dist = match self.inner.dists.get(&h) {
            Some(d) if !d.stuffed => d,
            _ => {
                let fresh = self.fresh_distribution(h).await?;
                cap = self.capability(h, WRITE).await?;
                fresh
            }
        };
        if dist.stuffed && size > dist.strip_size {
            dist = self.unstuff(h).await?;
            cap = self.capability(h, WRITE).await?;
        }
        let n = dist.width();
        let cap = &cap;
        futures::future::try_join_all(dist.datafiles.iter().enumerate().map(|(i, d)| async move {
            let local = dist::local_size(dist.strip_size.max(1), n, i, size);
            let change = Change::Truncate { size: local };
            let copied = self.inner.uncommitted_writes.keep(h, *d, change);
            match self.send_truncate(*d, local, cap).await {
                Ok(verifier) => self.changed(h, *d, verifier, cap).await,
                Err(e) => {
                    self.inner.uncommitted_writes.unkeep(h, copied);
                    Err(e)
                }
            }
        }))
        .await?;
        Ok(())
    }

    /// Makes the data of file `h` durable on every server holding it. In
    /// scratch mode (`sync = "none"`) the metadata is synced too. If a
    /// server restarted since it acknowledged a change to the file that was
    /// not durable yet, the client sends its copy of the changes again and
    /// fsyncs once more; EIO if it no longer has that copy (see
    /// `uncommitted_writes`).
    /// With `sync = "replay"`, it first makes durable every change of
    /// this client that its servers answered and have not flushed yet (the
    /// file's creation, its name, its attributes among them).
    pub async fn fsync(&self, h: Handle) -> Result<()> {
        // The unsent changes of this client's delegations go first (the
        // file's own create among them), so that its flush reports theirs.
        self.settle_unsent_changes().await;
        self.flush(h).await?;
        self.pool().commit_kept(self.cred).await?;
        self.commit_direct_changes(h).await
    }

    /// Makes what was sent directly of `h` durable on every server holding
    /// it, sending again what a restarted server lost (fsync's second half).
    pub(crate) async fn commit_direct_changes(&self, h: Handle) -> Result<()> {
        let mut copy = None;
        let mut failed = None;
        for _ in 0..SEND_AGAIN_ROUNDS {
            let replies = match self.distribution(h).await {
                Ok(_) => {
                    self.with_capability(h, ANY, |cap| self.commit_file(h, cap))
                        .await?
                }
                // A directory (or an object that is not a file): its server.
                Err(_) => vec![self.commit(h, &None).await?],
            };
            match self.inner.uncommitted_writes.check(h, &replies, copy) {
                Verdict::Durable => return Ok(()),
                Verdict::Lost(e) => return Err(e),
                Verdict::SendAgain { changes, copy: c } => {
                    tracing::info!(
                        "file {h:#x}: a server restarted before its data was durable; \
                         sending {} changes again",
                        changes.len()
                    );
                    let sent = self
                        .with_capability(h, WRITE, |cap| self.send_again(h, &changes, cap))
                        .await;
                    match sent {
                        Ok(()) => copy = Some(c),
                        // The next round finds what is still unsent.
                        Err(e) => failed = Some(e),
                    }
                }
            }
        }
        self.inner.uncommitted_writes.forget(h);
        Err(ShoalError::new(
            Errno::EIO,
            format!(
                "file {h:#x}: its unsynced data could not be made durable again in \
                 {SEND_AGAIN_ROUNDS} rounds (servers restarting, or the file changing){}",
                failed
                    .map(|e| format!(": {}", e.message))
                    .unwrap_or_default()
            ),
        ))
    }

    /// If `server`'s `verifier` says it restarted since it last answered,
    /// sends it the resend copies of what it may have lost, every file's (a
    /// program that never fsyncs loses nothing to the restart either),
    /// several files at once; a file that changed meanwhile goes again. A
    /// failure is left for the file's fsync to find.
    async fn send_again_if_restarted(&self, server: u32, verifier: u64) {
        let lost = self.inner.uncommitted_writes.restarted(server, verifier);
        if lost.is_empty() {
            return;
        }
        tracing::info!(
            "server {server} restarted: sending {} files' unsynced changes again",
            lost.len()
        );
        let uw = &self.inner.uncommitted_writes;
        let resend = |(h, mut changes, mut version): (Handle, Changes, u64)| async move {
            for _ in 0..SEND_AGAIN_ROUNDS {
                let sent = self
                    .with_capability(h, WRITE, |cap| self.send_again(h, &changes, cap))
                    .await;
                if let Err(e) = sent {
                    tracing::warn!("sending file {h:#x}'s changes again failed: {e}");
                    return;
                }
                match uw.changed_since(h, server, version) {
                    None => return,
                    // Copied more while its copy went: all of it again, newest last.
                    Some((newer, v)) => (changes, version) = (newer, v),
                }
            }
            // Still changing: its fsync will send it all again.
            uw.sent_again(h, server, 0);
        };
        futures::StreamExt::for_each_concurrent(
            futures::stream::iter(lost),
            SEND_AGAIN_FILES,
            resend,
        )
        .await;
    }

    /// Sends `changes` of file `h` again, in order, to the datafiles they
    /// were made to (their servers restarted and may have lost them).
    async fn send_again(
        &self,
        h: Handle,
        changes: &[(Handle, Change)],
        cap: Option<Capability>,
    ) -> Result<()> {
        let cap = &cap;
        // Per server, the verifier every change went under: only once all
        // went under one does the file count them as acknowledged again.
        let mut under: Vec<(u32, u64)> = Vec::new();
        for (d, change) in changes {
            let verifier = match change {
                Change::Write { offset, data } => {
                    let c = Chunk {
                        datafile: *d,
                        local_offset: *offset,
                        buf_offset: 0,
                        len: data.len(),
                    };
                    self.send_write(&c, data.clone(), cap).await?
                }
                Change::Truncate { size } => self.send_truncate(*d, *size, cap).await?,
            };
            let server = server_of(*d);
            match under.iter().find(|(s, _)| *s == server) {
                Some((_, v)) if *v != verifier => {
                    return Err(ShoalError::new(
                        Errno::EIO,
                        format!("server {server} restarted again while file {h:#x}'s changes went"),
                    ));
                }
                Some(_) => {}
                None => under.push((server, verifier)),
            }
        }
        for (server, verifier) in under {
            self.inner
                .uncommitted_writes
                .sent_again(h, server, verifier);
        }
        Ok(())
    }

    /// Makes the datafiles of file `h` durable, and in scratch mode its
    /// metadata too; returns each server's verifier.
    async fn commit_file(&self, h: Handle, cap: Option<Capability>) -> Result<Vec<(u32, u64)>> {
        let mut targets = self.distribution(h).await?.datafiles;
        if self.config().settings.sync == SyncMode::None {
            targets.push(h);
        }
        let cap = &cap;
        futures::future::try_join_all(targets.iter().map(|t| self.commit(*t, cap))).await
    }

    /// Makes the data of datafile (or object) `t` durable on its server;
    /// returns that server and its verifier.
    async fn commit(&self, t: Handle, cap: &Option<Capability>) -> Result<(u32, u64)> {
        let reply: FsyncReply = self
            .pool()
            .call::<ops::Fsync>(
                server_of(t),
                self.cred,
                &FsyncRequest {
                    handle: t,
                    cap: cap.clone(),
                },
            )
            .await?;
        Ok((server_of(t), reply.verifier))
    }

    /// Records a change to file `h` that datafile `d`'s server acknowledged
    /// with `verifier`; if it cannot be tracked until the file's fsync, it is
    /// made durable now.
    async fn changed(
        &self,
        h: Handle,
        d: Handle,
        verifier: u64,
        cap: &Option<Capability>,
    ) -> Result<()> {
        self.inner.changed_here(h);
        self.send_again_if_restarted(server_of(d), verifier).await;
        if self
            .inner
            .uncommitted_writes
            .changed(h, server_of(d), verifier)
        {
            return Ok(());
        }
        let (server, now) = self.commit(d, cap).await?;
        if now != verifier {
            return Err(ShoalError::new(
                Errno::EIO,
                format!("server {server} restarted before a change to file {h:#x} was durable"),
            ));
        }
        Ok(())
    }
}
