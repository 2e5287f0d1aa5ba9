//! Malformed input against live servers: random bytes, truncated frames,
//! impossible lengths, wrong header fields, garbage bodies, wrong handles and
//! huge offsets, each on raw TCP connections. Every bad connection is closed
//! or answered with an error reply (never left hanging), the server process
//! stays up, and a correct client keeps working throughout. Then the same
//! kind of input through the native client: long names, '/' and NUL in
//! names, `..` tricks and offsets near u64::MAX get clear errors.

// Message literals end in `..Default::default()` so that fields added to the
// schema later do not break this test.
#![allow(clippy::needless_update)]

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use prost::Message;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shoal_proto::auth::Secret;
use shoal_proto::error::Errno;
use shoal_proto::frame::{read_frame, Frame, FrameError, Kind, HEADER_LEN, MAX_BODY, MAX_PAYLOAD};
use shoal_proto::handle::{self, ROOT};
use shoal_proto::msg::*;
use shoal_proto::{Cred, Op};
use shoal_tests::{entry_names, Cluster};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Longest the server may take to answer or close a bad connection.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Bad connections in flight at once.
const PARALLEL: usize = 32;

/// The secret of the cluster the raw connections go to.
static SECRET: OnceLock<Secret> = OnceLock::new();

/// A raw connection that has passed the authentication handshake, so what
/// it sends next reaches the frame reader.
async fn connect(addr: SocketAddr) -> TcpStream {
    let secret = SECRET.get().expect("cluster secret");
    shoal_net::connect::connect(
        0,
        addr,
        IO_TIMEOUT,
        Some(shoal_proto::auth::Proof::Secret(secret)),
    )
    .await
    .expect("connect and handshake")
}

/// The bytes of a request frame on the wire.
fn frame(op: Op, id: u64, body: &[u8], payload: &[u8]) -> Vec<u8> {
    let f = Frame::request(
        op,
        id,
        Cred::ROOT,
        Bytes::copy_from_slice(body),
        Bytes::copy_from_slice(payload),
    );
    let mut w = f.encode_head().to_vec();
    w.extend_from_slice(payload);
    w
}

fn msg_frame(op: Op, id: u64, m: &impl Message, payload: &[u8]) -> Vec<u8> {
    frame(op, id, &m.encode_to_vec(), payload)
}

/// What the server did with the bytes of one connection.
#[derive(Debug)]
struct Exchange {
    replies: Vec<Frame>,
    closed: bool,
}

#[derive(Clone, Copy, Debug)]
enum Until {
    /// Until the server closes the connection.
    Closed,
    /// Until this many replies arrived (the connection stays open).
    Replies(usize),
}

/// Sends `bytes` on a new connection (then shuts down the sending side if
/// `half_close`) and reads what comes back. Panics if the server neither
/// answers nor closes within [`IO_TIMEOUT`], or sends something that is not
/// a well-formed reply.
async fn exchange(addr: SocketAddr, bytes: &[u8], half_close: bool, until: Until) -> Exchange {
    let mut s = connect(addr).await;
    // The server may close before it has read everything: not an error.
    let _ = s.write_all(bytes).await;
    if half_close {
        let _ = s.shutdown().await;
    }
    let mut replies = Vec::new();
    loop {
        if let Until::Replies(n) = until {
            if replies.len() == n {
                return Exchange {
                    replies,
                    closed: false,
                };
            }
        }
        match tokio::time::timeout(IO_TIMEOUT, read_frame(&mut s)).await {
            Err(_) => panic!(
                "server hung: no reply and no close within {IO_TIMEOUT:?} after {} bytes \
                 (first 64: {:02x?}), half_close={half_close}, {} replies so far",
                bytes.len(),
                &bytes[..bytes.len().min(64)],
                replies.len()
            ),
            Ok(Ok(f)) => {
                assert_eq!(f.header.kind, Kind::Reply, "server sent a request");
                replies.push(f);
            }
            Ok(Err(FrameError::Closed)) | Ok(Err(FrameError::Io(_))) => {
                return Exchange {
                    replies,
                    closed: true,
                };
            }
            Ok(Err(FrameError::Malformed(m))) => panic!("server sent a malformed frame: {m}"),
        }
    }
}

/// Runs `exchange` over many inputs, PARALLEL at a time.
async fn exchange_all(
    addr: SocketAddr,
    inputs: Vec<Vec<u8>>,
    half_close: bool,
    until: Until,
) -> Vec<(Vec<u8>, Exchange)> {
    futures::stream::iter(inputs)
        .map(|b| async move {
            let x = exchange(addr, &b, half_close, until).await;
            (b, x)
        })
        .buffer_unordered(PARALLEL)
        .collect()
        .await
}

fn errno_of(f: &Frame) -> i32 {
    f.header.status
}

fn error_message(f: &Frame) -> String {
    ErrorReply::decode(f.body.clone())
        .map(|e| e.message)
        .unwrap_or_else(|e| panic!("status {} without an ErrorReply body: {e}", f.header.status))
}

/// One request on a fresh connection; its reply.
async fn call(addr: SocketAddr, bytes: Vec<u8>) -> Frame {
    let mut x = exchange(addr, &bytes, false, Until::Replies(1)).await;
    x.replies.pop().unwrap()
}

async fn expect_errno(addr: SocketAddr, what: &str, bytes: Vec<u8>, want: Errno) {
    let r = call(addr, bytes).await;
    assert_eq!(
        errno_of(&r),
        want.0,
        "{what}: expected errno {} ({}), got {} {}",
        want.0,
        want.describe(),
        r.header.status,
        if r.header.status != 0 {
            error_message(&r)
        } else {
            String::new()
        }
    );
    if want.0 != 0 {
        assert!(
            !error_message(&r).is_empty(),
            "{what}: error without a message"
        );
    }
}

/// The errno of a call that must fail.
fn errno<T>(r: shoal_proto::error::Result<T>) -> Errno {
    match r {
        Ok(_) => panic!("succeeded"),
        Err(e) => e.errno,
    }
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// A correct client still creates, writes, reads and lists.
async fn correct_client_works(cluster: &Cluster, round: u32) {
    let client = cluster.client();
    client.ping_all().await.expect("ping every server");
    let d = client
        .mkdir(ROOT, &format!("ok{round}"), 0o755)
        .await
        .expect("mkdir")
        .handle;
    let data = pattern(200_000 + round as usize);
    for name in ["a", "b"] {
        let f = client.create(d, name, 0o644).await.expect("create").handle;
        client
            .write(f, 0, Bytes::from(data.clone()))
            .await
            .expect("write");
        let back = client.read(f, 0, data.len() + 100).await.expect("read");
        assert!(back[..] == data[..], "read back other bytes");
    }
    let names: Vec<String> = client
        .readdir_all(d)
        .await
        .expect("readdir")
        .into_iter()
        .map(|e| e.name)
        .collect();
    let mut names = names;
    names.sort_unstable();
    assert_eq!(names, vec!["a", "b"]);
}

fn assert_alive(cluster: &mut Cluster, when: &str) {
    for id in cluster.server_ids() {
        assert!(
            cluster.is_running(id),
            "server {id} died {when}: {}",
            cluster.read_log(&format!("server-{id}"))
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_frames_close_their_connection_and_the_server_keeps_serving() {
    let started = Instant::now();
    let mut cluster = Cluster::builder().servers(2).start();
    let _ = SECRET.set(
        cluster
            .config()
            .secret()
            .unwrap()
            .expect("kit clusters have a secret"),
    );
    let addr = cluster.config().servers[0].addr;
    let addr1 = cluster.config().servers[1].addr;
    let mut rng = StdRng::seed_from_u64(0x5348_0bad);
    correct_client_works(&cluster, 0).await;

    // Connections stalled in the middle of a frame stay open (the peer may
    // just be slow) but must not block anyone else.
    let valid = [
        frame(Op::Ping, 1, &[], &[]),
        msg_frame(
            Op::GetAttr,
            2,
            &GetAttrRequest {
                handle: ROOT,
                ..Default::default()
            },
            &[],
        ),
        msg_frame(
            Op::Lookup,
            3,
            &LookupRequest {
                dir: ROOT,
                name: "ok0".into(),
                ..Default::default()
            },
            &[],
        ),
        msg_frame(
            Op::Write,
            4,
            &WriteRequest {
                handle: handle::make(0, 1 << 30),
                offset: 0,
                ..Default::default()
            },
            &pattern(300),
        ),
    ];
    let mut stalled = Vec::new();
    for i in 0..16 {
        let v = &valid[i % valid.len()];
        let mut s = connect(addr).await;
        s.write_all(&v[..1 + i * 3]).await.unwrap();
        stalled.push(s);
    }

    // 1. Random bytes, then EOF: the server closes; anything it sent first
    // was a well-formed reply (exchange checks).
    let random: Vec<Vec<u8>> = (0..2000)
        .map(|_| {
            let len = rng.random_range(0..=256);
            (0..len).map(|_| rng.random::<u8>()).collect()
        })
        .collect();
    for (b, x) in exchange_all(addr, random, true, Until::Closed).await {
        assert!(x.closed, "random input {b:02x?} left open");
    }

    // 2. Random headers behind a plausible length, magic and version.
    let headers: Vec<Vec<u8>> = (0..1000)
        .map(|_| {
            let rest = rng.random_range(0..=64usize);
            let mut b = ((HEADER_LEN + rest) as u32).to_be_bytes().to_vec();
            b.extend_from_slice(&[0x53, 0x48, 1]);
            b.extend((0..HEADER_LEN - 3 + rest).map(|_| rng.random::<u8>()));
            b
        })
        .collect();
    for (b, x) in exchange_all(addr, headers, true, Until::Closed).await {
        assert!(x.closed, "random header {b:02x?} left open");
    }

    // 3. Every truncation of valid frames, then EOF: closed, never answered.
    let mut cuts = Vec::new();
    for v in &valid {
        for cut in 0..v.len() {
            cuts.push(v[..cut].to_vec());
        }
    }
    let n_cuts = cuts.len();
    for (b, x) in exchange_all(addr, cuts, true, Until::Closed).await {
        assert!(
            x.replies.is_empty(),
            "a frame cut to {} bytes was answered",
            b.len()
        );
    }

    // 4. Impossible lengths, wrong magic, version, kind and operation: the
    // connection is closed at once (no EOF needed), nothing is answered.
    let ping = frame(Op::Ping, 9, &[], &[]);
    let with = |at: usize, bytes: &[u8]| {
        let mut f = ping.clone();
        f[at..at + bytes.len()].copy_from_slice(bytes);
        f
    };
    let total = |len: u32| {
        let mut f = ping.clone();
        f[0..4].copy_from_slice(&len.to_be_bytes());
        f
    };
    let header_lengths = |len: usize, body: u32, payload: u32| {
        let mut f = ping.clone();
        f[0..4].copy_from_slice(&(len as u32).to_be_bytes());
        f[64..68].copy_from_slice(&body.to_be_bytes());
        f[68..72].copy_from_slice(&payload.to_be_bytes());
        f
    };
    let limit = HEADER_LEN + MAX_BODY + MAX_PAYLOAD;
    let bad_headers: Vec<(&str, Vec<u8>)> = vec![
        ("length u32::MAX", total(u32::MAX)),
        ("length 0", total(0)),
        ("length under the header", total(HEADER_LEN as u32 - 1)),
        ("length one over the limit", total(limit as u32 + 1)),
        (
            "body one over its limit",
            header_lengths(HEADER_LEN + MAX_BODY + 1, MAX_BODY as u32 + 1, 0),
        ),
        (
            "payload one over its limit",
            header_lengths(HEADER_LEN + MAX_PAYLOAD + 1, 0, MAX_PAYLOAD as u32 + 1),
        ),
        (
            "body and payload u32::MAX",
            header_lengths(limit, u32::MAX, u32::MAX),
        ),
        (
            "lengths that do not add up",
            header_lengths(HEADER_LEN + 10, 5, 6),
        ),
        (
            "lengths that add up to the limit, nothing sent",
            header_lengths(limit, MAX_BODY as u32, MAX_PAYLOAD as u32 + 1),
        ),
        ("magic 0", with(4, &[0, 0])),
        ("magic byte-swapped", with(4, &[0x48, 0x53])),
        ("version 0", with(6, &[0])),
        ("version 1", with(6, &[1])),
        ("version 2", with(6, &[2])),
        ("version 3", with(6, &[3])),
        ("version 5", with(6, &[5])),
        ("version 255", with(6, &[255])),
        ("kind reply", with(7, &[1])),
        ("kind 2", with(7, &[2])),
        ("kind 255", with(7, &[255])),
        ("op 0", with(8, &[0, 0])),
        ("op 999", with(8, &999u16.to_be_bytes())),
        ("op u16::MAX", with(8, &[0xff, 0xff])),
        ("33 supplementary groups", with(10, &[0, 33])),
        ("groups the length does not hold", with(10, &[0, 2])),
        ("u16::MAX supplementary groups", with(10, &[0xff, 0xff])),
    ];
    for (what, b) in &bad_headers {
        // Only the length field and header: the server must not wait for
        // a body it is going to refuse.
        let x = exchange(
            addr,
            &b[..b.len().min(4 + HEADER_LEN)],
            false,
            Until::Closed,
        )
        .await;
        assert!(x.closed && x.replies.is_empty(), "{what}: {x:?}");
    }

    // 5. Valid frames with garbage bodies, every operation: an error reply
    // (EPROTO), and the connection goes on serving.
    let mut garbage_bodies: Vec<Vec<u8>> = vec![
        vec![0xff; 16],
        // Field 1, length-delimited, 2^35 bytes long.
        vec![0x0a, 0xff, 0xff, 0xff, 0xff, 0x7f],
        // Field 1 as a varint that never ends.
        vec![
            0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        ],
    ];
    garbage_bodies.extend((0..5).map(|_| {
        let len = rng.random_range(1..=200);
        (0..len).map(|_| rng.random::<u8>()).collect::<Vec<u8>>()
    }));
    let mut inputs = Vec::new();
    for op in Op::ALL {
        for (i, body) in garbage_bodies.iter().enumerate() {
            let mut b = frame(op, 100 + i as u64, body, &pattern(i * 10));
            b.extend(frame(Op::Ping, 7, &[], &[]));
            inputs.push((op, i, b));
        }
    }
    let results: Vec<_> = futures::stream::iter(inputs)
        .map(|(op, i, b)| async move {
            let x = exchange(addr, &b, false, Until::Replies(2)).await;
            (op, i, x)
        })
        .buffer_unordered(PARALLEL)
        .collect()
        .await;
    for (op, i, x) in results {
        // Replies come in the order requests finish: match them by id.
        let by_id = |id: u64| {
            let found: Vec<&Frame> = x.replies.iter().filter(|f| f.header.id == id).collect();
            assert_eq!(
                found.len(),
                1,
                "{op:?}: {} replies with id {id}",
                found.len()
            );
            found[0]
        };
        let (r, ping) = (by_id(100 + i as u64), by_id(7));
        assert_eq!(r.header.op, op);
        assert_eq!(ping.header.status, 0, "ping after garbage {op:?}");
        // The first three bodies are not protobuf at all; every operation
        // that reads a body must refuse them.
        let ignores_body = matches!(op, Op::Ping | Op::Statfs | Op::Stats);
        if i < 3 && !ignores_body {
            assert_eq!(
                r.header.status,
                Errno::EPROTO.0,
                "{op:?} with garbage body {i}: {}",
                error_message(r)
            );
        }
        if r.header.status != 0 {
            error_message(r);
        }
    }

    // 6. Handles that do not exist or belong to another server.
    let other = handle::make(1, 1);
    let nowhere = handle::make(77, 1);
    let unallocated = handle::make(0, 1 << 40);
    for (what, h, want) in [
        ("handle 0", 0, Errno::EINVAL),
        ("handle of server 1", other, Errno::EINVAL),
        ("handle of server 77", nowhere, Errno::EINVAL),
        ("handle u64::MAX", u64::MAX, Errno::EINVAL),
        ("unallocated handle", unallocated, Errno::ENOENT),
    ] {
        expect_errno(
            addr,
            &format!("getattr {what}"),
            msg_frame(
                Op::GetAttr,
                1,
                &GetAttrRequest {
                    handle: h,
                    ..Default::default()
                },
                &[],
            ),
            want,
        )
        .await;
        let read = ReadRequest {
            handle: h,
            offset: 0,
            length: 10,
            ..Default::default()
        };
        expect_errno(
            addr,
            &format!("read {what}"),
            msg_frame(Op::Read, 1, &read, &[]),
            want,
        )
        .await;
        let write = WriteRequest {
            handle: h,
            offset: 0,
            ..Default::default()
        };
        expect_errno(
            addr,
            &format!("write {what}"),
            msg_frame(Op::Write, 1, &write, b"data"),
            want,
        )
        .await;
        expect_errno(
            addr,
            &format!("remove {what}"),
            msg_frame(
                Op::Remove,
                1,
                &RemoveRequest {
                    handle: h,
                    ..Default::default()
                },
                &[],
            ),
            want,
        )
        .await;
        let lookup = LookupRequest {
            dir: h,
            name: "x".into(),
            ..Default::default()
        };
        expect_errno(
            addr,
            &format!("lookup in {what}"),
            msg_frame(Op::Lookup, 1, &lookup, &[]),
            want,
        )
        .await;
    }
    // Server 0's root sent to server 1.
    expect_errno(
        addr1,
        "getattr of server 0's root on server 1",
        msg_frame(
            Op::GetAttr,
            1,
            &GetAttrRequest {
                handle: ROOT,
                ..Default::default()
            },
            &[],
        ),
        Errno::EINVAL,
    )
    .await;
    let bad_entry = CrDirEntRequest {
        dir: ROOT,
        name: "nowhere".into(),
        handle: nowhere,
        kind: ObjectKind::Metafile as i32,
        replace: false,
        ..Default::default()
    };
    expect_errno(
        addr,
        "entry naming server 77",
        msg_frame(Op::CrDirEnt, 1, &bad_entry, &[]),
        Errno::EINVAL,
    )
    .await;
    let bad_dist = SetDistRequest {
        handle: ROOT,
        dist: Some(Distribution {
            strip_size: 4096,
            datafiles: vec![nowhere],
            stuffed: false,
            width: 1,
            write_threshold: None,
        }),
        ..Default::default()
    };
    expect_errno(
        addr,
        "distribution naming server 77",
        msg_frame(Op::SetDist, 1, &bad_dist, &[]),
        Errno::EINVAL,
    )
    .await;
    let mut huge_threshold = bad_dist.clone();
    if let Some(d) = huge_threshold.dist.as_mut() {
        d.datafiles = vec![ROOT];
        d.write_threshold = Some(100 << 20);
    }
    expect_errno(
        addr,
        "distribution with a 100 MiB write threshold",
        msg_frame(Op::SetDist, 1, &huge_threshold, &[]),
        Errno::EINVAL,
    )
    .await;
    expect_errno(
        addr,
        "get_sizes of server 1's handle",
        msg_frame(
            Op::GetSizes,
            1,
            &GetSizesRequest {
                handles: vec![other],
                ..Default::default()
            },
            &[],
        ),
        Errno::EINVAL,
    )
    .await;

    // 7. Huge offsets and lengths on a real datafile of server 0.
    let created = call(
        addr,
        msg_frame(
            Op::CreateDatafiles,
            1,
            &CreateDatafilesRequest {
                count: 1,
                ..Default::default()
            },
            &[],
        ),
    )
    .await;
    assert_eq!(created.header.status, 0, "create a datafile");
    let d = CreateDatafilesReply::decode(created.body).unwrap().handles[0];
    let hello = msg_frame(
        Op::Write,
        1,
        &WriteRequest {
            handle: d,
            offset: 0,
            ..Default::default()
        },
        b"hello",
    );
    expect_errno(addr, "write hello", hello, Errno(0)).await;
    let read = |offset: u64, length: u64| {
        msg_frame(
            Op::Read,
            1,
            &ReadRequest {
                handle: d,
                offset,
                length,
                ..Default::default()
            },
            &[],
        )
    };
    let write = |offset: u64, len: usize| {
        msg_frame(
            Op::Write,
            1,
            &WriteRequest {
                handle: d,
                offset,
                ..Default::default()
            },
            &pattern(len),
        )
    };
    expect_errno(
        addr,
        "read u64::MAX at u64::MAX",
        read(u64::MAX, u64::MAX),
        Errno::EINVAL,
    )
    .await;
    expect_errno(addr, "read u64::MAX at 0", read(0, u64::MAX), Errno::EINVAL).await;
    expect_errno(
        addr,
        "read over the payload limit",
        read(0, MAX_PAYLOAD as u64 + 1),
        Errno::EINVAL,
    )
    .await;
    let past_end = call(addr, read(u64::MAX, 10)).await;
    assert_eq!(past_end.header.status, 0, "read at u64::MAX");
    assert!(
        past_end.payload.is_empty(),
        "read at u64::MAX returned bytes"
    );
    expect_errno(
        addr,
        "write 10 bytes at u64::MAX-1",
        write(u64::MAX - 1, 10),
        Errno::EFBIG,
    )
    .await;
    expect_errno(
        addr,
        "write 1 byte at u64::MAX-1",
        write(u64::MAX - 1, 1),
        Errno::EFBIG,
    )
    .await;
    expect_errno(addr, "write at u64::MAX", write(u64::MAX, 1), Errno::EFBIG).await;
    expect_errno(addr, "write at 2^50", write(1 << 50, 1), Errno::EFBIG).await;
    expect_errno(
        addr,
        "truncate to u64::MAX",
        msg_frame(
            Op::Truncate,
            1,
            &TruncateRequest {
                handle: d,
                size: u64::MAX,
                ..Default::default()
            },
            &[],
        ),
        Errno::EFBIG,
    )
    .await;
    let rdv = call(
        addr,
        msg_frame(
            Op::Rendezvous,
            1,
            &RendezvousRequest {
                handle: d,
                offset: u64::MAX,
                length: u64::MAX,
                write: false,
                ..Default::default()
            },
            &[],
        ),
    )
    .await;
    assert_eq!(rdv.header.status, 0, "rendezvous at u64::MAX");
    assert_eq!(RendezvousReply::decode(rdv.body).unwrap().ready, 0);
    let back = call(addr, read(0, 100)).await;
    assert_eq!(
        (back.header.status, &back.payload[..]),
        (0, &b"hello"[..]),
        "the datafile changed"
    );

    // 8. A flood of pipelined requests, then a close without reading; and
    // one read to the end, every id answered once.
    let flood: Vec<u8> = (0..2000u64)
        .flat_map(|i| frame(Op::Ping, i, &[], &[]))
        .collect();
    {
        let mut s = connect(addr).await;
        s.write_all(&flood).await.unwrap();
    }
    let x = exchange(addr, &flood, false, Until::Replies(2000)).await;
    let mut ids: Vec<u64> = x.replies.iter().map(|f| f.header.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..2000).collect::<Vec<_>>());
    // Connections that send nothing at all.
    for _ in 0..100 {
        drop(TcpStream::connect(addr).await.unwrap());
    }

    assert_alive(&mut cluster, "after malformed input");
    correct_client_works(&cluster, 1).await;

    // The stalled connections were never answered and are still open.
    for s in stalled {
        let mut buf = [0u8; 1];
        match tokio::time::timeout(Duration::from_millis(20), s.readable()).await {
            Err(_) => {}
            Ok(_) => match s.try_read(&mut buf) {
                Ok(0) => panic!("a stalled connection was closed"),
                Ok(_) => panic!("a stalled connection was answered"),
                Err(_) => {}
            },
        }
    }
    assert_alive(&mut cluster, "at the end");
    eprintln!(
        "malformed input: 2000 random, 1000 random headers, {n_cuts} truncations, {} bad \
         headers, {} garbage bodies, flood of 2000: {:?}",
        bad_headers.len(),
        Op::ALL.len() * garbage_bodies.len(),
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_client_refuses_bad_names_and_keeps_paths_inside_the_root() {
    let mut cluster = Cluster::builder().servers(2).start();
    let client = cluster.client();
    let long = "x".repeat(256);
    let max = "y".repeat(255);

    assert_eq!(
        errno(client.create(ROOT, &long, 0o644).await),
        Errno::ENAMETOOLONG
    );
    assert_eq!(
        errno(client.mkdir(ROOT, &long, 0o755).await),
        Errno::ENAMETOOLONG
    );
    assert_eq!(errno(client.lookup(ROOT, &long).await), Errno::ENAMETOOLONG);
    assert_eq!(
        errno(client.symlink(ROOT, &long, "target").await),
        Errno::ENAMETOOLONG
    );
    assert_eq!(
        errno(client.resolve(&format!("/{long}")).await),
        Errno::ENAMETOOLONG
    );
    assert_eq!(
        errno(client.resolve(&format!("/{}", "a/".repeat(2100))).await),
        Errno::ENAMETOOLONG,
        "a path over PATH_MAX"
    );
    // 255 bytes is fine.
    let f = client.create(ROOT, &max, 0o644).await.unwrap().handle;
    assert_eq!(client.lookup(ROOT, &max).await.unwrap().0, f);

    for bad in ["a/b", "/", "a\0b", "\0", ".", "..", ""] {
        assert_eq!(
            errno(client.create(ROOT, bad, 0o644).await),
            Errno::EINVAL,
            "create {bad:?}"
        );
        assert_eq!(
            errno(client.mkdir(ROOT, bad, 0o755).await),
            Errno::EINVAL,
            "mkdir {bad:?}"
        );
        assert_eq!(
            errno(client.lookup(ROOT, bad).await),
            Errno::EINVAL,
            "lookup {bad:?}"
        );
    }
    assert_eq!(errno(client.resolve("/a\0b").await), Errno::EINVAL);
    assert_eq!(errno(client.resolve("relative").await), Errno::EINVAL);

    // `..` never climbs above the root, lexically or through a symlink.
    let b = client.mkdir(ROOT, "b", 0o755).await.unwrap().handle;
    let etc = client.mkdir(ROOT, "etc", 0o755).await.unwrap().handle;
    let passwd = client.create(etc, "passwd", 0o644).await.unwrap().handle;
    assert_eq!(client.resolve("/a/../../b").await.unwrap().0, b);
    assert_eq!(client.resolve("/../../../b").await.unwrap().0, b);
    assert_eq!(client.resolve("/..").await.unwrap().0, ROOT);
    assert_eq!(client.resolve("/b/../..").await.unwrap().0, ROOT);
    client.symlink(b, "up", "../../../../../etc").await.unwrap();
    assert_eq!(
        client.resolve("/b/up/passwd").await.unwrap().0,
        passwd,
        "a symlink's `..` stopped at the root"
    );
    client.symlink(b, "abs", "/../../etc").await.unwrap();
    assert_eq!(client.resolve("/b/abs/passwd").await.unwrap().0, passwd);
    let names = entry_names(&client, ROOT).await;
    assert_eq!(names.len(), 3, "{names:?}");
    assert_alive(&mut cluster, "after bad names");
}

/// Offsets near u64::MAX through the native client: a clear error (EFBIG or
/// EINVAL; a read past the end may also return nothing), never a panic, and
/// the file is unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_client_offsets_near_u64_max_are_clear_errors() {
    let mut cluster = Cluster::builder().servers(2).start();
    let client = cluster.client();
    let f = client.create(ROOT, "f", 0o644).await.unwrap().handle;
    client
        .write(f, 0, Bytes::from_static(b"abc"))
        .await
        .unwrap();
    client.flush(f).await.unwrap();

    type Check = (&'static str, u64, usize, bool);
    // (operation, offset or size, length, is a read)
    let cases: [Check; 9] = [
        ("write", u64::MAX - 1, 1, false),
        ("write", u64::MAX - 1, 10, false),
        ("write", u64::MAX, 1, false),
        ("write", (1 << 50) - 1, 2, false),
        ("read", u64::MAX - 1, 10, true),
        ("read", u64::MAX, 1, true),
        ("read", u64::MAX - 4096, 1 << 20, true),
        ("truncate", u64::MAX, 0, false),
        ("truncate", 1 << 62, 0, false),
    ];
    let mut failures = Vec::new();
    for (op, offset, len, is_read) in cases {
        let c = client.clone();
        let task = tokio::spawn(async move {
            match op {
                "write" => c
                    .write(f, offset, Bytes::from(vec![1u8; len]))
                    .await
                    .map(|_| 0),
                "read" => c.read(f, offset, len).await.map(|b| b.len()),
                _ => c.truncate(f, offset).await.map(|_| 0),
            }
        });
        let what = format!("{op}(offset {offset:#x}, len {len})");
        match tokio::time::timeout(Duration::from_secs(20), task).await {
            Err(_) => failures.push(format!("{what}: hung")),
            Ok(Err(e)) if e.is_panic() => {
                let p = e.into_panic();
                let m = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                failures.push(format!("{what}: the client panicked: {m}"));
            }
            Ok(Err(e)) => failures.push(format!("{what}: {e}")),
            Ok(Ok(Ok(0))) if is_read => {}
            Ok(Ok(Ok(n))) => failures.push(format!("{what}: succeeded ({n} bytes)")),
            Ok(Ok(Err(e))) if [Errno::EFBIG, Errno::EINVAL].contains(&e.errno) => {}
            Ok(Ok(Err(e))) => failures.push(format!(
                "{what}: errno {} ({}) {}",
                e.errno.0,
                e.errno.describe(),
                e.message
            )),
        }
    }
    let fresh = cluster.client();
    let (g, _) = fresh.resolve("/f").await.unwrap();
    assert_eq!(
        &fresh.read(g, 0, 100).await.unwrap()[..],
        b"abc",
        "the file changed"
    );
    assert_eq!(fresh.getattr(g).await.unwrap().size, 3);
    assert_alive(&mut cluster, "after huge offsets");
    assert!(
        failures.is_empty(),
        "unclear results:\n{}",
        failures.join("\n")
    );
}
