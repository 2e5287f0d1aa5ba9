//! TCP keepalive on a server's connections: a client machine that powers
//! off or drops off the network sends no FIN, and without probes its
//! connection, and what ends with it (its record locks, its leases), would
//! stay for ever. With them the kernel declares the peer gone after
//! [`IDLE`] without traffic and [`PROBES`] unanswered probes [`INTERVAL`]
//! apart, about 40 s, and the same bound holds for data sent and never
//! acknowledged (TCP_USER_TIMEOUT).

use std::time::Duration;

use socket2::{SockRef, TcpKeepalive};
use tokio::net::TcpStream;

pub const IDLE: Duration = Duration::from_secs(20);
pub const INTERVAL: Duration = Duration::from_secs(5);
pub const PROBES: u32 = 4;

/// Turns keepalive on for `stream`. A failure leaves a connection that
/// works, only noticed later if its peer vanishes: callers log it.
pub fn keep_alive(stream: &TcpStream) -> std::io::Result<()> {
    let sock = SockRef::from(stream);
    let probes = TcpKeepalive::new()
        .with_time(IDLE)
        .with_interval(INTERVAL)
        .with_retries(PROBES);
    sock.set_tcp_keepalive(&probes)?;
    sock.set_tcp_user_timeout(Some(IDLE + INTERVAL * PROBES))
}
