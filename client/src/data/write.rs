//! Which path a write takes [Hildebrand 2006]: under the write threshold the
//! gathering path (buffered writes, waiting in the gathering buffer of
//! `gathering_buffer`, sent later as a few large writes), else the direct
//! path (straight to the servers holding the strips, `io`).
//!
//! What keeps the gathering path invisible to this client's callers:
//! - a read from an offset before the end of the buffered bytes first sends
//!   them and waits (reads see this client's own writes, and never end the
//!   file short of them);
//! - a direct write first sends the file's buffered writes if any of them
//!   lies in the write's range (or a send is under way), a truncate or any
//!   setattr of the file always (a later flush must never overwrite newer bytes, or a
//!   data write move an mtime set explicitly after it);
//! - attributes count buffered bytes in the size (`attrs`), so `O_APPEND`
//!   through the kernel and `ls -l` see the file as written;
//! - a full buffer is sent in the background while the writer fills it
//!   again; if it fills before that send is done the writer waits for it
//!   (one send in the background per file), and when the client buffers
//!   `MAX_TOTAL` bytes in all every file's is sent and the writer waits:
//!   memory stays bounded;
//! - sends of one file go one at a time under its gate, and a file's
//!   buffer (with its gate) stays while anyone waits on that gate, so a
//!   later send never overtakes an earlier one;
//! - fsync and close ([`Client::flush`]) send the buffered writes and report a
//!   send that failed since the last of them: an error of the gathering path
//!   reaches the application there, as NFS reports its unstable writes'
//!   errors (the write itself was acknowledged when it was buffered).
//!
//! Other clients see the bytes once they are sent: at the latest
//! `gather_delay_ms` after they were written if the front end has a thread
//! that calls [`Client::flush_due`] (the mount), else once the send that the
//! writer's next write starts in the background has gone (the writer does
//! not wait for it; on a runtime its callers drive, as the preload
//! library's, the send goes while a later call waits), or at its next read,
//! and at close or fsync always (close-to-open consistency).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal_proto::capability::WRITE;
use shoal_proto::cluster::WriteThreshold;
use shoal_proto::dist;
use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::handle::server_of;
use shoal_proto::ops;
use shoal_proto::Handle;

use crate::client::Client;
use crate::data::gathering_buffer::{Gate, Put};
use crate::data::write_behind::{Ticket, MIN_BEHIND};

/// The extended attribute that shows and sets a file's write threshold in
/// this client (`setfattr -n user.shoal.write_threshold -v 4096 FILE` on a
/// mount, `shoal_setxattr` in C): bytes, a K or M suffix allowed; removing
/// it returns the file to the cluster's. It lives in the client, never on
/// the servers: one program's choice for the file it writes.
pub const THRESHOLD_XATTR: &str = "user.shoal.write_threshold";

/// How many writes and bytes took each path, and what the gathering path
/// sent for them, since the client started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WritePaths {
    pub direct_writes: u64,
    pub direct_bytes: u64,
    pub gathered_writes: u64,
    pub gathered_bytes: u64,
    /// Writes the gathering path sent to the servers (one per buffered extent,
    /// before splitting at strips).
    pub gathered_sends: u64,
}

impl std::fmt::Display for WritePaths {
    /// The one form front ends show them in (`shoal stats --mount`,
    /// `SHOAL_STATS`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "direct {} writes {} bytes; gathered {} writes {} bytes, sent as {} writes",
            self.direct_writes,
            self.direct_bytes,
            self.gathered_writes,
            self.gathered_bytes,
            self.gathered_sends
        )
    }
}

/// How far [`Client::settle`] takes a file's buffered writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Settle {
    /// Sent (to the strips' servers or the gathering server).
    Send,
    /// Sent, and written out by the gathering server: readers of the
    /// strips' servers see them, and a later write-out cannot land over
    /// newer bytes.
    Push,
    /// Sent and durable (fsync, close): the resend copy goes.
    Commit,
}

impl Client {
    /// Writes `data` at `offset` of file `h`; returns the bytes written.
    /// Under the write threshold the write is buffered and sent later (see the
    /// module's comment); errors of that send come at fsync or close.
    pub async fn write(&self, h: Handle, offset: u64, data: Bytes) -> Result<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|e| *e <= dist::MAX_FILE_SIZE)
            .ok_or_else(|| {
                ShoalError::new(
                    Errno::EFBIG,
                    format!(
                        "write at offset {offset} goes past the largest file size ({} bytes)",
                        dist::MAX_FILE_SIZE
                    ),
                )
            })?;
        let g = &self.inner.gathering;
        let n = data.len() as u64;
        let written = data.len();
        let threshold = self.threshold_of(h);
        if threshold == WriteThreshold::AUTO {
            self.measure_round_trip(h).await;
        }
        let auto = threshold == WriteThreshold::AUTO;
        if data.len() < self.bytes_of(threshold)
            && !(auto && self.joins_nothing_buffered(h, offset, data.len()))
            && self.may_buffer(h).await?
        {
            // Buffered bytes go after any older write of their range in flight.
            self.inner.write_behind.settle_range(h, offset, end).await;
            let per_file = self.config().settings.gather_buffer as usize;
            match g.buffer.put(h, self.cred, offset, &data, per_file) {
                Put::Buffered => {}
                Put::BufferedFull if g.buffer.claim_background_send(h) => {
                    // Sent while the writer goes on filling the buffer again.
                    self.send_buffered_in_background(h);
                }
                Put::BufferedFull => self.send_buffered(h).await,
                Put::BufferedOverTotal => {
                    // The client buffers too much: every file's goes now, and
                    // is made durable (its copies go too); the writer waits.
                    let files = g.buffer.files();
                    let commits = files.into_iter().map(|f| self.settle(f, Settle::Commit));
                    futures::future::join_all(commits).await;
                }
            }
            g.gathered_writes.fetch_add(1, Ordering::Relaxed);
            g.gathered_bytes.fetch_add(n, Ordering::Relaxed);
            // A client without a thread of its own sends what waited long
            // enough when it writes again, in the background: a writer
            // going through many files must not wait, at each write, for
            // the round trips of the files it wrote a while ago.
            self.send_due_in_background();
        } else {
            // Buffered bytes of this range go first: their send must never
            // land over these newer ones. Others stay buffered.
            if g.buffer.unsent_in(h, offset, end) {
                self.send_buffered(h).await;
            }
            self.before_direct_write(h, offset, &data).await?;
            // What the writer waits for (`write_behind`) is what the direct
            // path costs it.
            let t0 = Instant::now();
            self.write_direct_or_behind(h, offset, data).await?;
            g.auto.direct(n as usize, t0.elapsed());
            g.direct_writes.fetch_add(1, Ordering::Relaxed);
            g.direct_bytes.fetch_add(n, Ordering::Relaxed);
        }
        self.inner.changed_here(h);
        let now = shoal_proto::time::now_ns();
        self.inner.attrs.update(&h, |a| {
            a.size = a.size.max(end);
            a.mtime_ns = now;
            a.ctime_ns = now;
        });
        Ok(written)
    }

    /// Whether a small write to `h` may be buffered: it is a regular file (its
    /// layout, cached for files, says so), the caller's right to write it is
    /// known now (a write refused at its send would be refused to nobody),
    /// so files whose server alone can check the caller (see
    /// `checked_only_by_its_server`) take the direct path.
    async fn may_buffer(&self, h: Handle) -> Result<bool> {
        // A layout seen at any time says so; the current one is the send's
        // to find (it unstuffs a file grown past its first strip). Asking
        // here for a stale stuffed one would fail a write that is only
        // buffered, while the file's server is down.
        if self.inner.dists.seen(&h).is_none() {
            self.distribution(h).await?;
        }
        if self.checked_only_by_its_server(h) {
            return Ok(false);
        }
        self.capability(h, WRITE).await?;
        Ok(true)
    }

    /// With `auto`: whether a write of `len` bytes at `offset` of `h` would
    /// go behind the writer if sent direct and does not continue the bytes
    /// this client buffered or put behind of the file (a random write).
    /// Buffered, it would join nothing: its send would cost the same
    /// messages later, and a copy. Measured (`shoal bench writesize`, random
    /// 32 KiB writes): direct behind the writer 1.2x the gathering path.
    fn joins_nothing_buffered(&self, h: Handle, offset: u64, len: usize) -> bool {
        self.config().settings.write_behind > 0
            && len >= MIN_BEHIND
            && self.buffered_end(h) != Some(offset)
    }

    /// The write threshold for file `h`: its own if one was set through this
    /// client, else its layout's (its directory's hint when it was made),
    /// else the cluster's (or the mount's); `auto` is what this client's
    /// writes show now (`threshold`).
    pub fn write_threshold(&self, h: Handle) -> usize {
        self.bytes_of(self.threshold_of(h))
    }

    /// A threshold in bytes now (`auto`'s as this client's writes show).
    fn bytes_of(&self, threshold: WriteThreshold) -> usize {
        match threshold {
            WriteThreshold::Bytes(b) => b as usize,
            WriteThreshold::Auto(_) => {
                let s = &self.config().settings;
                // A large write that goes behind the writer
                // (`write_behind`) does not wait for its round trip, the
                // fixed cost the gathering path saves.
                let worth_buffering = match s.write_behind {
                    0 => s.gather_buffer as usize,
                    _ => (s.gather_buffer as usize)
                        .min(crate::data::write_behind::AUTO_BUFFERS_UNDER),
                };
                self.inner.gathering.auto.threshold(worth_buffering)
            }
        }
    }

    /// Which threshold file `h` follows (see [`Client::write_threshold`]).
    fn threshold_of(&self, h: Handle) -> WriteThreshold {
        if let Some(own) = self.inner.gathering.thresholds.get(&h) {
            return WriteThreshold::Bytes(own);
        }
        let of_layout = self.inner.dists.seen(&h).and_then(|d| d.write_threshold);
        of_layout.map_or(
            self.config().settings.write_threshold,
            WriteThreshold::from_wire,
        )
    }

    /// For a file that follows `auto`, once per client: the round trip to
    /// `h`'s server, the fixed cost of a direct write until direct writes
    /// show theirs.
    async fn measure_round_trip(&self, h: Handle) {
        let auto = &self.inner.gathering.auto;
        if auto.knows_fixed_cost() {
            return;
        }
        let t0 = Instant::now();
        let ping = self
            .pool()
            .call::<ops::Ping>(server_of(h), self.cred, &shoal_proto::msg::Empty {})
            .await;
        if ping.is_ok() {
            auto.round_trip(t0.elapsed());
        }
    }

    /// Gives file `h` a write threshold of its own in this client (None:
    /// the cluster's again); its writes buffered under the old one are sent
    /// first.
    pub async fn set_write_threshold(&self, h: Handle, bytes: Option<u32>) -> Result<()> {
        let max = self.config().settings.gather_buffer;
        if bytes.is_some_and(|b| b > max) {
            return Err(ShoalError::invalid(format!(
                "write threshold {} is over the cluster's gather_buffer ({max} bytes)",
                bytes.unwrap_or(0)
            )));
        }
        self.send_buffered(h).await;
        let g = &self.inner.gathering;
        match bytes {
            Some(b) => g.thresholds.put(h, b),
            None => g.thresholds.remove(&h),
        }
        Ok(())
    }

    /// Sends file `h`'s buffered writes and reports a send of them that
    /// failed since the last fsync or close: what close(2) needs before it
    /// returns.
    pub async fn flush(&self, h: Handle) -> Result<()> {
        self.settle(h, Settle::Commit).await?;
        let behind = self.inner.write_behind.flush(h).await;
        match self.inner.gathering.buffer.take_error(h) {
            Some(e) => Err(e),
            // A create answered by this client that failed when sent.
            None => behind.and(self.create_failure(h)),
        }
    }

    /// Sends what was buffered longer than `gather_delay_ms`, of every file: for
    /// front ends to call every few milliseconds (the mount) or now and then
    /// (libshoal, on its calls). Errors wait for the files' fsync or close.
    pub async fn flush_due(&self) {
        let delay = Duration::from_millis(self.config().settings.gather_delay_ms as u64);
        let due = self.inner.gathering.buffer.due(delay);
        futures::future::join_all(due.into_iter().map(|h| self.send_buffered(h))).await;
    }

    /// Starts sending, in the background, what was buffered longer than
    /// `gather_delay_ms`, of every file whose send is not under way yet:
    /// [`Client::flush_due`] for a caller that must not wait.
    fn send_due_in_background(&self) {
        let delay = Duration::from_millis(self.config().settings.gather_delay_ms as u64);
        let buffer = &self.inner.gathering.buffer;
        for h in buffer.due(delay) {
            if buffer.claim_background_send(h) {
                self.send_buffered_in_background(h);
            }
        }
    }

    /// Sends every change this client answered itself and holds: the
    /// unsent creates and unlinks of its directory delegations, then every
    /// buffered write, of every file; reports the first failure (of this
    /// send or an earlier one not reported yet): for a front end going away
    /// (unmount, process exit, exec), whose memory goes with them.
    pub async fn flush_all(&self) -> Result<()> {
        // Nothing else may carry them: the pool's fence sends them only
        // before another request, and a front end that has no write
        // buffered sends none.
        self.settle_unsent_changes().await;
        // Files being sent or with an error to report too, not only those
        // with bytes buffered: flush waits for the one and reports the other.
        let mut files = self.inner.gathering.buffer.files();
        files.extend(self.inner.write_behind.files());
        files.sort_unstable();
        files.dedup();
        let results = futures::future::join_all(files.into_iter().map(|h| self.flush(h))).await;
        results.into_iter().collect()
    }

    /// The xattr [`THRESHOLD_XATTR`] of `h`, if `h` is a regular file
    /// (`value` None: removed); None if the call is not about it.
    pub(crate) async fn threshold_xattr(
        &self,
        h: Handle,
        name: &str,
        value: Option<&[u8]>,
    ) -> Option<Result<()>> {
        if name != THRESHOLD_XATTR || self.distribution(h).await.is_err() {
            return None;
        }
        let bytes = match value.map(parse_bytes) {
            None => None,
            Some(Some(b)) => Some(b),
            Some(None) => {
                return Some(Err(ShoalError::invalid(format!(
                    "{THRESHOLD_XATTR}: {:?} is not a number of bytes (a K or M suffix may follow)",
                    String::from_utf8_lossy(value.unwrap_or_default())
                ))))
            }
        };
        Some(self.set_write_threshold(h, bytes).await)
    }

    /// The value of [`THRESHOLD_XATTR`] for `h`, if the call is about it.
    pub(crate) async fn threshold_xattr_value(&self, h: Handle, name: &str) -> Option<Vec<u8>> {
        if name != THRESHOLD_XATTR || self.distribution(h).await.is_err() {
            return None;
        }
        Some(self.write_threshold(h).to_string().into_bytes())
    }

    /// Whether this client holds what [`flush_all`](Self::flush_all)
    /// sends: writes not sent yet or not answered yet (or a send's error
    /// not reported yet), or changes answered under a delegation, unsent.
    pub fn holds_back(&self) -> bool {
        self.inner.gathering.buffer.any()
            || self.inner.write_behind.any()
            || self.inner.delegated.unsettled()
    }

    /// How many writes and bytes took each path so far.
    pub fn write_paths(&self) -> WritePaths {
        let g = &self.inner.gathering;
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        WritePaths {
            direct_writes: n(&g.direct_writes),
            direct_bytes: n(&g.direct_bytes),
            gathered_writes: n(&g.gathered_writes),
            gathered_bytes: n(&g.gathered_bytes),
            gathered_sends: n(&g.gathered_sends),
        }
    }

    /// Before a read from `offset` of `h`: sends the file's buffered writes
    /// if some of them lie at or past `offset` (or is being sent), has its
    /// gathering server write out what it holds of this client's, and waits.
    pub(crate) async fn settle_for_read(&self, h: Handle, offset: u64) -> Result<()> {
        // What waited long enough goes too, every file's at once: after a
        // burst of small files written and left open, the first read sends
        // them all in one pipelined round rather than each read its own.
        self.flush_due().await;
        self.inner.write_behind.settle(h).await;
        if self.inner.gathering.buffer.touches(h, offset) {
            self.settle(h, Settle::Push).await?;
        }
        Ok(())
    }

    /// Sends file `h`'s buffered writes (see [`Client::settle`]).
    pub(crate) async fn send_buffered(&self, h: Handle) {
        // A send's failure is held for fsync and close: nothing to return.
        let _ = self.settle(h, Settle::Send).await;
    }

    /// Sends file `h`'s buffered writes in a task of the caller's runtime. On
    /// a runtime its callers drive (libshoal's preload flavor) the task
    /// runs while a later call waits, or the recall listener drives it; a
    /// failure waits for the file's fsync or close, whose flush waits for
    /// the send (it takes the file's gate).
    fn send_buffered_in_background(&self, h: Handle) {
        let c = self.clone();
        tokio::spawn(async move { c.send_buffered(h).await });
    }

    /// Sends file `h`'s buffered writes as the caller who wrote them, after
    /// any send of the file already under way, and then takes `step` with
    /// what its gathering server holds of this client's. A failure to send
    /// or commit is held for [`Client::flush`] (fsync, close) to report; a
    /// push that failed is returned (the caller was about to read, write,
    /// truncate or change the file over bytes that may yet land).
    pub(crate) async fn settle(&self, h: Handle, step: Settle) -> Result<()> {
        let buffer = &self.inner.gathering.buffer;
        let Some(gate) = buffer.gate(h) else {
            return Ok(());
        };
        let pushed = {
            let _one_at_a_time = gate.lock().await;
            if let Some(taken) = buffer.take(h, &gate) {
                self.send_taken(h, &gate, taken).await;
            }
            match step {
                Settle::Send => Ok(()),
                Settle::Push => self.commit_gathered(h, &gate, false).await,
                Settle::Commit => {
                    if let Err(e) = self.commit_gathered(h, &gate, true).await {
                        tracing::warn!("committing gathered writes of {h:#x} failed: {e}");
                        buffer.failed(h, &gate, as_reported(h, e));
                    }
                    Ok(())
                }
            }
        };
        drop(gate);
        buffer.tidy(h);
        // The buffered bytes now count at the servers, no longer here.
        self.inner.changed_here(h);
        pushed.map_err(|e| as_reported(h, e))
    }

    /// Before `data` goes direct at `offset` of `h`: bytes of that range
    /// its gathering server holds of this client's are written out first
    /// (else they could land over it later), and the resend copy takes the
    /// new bytes (else a resend would). Under the file's gate, so
    /// that no resend or push slips in between.
    async fn before_direct_write(&self, h: Handle, offset: u64, data: &[u8]) -> Result<()> {
        let buffer = &self.inner.gathering.buffer;
        let Some(gate) = buffer.gate(h) else {
            return Ok(());
        };
        let done = {
            let _one_at_a_time = gate.lock().await;
            self.under_gate_before_direct_writes(h, &gate, &[(offset, data)])
                .await
        };
        drop(gate);
        buffer.tidy(h);
        done.map_err(|e| as_reported(h, e))
    }

    /// [`Client::before_direct_write`] for several `writes` (offset, data)
    /// at once, the caller holding `gate`: one push for all of them.
    async fn under_gate_before_direct_writes(
        &self,
        h: Handle,
        gate: &Gate,
        writes: &[(u64, &[u8])],
    ) -> Result<()> {
        let buffer = &self.inner.gathering.buffer;
        let overlapped = writes
            .iter()
            .any(|(offset, data)| buffer.unpushed_in(h, *offset, offset + data.len() as u64));
        if overlapped {
            self.commit_gathered(h, gate, false).await?;
        }
        for (offset, data) in writes {
            buffer.overlay(h, *offset, data);
        }
        Ok(())
    }

    /// Sends `taken`, the buffered extents of `h`, under its `gate`: several
    /// small ones go to the file's gathering server in one message, others
    /// direct.
    async fn send_taken(
        &self,
        h: Handle,
        gate: &Gate,
        taken: crate::data::gathering_buffer::Taken,
    ) {
        let buffer = &self.inner.gathering.buffer;
        let writer = self.with_cred(taken.cred);
        let sends = taken.extents.len();
        let bytes: usize = taken.extents.iter().map(|(_, d)| d.len()).sum();
        let t0 = Instant::now();
        let at_server = buffer.at_server_epoch(h, gate).is_some();
        let done = if self.goes_to_gathering_server(sends, bytes, at_server) {
            writer
                .send_to_gathering_server(h, gate, taken.extents)
                .await
        } else {
            self.inner.gathering.count_sends(sends as u64);
            self.send_direct(h, gate, &writer, taken.extents).await
        };
        if done.is_ok() {
            self.inner.gathering.auto.gathered(bytes, t0.elapsed());
        }
        if let Err(e) = &done {
            tracing::warn!("sending buffered writes of {h:#x} failed: {e}");
        }
        buffer.sent(h, gate, done.err().map(|e| as_reported(h, e)));
    }

    /// Sends buffered `extents` of `h` straight to the strips' servers as
    /// `writer`, each one write, all in parallel, after what the gathering
    /// server holds of their ranges (under `gate`).
    async fn send_direct(
        &self,
        h: Handle,
        gate: &Gate,
        writer: &Client,
        extents: Vec<(u64, Vec<u8>)>,
    ) -> Result<()> {
        let writes: Vec<(u64, &[u8])> = extents.iter().map(|(o, d)| (*o, d.as_slice())).collect();
        self.under_gate_before_direct_writes(h, gate, &writes)
            .await?;
        let sends = extents.into_iter().map(|(offset, data)| async move {
            writer.write_direct(h, offset, &Bytes::from(data)).await
        });
        futures::future::try_join_all(sends).await.map(drop)
    }

    /// The last handle of `h` closed, after its flush: the sizes of writes
    /// put behind since (a mapping written back late) stop counting once
    /// they land (`WriteBehind::closed`).
    pub fn closed(&self, h: Handle) {
        self.inner.write_behind.closed(h);
    }

    /// The file `h` is gone: its buffered writes and writes put behind go
    /// too.
    pub(crate) fn discard_buffered(&self, h: Handle) {
        self.inner.gathering.buffer.discard(h);
        self.inner.write_behind.discard(h);
        self.inner.gathering.thresholds.remove(&h);
    }

    /// `h` was truncated to `size`: what this client sent before no longer
    /// makes it longer, and its copy at the gathering server ends there.
    pub(crate) fn buffered_truncated(&self, h: Handle, size: u64) {
        self.inner.gathering.buffer.truncated(h, size);
        self.inner.write_behind.truncated(h, size);
    }

    /// How long `h` is at least for this client's readers, counting its
    /// buffered bytes or those being sent, and its writes put behind since
    /// the file's last flush.
    pub(crate) fn buffered_end(&self, h: Handle) -> Option<u64> {
        let buffered = self.inner.gathering.buffer.end_of(h);
        let behind = self.inner.write_behind.end_of(h);
        buffered.max(behind)
    }
}

/// A write in flight that is finished however its task ends: if the task
/// is dropped before its reply (its runtime shut down), the write counts
/// as failed rather than holding its room, and its file's waiters, forever.
struct InFlight {
    client: Client,
    ticket: Option<Ticket>,
}

impl InFlight {
    fn finish(mut self, result: Result<()>) {
        let ticket = self.ticket.take().expect("finished once");
        self.client.inner.write_behind.finish(ticket, result);
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            let h = ticket.h;
            let lost = ShoalError::io(format!(
                "file {h:#x}: a write was dropped before its reply (the client stopped)"
            ));
            self.client.inner.write_behind.finish(ticket, Err(lost));
        }
    }
}

impl Client {
    /// Sends a write of `data` at `offset` of `h` on the direct path: a
    /// large one behind the caller, if the file has room in flight
    /// (`write_behind`), else waited for.
    pub(crate) async fn write_direct_or_behind(
        &self,
        h: Handle,
        offset: u64,
        data: Bytes,
    ) -> Result<()> {
        let window = self.config().settings.write_behind as usize;
        if window == 0 || data.len() < MIN_BEHIND {
            return self.write_direct(h, offset, &data).await;
        }
        let end = offset + data.len() as u64;
        let behind = &self.inner.write_behind;
        let Some(ticket) = behind.begin(h, offset, end, window).await else {
            return self.write_direct(h, offset, &data).await;
        };
        let in_flight = InFlight {
            client: self.clone(),
            ticket: Some(ticket),
        };
        tokio::spawn(async move {
            let done = in_flight.client.write_direct(h, offset, &data).await;
            if let Err(e) = &done {
                tracing::warn!("a write of {h:#x} at {offset} failed: {e}");
            }
            in_flight.finish(done.map_err(|e| as_reported(h, e)));
        });
        Ok(())
    }
}

/// A failed send as close or fsync report it: what the application can act
/// on keeps its errno (no space, no right, too large); anything else (a
/// server gone, a connection lost) is EIO, as a local disk's writeback
/// error is: the data is lost.
pub(crate) fn as_reported(h: Handle, e: ShoalError) -> ShoalError {
    let as_is = [Errno::ENOSPC, Errno::EACCES, Errno::EPERM, Errno::EFBIG];
    if as_is.contains(&e.errno) || e.errno == Errno::EIO {
        return e;
    }
    ShoalError::new(
        Errno::EIO,
        format!("writes to file {h:#x} acknowledged before they landed were lost: {e}"),
    )
}

/// A byte count as text: digits and an optional K or M suffix.
fn parse_bytes(text: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(text).ok()?.trim();
    let (digits, shift) = match text.as_bytes().last()? {
        b'k' | b'K' => (&text[..text.len() - 1], 10),
        b'm' | b'M' => (&text[..text.len() - 1], 20),
        _ => (text, 0),
    };
    digits.parse::<u32>().ok()?.checked_mul(1 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_values() {
        assert_eq!(parse_bytes(b"4096"), Some(4096));
        assert_eq!(parse_bytes(b"32K\n"), Some(32 << 10));
        assert_eq!(parse_bytes(b"1m"), Some(1 << 20));
        assert_eq!(parse_bytes(b"0"), Some(0));
        assert_eq!(parse_bytes(b"-1"), None);
        assert_eq!(parse_bytes(b"K"), None);
        assert_eq!(parse_bytes(b"9999999M"), None);
    }
}
