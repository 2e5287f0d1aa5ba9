//! The frame: how one request or reply is laid out on a TCP stream.
//!
//! ```text
//! u32  length of everything after this field (big-endian, like all fields)
//! u16  magic 0x5348 ("SH")
//! u8   version (1)
//! u8   kind: 0 request, 1 reply
//! u16  operation code (op.rs)
//! u16  flags: bit 15 (RESENT) a request sent before, on a connection that broke;
//!      bit 14 (LEASED) a reply that grants the client a lease on what it
//!      names (leases.rs in the server says which objects each op's names);
//!      bits 0-13 the number of supplementary groups that follow the header
//!      (0..=32, cred::MAX_GROUPS; always 0 in a reply)
//! u64  request id, echoed in the reply; requests on one connection are multiplexed by it
//! u64  client: the sending client's id, drawn at random when it starts (0: none);
//!      with the request id it names the request to the server's reply cache
//!      (a reply echoes it); with its top bit set (NO_LEASES) the client takes no
//!      leases, having nobody to answer recalls while it is idle
//! u64  acked: every request of this client to this server with a lower id
//!      has its reply (the server may forget those; 0 in a reply)
//! u64  seq: in a reply, the place in the server's commit sequence of the change
//!      the request made, when it is not durable yet (sync = "replay"; 0 otherwise);
//!      0 in a request
//! u64  flushed: in a reply, the server's durable commit sequence (every change up
//!      to it is on its disk); 0 in a request
//! u32  uid of the caller
//! u32  gid of the caller
//! i32  status: 0, or the errno of a failed reply
//! u32  body length
//! u32  payload length
//! u32  x flags  the caller's supplementary groups (cred.rs)
//! body     protobuf message for (op, kind), see shoal.proto
//! payload  raw bytes (file data), never re-encoded
//! ```
//!
//! Every field is checked on decode; a bad frame is an error for that connection only.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::cred::{Cred, MAX_GROUPS};
use crate::error::{Errno, ShoalError};
use crate::op::Op;

pub const MAGIC: u16 = 0x5348;
pub const VERSION: u8 = 4;
/// Bytes of the fixed header, after the length field (the supplementary
/// groups follow it).
pub const HEADER_LEN: usize = 68;
/// Largest protobuf body accepted.
pub const MAX_BODY: usize = 4 << 20;
/// Largest raw payload accepted.
pub const MAX_PAYLOAD: usize = 16 << 20;
/// The flags bit of a request sent again (see the layout above).
pub const RESENT: u16 = 0x8000;
/// The bit of a client id that says the client takes no leases (see the
/// layout above): a client whose sockets are read only while it is in a
/// call (the preload library) could not answer a recall in time.
pub const NO_LEASES: u64 = 1 << 63;
/// The flags bit of a reply that grants a lease (see the layout above).
pub const LEASED: u16 = 0x4000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Request = 0,
    Reply = 1,
}

/// Which client a request comes from, for the server's reply cache: a
/// client sends a request again (after its connection broke) under the
/// same `client` and request id, and says with `acked` which replies it
/// holds, so that the server can forget them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientRef {
    pub client: u64,
    pub acked: u64,
    /// The request was sent before, on a connection that broke: the server
    /// looks for its reply in the cache (a first copy cannot have one).
    pub resent: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub op: Op,
    pub id: u64,
    /// The client that sent the request (0: none, not cached), and the id
    /// below which all its requests to this server have their replies.
    pub client: ClientRef,
    /// Who the request acts for (a reply echoes the uid and gid only).
    pub cred: Cred,
    pub status: i32,
    /// Where a reply's change stands in the server's commit sequence (always
    /// the default in a request).
    pub commit: Commit,
    /// A reply that grants the client a lease on the objects it names
    /// (always false in a request).
    pub leased: bool,
}

/// A reply's news of the server's commit sequence (`sync = "replay"`): the
/// request's change is `seq` (0: durable already, or no change), and every
/// change up to `flushed` is durable. A client keeps a request whose reply
/// has `seq > flushed` until a later reply's `flushed` reaches `seq`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Commit {
    pub seq: u64,
    pub flushed: u64,
}

impl Commit {
    /// Whether the change is not durable yet, so its client must keep its
    /// request (a kept change).
    pub fn pending(&self) -> bool {
        self.seq > self.flushed
    }
}

/// A decoded frame. `body` and `payload` are the bytes as they were
/// received, never copied.
#[derive(Clone, Debug)]
pub struct Frame {
    pub header: Header,
    pub body: Bytes,
    pub payload: Bytes,
}

/// Why a frame could not be read. Any of these ends the connection.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("connection closed")]
    Closed,
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
    #[error("malformed frame: {0}")]
    Malformed(String),
}

impl From<FrameError> for ShoalError {
    fn from(e: FrameError) -> Self {
        match e {
            FrameError::Malformed(m) => ShoalError::protocol(m),
            other => ShoalError::new(Errno::EIO, other.to_string()),
        }
    }
}

impl Frame {
    pub fn request(op: Op, id: u64, cred: Cred, body: Bytes, payload: Bytes) -> Frame {
        Frame {
            header: Header {
                kind: Kind::Request,
                op,
                id,
                client: ClientRef::default(),
                cred,
                status: 0,
                commit: Commit::default(),
                leased: false,
            },
            body,
            payload,
        }
    }

    /// The request as client `client` sends it (see [`ClientRef`]).
    pub fn from_client(mut self, client: ClientRef) -> Frame {
        self.header.client = client;
        self
    }

    /// A reply to `request` with the given status, body and payload.
    pub fn reply_to(request: &Header, status: i32, body: Bytes, payload: Bytes) -> Frame {
        Frame {
            header: Header {
                kind: Kind::Reply,
                status,
                cred: Cred::new(request.cred.uid, request.cred.gid),
                client: ClientRef {
                    client: request.client.client,
                    acked: 0,
                    resent: false,
                },
                ..*request
            },
            body,
            payload,
        }
    }

    /// The reply with news of the server's commit sequence.
    pub fn with_commit(mut self, commit: Commit) -> Frame {
        debug_assert_eq!(self.header.kind, Kind::Reply, "commit news in a request");
        self.header.commit = commit;
        self
    }

    /// The reply, granting a lease on what it names.
    pub fn leased(mut self) -> Frame {
        debug_assert_eq!(self.header.kind, Kind::Reply, "a lease in a request");
        self.header.leased = true;
        self
    }

    /// Size of the frame on the wire, length field included.
    pub fn wire_len(&self) -> usize {
        4 + self.head_len() + self.body.len() + self.payload.len()
    }

    /// Bytes of the header and the groups that follow it.
    fn head_len(&self) -> usize {
        HEADER_LEN + 4 * self.header.cred.groups().len()
    }

    /// Encodes the length field, header and body; the payload is written after it
    /// as it is, so bulk data is not copied into a new buffer.
    pub fn encode_head(&self) -> BytesMut {
        let mut b = BytesMut::with_capacity(4 + self.head_len() + self.body.len());
        let h = &self.header;
        let groups = h.cred.groups();
        b.put_u32((self.head_len() + self.body.len() + self.payload.len()) as u32);
        b.put_u16(MAGIC);
        b.put_u8(VERSION);
        b.put_u8(h.kind as u8);
        b.put_u16(h.op as u16);
        let resent = if h.client.resent { RESENT } else { 0 };
        let leased = if h.leased { LEASED } else { 0 };
        b.put_u16(groups.len() as u16 | resent | leased);
        b.put_u64(h.id);
        b.put_u64(h.client.client);
        b.put_u64(h.client.acked);
        b.put_u64(h.commit.seq);
        b.put_u64(h.commit.flushed);
        b.put_u32(h.cred.uid);
        b.put_u32(h.cred.gid);
        b.put_i32(h.status);
        b.put_u32(self.body.len() as u32);
        b.put_u32(self.payload.len() as u32);
        for g in groups {
            b.put_u32(*g);
        }
        b.extend_from_slice(&self.body);
        b
    }

    /// Decodes everything after the length field.
    pub fn decode(mut buf: Bytes) -> Result<Frame, FrameError> {
        if buf.len() < HEADER_LEN {
            return Err(FrameError::Malformed(format!(
                "frame of {} bytes is shorter than its header",
                buf.len()
            )));
        }
        let (mut header, lens) = parse_header(&buf[..HEADER_LEN], buf.len())?;
        buf.advance(HEADER_LEN);
        add_groups(&mut header, &buf.split_to(4 * lens.groups))?;
        let body = buf.split_to(lens.body);
        Ok(Frame {
            header,
            body,
            payload: buf,
        })
    }
}

/// A frame read up to its payload ([`read_frame_head`]), so that the reader
/// can say where the payload goes before it arrives.
#[derive(Debug)]
pub struct FrameHead {
    pub header: Header,
    pub body: Bytes,
    /// Bytes of payload that follow on the stream.
    pub payload_len: usize,
}

impl FrameHead {
    /// Reads the payload into a buffer of its own: the whole frame.
    pub async fn read_payload<R: AsyncRead + Unpin>(self, r: &mut R) -> Result<Frame, FrameError> {
        let payload = read_exactly(r, self.payload_len).await?;
        Ok(Frame {
            header: self.header,
            body: self.body,
            payload: payload.freeze(),
        })
    }

    /// Reads the payload into `into` (exactly [`FrameHead::payload_len`]
    /// bytes, the caller's memory, copied into by nobody but the socket);
    /// the frame then has an empty payload.
    pub async fn read_payload_into<R: AsyncRead + Unpin>(
        self,
        r: &mut R,
        into: &mut [u8],
    ) -> Result<Frame, FrameError> {
        assert_eq!(into.len(), self.payload_len, "a payload lands whole");
        r.read_exact(into).await?;
        Ok(Frame {
            header: self.header,
            body: self.body,
            payload: Bytes::new(),
        })
    }
}

/// Sets `header`'s supplementary groups from their wire form, `wire`.
fn add_groups(header: &mut Header, wire: &[u8]) -> Result<(), FrameError> {
    let groups: Vec<u32> = wire
        .chunks_exact(4)
        .map(|g| u32::from_be_bytes([g[0], g[1], g[2], g[3]]))
        .collect();
    let c = header.cred;
    header.cred = Cred::from_wire(c.uid, c.gid, &groups).ok_or_else(|| {
        FrameError::Malformed(format!(
            "supplementary groups {groups:?} repeat one or hold the primary gid {}",
            c.gid
        ))
    })?;
    Ok(())
}

/// How many supplementary groups and body bytes follow a frame's header.
struct Lengths {
    groups: usize,
    body: usize,
}

/// Checks the fixed header `h` (the [`HEADER_LEN`] bytes after the length
/// field) of a frame whose length field says `len`; returns the header
/// (without its supplementary groups, which follow it) and what follows.
/// Everything a header can get wrong is found here, so [`read_frame`]
/// refuses a bad frame before reading (or allocating) its rest.
fn parse_header(mut h: &[u8], len: usize) -> Result<(Header, Lengths), FrameError> {
    let bad = |m: String| Err(FrameError::Malformed(m));
    debug_assert_eq!(h.len(), HEADER_LEN);
    let magic = h.get_u16();
    if magic != MAGIC {
        return bad(format!("bad magic {magic:#06x}"));
    }
    let version = h.get_u8();
    if version != VERSION {
        return bad(format!("unsupported protocol version {version}"));
    }
    let kind = match h.get_u8() {
        0 => Kind::Request,
        1 => Kind::Reply,
        k => return bad(format!("unknown frame kind {k}")),
    };
    let code = h.get_u16();
    let Some(op) = Op::from_code(code) else {
        return bad(format!("unknown operation {code}"));
    };
    let flags = h.get_u16();
    let resent = flags & RESENT != 0;
    let leased = flags & LEASED != 0;
    let groups = (flags & !(RESENT | LEASED)) as usize;
    if groups > MAX_GROUPS {
        return bad(format!(
            "{groups} supplementary groups (at most {MAX_GROUPS})"
        ));
    }
    if kind == Kind::Reply && groups != 0 {
        return bad(format!("a reply with {groups} supplementary groups"));
    }
    let id = h.get_u64();
    let client = ClientRef {
        client: h.get_u64(),
        acked: h.get_u64(),
        resent,
    };
    if kind == Kind::Reply && (client.acked != 0 || resent) {
        return bad(format!(
            "a reply with acked {} or marked resent",
            client.acked
        ));
    }
    let commit = Commit {
        seq: h.get_u64(),
        flushed: h.get_u64(),
    };
    if kind == Kind::Request && (commit != Commit::default() || leased) {
        return bad(format!(
            "a request with commit news {commit:?} or a lease ({leased})"
        ));
    }
    let uid = h.get_u32();
    let gid = h.get_u32();
    let status = h.get_i32();
    let body_len = h.get_u32() as usize;
    let payload_len = h.get_u32() as usize;
    if body_len > MAX_BODY || payload_len > MAX_PAYLOAD {
        return bad(format!(
            "body {body_len} or payload {payload_len} over the limit"
        ));
    }
    if 4 * groups + body_len + payload_len != len - HEADER_LEN {
        return bad(format!(
            "lengths {groups} groups + {body_len}+{payload_len} do not match the {} bytes \
             that follow",
            len - HEADER_LEN
        ));
    }
    Ok((
        Header {
            kind,
            op,
            id,
            client,
            cred: Cred::new(uid, gid),
            status,
            commit,
            leased,
        },
        Lengths {
            groups,
            body: body_len,
        },
    ))
}

/// Reads one frame. `Closed` means the peer closed cleanly between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> Result<Frame, FrameError> {
    read_frame_head(r).await?.read_payload(r).await
}

/// Reads one frame up to its payload (see [`FrameHead`]). `Closed` means
/// the peer closed cleanly between frames.
pub async fn read_frame_head<R: AsyncRead + Unpin>(r: &mut R) -> Result<FrameHead, FrameError> {
    let len = match r.read_u32().await {
        Ok(n) => n as usize,
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(e.into()),
    };
    read_head_rest(r, len).await
}

/// Like [`read_frame`], but once the first byte of a frame has arrived the
/// rest must arrive within `limit`, or the read fails with `TimedOut`: a peer
/// that stalls mid-frame cannot hold the reader forever. Waiting between
/// frames is not bounded (an idle connection is fine).
pub async fn read_frame_timeout<R: AsyncRead + Unpin>(
    r: &mut R,
    limit: std::time::Duration,
) -> Result<Frame, FrameError> {
    let first = match r.read_u8().await {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(e.into()),
    };
    let rest = async {
        let mut more = [0u8; 3];
        r.read_exact(&mut more).await?;
        let len = u32::from_be_bytes([first, more[0], more[1], more[2]]) as usize;
        read_head_rest(r, len).await?.read_payload(r).await
    };
    tokio::time::timeout(limit, rest).await.map_err(|_| {
        FrameError::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("the rest of a frame did not arrive within {limit:?}"),
        ))
    })?
}

/// Reads what follows a frame's length field, which said `len`, up to the
/// payload.
async fn read_head_rest<R: AsyncRead + Unpin>(
    r: &mut R,
    len: usize,
) -> Result<FrameHead, FrameError> {
    if !(HEADER_LEN..=HEADER_LEN + 4 * MAX_GROUPS + MAX_BODY + MAX_PAYLOAD).contains(&len) {
        return Err(FrameError::Malformed(format!(
            "frame length {len} out of range"
        )));
    }
    // The header first: a bad one ends the connection at once, without
    // waiting for (or allocating) the rest of a frame that will be refused.
    let mut head = [0u8; HEADER_LEN];
    r.read_exact(&mut head).await?;
    let (mut header, lens) = parse_header(&head, len)?;
    let groups = 4 * lens.groups;
    let mut rest = read_exactly(r, groups + lens.body).await?;
    add_groups(&mut header, &rest.split_to(groups))?;
    Ok(FrameHead {
        header,
        body: rest.freeze(),
        payload_len: len - HEADER_LEN - groups - lens.body,
    })
}

/// Reads `len` bytes into a buffer of their own.
async fn read_exactly<R: AsyncRead + Unpin>(r: &mut R, len: usize) -> Result<BytesMut, FrameError> {
    let mut buf = BytesMut::with_capacity(len);
    // Into the spare capacity as it is: zeroing a MiB of payload first
    // only to overwrite it cost about 1% of a streaming read's CPU.
    while buf.len() < len {
        let want = (len - buf.len()) as u64;
        if (&mut *r).take(want).read_buf(&mut buf).await? == 0 {
            return Err(FrameError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
    }
    debug_assert_eq!(buf.len(), len, "take() bounds what is read");
    Ok(buf)
}

/// Writes one frame (not flushed: the caller batches flushes).
pub async fn write_frame<W: AsyncWrite + Unpin>(w: &mut W, frame: &Frame) -> std::io::Result<()> {
    w.write_all(&frame.encode_head()).await?;
    if !frame.payload.is_empty() {
        w.write_all(&frame.payload).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Frame {
        Frame::request(
            Op::Write,
            7,
            Cred::new(1000, 100).with_groups(&[5, 70000]),
            Bytes::from_static(b"body"),
            Bytes::from_static(b"payload!"),
        )
        .from_client(ClientRef {
            client: 0xfeed_f00d,
            acked: 5,
            resent: true,
        })
    }

    #[tokio::test]
    async fn frames_round_trip() {
        let f = sample();
        let mut wire = Vec::new();
        write_frame(&mut wire, &f).await.unwrap();
        assert_eq!(wire.len(), f.wire_len());
        let g = read_frame(&mut &wire[..]).await.unwrap();
        assert_eq!(g.header, f.header);
        assert_eq!(g.body, f.body);
        assert_eq!(g.payload, f.payload);
    }

    #[tokio::test]
    async fn supplementary_groups_ride_after_the_header_within_the_limit() {
        let mut wire = Vec::new();
        write_frame(&mut wire, &sample()).await.unwrap();
        assert_eq!(
            wire.len(),
            4 + HEADER_LEN + 8 + 4 + 8,
            "two groups of 4 bytes"
        );
        assert_eq!(&wire[10..12], &[0x80, 2], "flags count them, beside RESENT");
        assert_eq!(&wire[72..80], &[0, 0, 0, 5, 0, 1, 0x11, 0x70]);
        // A reply carries none.
        let reply = Frame::reply_to(&sample().header, 0, Bytes::new(), Bytes::new());
        assert!(reply.header.cred.groups().is_empty());
        // A group twice, or the primary gid again: refused.
        for groups in [[0, 0, 0, 5, 0, 0, 0, 5], [0, 0, 0, 5, 0, 0, 0, 100]] {
            let mut w = wire.clone();
            w[56..64].copy_from_slice(&groups);
            assert!(matches!(
                read_frame(&mut &w[..]).await,
                Err(FrameError::Malformed(_))
            ));
        }
        // More than the limit, or a count the length does not cover: refused.
        for (count, extra) in [(MAX_GROUPS as u16 + 1, 4 * (MAX_GROUPS + 1)), (3, 8)] {
            let mut w = wire.clone();
            w[10..12].copy_from_slice(&count.to_be_bytes());
            w.splice(56..64, std::iter::repeat_n(0u8, extra));
            let len = (w.len() - 4) as u32;
            w[0..4].copy_from_slice(&len.to_be_bytes());
            assert!(
                matches!(read_frame(&mut &w[..]).await, Err(FrameError::Malformed(_))),
                "{count} groups in {extra} bytes"
            );
        }
    }

    #[tokio::test]
    async fn a_reply_echoes_its_client_and_carries_no_acked() {
        let reply = Frame::reply_to(&sample().header, 0, Bytes::new(), Bytes::new());
        assert_eq!(reply.header.client.client, 0xfeed_f00d);
        assert_eq!(reply.header.client.acked, 0);
        let mut wire = Vec::new();
        write_frame(&mut wire, &reply).await.unwrap();
        assert_eq!(
            read_frame(&mut &wire[..]).await.unwrap().header,
            reply.header
        );
        // acked is the 8 bytes after the client's id (bytes 28..36), RESENT
        // the top bit of the flags (byte 10): neither belongs in a reply.
        for (at, x) in [(35, 1), (10, 0x80)] {
            let mut w = wire.clone();
            w[at] |= x;
            assert!(matches!(
                read_frame(&mut &w[..]).await,
                Err(FrameError::Malformed(_))
            ));
        }
    }

    #[tokio::test]
    async fn a_bad_header_is_refused_before_the_rest_arrives() {
        let mut wire = Vec::new();
        write_frame(&mut wire, &sample()).await.unwrap();
        // Each corruption of the header, sent without the rest of the frame
        // on a stream that stays open: refused at once, not waited on.
        let corruptions: [(usize, u8); 6] = [
            (4, 0xff),
            (6, 0x07),
            (7, 0x09),
            (9, 0xee),
            (36, 0x01),
            (68, 0x40),
        ];
        for (at, x) in corruptions {
            let mut w = wire.clone();
            w[at] ^= x;
            let (mut tx, mut rx) = tokio::io::duplex(1024);
            tx.write_all(&w[..4 + HEADER_LEN]).await.unwrap();
            let read = tokio::time::timeout(std::time::Duration::from_secs(5), read_frame(&mut rx));
            assert!(
                matches!(read.await, Ok(Err(FrameError::Malformed(_)))),
                "corruption at byte {at} was not refused from the header alone"
            );
            drop(tx);
        }
    }

    #[tokio::test]
    async fn a_frame_that_stalls_half_way_times_out() {
        let mut wire = Vec::new();
        write_frame(&mut wire, &sample()).await.unwrap();
        let limit = std::time::Duration::from_millis(100);
        // Whole frames read as usual.
        let g = read_frame_timeout(&mut &wire[..], limit).await.unwrap();
        assert_eq!(g.payload, sample().payload);
        // Stalls within the length field and within the body both time out.
        for cut in [2, wire.len() - 3] {
            let (mut tx, mut rx) = tokio::io::duplex(1024);
            tx.write_all(&wire[..cut]).await.unwrap();
            match read_frame_timeout(&mut rx, limit).await {
                Err(FrameError::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::TimedOut),
                other => panic!("cut at {cut}: {other:?}"),
            }
            drop(tx);
        }
        // A clean close between frames is Closed.
        let (tx, mut rx) = tokio::io::duplex(1024);
        drop(tx);
        assert!(matches!(
            read_frame_timeout(&mut rx, limit).await,
            Err(FrameError::Closed)
        ));
    }

    #[tokio::test]
    async fn truncated_and_corrupt_frames_are_errors() {
        let mut wire = Vec::new();
        write_frame(&mut wire, &sample()).await.unwrap();
        for cut in 1..wire.len() {
            assert!(read_frame(&mut &wire[..cut]).await.is_err(), "cut at {cut}");
        }
        // Every single-byte corruption of the header is either detected or decodes
        // to a frame whose lengths still add up; it never panics.
        for i in 4..4 + HEADER_LEN {
            let mut w = wire.clone();
            w[i] ^= 0xff;
            let _ = read_frame(&mut &w[..]).await;
        }
        let mut huge = wire.clone();
        huge[0..4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            read_frame(&mut &huge[..]).await,
            Err(FrameError::Malformed(_))
        ));
    }
}
