//! Free loopback addresses for the servers of a local cluster (`shoal up`,
//! the test kit).
//!
//! Why not port 0: the kernel may give two binds to port 0 in a row the same
//! port once the first listener is closed, and `shoal up` closes each before
//! the servers start (it gave two servers of one cluster the same port, and
//! the fifth round of a 7-round `shoal bench ablation` failed with
//! EADDRINUSE); and such ports come from the ephemeral range, from which the
//! kernel also draws the local ports of outgoing connections, so any
//! connection on the machine may take one before its server binds it. Here
//! ports come from below the ephemeral range, where no outgoing connection
//! is given one, are checked free, and are never handed out twice by one
//! process.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::sync::Mutex;

use rand::Rng;

/// Lowest port chosen: below it lie the well-known and most registered ports.
pub const LOWEST: u16 = 10_000;
/// Random ports tried before letting the kernel choose.
const TRIES: usize = 200;
/// Linux's default ephemeral range, for when /proc does not say.
const DEFAULT_EPHEMERAL: (u16, u16) = (32_768, 60_999);

static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// A 127.0.0.1 address whose port is free now, below the kernel's ephemeral
/// range when there is room there, and not handed out before by this process.
pub fn free_loopback_addr() -> std::io::Result<SocketAddr> {
    let below = ephemeral_range().0;
    if below > LOWEST {
        let mut handed = HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner());
        let mut rng = rand::rng();
        for _ in 0..TRIES {
            let port = rng.random_range(LOWEST..below);
            let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
            if !handed.contains(&port) && TcpListener::bind(addr).is_ok() {
                handed.insert(port);
                return Ok(addr);
            }
        }
    }
    // No room below the ephemeral range, or all tried were taken.
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()
}

/// The kernel's range for the local ports of outgoing connections.
pub fn ephemeral_range() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| parse_range(&text))
        .unwrap_or(DEFAULT_EPHEMERAL)
}

fn parse_range(text: &str) -> Option<(u16, u16)> {
    let mut ports = text.split_whitespace().map(|p| p.parse::<u16>().ok());
    Some((ports.next()??, ports.next()??))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_free_distinct_and_below_the_ephemeral_range() {
        let below = ephemeral_range().0;
        let addrs: Vec<SocketAddr> = (0..50).map(|_| free_loopback_addr().unwrap()).collect();
        let ports: BTreeSet<u16> = addrs.iter().map(|a| a.port()).collect();
        assert_eq!(ports.len(), addrs.len(), "a port was handed out twice");
        for a in &addrs {
            assert!(a.ip().is_loopback());
            if below > LOWEST {
                assert!(
                    (LOWEST..below).contains(&a.port()),
                    "{a} is in the ephemeral range"
                );
            }
            TcpListener::bind(a).expect("the port handed out is free");
        }
    }

    #[test]
    fn the_range_file_is_read_and_garbage_refused() {
        assert_eq!(parse_range("32768\t60999\n"), Some((32768, 60999)));
        assert_eq!(parse_range("1024 65535"), Some((1024, 65535)));
        assert_eq!(parse_range("garbage"), None);
        assert_eq!(parse_range("70000 80000"), None);
        assert_eq!(parse_range(""), None);
    }
}
