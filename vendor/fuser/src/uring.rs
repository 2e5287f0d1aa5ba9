//! FUSE over io_uring (Linux 6.14+, FUSE ABI 7.42): requests arrive as
//! completions of commands registered on `/dev/fuse`, and a reply goes back
//! with the command that also fetches the next request, so a request costs
//! no `read` and a reply no `writev` of its own.
//!
//! The kernel keeps one queue per possible CPU and hands a request to the
//! queue of the CPU its caller runs on; every queue must have entries
//! registered before the kernel switches from `/dev/fuse` to the rings (until
//! then, and for FORGET, INTERRUPT and notifications always, the classic
//! loop threads serve). Here each queue has one thread, pinned to its CPU,
//! with its own ring of `QUEUE_DEPTH` entries.
//!
//! An entry is a header buffer (the request's `fuse_in_header` and its
//! op-specific header; the reply's `fuse_out_header`) and a payload buffer
//! (everything else). The payload buffer sits `PREFIX` bytes into an
//! allocation, so the two headers can be copied in front of the payload and
//! the request parsed from one contiguous slice, the same bytes a `read` of
//! `/dev/fuse` would have returned, without copying the payload.
//!
//! Replies may come from any thread, but only the ring thread commits. An
//! entry's buffers belong to the kernel while the entry is registered and to
//! the request while it is being served; the commit hands them back. A reply
//! sent while the ring thread is still inside the filesystem method that got
//! the request is committed once the method returns, so the kernel never
//! writes the next request into bytes the method may still read. A reply
//! from another thread is handed to the ring thread (`handoff`, woken by an
//! eventfd): the kernel delivers an entry's next request as task work of the
//! thread that committed it, so a commit from a runtime thread would wake
//! that thread and then the ring thread for every request.

use std::cell::UnsafeCell;
use std::io;
use std::io::IoSlice;
use std::mem::size_of;
use std::os::fd::AsRawFd;
use std::os::fd::FromRawFd;
use std::sync::Arc;
use std::sync::atomic::AtomicU8;
use std::sync::atomic::Ordering;

use io_uring::IoUring;
use io_uring::cqueue;
use io_uring::opcode;
use io_uring::squeue;
use io_uring::types;
use log::error;
use log::warn;
use parking_lot::Mutex;

use crate::channel::ChannelSender;
use crate::dev_fuse::DevFuse;
use crate::ll::fuse_abi as abi;

/// Entries per queue: requests one CPU's callers can have in service at once
/// before the kernel queues more behind them.
const QUEUE_DEPTH: usize = 16;

/// `FUSE_IO_URING_CMD_REGISTER`: register an entry's buffers and fetch.
const CMD_REGISTER: u32 = 1;
/// `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`: answer the entry's request and fetch.
const CMD_COMMIT_AND_FETCH: u32 = 2;

/// `struct fuse_uring_req_header`: `in_out` holds the in or out header,
/// `op_in` the request's op-specific header.
#[repr(C)]
struct ReqHeader {
    in_out: [u8; 128],
    op_in: [u8; 128],
    ring_ent_in_out: EntInOut,
}

/// `struct fuse_uring_ent_in_out`.
#[repr(C)]
#[derive(Clone, Copy)]
struct EntInOut {
    flags: u64,
    commit_id: u64,
    payload_sz: u32,
    padding: u32,
    reserved: u64,
}

const IN_HEADER: usize = size_of::<abi::fuse_in_header>();
const OUT_HEADER: usize = size_of::<abi::fuse_out_header>();
/// Room in front of the payload for the in header and the largest
/// op-specific header (`op_in`), rounded to keep the payload aligned.
const PREFIX: usize = 256;
const _: () = assert!(PREFIX >= IN_HEADER + 128);
const _: () = assert!(size_of::<ReqHeader>() == 288);
// `send_in_place` writes the out header's three fields (len, error, unique).
const _: () = assert!(OUT_HEADER == 16);
const _: () = assert!(size_of::<squeue::Entry128>() == 128);

/// Where an entry is: with the kernel, in a filesystem method on the ring
/// thread, waiting for its reply elsewhere, or answered during the method.
const WITH_KERNEL: u8 = 0;
const DISPATCHING: u8 = 1;
const AWAITING_REPLY: u8 = 2;
const REPLIED_IN_DISPATCH: u8 = 3;

struct Entry {
    header: UnsafeCell<Box<ReqHeader>>,
    /// `PREFIX` bytes, then the payload buffer; u64s for the headers' alignment.
    /// Owned here and never touched through this field after it is made:
    /// every access goes through `base`, so that the ring thread (reading a
    /// request's headers in the prefix) and a reply filling the payload in
    /// place on another thread never hold references to the same bytes.
    _buf: Box<[u64]>,
    /// The first byte of `_buf` (a heap allocation: it does not move).
    base: *mut u8,
    iov: UnsafeCell<[libc::iovec; 2]>,
    state: AtomicU8,
    commit_id: UnsafeCell<u64>,
}

/// One kernel queue: its ring, its entries and the device they are
/// registered on.
pub(crate) struct Queue {
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    /// Serialises pushes to the submission queue (replies come from any thread).
    submit: Mutex<()>,
    entries: Box<[Entry]>,
    payload_len: usize,
    qid: u16,
    dev: Arc<DevFuse>,
    /// Entries answered on other threads, for the ring thread to commit.
    handoff: Mutex<Vec<usize>>,
    /// Wakes the ring thread for `handoff` (a read of it is always pending).
    wake: std::os::fd::OwnedFd,
    wake_buf: UnsafeCell<u64>,
}

const WAKE_TAG: u64 = u64::MAX;

// SAFETY: an entry's cells (and the buffer behind `base`) are touched only
// by whoever holds the entry: the
// ring thread from its completion until the request is dispatched, the
// request's reply until it commits (the `state` handover orders the two), and
// the kernel in between. The ring's submission side is used under `submit`,
// its completion side only by the ring thread.
unsafe impl Send for Queue {}
unsafe impl Sync for Queue {}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue").field("qid", &self.qid).finish()
    }
}

/// The reply half of a request that came from a ring entry.
#[derive(Debug)]
pub(crate) struct RingReply {
    queue: Arc<Queue>,
    entry: usize,
    /// Whether the request carried a payload, which then sits in the
    /// payload buffer and is being read while the request is dispatched.
    request_payload: bool,
}

impl RingReply {
    /// Writes the reply (`fuse_out_header` and its arguments, as they would
    /// be written to `/dev/fuse`) into the entry and commits it.
    pub(crate) fn send(&self, data: &[IoSlice<'_>]) -> io::Result<()> {
        let q = &self.queue;
        let e = &q.entries[self.entry];
        let total: usize = data.iter().map(|s| s.len()).sum();
        if total < OUT_HEADER || total - OUT_HEADER > q.payload_len {
            // Not a reply fuser can form; the caller logs it and the request
            // stays unanswered, as a failed writev would leave it.
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: this reply holds the entry (see `Queue`).
        unsafe {
            let header = &mut *e.header.get();
            let payload = q.payload(self.entry);
            let mut at = 0; // bytes of the reply placed so far
            for s in data {
                let (head, rest) = s.split_at(OUT_HEADER.saturating_sub(at).min(s.len()));
                header.in_out[at..at + head.len()].copy_from_slice(head);
                at += head.len();
                if !rest.is_empty() {
                    let off = at - OUT_HEADER;
                    payload[off..off + rest.len()].copy_from_slice(rest);
                    at += rest.len();
                }
            }
            header.ring_ent_in_out.payload_sz = (total - OUT_HEADER) as u32;
        }
        self.hand_back()
    }

    /// The entry's payload buffer, for a reply to be written into in place
    /// (see [`RingReply::send_in_place`]): the kernel copies the reply from
    /// there, so bytes received straight into it are copied by nobody else.
    /// None if the request carried a payload of its own (a write's data):
    /// the method given the request may still be reading it there.
    pub(crate) fn payload(&mut self) -> Option<&mut [u8]> {
        if self.request_payload {
            return None;
        }
        // SAFETY: this reply holds the entry (see `Queue`), and `&mut self`
        // lends its payload to one caller at a time; the request's own bytes
        // lie in the prefix, apart from it.
        Some(unsafe { self.queue.payload(self.entry) })
    }

    /// Answers request `unique` with the first `len` bytes of the payload
    /// buffer, written there through [`RingReply::payload`], and commits.
    pub(crate) fn send_in_place(&self, unique: u64, len: usize) -> io::Result<()> {
        let q = &self.queue;
        if len > q.payload_len {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let total = (OUT_HEADER + len) as u32;
        // SAFETY: this reply holds the entry (see `Queue`).
        unsafe {
            let header = &mut *q.entries[self.entry].header.get();
            let out = &mut header.in_out[..OUT_HEADER];
            out[0..4].copy_from_slice(&total.to_ne_bytes());
            out[4..8].copy_from_slice(&0i32.to_ne_bytes());
            out[8..16].copy_from_slice(&unique.to_ne_bytes());
            header.ring_ent_in_out.payload_sz = len as u32;
        }
        self.hand_back()
    }

    /// Gives the answered entry back: committed by the ring thread once the
    /// method that got the request returns, or at once through `handoff`.
    fn hand_back(&self) -> io::Result<()> {
        let q = &self.queue;
        let e = &q.entries[self.entry];
        match e.state.compare_exchange(
            DISPATCHING,
            REPLIED_IN_DISPATCH,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => Ok(()), // the ring thread commits when the method returns
            Err(state) => {
                debug_assert_eq!(state, AWAITING_REPLY);
                e.state.store(WITH_KERNEL, Ordering::Release);
                let mut handoff = q.handoff.lock();
                handoff.push(self.entry);
                if handoff.len() == 1 {
                    let one = 1u64.to_ne_bytes();
                    // SAFETY: writing 8 bytes to an eventfd.
                    let n = unsafe { libc::write(q.wake.as_raw_fd(), one.as_ptr().cast(), 8) };
                    if n != 8 {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(())
            }
        }
    }

    pub(crate) fn channel(&self) -> ChannelSender {
        ChannelSender::from_device(self.queue.dev.clone())
    }
}

impl Queue {
    /// Sets up queue `qid`'s ring and entries (payloads of `payload_len`
    /// bytes: at least the connection's largest request or reply).
    pub(crate) fn new(dev: Arc<DevFuse>, qid: u16, payload_len: usize) -> io::Result<Arc<Queue>> {
        let ring = IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .setup_cqsize(4 * QUEUE_DEPTH as u32)
            .build(2 * QUEUE_DEPTH as u32)?;
        let words = (PREFIX + payload_len).div_ceil(8);
        let mut entries = (0..QUEUE_DEPTH)
            .map(|_| Entry {
                header: UnsafeCell::new(Box::new(ReqHeader {
                    in_out: [0; 128],
                    op_in: [0; 128],
                    ring_ent_in_out: EntInOut {
                        flags: 0,
                        commit_id: 0,
                        payload_sz: 0,
                        padding: 0,
                        reserved: 0,
                    },
                })),
                _buf: vec![0u64; words].into_boxed_slice(),
                base: std::ptr::null_mut(),
                iov: UnsafeCell::new(
                    [libc::iovec {
                        iov_base: std::ptr::null_mut(),
                        iov_len: 0,
                    }; 2],
                ),
                state: AtomicU8::new(WITH_KERNEL),
                commit_id: UnsafeCell::new(0),
            })
            .collect::<Box<[Entry]>>();
        for e in entries.iter_mut() {
            e.base = e._buf.as_mut_ptr().cast();
        }
        // SAFETY: eventfd returns a new descriptor or -1.
        let wake = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if wake < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Arc::new(Queue {
            ring,
            submit: Mutex::new(()),
            entries,
            payload_len,
            qid,
            dev,
            handoff: Mutex::new(Vec::new()),
            wake: unsafe { std::os::fd::OwnedFd::from_raw_fd(wake) },
            wake_buf: UnsafeCell::new(0),
        }))
    }

    /// The entry's payload buffer.
    ///
    /// SAFETY: the caller holds the entry.
    #[allow(clippy::mut_from_ref)]
    unsafe fn payload(&self, entry: usize) -> &mut [u8] {
        let base = self.entries[entry].base;
        unsafe { std::slice::from_raw_parts_mut(base.add(PREFIX), self.payload_len) }
    }

    /// The 128-byte submission for `cmd` on `entry`.
    fn command(&self, entry: usize, cmd: u32, commit_id: u64) -> squeue::Entry128 {
        // struct fuse_uring_cmd_req: flags, commit_id, qid, padding.
        let mut req = [0u8; 80];
        req[8..16].copy_from_slice(&commit_id.to_ne_bytes());
        req[16..18].copy_from_slice(&self.qid.to_ne_bytes());
        let iov = self.entries[entry].iov.get();
        let sqe = opcode::UringCmd80::new(types::Fd(self.dev.as_raw_fd()), cmd)
            .cmd(req)
            .addr(Some(iov as u64))
            .build()
            .user_data(entry as u64);
        // The kernel wants `len` = 2 (the header and payload iovecs), a field
        // the builder does not set: byte 24 of the SQE (`struct io_uring_sqe`).
        // SAFETY: `Entry128` is the 128-byte SQE, checked above.
        let mut raw: [u8; 128] = unsafe { std::mem::transmute(sqe) };
        raw[24..28].copy_from_slice(&2u32.to_ne_bytes());
        unsafe { std::mem::transmute(raw) }
    }

    /// Pushes a command, submitted with the ring thread's next wait.
    fn push(&self, sqe: &squeue::Entry128) -> io::Result<()> {
        let _guard = self.submit.lock();
        // SAFETY: pushes are serialised by `submit`; the queue never holds
        // more than one command per entry and the wake-up read, within its
        // size of 2 x QUEUE_DEPTH.
        unsafe {
            let mut sq = self.ring.submission_shared();
            sq.push(sqe)
                .map_err(|_| io::Error::other("FUSE ring's submission queue full"))?;
        }
        Ok(())
    }

    fn commit(&self, entry: usize) -> io::Result<()> {
        // SAFETY: the committer holds the entry.
        let commit_id = unsafe { *self.entries[entry].commit_id.get() };
        self.push(&self.command(entry, CMD_COMMIT_AND_FETCH, commit_id))
    }

    /// Registers every entry with the kernel.
    fn register(&self) -> io::Result<()> {
        for (i, e) in self.entries.iter().enumerate() {
            // SAFETY: not yet registered: the ring thread holds every entry.
            unsafe {
                let header = &mut **e.header.get();
                let payload = self.payload(i);
                *e.iov.get() = [
                    libc::iovec {
                        iov_base: (header as *mut ReqHeader).cast(),
                        iov_len: size_of::<ReqHeader>(),
                    },
                    libc::iovec {
                        iov_base: payload.as_mut_ptr().cast(),
                        iov_len: payload.len(),
                    },
                ];
            }
            self.push(&self.command(i, CMD_REGISTER, 0))?;
        }
        self.arm_wake()?;
        self.ring.submit()?;
        Ok(())
    }

    fn arm_wake(&self) -> io::Result<()> {
        let sqe = opcode::Read::new(
            types::Fd(self.wake.as_raw_fd()),
            self.wake_buf.get().cast(),
            8,
        )
        .build()
        .user_data(WAKE_TAG)
        .into();
        self.push(&sqe)
    }

    /// The request in `entry`, laid out as `/dev/fuse` delivers it, or None
    /// if its sizes do not add up.
    ///
    /// SAFETY: the ring thread holds the entry (its completion just arrived).
    unsafe fn request(&self, entry: usize) -> Option<&[u8]> {
        let e = &self.entries[entry];
        let header = unsafe { &**e.header.get() };
        let payload_sz = header.ring_ent_in_out.payload_sz as usize;
        unsafe { *e.commit_id.get() = header.ring_ent_in_out.commit_id };
        let len = u32::from_ne_bytes(header.in_out[0..4].try_into().unwrap()) as usize;
        let op_len = len.checked_sub(IN_HEADER + payload_sz)?;
        if op_len > header.op_in.len() || payload_sz > self.payload_len || op_len % 8 != 0 {
            return None;
        }
        let start = PREFIX - IN_HEADER - op_len;
        let bytes = unsafe { std::slice::from_raw_parts_mut(e.base, PREFIX + payload_sz) };
        bytes[start..start + IN_HEADER].copy_from_slice(&header.in_out[..IN_HEADER]);
        bytes[start + IN_HEADER..PREFIX].copy_from_slice(&header.op_in[..op_len]);
        Some(&bytes[start..])
    }

    /// The unique id in the entry's in header, to answer a request that
    /// cannot be parsed.
    unsafe fn unique(&self, entry: usize) -> u64 {
        let header = unsafe { &**self.entries[entry].header.get() };
        u64::from_ne_bytes(header.in_out[8..16].try_into().unwrap())
    }

    /// Serves the queue until the connection ends: registers the entries,
    /// then hands each request to `dispatch` with the reply it must use.
    pub(crate) fn serve(
        self: &Arc<Queue>,
        mut dispatch: impl FnMut(&[u8], RingReply) -> Result<(), RingReply>,
    ) -> io::Result<()> {
        pin_to_cpu(self.qid as usize);
        self.register()?;
        let mut live = self.entries.len();
        // Kept across wake-ups, so the loop allocates nothing per request.
        let mut done: Vec<(usize, i32)> = Vec::with_capacity(4 * QUEUE_DEPTH);
        let mut handed: Vec<usize> = Vec::with_capacity(QUEUE_DEPTH);
        loop {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(e),
            }
            done.clear();
            done.extend(
                // SAFETY: only this thread reads the completion queue.
                unsafe { self.ring.completion_shared() }
                    .map(|c| (c.user_data() as usize, c.result())),
            );
            for &(entry, result) in &done {
                if entry as u64 == WAKE_TAG {
                    std::mem::swap(&mut handed, &mut *self.handoff.lock());
                    for entry in handed.drain(..) {
                        if let Err(err) = self.commit(entry) {
                            error!("FUSE ring queue {}: commit failed: {err}", self.qid);
                        }
                    }
                    self.arm_wake()?;
                    continue;
                }
                if result < 0 {
                    // The connection is gone (ENOTCONN on unmount or abort)
                    // or the kernel refused the entry: it will not come back.
                    if result != -libc::ENOTCONN {
                        warn!(
                            "FUSE ring queue {} entry {entry}: {}",
                            self.qid,
                            io::Error::from_raw_os_error(-result)
                        );
                    }
                    live -= 1;
                    continue;
                }
                self.serve_entry(entry, &mut dispatch);
            }
            if live == 0 {
                return Ok(());
            }
        }
    }

    fn serve_entry(
        self: &Arc<Queue>,
        entry: usize,
        dispatch: &mut impl FnMut(&[u8], RingReply) -> Result<(), RingReply>,
    ) {
        let e = &self.entries[entry];
        e.state.store(DISPATCHING, Ordering::Release);
        // SAFETY: the completion gave this thread the entry.
        let request_payload = unsafe { (*e.header.get()).ring_ent_in_out.payload_sz } != 0;
        let reply = RingReply {
            queue: self.clone(),
            entry,
            request_payload,
        };
        // SAFETY: the completion gave this thread the entry.
        let unparsed = match unsafe { self.request(entry) } {
            Some(request) => dispatch(request, reply).err(),
            None => {
                error!(
                    "FUSE ring queue {}: a request whose sizes do not add up",
                    self.qid
                );
                Some(reply)
            }
        };
        if let Some(reply) = unparsed {
            // SAFETY: not dispatched: this thread still holds the entry.
            let unique = unsafe { self.unique(entry) };
            let mut out = [0u8; OUT_HEADER];
            out[0..4].copy_from_slice(&(OUT_HEADER as u32).to_ne_bytes());
            out[4..8].copy_from_slice(&(-libc::EIO).to_ne_bytes());
            out[8..16].copy_from_slice(&unique.to_ne_bytes());
            if let Err(err) = reply.send(&[IoSlice::new(&out)]) {
                error!("FUSE ring queue {}: {err}", self.qid);
            }
        }
        if e.state
            .compare_exchange(
                DISPATCHING,
                AWAITING_REPLY,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_err()
        {
            // Answered during the method: commit now (submitted with the
            // next wait).
            e.state.store(WITH_KERNEL, Ordering::Release);
            if let Err(err) = self.commit(entry) {
                error!("FUSE ring queue {}: commit failed: {err}", self.qid);
            }
        }
    }
}

/// Keeps the calling thread on `cpu`, where the kernel's queue of that
/// number gets its requests from (best effort: a failure only costs locality).
fn pin_to_cpu(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET stays within it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
            warn!(
                "pinning FUSE ring thread to CPU {cpu}: {}",
                io::Error::last_os_error()
            );
        }
    }
}

/// The number of kernel queues: one per possible CPU.
pub(crate) fn queue_count() -> io::Result<usize> {
    let possible = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let mut n = 0;
    for range in possible.trim().split(',') {
        let (lo, hi) = range.split_once('-').unwrap_or((range, range));
        let lo: usize = lo.parse().map_err(io::Error::other)?;
        let hi: usize = hi.parse().map_err(io::Error::other)?;
        n += hi + 1 - lo;
    }
    Ok(n)
}
