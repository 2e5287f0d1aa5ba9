//! The credential broker of a client node (`shoal_proto::credential`): a
//! Unix socket where any local process may ask for a user credential, and
//! gets one for the user the kernel says it is, never for another.
//!
//! The mount serves it (`shoal mount`), or `shoal agent` on a node without
//! one; libshoal asks it when the process cannot read the cluster secret.
//!
//! ```text
//! process -> broker   1 byte: 1 (a credential, please)
//! broker -> process   1 byte: 1, u16 length, the credential's key and the
//!                     credential (`Issued::encode`)
//!                  or 1 byte: 0, u16 length, a message saying why not
//! ```
//!
//! Who asks is read from the socket, not from anything the process says:
//! `SO_PEERCRED` gives the effective uid and gid and `SO_PEERGROUPS` the
//! supplementary groups the process had when it connected, both recorded
//! by the kernel then, so a process cannot name another user and a pid
//! reused meanwhile changes nothing.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;

use shoal_proto::credential::{CredentialKey, Issued};
use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::Cred;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

const ASK: u8 = 1;
const ISSUED: u8 = 1;
const REFUSED: u8 = 0;
/// The longest an exchange may take on either side.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(5);

/// Listens at `path`: its directory is made (mode 0755) if missing, a
/// socket left there by a broker that is gone is replaced, and the socket
/// is open to every local user (mode 0666): a credential only ever names
/// its asker. EBUSY if a live broker already listens there.
pub fn bind(path: &Path) -> Result<UnixListener> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let named = |e: std::io::Error| {
        ShoalError::from(e).context(format!("broker socket {}", path.display()))
    };
    if let Some(dir) = path.parent().filter(|d| !d.exists()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(named)?;
    }
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(ShoalError::new(
                Errno::EBUSY,
                format!("a broker already listens at {}", path.display()),
            ));
        }
        std::fs::remove_file(path).map_err(named)?;
    }
    let listener = UnixListener::bind(path).map_err(named)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).map_err(named)?;
    Ok(listener)
}

/// Serves credentials made with `key`, each living `lifetime`, until the
/// task is dropped.
pub async fn serve(listener: UnixListener, key: CredentialKey, lifetime: Duration) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let key = key.clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(EXCHANGE_TIMEOUT, answer(stream, &key, lifetime))
                        .await;
                });
            }
            Err(e) => {
                tracing::warn!("credential broker: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn answer(mut stream: UnixStream, key: &CredentialKey, lifetime: Duration) {
    let mut ask = [0u8; 1];
    if stream.read_exact(&mut ask).await.is_err() {
        return;
    }
    let reply = match who_asks(&stream) {
        Ok(cred) if ask[0] == ASK => {
            let expires_s = shoal_proto::time::now_s() + lifetime.as_secs();
            tracing::debug!("credential broker: issued one for {cred:?}");
            framed(ISSUED, &key.issue(cred, expires_s).encode())
        }
        Ok(_) => framed(REFUSED, format!("unknown request {}", ask[0]).as_bytes()),
        Err(e) => framed(REFUSED, format!("cannot tell who asks: {e}").as_bytes()),
    };
    let _ = stream.write_all(&reply).await;
}

fn framed(status: u8, bytes: &[u8]) -> Vec<u8> {
    let len = (bytes.len().min(u16::MAX as usize) as u16).to_be_bytes();
    [
        &[status][..],
        &len,
        &bytes[..bytes.len().min(u16::MAX as usize)],
    ]
    .concat()
}

/// The effective uid, gid and supplementary groups of the process at the
/// other end of `stream`, as the kernel recorded them when it connected.
fn who_asks(stream: &UnixStream) -> std::io::Result<Cred> {
    let peer = stream.peer_cred()?;
    let fd = stream.as_raw_fd();
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut len = (groups.len() * std::mem::size_of::<libc::gid_t>()) as libc::socklen_t;
        // SAFETY: the buffer holds `len` bytes, which the kernel fills.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if r == 0 {
            groups.truncate(len as usize / std::mem::size_of::<libc::gid_t>());
            break;
        }
        let e = std::io::Error::last_os_error();
        // Too small: the kernel said how many it has.
        let wanted = len as usize / std::mem::size_of::<libc::gid_t>();
        if e.raw_os_error() != Some(libc::ERANGE) || wanted <= groups.len() {
            return Err(e);
        }
        groups.resize(wanted, 0);
    }
    Ok(Cred::new(peer.uid(), peer.gid()).with_groups(&groups))
}

/// `SO_PEERGROUPS` (Linux 4.13), which the libc crate exports only for
/// some targets.
const SO_PEERGROUPS: libc::c_int = 59;

/// Asks the broker at `path` for a credential for this process (blocking:
/// the library asks from its caller's thread, once per lifetime).
pub fn ask(path: &Path) -> Result<Issued> {
    let unreachable = |e: std::io::Error| {
        ShoalError::new(
            Errno::EACCES,
            format!(
                "no credential broker at {} (it runs in `shoal mount` and `shoal agent`): {e}",
                path.display()
            ),
        )
    };
    let mut s = std::os::unix::net::UnixStream::connect(path).map_err(unreachable)?;
    s.set_read_timeout(Some(EXCHANGE_TIMEOUT))
        .map_err(unreachable)?;
    s.set_write_timeout(Some(EXCHANGE_TIMEOUT))
        .map_err(unreachable)?;
    s.write_all(&[ASK]).map_err(unreachable)?;
    let mut head = [0u8; 3];
    s.read_exact(&mut head).map_err(unreachable)?;
    let mut body = vec![0u8; u16::from_be_bytes([head[1], head[2]]) as usize];
    s.read_exact(&mut body).map_err(unreachable)?;
    match head[0] {
        ISSUED => Issued::decode(&body).ok_or_else(|| {
            ShoalError::protocol(format!(
                "the credential broker at {} sent a malformed credential",
                path.display()
            ))
        }),
        _ => Err(ShoalError::new(
            Errno::EACCES,
            format!(
                "the credential broker at {} refused: {}",
                path.display(),
                String::from_utf8_lossy(&body)
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shoal_proto::auth::{nonce, Secret};

    #[tokio::test]
    async fn the_broker_issues_this_process_a_credential_for_itself() {
        let dir = std::env::temp_dir().join(format!("shoal-broker-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("sub").join("broker.sock");
        let key = CredentialKey::derive(&Secret::new(b"s").unwrap());
        let listener = bind(&path).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o666);
        assert_eq!(bind(&path).unwrap_err().errno, Errno::EBUSY);
        let serving = tokio::spawn(serve(listener, key.clone(), Duration::from_secs(600)));
        let asked = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || ask(&path))
                .await
                .unwrap()
        };
        let issued = asked.unwrap();
        // SAFETY: no arguments.
        let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
        assert_eq!(
            (issued.credential.cred.uid, issued.credential.cred.gid),
            (euid, egid)
        );
        let n = nonce();
        let now = shoal_proto::time::now_s();
        let checked = key
            .check(&issued.credential.encode(), &n, &issued.proof(&n), now)
            .unwrap();
        assert!(checked.expires_s > now + 590 && checked.expires_s <= now + 600);
        serving.abort();
        // A socket left behind by a broker that is gone is taken over.
        let _ = serving.await;
        bind(&path).unwrap();
        assert_eq!(
            tokio::task::spawn_blocking(move || ask(&dir.join("none.sock")))
                .await
                .unwrap()
                .unwrap_err()
                .errno,
            Errno::EACCES
        );
    }
}
