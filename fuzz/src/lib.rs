//! The bodies of Shoal's fuzz targets, as plain functions so that the same
//! checks run under libFuzzer (`cargo fuzz run <target>`, see README.md) and
//! as ordinary tests that replay the stored corpus (`cargo test` in this
//! directory, no nightly needed).
//!
//! * [`frame_decode`]: any bytes given to `Frame::decode` and `read_frame`
//!   are an error or a frame that re-encodes to exactly those bytes; never a
//!   panic, never a wait.
//! * [`request_validation`]: a short sequence of requests (any operation,
//!   bodies that are either raw bytes or well-typed messages with hostile
//!   values) run through a real `Service` on the in-memory engine; every reply
//!   is a well-formed reply frame, and the server still answers afterwards.

// Message literals end in `..Default::default()` even when every field is
// set today, so that fields added to the schema later do not break the build.
#![allow(clippy::needless_update)]

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use arbitrary::{Result as ArbResult, Unstructured};
use bytes::{Bytes, BytesMut};
use prost::Message;
use shoal_proto::cluster::{ClusterConfig, ServerEntry, Settings, SyncMode};
use shoal_proto::error::Errno;
use shoal_proto::frame::{read_frame, ClientRef, Frame, Kind, HEADER_LEN, MAX_BODY, MAX_PAYLOAD};
use shoal_proto::handle::{self, Handle, ROOT};
use shoal_proto::msg::*;
use shoal_proto::{Cred, Op};
use shoal_server::kv::MemEngine;
use shoal_server::Service;

/// Runs a future that never waits (reads from a byte slice) to completion.
fn block_on<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    match f.as_mut().poll(&mut cx) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("reading a frame from a byte slice waited"),
    }
}

/// The bytes `frame` has on the wire.
fn wire(frame: &Frame) -> Vec<u8> {
    let mut w = frame.encode_head().to_vec();
    w.extend_from_slice(&frame.payload);
    w
}

fn check_limits(f: &Frame) {
    assert!(f.body.len() <= MAX_BODY, "body over the limit accepted");
    assert!(
        f.payload.len() <= MAX_PAYLOAD,
        "payload over the limit accepted"
    );
}

/// Target `frame_decode`.
pub fn frame_decode(data: &[u8]) {
    // 1. The bytes after a length field, as the listener hands them over.
    let decoded = Frame::decode(Bytes::copy_from_slice(data));
    if let Ok(f) = &decoded {
        check_limits(f);
        let w = wire(f);
        assert_eq!(&w[4..], data, "a decoded frame re-encodes to other bytes");
        assert_eq!(f.wire_len(), data.len() + 4);
    }

    // 2. The same bytes behind a length field that matches them: read_frame
    // must agree with decode.
    let mut framed = (data.len() as u32).to_be_bytes().to_vec();
    framed.extend_from_slice(data);
    let read = block_on(read_frame(&mut &framed[..]));
    assert_eq!(
        read.is_ok(),
        decoded.is_ok(),
        "read_frame and Frame::decode disagree: {:?} vs {:?}",
        read.as_ref().err(),
        decoded.as_ref().err()
    );

    // 3. The bytes as a stream of frames: each frame read re-encodes to the
    // bytes it consumed; the stream ends in an error, never a panic.
    let mut rest: &[u8] = data;
    for _ in 0..64 {
        let before = rest;
        match block_on(read_frame(&mut rest)) {
            Ok(f) => {
                check_limits(&f);
                let used = before.len() - rest.len();
                assert_eq!(
                    wire(&f),
                    &before[..used],
                    "stream frame re-encodes differently"
                );
            }
            Err(_) => break,
        }
    }

    // 4. Every prefix of a valid frame is an error, never a frame.
    if decoded.is_ok() && data.len() <= 4096 {
        for cut in [0, 1, 3, 4, 5, HEADER_LEN, framed.len() - 1] {
            if cut < framed.len() {
                assert!(
                    block_on(read_frame(&mut &framed[..cut])).is_err(),
                    "a frame cut at {cut} of {} bytes was accepted",
                    framed.len()
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------
// request_validation

/// Interesting 64-bit values: limits and their neighbours.
const EDGES: [u64; 14] = [
    0,
    1,
    4095,
    4096,
    65535,
    65536,
    65537,
    (16 << 20) - 1,
    16 << 20,
    (16 << 20) + 1,
    (1 << 50) - 1,
    1 << 50,
    u64::MAX - 1,
    u64::MAX,
];

struct Gen<'a, 'b> {
    u: &'b mut Unstructured<'a>,
    /// Handles this sequence has seen in replies, plus the root.
    known: Vec<Handle>,
    servers: u32,
}

impl Gen<'_, '_> {
    fn handle(&mut self) -> ArbResult<Handle> {
        Ok(match self.u.int_in_range(0u8..=15)? {
            0..=6 => *self.u.choose(&self.known)?,
            7 => 0,
            8 => ROOT,
            // A handle of a server that exists but is not this one, or of
            // one that does not exist, or a counter nobody allocated.
            9 => handle::make(self.u.int_in_range(0..=self.servers)?, 1),
            10 => handle::make(0, self.u.int_in_range(1..=1 << 20)?),
            11 => u64::MAX,
            12 => (self.servers as u64) << 48,
            _ => self.u.arbitrary()?,
        })
    }

    fn number(&mut self) -> ArbResult<u64> {
        Ok(match self.u.int_in_range(0u8..=3)? {
            0 => *self.u.choose(&EDGES)?,
            1 => self.u.int_in_range(0..=200_000)?,
            2 => self
                .u
                .choose(&EDGES)?
                .wrapping_add(self.u.int_in_range(0..=8)?),
            _ => self.u.arbitrary()?,
        })
    }

    fn name(&mut self) -> ArbResult<String> {
        Ok(match self.u.int_in_range(0u8..=12)? {
            0..=4 => ["a", "b", "c", "dir", "f"][self.u.int_in_range(0..=4)?].to_string(),
            5 => "x".repeat(255),
            6 => "x".repeat(256),
            7 => [".", "..", "", "/", "a/b", "a\0b", "\0", "../../etc"]
                [self.u.int_in_range(0..=7)?]
            .to_string(),
            8 => "é".repeat(self.u.int_in_range(100..=200)?),
            9 => "n".repeat(self.u.int_in_range(0..=5000)?),
            _ => self.u.arbitrary()?,
        })
    }

    /// An xattr name: often a directory hint (`user.shoal.<hint>`,
    /// [Kuhn 2008]), known or not.
    fn xattr_name(&mut self) -> ArbResult<String> {
        Ok(match self.u.int_in_range(0u8..=3)? {
            0 => format!(
                "user.shoal.{}",
                [
                    "strip_size",
                    "num_dfiles",
                    "dist",
                    "no_metafile",
                    "nope",
                    ""
                ][self.u.int_in_range(0..=5)?]
            ),
            _ => self.name()?,
        })
    }

    /// Directory hints, valid or not (the servers validate only xattr
    /// values; hints in requests are compared, never parsed).
    fn hints(&mut self) -> ArbResult<Option<DirHints>> {
        if self.u.ratio(1, 2)? {
            return Ok(None);
        }
        Ok(Some(DirHints {
            strip_size: self.u.arbitrary()?,
            num_dfiles: self.u.arbitrary()?,
            dist: self.name()?,
            no_metafile: self.u.arbitrary()?,
            write_threshold: self.u.arbitrary()?,
            split_entries: self.u.arbitrary()?,
        }))
    }

    fn kind(&mut self) -> ArbResult<i32> {
        Ok(match self.u.int_in_range(0u8..=5)? {
            5 => self.u.arbitrary()?,
            k => k as i32,
        })
    }

    fn attrs(&mut self) -> ArbResult<Option<Attributes>> {
        if self.u.ratio(1, 4)? {
            return Ok(None);
        }
        Ok(Some(Attributes {
            mode: self.u.arbitrary()?,
            uid: self.u.arbitrary()?,
            gid: self.u.arbitrary()?,
            atime_ns: self.u.arbitrary()?,
            mtime_ns: self.u.arbitrary()?,
            ctime_ns: self.u.arbitrary()?,
            ..Default::default()
        }))
    }

    fn handles(&mut self) -> ArbResult<Vec<Handle>> {
        let n = match self.u.int_in_range(0u8..=9)? {
            9 => self.u.int_in_range(0..=70_000)?,
            _ => self.u.int_in_range(0..=8)?,
        };
        let mut v = Vec::with_capacity(n);
        for i in 0..n {
            // Long lists repeat a few handles rather than eat the input.
            v.push(if i < 16 { self.handle()? } else { v[i % 16] });
        }
        Ok(v)
    }

    fn dist(&mut self) -> ArbResult<Option<Distribution>> {
        if self.u.ratio(1, 6)? {
            return Ok(None);
        }
        Ok(Some(Distribution {
            strip_size: self.number()?,
            datafiles: self.handles()?,
            stuffed: self.u.arbitrary()?,
            width: self.u.arbitrary()?,
            ..Default::default()
        }))
    }

    /// A well-typed request body for `op`, with hostile field values.
    fn body(&mut self, op: Op) -> ArbResult<Vec<u8>> {
        Ok(match op {
            Op::Ping | Op::Statfs | Op::Stats => Vec::new(),
            Op::Lookup => LookupRequest {
                dir: self.handle()?,
                name: self.name()?,
                ..Default::default()
            }
            .encode_to_vec(),
            Op::GetAttr => GetAttrRequest {
                handle: self.handle()?,
                ..Default::default()
            }
            .encode_to_vec(),
            Op::SetAttr => SetAttrRequest {
                handle: self.handle()?,
                mask: self.u.arbitrary()?,
                mode: self.u.arbitrary()?,
                uid: self.u.arbitrary()?,
                gid: self.u.arbitrary()?,
                atime_ns: self.u.arbitrary()?,
                mtime_ns: self.u.arbitrary()?,
                ..Default::default()
            }
            .encode_to_vec(),
            Op::CreateObject => CreateObjectRequest {
                kind: self.kind()?,
                attrs: self.attrs()?,
                parent: self.handle()?,
                target: self.name()?,
                hints: self.hints()?,
                rdev: self.u.arbitrary()?,
            }
            .encode_to_vec(),
            Op::CreateDatafiles => CreateDatafilesRequest {
                count: match self.u.int_in_range(0u8..=3)? {
                    0 => self.u.arbitrary()?,
                    _ => self.u.int_in_range(0..=5)?,
                },
                ..Default::default()
            }
            .encode_to_vec(),
            Op::SetDist => SetDistRequest {
                handle: self.handle()?,
                dist: self.dist()?,
                ..Default::default()
            }
            .encode_to_vec(),
            Op::CrDirEnt => CrDirEntRequest {
                dir: self.handle()?,
                name: self.name()?,
                handle: self.handle()?,
                kind: self.kind()?,
                replace: self.u.arbitrary()?,
                created_under: self.hints()?,
            }
            .encode_to_vec(),
            Op::RmDirEnt => RmDirEntRequest {
                dir: self.handle()?,
                name: self.name()?,
                expect_handle: self.handle()?,
                must_be_dir: self.u.arbitrary()?,
                must_not_be_dir: self.u.arbitrary()?,
                ..Default::default()
            }
            .encode_to_vec(),
            Op::RenameEntry => RenameEntryRequest {
                dir: self.handle()?,
                old_name: self.name()?,
                new_name: self.name()?,
                no_replace: self.u.arbitrary()?,
                ..Default::default()
            }
            .encode_to_vec(),
            Op::Readdir => ReaddirRequest {
                dir: self.handle()?,
                start_after: self.name()?,
                max: self.u.arbitrary()?,
                with_dir: self.u.arbitrary()?,
            }
            .encode_to_vec(),
            Op::Remove => RemoveRequest {
                handle: self.handle()?,
                ..Default::default()
            }
            .encode_to_vec(),
            Op::RmdirPrepare | Op::RmdirAbort => RmdirRequest {
                dir: self.handle()?,
                partitions_marked: self.u.arbitrary()?,
            }
            .encode_to_vec(),
            Op::SetParent => SetParentRequest {
                dir: self.handle()?,
                parent: self.handle()?,
                ..Default::default()
            }
            .encode_to_vec(),
            Op::Read => ReadRequest {
                handle: self.handle()?,
                offset: self.number()?,
                length: self.number()?,
                ..Default::default()
            }
            .encode_to_vec(),
            Op::Write => WriteRequest {
                handle: self.handle()?,
                offset: self.number()?,
                ..Default::default()
            }
            .encode_to_vec(),
            Op::Truncate => TruncateRequest {
                handle: self.handle()?,
                size: self.number()?,
                ..Default::default()
            }
            .encode_to_vec(),
            Op::Fsync => FsyncRequest {
                handle: self.handle()?,
                ..Default::default()
            }
            .encode_to_vec(),
            Op::GetSizes => GetSizesRequest {
                handles: self.handles()?,
                file: self.handle()?,
            }
            .encode_to_vec(),
            Op::SetXattr => SetXattrRequest {
                handle: self.handle()?,
                name: self.xattr_name()?,
                value: match self.u.int_in_range(0u8..=7)? {
                    7 => vec![7u8; self.u.int_in_range(65530..=65540)?],
                    6 => ["1", "0", "64K", "4", "simple_stripe:strip_size=8192", "9G"]
                        [self.u.int_in_range(0..=5)?]
                    .into(),
                    _ => self.u.arbitrary::<Vec<u8>>()?,
                }
                .into(),
                create_only: self.u.arbitrary()?,
                replace_only: self.u.arbitrary()?,
                ..Default::default()
            }
            .encode_to_vec(),
            Op::GetXattr => GetXattrRequest {
                handle: self.handle()?,
                name: self.xattr_name()?,
                ..Default::default()
            }
            .encode_to_vec(),
            Op::ListXattr => ListXattrRequest {
                handle: self.handle()?,
                ..Default::default()
            }
            .encode_to_vec(),
            Op::RemoveXattr => RemoveXattrRequest {
                handle: self.handle()?,
                name: self.xattr_name()?,
                ..Default::default()
            }
            .encode_to_vec(),
            Op::CreateFile => CreateFileRequest {
                attrs: self.attrs()?,
                num_dfiles: match self.u.int_in_range(0u8..=3)? {
                    0 => self.u.arbitrary()?,
                    _ => self.u.int_in_range(0..=4)?,
                },
                strip_size: self.number()?,
                stuffed: self.u.arbitrary()?,
                ..Default::default()
            }
            .encode_to_vec(),
            Op::Unstuff => UnstuffRequest {
                handle: self.handle()?,
                ..Default::default()
            }
            .encode_to_vec(),
            Op::ListAttr => ListAttrRequest {
                handles: self.handles()?,
                ..Default::default()
            }
            .encode_to_vec(),
            Op::Rendezvous => RendezvousRequest {
                handle: self.handle()?,
                offset: self.number()?,
                length: self.number()?,
                write: self.u.arbitrary()?,
                ..Default::default()
            }
            .encode_to_vec(),
            // Operations added after this target was written: raw bytes.
            #[allow(unreachable_patterns)]
            _ => self.u.arbitrary::<Vec<u8>>()?,
        })
    }

    fn payload(&mut self, op: Op) -> ArbResult<Bytes> {
        let len = match (op, self.u.int_in_range(0u8..=15)?) {
            (Op::Write, 0..=9) => self.u.int_in_range(0..=4096)?,
            (Op::Write, 10..=12) => self.u.int_in_range(65530..=70_000)?,
            (Op::Write, 13) => 1 << 20,
            (_, 0) => self.u.int_in_range(0..=64)?,
            _ => 0,
        };
        let seed: u8 = self.u.arbitrary()?;
        Ok((0..len).map(|i| (i as u8).wrapping_add(seed)).collect())
    }

    fn request(&mut self, id: u64) -> ArbResult<Frame> {
        let op = *self.u.choose(&Op::ALL)?;
        let body = if self.u.ratio(1, 5)? {
            // Raw bytes: almost never a valid message.
            self.u.arbitrary::<Vec<u8>>()?
        } else {
            self.body(op)?
        };
        let payload = self.payload(op)?;
        // Mostly root (so that requests get past the permission checks to
        // what they validate), sometimes anyone, in up to 40 groups (the
        // frame carries the first 32).
        let cred = if self.u.ratio(3, 4)? {
            Cred::ROOT
        } else {
            let groups: Vec<u32> = (0..self.u.int_in_range(0..=40)?)
                .map(|_| self.u.arbitrary())
                .collect::<ArbResult<_>>()?;
            Cred::new(self.u.arbitrary()?, self.u.arbitrary()?).with_groups(&groups)
        };
        let mut f = Frame::request(op, id, cred, Bytes::from(body), payload);
        if self.u.ratio(1, 8)? {
            f.header.status = self.u.arbitrary()?;
        }
        // A few clients, sending requests again or not, with any `acked`:
        // the reply cache must answer or refuse, never trip.
        if self.u.ratio(1, 2)? {
            f.header.client = ClientRef {
                client: self.u.int_in_range(0..=3)?,
                acked: self.u.arbitrary()?,
                resent: self.u.arbitrary()?,
            };
        }
        Ok(f)
    }
}

/// Handles a successful reply names, so later requests can use them.
fn learn(op: Op, reply: &Frame, known: &mut Vec<Handle>) {
    let b = reply.body.clone();
    let mut add = |h: Handle| {
        if h != 0 && !known.contains(&h) && known.len() < 64 {
            known.push(h);
        }
    };
    match op {
        Op::CreateObject => CreateObjectReply::decode(b)
            .into_iter()
            .for_each(|r| add(r.handle)),
        Op::CreateDatafiles => CreateDatafilesReply::decode(b)
            .into_iter()
            .flat_map(|r| r.handles)
            .for_each(&mut add),
        Op::CreateFile => {
            if let Ok(r) = CreateFileReply::decode(b) {
                if let Some(o) = r.object {
                    add(o.handle);
                    o.dist
                        .into_iter()
                        .flat_map(|d| d.datafiles)
                        .for_each(&mut add);
                }
            }
        }
        Op::Lookup => LookupReply::decode(b)
            .into_iter()
            .for_each(|r| add(r.handle)),
        _ => {}
    }
}

/// EIO replies to bad requests already found and reported (README.md),
/// tolerated so that fuzzing goes on past them. Remove each once fixed.
const KNOWN_EIO: &[&str] = &[];

/// Checks that `reply` is a well-formed reply to `req`.
fn check_reply(req: &Frame, reply: &Frame) {
    let (q, r) = (&req.header, &reply.header);
    assert_eq!(r.kind, Kind::Reply, "a reply that is not a reply");
    assert_eq!(
        (r.op, r.id, r.cred.uid, r.cred.gid),
        (q.op, q.id, q.cred.uid, q.cred.gid),
        "header not echoed"
    );
    assert!(r.status >= 0, "negative status {}", r.status);
    // The reply must fit in a frame the client accepts.
    let w = wire(reply);
    let back = Frame::decode(Bytes::copy_from_slice(&w[4..]))
        .unwrap_or_else(|e| panic!("{} reply does not decode: {e}", q.op.name()));
    assert_eq!(back.header, reply.header);
    if r.status != 0 {
        let err = ErrorReply::decode(reply.body.clone()).expect("error reply body");
        assert!(
            !err.message.is_empty(),
            "error {} without a message",
            r.status
        );
        assert!(reply.payload.is_empty(), "error reply with a payload");
        // EIO means the server broke, not that the request was bad. The only
        // excuse here: this harness starts no peers (a request that needs
        // another server), never bad input.
        if r.status == Errno::EIO.0 {
            let known = KNOWN_EIO.iter().any(|k| err.message.contains(k));
            assert!(
                err.message.contains("peer") || known,
                "{} answered EIO to a request: {:?}",
                q.op.name(),
                err.message
            );
        }
        return;
    }
    assert!(
        q.op.reply_decodes(&reply.body),
        "{} reply body does not decode",
        q.op.name()
    );
    if q.op == Op::Read {
        if let Ok(rq) = ReadRequest::decode(req.body.clone()) {
            assert!(
                reply.payload.len() as u64 <= rq.length,
                "read returned {} bytes for {} asked",
                reply.payload.len(),
                rq.length
            );
        }
    } else {
        assert!(
            reply.payload.is_empty(),
            "{} reply with a payload",
            q.op.name()
        );
    }
}

fn config(u: &mut Unstructured) -> ArbResult<ClusterConfig> {
    let servers: u32 = u.int_in_range(1..=3)?;
    let mut settings = Settings {
        inline_max: *u.choose(&[0, 16, 4096, 64 << 10])?,
        sync: if u.arbitrary()? {
            SyncMode::Full
        } else {
            SyncMode::None
        },
        ..Settings::default()
    };
    for t in Settings::switches() {
        if u.ratio(1, 4)? {
            // A combination the settings refuse is left out.
            let _ = settings.set(&format!("{t}=false"));
        }
    }
    Ok(ClusterConfig {
        secret_file: None,
        broker_socket: None,
        loaded_from: None,
        settings,
        servers: (0..servers)
            .map(|id| ServerEntry {
                id,
                // Nothing listens here: this harness starts no peers.
                addr: ([127, 0, 0, 1], 9).into(),
                data: std::path::PathBuf::from(format!("/nonexistent/server-{id}")),
                metrics_addr: None,
            })
            .collect(),
    })
}

/// Where the harness puts each run's data directory (tmpfs if there is one).
fn scratch() -> std::path::PathBuf {
    if let Some(d) = std::env::var_os("SHOAL_FUZZ_TMP") {
        return d.into();
    }
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// Target `request_validation`.
pub fn request_validation(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(config) = config(&mut u) else {
        return;
    };
    let id = if config.num_servers() > 1 && u.ratio(1, 4).unwrap_or(false) {
        1
    } else {
        0
    };
    let dir = tempfile::Builder::new()
        .prefix("shoal-fuzz-")
        .tempdir_in(scratch())
        .expect("scratch directory");
    let servers = config.num_servers();
    let service = Service::with_engine(config, id, Arc::new(MemEngine::default()), dir.path())
        .expect("service on the in-memory engine");
    let mut gen = Gen {
        u: &mut u,
        known: vec![ROOT],
        servers,
    };
    // SHOAL_FUZZ_TRACE=1 prints each request and its reply (for triage).
    let trace = std::env::var_os("SHOAL_FUZZ_TRACE").is_some();
    for n in 0..24u64 {
        let Ok(req) = gen.request(n) else {
            break;
        };
        let reply = service.handle(&req);
        if trace {
            let message = ErrorReply::decode(reply.body.clone())
                .map(|e| e.message)
                .unwrap_or_default();
            eprintln!(
                "{n}: {:?} body {:02x?} payload {} bytes -> status {} {message}",
                req.header.op,
                &req.body[..req.body.len().min(48)],
                req.payload.len(),
                reply.header.status
            );
        }
        check_reply(&req, &reply);
        if reply.header.status == 0 {
            learn(req.header.op, &reply, &mut gen.known);
        }
    }
    // The server still answers: nothing poisoned, the root still there.
    let ping = Frame::request(Op::Ping, 1, Cred::ROOT, Bytes::new(), Bytes::new());
    assert_eq!(
        service.handle(&ping).header.status,
        0,
        "ping fails afterwards"
    );
    if id == 0 {
        let body = Bytes::from(
            GetAttrRequest {
                handle: ROOT,
                ..Default::default()
            }
            .encode_to_vec(),
        );
        let reply = service.handle(&Frame::request(
            Op::GetAttr,
            2,
            Cred::ROOT,
            body,
            Bytes::new(),
        ));
        assert_eq!(reply.header.status, 0, "the root is gone");
        let attr = GetAttrReply::decode(reply.body).unwrap();
        assert_eq!(attr.object.unwrap().kind(), ObjectKind::Directory);
    }
}

/// Bytes of a valid frame (with its length field), for seeding corpora.
pub fn frame_bytes(op: Op, body: &[u8], payload: &[u8]) -> Vec<u8> {
    let f = Frame::request(
        op,
        1,
        Cred::ROOT,
        Bytes::copy_from_slice(body),
        Bytes::copy_from_slice(payload),
    );
    let mut b = BytesMut::from(&f.encode_head()[..]);
    b.extend_from_slice(payload);
    b.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stored corpus of `target`, and the findings (minimized crash
    /// inputs, `findings/<target>-*`) as regression inputs.
    fn corpus(target: &str) -> Vec<Vec<u8>> {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut out = Vec::new();
        for e in std::fs::read_dir(root.join("corpus").join(target))
            .into_iter()
            .flatten()
            .flatten()
        {
            out.push(std::fs::read(e.path()).unwrap());
        }
        for e in std::fs::read_dir(root.join("findings"))
            .into_iter()
            .flatten()
            .flatten()
        {
            if e.file_name().to_string_lossy().starts_with(target) {
                out.push(std::fs::read(e.path()).unwrap());
            }
        }
        out
    }

    /// Pseudo-random inputs from a fixed seed (xorshift), so the checks run
    /// even with an empty corpus.
    fn generated(n: usize, max_len: usize) -> Vec<Vec<u8>> {
        let mut x: u64 = 0x5348_0001_dead_beef;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        (0..n)
            .map(|_| {
                let len = next() as usize % max_len;
                (0..len).map(|_| next() as u8).collect()
            })
            .collect()
    }

    #[test]
    fn frame_decode_replays_corpus_and_random_frames() {
        let mut inputs = corpus("frame_decode");
        inputs.extend(generated(2000, 200));
        // Valid frames and every single-byte corruption of their headers.
        let valid = frame_bytes(Op::Write, b"\x08\x01\x10\x02", b"payload");
        for i in 0..valid.len() {
            for x in [0x01u8, 0x80, 0xff] {
                let mut v = valid[4..].to_vec();
                if i < v.len() {
                    v[i] ^= x;
                }
                inputs.push(v);
            }
        }
        inputs.push(valid[4..].to_vec());
        for input in &inputs {
            frame_decode(input);
        }
    }

    /// Replays the file named by SHOAL_FUZZ_INPUT (with SHOAL_FUZZ_TRACE=1
    /// to see each request): `cargo test replay_one -- --nocapture`.
    #[test]
    fn replay_one() {
        if let Some(p) = std::env::var_os("SHOAL_FUZZ_INPUT") {
            request_validation(&std::fs::read(p).unwrap());
        }
    }

    #[test]
    fn request_validation_replays_corpus_and_random_sequences() {
        let mut inputs = corpus("request_validation");
        inputs.extend(generated(300, 2000));
        for input in &inputs {
            request_validation(input);
        }
    }
}
