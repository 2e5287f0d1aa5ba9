//! Cluster authentication: a handshake before the first frame of every
//! connection (client to server and server to server).
//!
//! ```text
//! server -> client   32-byte random nonce
//! client -> server   1, then 32-byte HMAC-SHA256(secret, "shoal-auth-v1" || nonce)
//!               or   2, a u16 length (big-endian), a user credential and
//!                    its 32-byte proof (`credential`)
//! server -> client   1 byte: 1 accepted, 0 refused (then the server closes)
//! ```
//!
//! The secret never crosses the wire, and a fresh nonce per connection makes a
//! recorded proof useless for another one. A connection opened with the
//! secret may act for any user (the servers, the mount, root's programs); one
//! opened with a user credential only for the user it names ([`Peer`]). The server reads no frame before
//! the proof checks out. Each side bounds the handshake by
//! [`HANDSHAKE_TIMEOUT`], so a silent peer cannot hold a connection.
//!
//! The secret is the content of the cluster file's `secret_file` (made by
//! `shoal up`: 32 random bytes, hex-encoded, mode 0600), surrounding
//! whitespace trimmed. A cluster file without `secret_file` skips the
//! handshake on both sides: that is for scratch clusters on a trusted host
//! only, since anyone who can reach a port is then served.

use std::fmt;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::credential::{self, CredentialKey, Invalid, Issued};
use crate::error::{Errno, Result, ShoalError};
pub use crate::secret::{nonce, Secret, NONCE_LEN, PROOF_LEN};
use crate::Cred;

/// The longest a handshake may take on either side.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

const ACCEPTED: u8 = 1;
const REFUSED: u8 = 0;
const BY_SECRET: u8 = 1;
const BY_CREDENTIAL: u8 = 2;

/// Who opened a connection, as the handshake proved it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Peer {
    /// A holder of the cluster secret (or anyone, on a cluster without
    /// one): may act for any user.
    Member,
    /// A process with a user credential: may act only as `cred`, until
    /// `expires_s` (seconds since the Unix epoch).
    User { cred: Cred, expires_s: u64 },
}

/// What the connecting side proves.
#[derive(Clone, Copy, Debug)]
pub enum Proof<'a> {
    Secret(&'a Secret),
    Credential(&'a Issued),
}

/// Why a server did not accept a connection.
#[derive(Debug)]
pub enum Refusal {
    /// The peer's proof did not match the secret.
    WrongSecret,
    /// The peer's user credential did not check out.
    Credential(Invalid),
    /// The peer closed before sending a proof (e.g. a port probe).
    Closed,
    /// The peer failed or stayed silent before proving anything.
    NoProof(String),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::WrongSecret => f.write_str("wrong cluster secret"),
            Refusal::Credential(why) => write!(f, "{why}"),
            Refusal::Closed => f.write_str("closed before proving the cluster secret"),
            Refusal::NoProof(why) => write!(f, "no proof of the cluster secret: {why}"),
        }
    }
}

/// The server's side: sends a nonce, checks the proof (of the secret, or a
/// user credential under `key`), answers accepted or refused. On `Err` the
/// caller closes the connection without reading a frame.
pub async fn server_handshake<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    secret: &Secret,
    key: &CredentialKey,
) -> std::result::Result<Peer, Refusal> {
    let lost = |e: std::io::Error| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            Refusal::Closed
        } else {
            Refusal::NoProof(e.to_string())
        }
    };
    let exchange = async {
        let nonce = nonce();
        stream.write_all(&nonce).await.map_err(lost)?;
        stream.flush().await.map_err(lost)?;
        let mut by = [0u8; 1];
        stream.read_exact(&mut by).await.map_err(lost)?;
        let verdict = match by[0] {
            BY_SECRET => {
                let mut proof = [0u8; PROOF_LEN];
                stream.read_exact(&mut proof).await.map_err(lost)?;
                if secret.verify(&nonce, &proof) {
                    Ok(Peer::Member)
                } else {
                    Err(Refusal::WrongSecret)
                }
            }
            BY_CREDENTIAL => {
                let mut len = [0u8; 2];
                stream.read_exact(&mut len).await.map_err(lost)?;
                let len = u16::from_be_bytes(len) as usize;
                if len > credential::MAX_LEN {
                    return Err(Refusal::Credential(Invalid::Malformed));
                }
                let mut bytes = vec![0u8; len + PROOF_LEN];
                stream.read_exact(&mut bytes).await.map_err(lost)?;
                let (bytes, proof) = bytes.split_at(len);
                key.check(bytes, &nonce, proof, crate::time::now_s())
                    .map(|c| Peer::User {
                        cred: c.cred,
                        expires_s: c.expires_s,
                    })
                    .map_err(Refusal::Credential)
            }
            other => Err(Refusal::NoProof(format!("unknown proof kind {other}"))),
        };
        let answer = if verdict.is_ok() { ACCEPTED } else { REFUSED };
        let sent = stream.write_all(&[answer]).await;
        let _ = stream.flush().await;
        if verdict.is_ok() {
            sent.map_err(lost)?;
        }
        verdict
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, exchange)
        .await
        .map_err(|_| Refusal::NoProof(format!("silent for {HANDSHAKE_TIMEOUT:?}")))?
}

/// The connecting side: answers the server's nonce. `who` names the server
/// in errors ("server 0 at 127.0.0.1:7070"). A refusal is EACCES.
pub async fn client_handshake<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    proof: Proof<'_>,
    who: &str,
) -> Result<()> {
    let lost = |e: std::io::Error| {
        ShoalError::new(
            Errno::EIO,
            format!("{who}: authentication handshake failed: {e}"),
        )
    };
    let exchange = async {
        let mut nonce = [0u8; NONCE_LEN];
        stream.read_exact(&mut nonce).await.map_err(lost)?;
        let answer = match proof {
            Proof::Secret(secret) => [&[BY_SECRET][..], &secret.proof(&nonce)].concat(),
            Proof::Credential(issued) => {
                let bytes = issued.credential.encode();
                let len = (bytes.len() as u16).to_be_bytes();
                [&[BY_CREDENTIAL][..], &len, &bytes, &issued.proof(&nonce)].concat()
            }
        };
        stream.write_all(&answer).await.map_err(lost)?;
        stream.flush().await.map_err(lost)?;
        let mut verdict = [0u8; 1];
        match stream.read_exact(&mut verdict).await {
            Ok(_) if verdict[0] == ACCEPTED => Ok(()),
            Ok(_) => Err(refused(who, proof)),
            // A server that closes instead of answering refused us too.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(refused(who, proof)),
            Err(e) => Err(lost(e)),
        }
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, exchange)
        .await
        .map_err(|_| {
            ShoalError::new(
                Errno::ETIMEDOUT,
                format!("{who}: no authentication handshake within {HANDSHAKE_TIMEOUT:?}"),
            )
        })?
}

fn refused(who: &str, proof: Proof) -> ShoalError {
    let what = match proof {
        Proof::Secret(_) => "the cluster secret (check secret_file)".to_string(),
        Proof::Credential(i) => format!(
            "the user credential for uid {} (expired, or not issued by this cluster's broker)",
            i.credential.cred.uid
        ),
    };
    ShoalError::new(Errno::EACCES, format!("{who} refused {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn handshake_accepts_the_secret_and_refuses_another() {
        for (server_key, client_key, ok) in [("s", "s", true), ("s", "t", false)] {
            let (mut c, mut s) = tokio::io::duplex(1024);
            let server_secret = Secret::new(server_key.as_bytes()).unwrap();
            let client_secret = Secret::new(client_key.as_bytes()).unwrap();
            let server = tokio::spawn(async move {
                let key = CredentialKey::derive(&server_secret);
                let r = server_handshake(&mut s, &server_secret, &key).await;
                drop(s);
                r
            });
            let client = client_handshake(&mut c, Proof::Secret(&client_secret), "server 0").await;
            let server = server.await.unwrap();
            assert_eq!(client.is_ok(), ok);
            assert_eq!(server.is_ok(), ok);
            if ok {
                assert_eq!(server.unwrap(), Peer::Member);
                continue;
            }
            if !ok {
                assert_eq!(client.unwrap_err().errno, Errno::EACCES);
                assert!(matches!(server, Err(Refusal::WrongSecret)));
            }
        }
    }

    #[tokio::test]
    async fn a_user_credential_opens_a_connection_for_its_user_only_while_it_lives() {
        let secret = Secret::new(b"s").unwrap();
        let key = CredentialKey::derive(&secret);
        let user = Cred::new(1000, 1000).with_groups(&[20]);
        let now = crate::time::now_s();
        for (issuer, expires_s, ok) in [
            (key.clone(), now + 600, true),
            (key.clone(), now - 1, false),
            (
                CredentialKey::derive(&Secret::new(b"t").unwrap()),
                now + 600,
                false,
            ),
        ] {
            let issued = issuer.issue(user, expires_s);
            let (mut c, mut s) = tokio::io::duplex(1024);
            let (secret, key) = (secret.clone(), key.clone());
            let server = tokio::spawn(async move {
                let r = server_handshake(&mut s, &secret, &key).await;
                drop(s);
                r
            });
            let client = client_handshake(&mut c, Proof::Credential(&issued), "server 0").await;
            let server = server.await.unwrap();
            assert_eq!(client.is_ok(), ok, "{expires_s}");
            match server {
                Ok(peer) => assert_eq!(
                    peer,
                    Peer::User {
                        cred: user,
                        expires_s
                    }
                ),
                Err(e) => {
                    assert!(!ok);
                    assert!(matches!(e, Refusal::Credential(_)), "{e}");
                    assert_eq!(client.unwrap_err().errno, Errno::EACCES);
                }
            }
        }
    }
}
