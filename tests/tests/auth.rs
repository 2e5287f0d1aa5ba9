//! Authentication: every connection proves the cluster secret before its
//! first frame. A client with the right secret is served; one with a wrong
//! secret gets EACCES and one with none is closed, before any request is
//! served; a raw connection that skips the handshake never gets a reply
//! frame; and `shoal up` keeps the secret in a 0600 file.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use shoal_client::Client;
use shoal_proto::auth::Secret;
use shoal_proto::error::Errno;
use shoal_proto::frame::{write_frame, Frame};
use shoal_proto::handle::ROOT;
use shoal_proto::{Cred, Op};
use shoal_tests::{entry_names, shoal_bin, Cluster};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_clients_with_the_cluster_secret_are_served() {
    let cluster = Cluster::builder().servers(2).start();
    assert!(cluster.config().secret_file.is_some());

    // (1) The right secret: served, on every server (the servers also reach
    // each other, authenticated, to fill their precreate pools).
    let client = cluster.client();
    client.create(ROOT, "ok", 0o644).await.unwrap();
    cluster.wait_for_pools(&client).await;

    // (2) A wrong secret: EACCES naming the server and secret_file, and
    // nothing was created.
    let wrong_file = cluster.dir().join("wrong-secret");
    Secret::create_file(&wrong_file).unwrap();
    let mut config = cluster.config().clone();
    config.secret_file = Some(wrong_file);
    let wrong = Client::new(config);
    let e = wrong.create(ROOT, "wrong", 0o644).await.unwrap_err();
    assert_eq!(e.errno, Errno::EACCES, "{e:?}");
    assert!(
        e.message.contains("refused the cluster secret") && e.message.contains("secret_file"),
        "{}",
        e.message
    );
    let e = wrong.server_stats(1).await.unwrap_err();
    assert_eq!(e.errno, Errno::EACCES, "{e:?}");

    // No secret at all: refused too (the connection is closed).
    let mut config = cluster.config().clone();
    config.secret_file = None;
    let none = Client::new(config);
    assert!(none.create(ROOT, "none", 0o644).await.is_err());

    // The right client keeps working, and nothing the others sent was served.
    client.create(ROOT, "ok2", 0o644).await.unwrap();
    let names = entry_names(&client, ROOT).await;
    assert!(names.contains(&"ok".to_string()) && names.contains(&"ok2".to_string()));
    assert!(
        !names.iter().any(|n| n == "wrong" || n == "none"),
        "{names:?}"
    );
    let log = cluster.read_log("server-0");
    assert!(log.contains("refused connection from 127.0.0.1"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raw_frame_without_the_handshake_gets_no_reply() {
    let cluster = Cluster::builder().servers(1).start();
    let addr = cluster.config().servers[0].addr;
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut wire = Vec::new();
    // A few pings, more than a proof's worth of bytes.
    for id in 1..=4 {
        let ping = Frame::request(Op::Ping, id, Cred::ROOT, Bytes::new(), Bytes::new());
        write_frame(&mut wire, &ping).await.unwrap();
    }
    s.write_all(&wire).await.unwrap();
    // The server sends its nonce, then the refusal byte, then closes: never a
    // frame. (A reset may cut the tail short; whatever arrives is a prefix.)
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await {
            Err(_) => panic!("the server neither refused nor closed: {got:02x?}"),
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
    assert!(
        got.len() <= 33,
        "more than a nonce and a verdict: {got:02x?}"
    );
    if got.len() == 33 {
        assert_eq!(got[32], 0, "the verdict is a refusal");
    }
}

#[test]
fn shoal_up_makes_a_private_secret_file() {
    let dir = tempfile::Builder::new()
        .prefix("shoal-auth-up-")
        .tempdir()
        .unwrap();
    let data = dir.path().join("cluster");
    let up = Command::new(shoal_bin())
        .args(["up", "--servers", "2", "--data"])
        .arg(&data)
        .arg("--detach")
        .output()
        .unwrap();
    let down = || {
        Command::new(shoal_bin())
            .args(["down", "--data"])
            .arg(&data)
            .output()
            .unwrap()
    };
    if !up.status.success() {
        down();
        panic!(
            "shoal up failed: {}{}",
            String::from_utf8_lossy(&up.stdout),
            String::from_utf8_lossy(&up.stderr)
        );
    }
    let secret = data.join("secret");
    let mode = std::fs::metadata(&secret).map(|m| m.permissions().mode());
    let text = std::fs::read_to_string(&secret).unwrap_or_default();
    let cluster_file = std::fs::read_to_string(data.join("cluster.toml")).unwrap_or_default();
    let down = down();
    assert!(down.status.success(), "{down:?}");
    assert_eq!(mode.unwrap() & 0o777, 0o600, "mode of {}", secret.display());
    assert_eq!(text.trim().len(), 64, "32 bytes, hex-encoded");
    assert!(text.trim().bytes().all(|b| b.is_ascii_hexdigit()));
    assert!(cluster_file.contains("secret_file"), "{cluster_file}");
}
