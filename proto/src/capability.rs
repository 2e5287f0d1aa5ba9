//! Capabilities (`Capability` in shoal.proto): how the servers holding a
//! file's datafiles, which know nothing of its mode or owner, tell whether a
//! data request may proceed. The file's metafile server decides what the
//! user may do and signs it; the datafile servers check the signature.
//!
//! The tag is HMAC-SHA256 keyed by the cluster secret over
//!
//! ```text
//! "shoal-cap-v1" | file u64 | uid u32 | rights u32 | expires_ms i64 |
//! count u32 | datafiles u64 x count          (all big-endian)
//! ```
//!
//! so a client cannot widen one (more rights, another user, another
//! datafile, a later expiry) without the secret. Expiry is an absolute time:
//! the servers' clocks must agree to well within the lifetime (60 s).

use std::time::Duration;

use hmac::Mac;

use crate::error::{Errno, Result, ShoalError};
use crate::handle::Handle;
use crate::msg::Capability;
use crate::secret::Secret;

/// Right to read the file's data.
pub const READ: u32 = 1;
/// Right to write it (write, truncate).
pub const WRITE: u32 = 2;
/// What an fsync needs: any capability of the file, whatever its rights.
pub const ANY: u32 = 0;

const CONTEXT: &[u8] = b"shoal-cap-v1";

/// The name of a set of rights, for messages.
pub fn rights_name(rights: u32) -> &'static str {
    match rights & (READ | WRITE) {
        0 => "no access",
        READ => "read",
        WRITE => "write",
        _ => "read and write",
    }
}

fn tag(secret: &Secret, cap: &Capability) -> hmac::Hmac<sha2::Sha256> {
    let mut mac = secret.keyed(CONTEXT);
    mac.update(&cap.file.to_be_bytes());
    mac.update(&cap.uid.to_be_bytes());
    mac.update(&cap.rights.to_be_bytes());
    mac.update(&cap.expires_ms.to_be_bytes());
    mac.update(&(cap.datafiles.len() as u32).to_be_bytes());
    for d in &cap.datafiles {
        mac.update(&d.to_be_bytes());
    }
    mac
}

/// A signed capability for `uid` to use file `file`'s `datafiles` with
/// `rights`, valid for `lifetime` from `now_ms`.
pub fn issue(
    secret: &Secret,
    file: Handle,
    datafiles: &[Handle],
    uid: u32,
    rights: u32,
    now_ms: i64,
    lifetime: Duration,
) -> Capability {
    let mut cap = Capability {
        file,
        datafiles: datafiles.to_vec(),
        uid,
        rights,
        expires_ms: now_ms.saturating_add(lifetime.as_millis() as i64),
        mac: Default::default(),
    };
    cap.mac = tag(secret, &cap).finalize().into_bytes().to_vec().into();
    cap
}

/// Checks that `cap` lets `uid` use `datafile` with `need` (a right, or
/// [`ANY`]) at `now_ms`. Every refusal is EACCES naming the datafile and
/// what is wrong; an expired capability says so, and the client asks for a
/// fresh one.
pub fn check(
    secret: &Secret,
    cap: Option<&Capability>,
    uid: u32,
    datafile: Handle,
    need: u32,
    now_ms: i64,
) -> Result<()> {
    let refuse = |why: String| {
        Err(ShoalError::new(
            Errno::EACCES,
            format!("datafile {datafile:#x}: {why}"),
        ))
    };
    let Some(cap) = cap else {
        return refuse("no capability (the file's server issues one with its attributes)".into());
    };
    if tag(secret, cap).verify_slice(&cap.mac).is_err() {
        return refuse(format!(
            "the capability for file {:#x} is not signed with the cluster secret",
            cap.file
        ));
    }
    if now_ms >= cap.expires_ms {
        return refuse(format!(
            "the capability for file {:#x} expired {} ms ago",
            cap.file,
            now_ms - cap.expires_ms
        ));
    }
    if cap.uid != uid {
        return refuse(format!(
            "the capability for file {:#x} is for uid {}, not uid {uid}",
            cap.file, cap.uid
        ));
    }
    if !cap.datafiles.contains(&datafile) {
        return refuse(format!(
            "the capability for file {:#x} does not name this datafile",
            cap.file
        ));
    }
    if cap.rights & need != need {
        return refuse(format!(
            "uid {uid} may not {} file {:#x} (its capability grants {})",
            rights_name(need),
            cap.file,
            rights_name(cap.rights)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIFE: Duration = Duration::from_secs(60);

    fn refused(r: Result<()>, why: &str) {
        let e = r.expect_err(why);
        assert_eq!(e.errno, Errno::EACCES, "{why}");
        assert!(e.message.contains(why), "{}: {why}", e.message);
    }

    #[test]
    fn a_capability_is_good_for_its_user_datafiles_rights_and_time_only() {
        let secret = Secret::new(b"cluster").unwrap();
        let cap = issue(&secret, 10, &[11, 12], 1001, READ, 1_000, LIFE);
        let ok = |uid, df, need, now| check(&secret, Some(&cap), uid, df, need, now);
        ok(1001, 12, READ, 1_000).unwrap();
        ok(1001, 11, ANY, 60_999).unwrap();
        refused(ok(1001, 11, READ, 61_000), "expired");
        refused(ok(1002, 11, READ, 1_000), "is for uid 1001");
        refused(ok(1001, 13, READ, 1_000), "does not name");
        refused(ok(1001, 11, WRITE, 1_000), "may not write");
        refused(check(&secret, None, 1001, 11, READ, 1_000), "no capability");
    }

    #[test]
    fn changing_any_field_or_the_key_breaks_the_signature() {
        let secret = Secret::new(b"cluster").unwrap();
        let cap = issue(&secret, 10, &[11], 1001, READ, 1_000, LIFE);
        let edits: [fn(&mut Capability); 5] = [
            |c| c.rights |= WRITE,
            |c| c.uid = 1002,
            |c| c.datafiles.push(12),
            |c| c.expires_ms += 1,
            |c| c.file = 20,
        ];
        for edit in edits {
            let mut forged = cap.clone();
            edit(&mut forged);
            let df = *forged.datafiles.last().unwrap();
            refused(
                check(&secret, Some(&forged), forged.uid, df, ANY, 1_000),
                "not signed",
            );
        }
        let other = Secret::new(b"another").unwrap();
        refused(
            check(&other, Some(&cap), 1001, 11, READ, 1_000),
            "not signed",
        );
    }
}
