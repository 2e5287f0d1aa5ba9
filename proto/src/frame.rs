//! The frame: how one request or reply is laid out on a TCP stream.
//!
//! ```text
//! u32  length of everything after this field (big-endian, like all fields)
//! u16  magic 0x5348 ("SH")
//! u8   version (1)
//! u8   kind: 0 request, 1 reply
//! u16  operation code (op.rs)
//! u16  flags (reserved, 0)
//! u64  request id, echoed in the reply; requests on one connection are multiplexed by it
//! u32  uid of the caller
//! u32  gid of the caller
//! i32  status: 0, or the errno of a failed reply
//! u32  body length
//! u32  payload length
//! body     protobuf message for (op, kind), see shoal.proto
//! payload  raw bytes (file data), never re-encoded
//! ```
//!
//! Every field is checked on decode; a bad frame is an error for that connection only.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::error::{Errno, ShoalError};
use crate::op::Op;

pub const MAGIC: u16 = 0x5348;
pub const VERSION: u8 = 1;
/// Bytes of the fixed header, after the length field.
pub const HEADER_LEN: usize = 36;
/// Largest protobuf body accepted.
pub const MAX_BODY: usize = 4 << 20;
/// Largest raw payload accepted.
pub const MAX_PAYLOAD: usize = 16 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Request = 0,
    Reply = 1,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub op: Op,
    pub flags: u16,
    pub id: u64,
    pub uid: u32,
    pub gid: u32,
    pub status: i32,
}

/// A decoded frame. `body` and `payload` share the receive buffer (no copies).
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
    pub fn request(op: Op, id: u64, uid: u32, gid: u32, body: Bytes, payload: Bytes) -> Frame {
        Frame {
            header: Header {
                kind: Kind::Request,
                op,
                flags: 0,
                id,
                uid,
                gid,
                status: 0,
            },
            body,
            payload,
        }
    }

    /// A reply to `request` with the given status, body and payload.
    pub fn reply_to(request: &Header, status: i32, body: Bytes, payload: Bytes) -> Frame {
        Frame {
            header: Header {
                kind: Kind::Reply,
                status,
                ..*request
            },
            body,
            payload,
        }
    }

    /// Size of the frame on the wire, length field included.
    pub fn wire_len(&self) -> usize {
        4 + HEADER_LEN + self.body.len() + self.payload.len()
    }

    /// Encodes the length field, header and body; the payload is written after it
    /// as it is, so bulk data is not copied into a new buffer.
    pub fn encode_head(&self) -> BytesMut {
        let mut b = BytesMut::with_capacity(4 + HEADER_LEN + self.body.len());
        let h = &self.header;
        b.put_u32((HEADER_LEN + self.body.len() + self.payload.len()) as u32);
        b.put_u16(MAGIC);
        b.put_u8(VERSION);
        b.put_u8(h.kind as u8);
        b.put_u16(h.op as u16);
        b.put_u16(h.flags);
        b.put_u64(h.id);
        b.put_u32(h.uid);
        b.put_u32(h.gid);
        b.put_i32(h.status);
        b.put_u32(self.body.len() as u32);
        b.put_u32(self.payload.len() as u32);
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
        let (header, body_len) = parse_header(&buf[..HEADER_LEN], buf.len())?;
        buf.advance(HEADER_LEN);
        let body = buf.split_to(body_len);
        Ok(Frame {
            header,
            body,
            payload: buf,
        })
    }
}

/// Checks the fixed header `h` (the [`HEADER_LEN`] bytes after the length
/// field) of a frame whose length field says `len`; returns the header and
/// the body length. Everything a header can get wrong is found here, so
/// [`read_frame`] refuses a bad frame before reading (or allocating) its rest.
fn parse_header(mut h: &[u8], len: usize) -> Result<(Header, usize), FrameError> {
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
    let id = h.get_u64();
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
    if body_len + payload_len != len - HEADER_LEN {
        return bad(format!(
            "lengths {body_len}+{payload_len} do not match the {} bytes that follow",
            len - HEADER_LEN
        ));
    }
    Ok((
        Header {
            kind,
            op,
            flags,
            id,
            uid,
            gid,
            status,
        },
        body_len,
    ))
}

/// Reads one frame. `Closed` means the peer closed cleanly between frames.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> Result<Frame, FrameError> {
    let len = match r.read_u32().await {
        Ok(n) => n as usize,
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(e.into()),
    };
    read_frame_rest(r, len).await
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
        read_frame_rest(r, len).await
    };
    tokio::time::timeout(limit, rest).await.map_err(|_| {
        FrameError::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("the rest of a frame did not arrive within {limit:?}"),
        ))
    })?
}

/// Reads what follows a frame's length field, which said `len`.
async fn read_frame_rest<R: AsyncRead + Unpin>(r: &mut R, len: usize) -> Result<Frame, FrameError> {
    if !(HEADER_LEN..=HEADER_LEN + MAX_BODY + MAX_PAYLOAD).contains(&len) {
        return Err(FrameError::Malformed(format!(
            "frame length {len} out of range"
        )));
    }
    // The header first: a bad one ends the connection at once, without
    // waiting for (or allocating) the rest of a frame that will be refused.
    let mut head = [0u8; HEADER_LEN];
    r.read_exact(&mut head).await?;
    parse_header(&head, len)?;
    let mut buf = BytesMut::with_capacity(len);
    buf.extend_from_slice(&head);
    buf.resize(len, 0);
    r.read_exact(&mut buf[HEADER_LEN..]).await?;
    Frame::decode(buf.freeze())
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
            1000,
            100,
            Bytes::from_static(b"body"),
            Bytes::from_static(b"payload!"),
        )
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
    async fn a_bad_header_is_refused_before_the_rest_arrives() {
        let mut wire = Vec::new();
        write_frame(&mut wire, &sample()).await.unwrap();
        // Each corruption of the header, sent without the rest of the frame
        // on a stream that stays open: refused at once, not waited on.
        let corruptions: [(usize, u8); 5] =
            [(4, 0xff), (6, 0x07), (7, 0x09), (9, 0xee), (36, 0x40)];
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
