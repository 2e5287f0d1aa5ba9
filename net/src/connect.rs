//! Opening a connection to a server, for a client and for a server asking
//! its peers alike: connect within a time limit, set the socket options
//! every connection of Shoal's wants, and prove the cluster secret
//! or a user credential (`shoal_proto::auth`) before the first frame.

use std::net::SocketAddr;
use std::time::Duration;

use shoal_proto::auth::{client_handshake, Proof};
use shoal_proto::error::{Errno, Result, ShoalError};
use tokio::net::TcpStream;

/// Connects to server `server` at `addr`, failing with ETIMEDOUT if it takes
/// longer than `timeout` and EHOSTUNREACH if the connection is refused;
/// sets TCP_NODELAY (a small request goes out at once); with a `proof`
/// (the cluster secret, or a user credential), runs the handshake (a
/// refusal is EACCES).
pub async fn connect(
    server: u32,
    addr: SocketAddr,
    timeout: Duration,
    proof: Option<Proof<'_>>,
) -> Result<TcpStream> {
    let mut stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
        .await
        .map_err(|_| {
            ShoalError::new(
                Errno::ETIMEDOUT,
                format!("server {server} at {addr} does not answer"),
            )
        })?
        .map_err(|e| {
            ShoalError::new(
                Errno::EHOSTUNREACH,
                format!("server {server} at {addr} does not answer: {e}"),
            )
        })?;
    stream.set_nodelay(true)?;
    if let Some(proof) = proof {
        client_handshake(&mut stream, proof, &format!("server {server} at {addr}")).await?;
    }
    Ok(stream)
}
