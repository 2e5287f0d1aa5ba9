//! The sending side of a connection, shared by every request (client) or
//! reply (server) that goes out on it.
//!
//! Why not a writer task fed by a channel: handing each frame to another
//! task costs a thread wake-up, and on a loaded two-core machine a wake-up
//! costs as much as the rest of a small request. So [`FrameSink::send`]
//! writes the frame on the sender's own thread, with a non-blocking write,
//! whenever nothing is queued before it; only what the socket does not take
//! at once (a full send buffer) is queued, in order, for the flusher
//! ([`FrameSink::flush_queued`], one task per connection), which writes it
//! as the socket drains. Frames never interleave: senders take one lock, and
//! while anything is queued new frames queue behind it.
//!
//! The queue holds the frames' own buffers (`Bytes`), not a copy: a large
//! payload queued behind a full socket (a 1 MiB read reply, a 1 MiB write)
//! is written from where it already is.

use std::collections::VecDeque;
use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;
use std::sync::{Mutex, MutexGuard};

use bytes::Bytes;
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::Notify;

use shoal_proto::frame::Frame;

/// Most bytes a connection may have queued behind a full socket; a sender
/// that would pass it gets an error (the peer is not reading).
pub const MAX_QUEUED: usize = 256 << 20;

pub struct FrameSink {
    half: OwnedWriteHalf,
    state: Mutex<State>,
    /// Tells the flusher that something was queued or that the sink closed.
    wake: Notify,
}

/// Most pieces of the queue one write hands to the socket.
const MAX_IOVECS: usize = 64;

#[derive(Default)]
struct State {
    /// What is still to be written, in order; no piece is empty.
    queued: VecDeque<Bytes>,
    /// Bytes in `queued`.
    queued_len: usize,
    /// No frame is taken any more; the flusher writes what is queued and stops.
    closed: bool,
    /// The connection failed: every later send fails with this.
    failed: Option<io::ErrorKind>,
}

impl State {
    fn push(&mut self, piece: Bytes) {
        if !piece.is_empty() {
            self.queued_len += piece.len();
            self.queued.push_back(piece);
        }
    }

    /// `n` bytes from the front of the queue were written.
    fn advance(&mut self, mut n: usize) {
        assert!(n <= self.queued_len, "wrote more than was queued");
        self.queued_len -= n;
        while n > 0 {
            let front = self
                .queued
                .front_mut()
                .expect("queued bytes to advance over");
            if n < front.len() {
                *front = front.slice(n..);
                return;
            }
            n -= front.len();
            self.queued.pop_front();
        }
    }
}

impl FrameSink {
    pub fn new(half: OwnedWriteHalf) -> FrameSink {
        FrameSink {
            half,
            state: Mutex::default(),
            wake: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sends one frame: written at once as far as the socket takes it, the
    /// rest queued for the flusher. Does not wait, so any thread may call it.
    pub fn send(&self, frame: &Frame) -> io::Result<()> {
        let head = frame.encode_head();
        let payload = &frame.payload;
        let mut st = self.lock();
        if let Some(kind) = st.failed {
            return Err(kind.into());
        }
        if st.closed {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let mut written = 0;
        if st.queued.is_empty() {
            let total = head.len() + payload.len();
            while written < total {
                let (h, p) = (written.min(head.len()), written.saturating_sub(head.len()));
                let bufs = [IoSlice::new(&head[h..]), IoSlice::new(&payload[p..])];
                match self.try_send(&bufs) {
                    Ok(0) => return Err(self.fail(&mut st, io::ErrorKind::WriteZero)),
                    Ok(n) => written += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(self.fail(&mut st, e.kind())),
                }
            }
            if written == total {
                return Ok(());
            }
        }
        if st.queued_len + head.len() + payload.len() - written > MAX_QUEUED {
            return Err(self.fail(&mut st, io::ErrorKind::TimedOut));
        }
        let was_empty = st.queued.is_empty();
        if written < head.len() {
            st.push(head.freeze().slice(written..));
            st.push(payload.clone());
        } else {
            st.push(payload.slice(written - head.len()..));
        }
        if was_empty {
            self.wake.notify_one();
        }
        Ok(())
    }

    /// Writes `bufs` without blocking, as `try_write_vectored` does, but
    /// with MSG_NOSIGNAL: a peer that closed the connection fails the write
    /// with EPIPE, an error on this connection, instead of raising SIGPIPE,
    /// which ends a process that does not ignore it. Rust's runtime ignores
    /// it in its own programs; a C program under the preload library, or a
    /// `shoal` tool printing to a pipe, does not.
    fn try_send(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let stream: &tokio::net::TcpStream = self.half.as_ref();
        stream.try_io(tokio::io::Interest::WRITABLE, || {
            // SAFETY: an all-zero msghdr is valid (no name, no control data).
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            // IoSlice is ABI-compatible with iovec on Unix; sendmsg only
            // reads through the pointer.
            msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
            msg.msg_iovlen = bufs.len() as _;
            // SAFETY: the socket's own descriptor, and iovecs that live
            // through the call.
            let n = unsafe { libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
            match n {
                n if n < 0 => Err(io::Error::last_os_error()),
                n => Ok(n as usize),
            }
        })
    }

    fn fail(&self, st: &mut State, kind: io::ErrorKind) -> io::Error {
        st.failed = Some(kind);
        st.queued.clear();
        st.queued_len = 0;
        self.wake.notify_one();
        kind.into()
    }

    /// Takes no more frames; the flusher writes what is queued, then returns.
    pub fn close(&self) {
        self.lock().closed = true;
        self.wake.notify_one();
    }

    /// Ends the connection in both directions at once, whoever else holds
    /// its halves: the peer reads its end, and so does this side's reader
    /// (a server dropping a client that does not answer, a client dropped).
    pub fn shut_down(&self) {
        self.close();
        let stream: &tokio::net::TcpStream = self.half.as_ref();
        // SAFETY: shutdown(2) on a descriptor this sink's stream owns and
        // keeps open; it only ends the connection, never closes the fd.
        unsafe { libc::shutdown(stream.as_raw_fd(), libc::SHUT_RDWR) };
    }

    /// The flusher: writes queued bytes as the socket drains. Returns once the
    /// sink is closed and everything queued is written, or the connection
    /// failed.
    pub async fn flush_queued(&self) -> io::Result<()> {
        loop {
            {
                let mut st = self.lock();
                if let Some(kind) = st.failed {
                    return Err(kind.into());
                }
                if st.queued.is_empty() {
                    if st.closed {
                        return Ok(());
                    }
                } else {
                    let bufs: Vec<IoSlice<'_>> = st
                        .queued
                        .iter()
                        .take(MAX_IOVECS)
                        .map(|b| IoSlice::new(b))
                        .collect();
                    match self.try_send(&bufs) {
                        Ok(0) => return Err(self.fail(&mut st, io::ErrorKind::WriteZero)),
                        Ok(n) => {
                            st.advance(n);
                            continue;
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(self.fail(&mut st, e.kind())),
                    }
                }
            }
            let queued = !self.lock().queued.is_empty();
            if queued {
                self.half.writable().await?;
            } else {
                self.wake.notified().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use shoal_proto::cred::Cred;
    use shoal_proto::frame::read_frame;
    use shoal_proto::op::Op;
    use std::sync::Arc;
    use tokio::net::{TcpListener, TcpStream};
    use tokio::task::JoinHandle;

    /// A sink on one end of a loopback connection with its flusher running,
    /// and the other end.
    async fn sink_and_peer() -> (Arc<FrameSink>, JoinHandle<io::Result<()>>, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (a, b) = tokio::join!(TcpStream::connect(addr), l.accept());
        let (_, wa) = a.unwrap().into_split();
        let sink = Arc::new(FrameSink::new(wa));
        let flusher = tokio::spawn({
            let sink = sink.clone();
            async move { sink.flush_queued().await }
        });
        (sink, flusher, b.unwrap().0)
    }

    #[test]
    fn the_queue_advances_across_its_pieces_without_losing_a_byte() {
        let mut st = State::default();
        st.push(Bytes::from_static(b"head"));
        st.push(Bytes::new());
        st.push(Bytes::from_static(b"payload"));
        st.push(Bytes::from_static(b"next"));
        assert_eq!(st.queued.len(), 3, "an empty piece is not queued");
        st.advance(2);
        st.advance(5);
        let rest: Vec<u8> = st.queued.iter().flat_map(|b| b.to_vec()).collect();
        assert_eq!(rest, b"loadnext");
        assert_eq!(st.queued_len, rest.len());
        st.advance(st.queued_len);
        assert!(st.queued.is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn frames_from_many_threads_arrive_whole_and_in_each_senders_order() {
        let (sink, flusher, b) = sink_and_peer().await;
        // Big payloads fill the socket's buffer, so some frames queue.
        let senders: Vec<_> = (0..4u64)
            .map(|t| {
                let sink = sink.clone();
                std::thread::spawn(move || {
                    for i in 0..50u64 {
                        let payload =
                            Bytes::from(vec![t as u8; 1000 + (i as usize * 997) % 200_000]);
                        let f = Frame::request(
                            Op::Write,
                            t * 1000 + i,
                            Cred::ROOT,
                            Bytes::new(),
                            payload,
                        );
                        sink.send(&f).unwrap();
                    }
                })
            })
            .collect();
        let (mut rb, _wb) = b.into_split();
        let mut next = [0u64; 4];
        for _ in 0..200 {
            let f = read_frame(&mut rb).await.unwrap();
            let (t, i) = (f.header.id / 1000, f.header.id % 1000);
            assert_eq!(i, next[t as usize], "sender {t}'s frames in order");
            next[t as usize] += 1;
            assert!(
                f.payload.iter().all(|b| *b == t as u8),
                "frame {t}/{i} intact"
            );
        }
        for s in senders {
            s.join().unwrap();
        }
        sink.close();
        flusher.await.unwrap().unwrap();
        assert!(sink
            .send(&Frame::request(
                Op::Ping,
                1,
                Cred::ROOT,
                Bytes::new(),
                Bytes::new()
            ))
            .is_err());
    }

    #[tokio::test]
    async fn a_closed_peer_fails_the_sender_instead_of_queueing_forever() {
        // SIGPIPE as a C program has it (Rust's runtime ignores it in this
        // test binary): a write to the closed peer that raised it would end
        // the whole test process here.
        // SAFETY: this binary's other tests write to no closed socket or pipe
        // but through the sink.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
        let (sink, flusher, b) = sink_and_peer().await;
        drop(b);
        let f = Frame::request(
            Op::Write,
            1,
            Cred::ROOT,
            Bytes::new(),
            Bytes::from(vec![0u8; 1 << 20]),
        );
        let mut failed = false;
        for _ in 0..1000 {
            if sink.send(&f).is_err() {
                failed = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        assert!(failed, "sending to a closed peer fails");
        assert!(sink.send(&f).is_err(), "and keeps failing");
        assert!(flusher.await.unwrap().is_err(), "the flusher stops");
    }
}
