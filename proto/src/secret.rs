//! The cluster secret: what every server and the clients that hold it
//! share (the content of the cluster file's `secret_file`), and the tags
//! made with it: the handshake's proof (`auth`), capabilities
//! (`capability`), the key of user credentials (`credential`).

use std::fmt;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

use crate::error::{Result, ShoalError};

/// Bytes of the server's nonce.
pub const NONCE_LEN: usize = 32;
/// Bytes of the client's proof (an HMAC-SHA256 tag).
pub const PROOF_LEN: usize = 32;
/// Domain separation for the proof.
pub const CONTEXT: &[u8] = b"shoal-auth-v1";

/// The cluster secret. Its bytes are never printed.
#[derive(Clone)]
pub struct Secret(Arc<[u8]>, Arc<Hmac<Sha256>>);

impl PartialEq for Secret {
    fn eq(&self, other: &Secret) -> bool {
        self.0 == other.0
    }
}

impl Eq for Secret {}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl Secret {
    pub fn new(bytes: &[u8]) -> Result<Secret> {
        if bytes.is_empty() {
            return Err(ShoalError::invalid("the cluster secret is empty"));
        }
        // Keyed once: every tag (a proof, each capability a server grants
        // or checks) starts from a copy instead of hashing the key again.
        let keyed = Hmac::<Sha256>::new_from_slice(bytes).expect("HMAC takes any key length");
        Ok(Secret(bytes.into(), Arc::new(keyed)))
    }

    /// Reads a secret file (surrounding whitespace is not part of the secret).
    pub fn load(path: &Path) -> Result<Secret> {
        let text = std::fs::read(path)
            .map_err(|e| ShoalError::from(e).context(format!("secret_file {}", path.display())))?;
        Secret::new(text.trim_ascii())
            .map_err(|e| e.context(format!("secret_file {}", path.display())))
    }

    /// Writes a new random secret (32 bytes, hex-encoded) to `path`, created
    /// with mode 0600; fails if `path` exists.
    pub fn create_file(path: &Path) -> Result<Secret> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut raw = [0u8; 32];
        rand::rng().fill_bytes(&mut raw);
        let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| ShoalError::from(e).context(format!("creating {}", path.display())))?;
        file.write_all(format!("{hex}\n").as_bytes())
            .and_then(|_| file.sync_all())
            .map_err(|e| ShoalError::from(e).context(format!("writing {}", path.display())))?;
        Secret::new(hex.as_bytes())
    }

    /// An HMAC-SHA256 keyed by the secret, started with `context` so that
    /// a tag made for one purpose (the handshake, a capability) is never
    /// valid for another.
    pub(crate) fn keyed(&self, context: &[u8]) -> Hmac<Sha256> {
        let mut mac = (*self.1).clone();
        mac.update(context);
        mac
    }

    fn mac(&self, nonce: &[u8; NONCE_LEN]) -> Hmac<Sha256> {
        let mut mac = self.keyed(CONTEXT);
        mac.update(nonce);
        mac
    }

    /// The proof that answers `nonce`.
    pub fn proof(&self, nonce: &[u8; NONCE_LEN]) -> [u8; PROOF_LEN] {
        self.mac(nonce).finalize().into_bytes().into()
    }

    /// Whether `proof` answers `nonce` (constant time).
    pub fn verify(&self, nonce: &[u8; NONCE_LEN], proof: &[u8]) -> bool {
        self.mac(nonce).verify_slice(proof).is_ok()
    }
}

/// A fresh random nonce.
pub fn nonce() -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    rand::rng().fill_bytes(&mut n);
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_depend_on_secret_and_nonce() {
        let a = Secret::new(b"alpha").unwrap();
        let b = Secret::new(b"beta").unwrap();
        let n1 = nonce();
        let n2 = nonce();
        assert!(a.verify(&n1, &a.proof(&n1)));
        assert!(!a.verify(&n1, &b.proof(&n1)));
        assert!(!a.verify(&n2, &a.proof(&n1)));
        assert!(!a.verify(&n1, &a.proof(&n1)[..31]));
        assert!(Secret::new(b"").is_err());
    }

    #[test]
    fn created_secret_files_are_private_and_load_back() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("shoal-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("secret");
        let _ = std::fs::remove_file(&path);
        let made = Secret::create_file(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(Secret::load(&path).unwrap(), made);
        assert!(Secret::create_file(&path).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
