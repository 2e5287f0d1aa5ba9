//! `shoal up`'s choice of ports: each server its own, below the kernel's
//! ephemeral range (where no outgoing connection can take it before the
//! server binds it), and a cluster file in which two servers share a port,
//! as one written before that rule could be, repaired rather than started
//! into EADDRINUSE.

use std::path::Path;
use std::process::{Command, Output};

use shoal_net::ports::{ephemeral_range, LOWEST};
use shoal_proto::cluster::ClusterConfig;
use shoal_tests::shoal_bin;

fn shoal(args: &[&str], data: &Path) -> Output {
    Command::new(shoal_bin())
        .args(args)
        .arg("--data")
        .arg(data)
        .output()
        .unwrap()
}

/// Starts the cluster in `data`, or panics with `up`'s output after
/// stopping whatever it started.
fn up(data: &Path) {
    let out = shoal(&["up", "--servers", "3", "--detach"], data);
    if !out.status.success() {
        shoal(&["down"], data);
        panic!(
            "shoal up failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn down(data: &Path) {
    let out = shoal(&["down"], data);
    assert!(out.status.success(), "{out:?}");
}

fn ports(data: &Path) -> Vec<u16> {
    let config = ClusterConfig::load(&data.join("cluster.toml")).unwrap();
    config.servers.iter().map(|s| s.addr.port()).collect()
}

fn assert_distinct(ports: &[u16]) {
    let mut sorted = ports.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), ports.len(), "ports {ports:?}");
}

#[test]
fn each_server_gets_its_own_port_and_a_shared_one_is_repaired() {
    let dir = tempfile::Builder::new()
        .prefix("shoal-local-cluster-")
        .tempdir()
        .unwrap();
    let data = dir.path().join("cluster");

    up(&data);
    let first = ports(&data);
    down(&data);
    assert_distinct(&first);
    let low = ephemeral_range().0;
    if low > LOWEST {
        for p in &first {
            assert!(
                *p < low,
                "port {p} lies in the ephemeral range (from {low})"
            );
        }
    }

    // Server 1 made to share server 0's port, as a file from before could.
    let path = data.join("cluster.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let shared = text.replace(
        &format!("127.0.0.1:{}", first[1]),
        &format!("127.0.0.1:{}", first[0]),
    );
    assert_ne!(text, shared);
    std::fs::write(&path, shared).unwrap();

    up(&data);
    let again = ports(&data);
    let ls = Command::new(shoal_bin())
        .args(["ls", "--config"])
        .arg(&path)
        .arg("/")
        .output()
        .unwrap();
    down(&data);
    assert_distinct(&again);
    assert!(ls.status.success(), "the repaired cluster answers: {ls:?}");
}
