//! User credentials: how a process that does not hold the cluster secret
//! (an unprivileged user's program under libshoal) proves to the servers
//! which user it is, and can act only as that user.
//!
//! A broker on the process's node (the mount, or `shoal agent`) holds the
//! secret. It learns the asking process's effective uid, gid and groups from
//! the kernel (`shoal_net::broker`) and issues a credential:
//!
//! ```text
//! body = 1 u8 | uid u32 | gid u32 | n u8 | groups u32 x n | expires_s u64 |
//!        serial [u8; 16]                                  (all big-endian)
//! K    = HMAC-SHA256(secret, "shoal-credential-key-v1")
//! tag  = HMAC-SHA256(K, "tag" | body)
//! key  = HMAC-SHA256(K, "key" | body | tag)
//! ```
//!
//! The process gets `body | tag` (the credential) and `key` (its key), and
//! opens each connection by sending the credential and
//! `HMAC-SHA256(key, "shoal-auth-user-v1" | nonce)` for the server's nonce
//! (`auth`). Every server derives `K` from the secret, so it checks a
//! credential without asking anyone: the tag, the expiry, and the proof.
//!
//! What it protects against:
//! - a user claiming another uid or group: a credential names them, and no
//!   one without `K` can make or change one (a server refuses any request
//!   of the connection that acts for someone else);
//! - a credential seen on the wire, used again: the proof answers one
//!   connection's nonce, and `key` never crosses the wire;
//! - a credential kept (or stolen) for later: it expires after
//!   `credential_ttl_s`, and a connection opened with it ends then.
//!
//! What it does not: root on a client node (it can read the secret), a
//! process handing its own credential and key to another (which then acts
//! as the first user, not as anyone else), and an active attacker on the
//! network (connections are not encrypted, as with the cluster secret).
//! Servers' and brokers' clocks must agree to well within the lifetime.

use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

use crate::cred::{Cred, MAX_GROUPS};
use crate::secret::{Secret, NONCE_LEN, PROOF_LEN};

/// Bytes of a credential's key and of a proof made with it.
pub const KEY_LEN: usize = 32;
/// The longest a credential may live, whatever a broker says: a server
/// refuses one that expires later than this from now.
pub const MAX_LIFETIME_S: u64 = 24 * 3600;
/// The longest encoded credential.
pub const MAX_LEN: usize = 1 + 4 + 4 + 1 + 4 * MAX_GROUPS + 8 + SERIAL_LEN + TAG_LEN;

const VERSION: u8 = 1;
const SERIAL_LEN: usize = 16;
const TAG_LEN: usize = 32;
const KEY_CONTEXT: &[u8] = b"shoal-credential-key-v1";
const PROOF_CONTEXT: &[u8] = b"shoal-auth-user-v1";

/// The key credentials are made and checked with, derived from the cluster
/// secret: what a broker and every server hold.
#[derive(Clone)]
pub struct CredentialKey([u8; 32]);

impl std::fmt::Debug for CredentialKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CredentialKey(..)")
    }
}

/// A credential as it travels: who, until when, and the tag that says a
/// broker of this cluster issued it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credential {
    pub cred: Cred,
    /// Seconds since the Unix epoch.
    pub expires_s: u64,
    serial: [u8; SERIAL_LEN],
    tag: [u8; TAG_LEN],
}

/// What a broker hands a process: its credential and the credential's key,
/// which proves the process holds it without sending it.
#[derive(Clone)]
pub struct Issued {
    pub credential: Credential,
    key: [u8; KEY_LEN],
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Issued({:?}, key ..)", self.credential)
    }
}

/// Why a server refused a credential.
#[derive(Debug, PartialEq, Eq)]
pub enum Invalid {
    Malformed,
    /// Not issued by a broker of this cluster, or changed since.
    Forged,
    Expired,
    /// Expires further ahead than [`MAX_LIFETIME_S`].
    TooLong,
    /// The proof does not answer the nonce with the credential's key.
    WrongProof,
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Invalid::Malformed => "a malformed user credential",
            Invalid::Forged => "a user credential this cluster did not issue",
            Invalid::Expired => "an expired user credential",
            Invalid::TooLong => "a user credential that lives too long",
            Invalid::WrongProof => "a user credential without its key",
        })
    }
}

impl CredentialKey {
    pub fn derive(secret: &Secret) -> CredentialKey {
        CredentialKey(secret.keyed(KEY_CONTEXT).finalize().into_bytes().into())
    }

    fn mac(&self, context: &[u8]) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(context);
        mac
    }

    fn key_of(&self, body: &[u8], tag: &[u8]) -> [u8; KEY_LEN] {
        let mut mac = self.mac(b"key");
        mac.update(body);
        mac.update(tag);
        mac.finalize().into_bytes().into()
    }

    /// A credential for `cred`, expiring at `expires_s`, and its key.
    pub fn issue(&self, cred: Cred, expires_s: u64) -> Issued {
        let mut serial = [0u8; SERIAL_LEN];
        rand::rng().fill_bytes(&mut serial);
        let mut credential = Credential {
            cred,
            expires_s,
            serial,
            tag: [0; TAG_LEN],
        };
        let body = credential.body();
        let mut mac = self.mac(b"tag");
        mac.update(&body);
        credential.tag = mac.finalize().into_bytes().into();
        let key = self.key_of(&body, &credential.tag);
        Issued { credential, key }
    }

    /// The credential `bytes` hold, if this cluster issued it, it has not
    /// expired at `now_s`, and `proof` answers `nonce` with its key.
    pub fn check(
        &self,
        bytes: &[u8],
        nonce: &[u8; NONCE_LEN],
        proof: &[u8],
        now_s: u64,
    ) -> Result<Credential, Invalid> {
        let credential = Credential::decode(bytes).ok_or(Invalid::Malformed)?;
        let body = credential.body();
        let mut mac = self.mac(b"tag");
        mac.update(&body);
        mac.verify_slice(&credential.tag)
            .map_err(|_| Invalid::Forged)?;
        if credential.expires_s <= now_s {
            return Err(Invalid::Expired);
        }
        if credential.expires_s > now_s.saturating_add(MAX_LIFETIME_S) {
            return Err(Invalid::TooLong);
        }
        let key = self.key_of(&body, &credential.tag);
        proof_mac(&key, nonce)
            .verify_slice(proof)
            .map_err(|_| Invalid::WrongProof)?;
        Ok(credential)
    }
}

fn proof_mac(key: &[u8; KEY_LEN], nonce: &[u8; NONCE_LEN]) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(PROOF_CONTEXT);
    mac.update(nonce);
    mac
}

impl Credential {
    fn body(&self) -> Vec<u8> {
        let groups = self.cred.groups();
        let mut b = Vec::with_capacity(MAX_LEN);
        b.push(VERSION);
        b.extend_from_slice(&self.cred.uid.to_be_bytes());
        b.extend_from_slice(&self.cred.gid.to_be_bytes());
        b.push(groups.len() as u8);
        for g in groups {
            b.extend_from_slice(&g.to_be_bytes());
        }
        b.extend_from_slice(&self.expires_s.to_be_bytes());
        b.extend_from_slice(&self.serial);
        b
    }

    /// The credential as it travels: its body, then its tag.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = self.body();
        b.extend_from_slice(&self.tag);
        b
    }

    /// A credential as [`Credential::encode`] wrote it, or None.
    pub fn decode(b: &[u8]) -> Option<Credential> {
        let mut r = Reader(b);
        if r.take::<1>()?[0] != VERSION {
            return None;
        }
        let uid = u32::from_be_bytes(r.take()?);
        let gid = u32::from_be_bytes(r.take()?);
        let n = r.take::<1>()?[0] as usize;
        if n > MAX_GROUPS {
            return None;
        }
        let groups = (0..n)
            .map(|_| r.take().map(u32::from_be_bytes))
            .collect::<Option<Vec<u32>>>()?;
        let cred = Cred::from_wire(uid, gid, &groups)?;
        let expires_s = u64::from_be_bytes(r.take()?);
        let serial = r.take()?;
        let tag = r.take()?;
        r.0.is_empty().then_some(Credential {
            cred,
            expires_s,
            serial,
            tag,
        })
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
}

impl Issued {
    /// The proof that answers a server's `nonce`.
    pub fn proof(&self, nonce: &[u8; NONCE_LEN]) -> [u8; PROOF_LEN] {
        proof_mac(&self.key, nonce).finalize().into_bytes().into()
    }

    /// As a broker hands it over: the key, then the credential.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = self.key.to_vec();
        b.extend_from_slice(&self.credential.encode());
        b
    }

    pub fn decode(b: &[u8]) -> Option<Issued> {
        let (key, rest) = b.split_first_chunk::<KEY_LEN>()?;
        Some(Issued {
            key: *key,
            credential: Credential::decode(rest)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret::nonce;

    const NOW: u64 = 1_800_000_000;

    fn key(s: &str) -> CredentialKey {
        CredentialKey::derive(&Secret::new(s.as_bytes()).unwrap())
    }

    #[test]
    fn a_credential_checks_out_with_its_proof_and_round_trips() {
        let k = key("cluster");
        let who = Cred::new(1000, 100).with_groups(&[5, 7]);
        let issued = k.issue(who, NOW + 600);
        let n = nonce();
        let bytes = issued.credential.encode();
        assert!(bytes.len() <= MAX_LEN);
        let got = k.check(&bytes, &n, &issued.proof(&n), NOW).unwrap();
        assert_eq!(got.cred, who);
        assert_eq!(got.expires_s, NOW + 600);
        let again = Issued::decode(&issued.encode()).unwrap();
        assert_eq!(again.credential, issued.credential);
        assert_eq!(again.proof(&n), issued.proof(&n));
    }

    #[test]
    fn forged_expired_replayed_and_keyless_credentials_are_refused() {
        let k = key("cluster");
        let issued = k.issue(Cred::new(1000, 1000), NOW + 600);
        let n = nonce();
        let proof = issued.proof(&n);
        let bytes = issued.credential.encode();
        // Another cluster's broker.
        assert_eq!(
            key("other").check(&bytes, &n, &proof, NOW),
            Err(Invalid::Forged)
        );
        // Another uid written over this one's (byte 1..5 is the uid).
        let mut root = bytes.clone();
        root[1..5].copy_from_slice(&0u32.to_be_bytes());
        assert_eq!(k.check(&root, &n, &proof, NOW), Err(Invalid::Forged));
        // A later expiry written in.
        let mut later = bytes.clone();
        let at = 1 + 4 + 4 + 1;
        later[at..at + 8].copy_from_slice(&(NOW + 7200).to_be_bytes());
        assert_eq!(k.check(&later, &n, &proof, NOW), Err(Invalid::Forged));
        // Used after it expired.
        assert_eq!(
            k.check(&bytes, &n, &proof, NOW + 600),
            Err(Invalid::Expired)
        );
        // A proof recorded for another connection's nonce.
        assert_eq!(
            k.check(&bytes, &nonce(), &proof, NOW),
            Err(Invalid::WrongProof)
        );
        // Too long a life, even if a broker signed it.
        let long = k.issue(Cred::new(1000, 1000), NOW + MAX_LIFETIME_S + 1);
        assert_eq!(
            k.check(&long.credential.encode(), &n, &long.proof(&n), NOW),
            Err(Invalid::TooLong)
        );
        assert_eq!(
            k.check(&bytes[..10], &n, &proof, NOW),
            Err(Invalid::Malformed)
        );
        assert!(Credential::decode(&[bytes.as_slice(), &[0]].concat()).is_none());
    }
}
