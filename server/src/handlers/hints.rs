//! Directory hints on the server ([Kuhn 2008]). A directory's hints live in its
//! own record (`ObjectRecord.hints`, no key of their own), so every getattr,
//! lookup and listing of the directory carries them at no cost, and a
//! subdirectory copies them when it is created.
//!
//! Users change them as the extended attributes `user.shoal.<hint>`: the
//! xattr handlers hand those names here, where each value is validated
//! (`shoal_proto::hints`) before it is stored.
//!
//! The servers also keep new objects true to the hints: an entry for a new
//! file or directory says which hints it was made under, and is refused with
//! ESTALE if the directory's hints differ now (see [`check_unchanged`]).

use shoal_proto::error::{Errno, ShoalError};
use shoal_proto::hints::{self, Hint};
use shoal_proto::msg::{DirHints, Empty, ObjectRecord};
use shoal_proto::{Handle, ObjectKind};

use crate::request::{Request, Result};
use crate::service::{Reply, Service};

/// The hints of directory record `dir` (none set if it has none).
pub(crate) fn of(dir: &ObjectRecord) -> DirHints {
    dir.hints.clone().unwrap_or_default()
}

/// ESTALE unless directory `dir` still has the hints `under` that the new
/// entry `name` was made under.
pub(crate) fn check_unchanged(
    dir: &ObjectRecord,
    under: &DirHints,
    name: &str,
) -> Result<(), ShoalError> {
    if of(dir) == *under {
        return Ok(());
    }
    Err(ShoalError::new(
        Errno::ESTALE,
        format!(
            "{name}: the hints of directory {:#x} changed while it was made; \
             make it again under the current ones",
            dir.handle
        ),
    ))
}

fn not_a_directory(hint: Hint, h: Handle) -> ShoalError {
    ShoalError::invalid(format!(
        "{}: hints are set on directories, and {h:#x} is not one",
        hint.xattr()
    ))
}

/// Sets a hint from its xattr value, with setxattr's create/replace flags.
pub(crate) fn set(
    s: &Service,
    r: &Request,
    h: Handle,
    hint: Hint,
    value: &[u8],
    create_only: bool,
    replace_only: bool,
) -> Result<Reply<Empty>> {
    let text = std::str::from_utf8(value)
        .map_err(|_| ShoalError::invalid(format!("hint {}: the value is not text", hint.name())))?;
    let ((), syncs) = s.change(r, |txn| {
        let mut rec = s.meta.get(r, h)?;
        if rec.kind() != ObjectKind::Directory {
            return Err(not_a_directory(hint, h).into());
        }
        let mut current = of(&rec);
        let exists = hints::get(&current, hint).is_some();
        if create_only && exists {
            return Err(
                ShoalError::new(Errno::EEXIST, format!("{} is set already", hint.xattr())).into(),
            );
        }
        if replace_only && !exists {
            return Err(
                ShoalError::new(Errno::ENODATA, format!("{} is not set", hint.xattr())).into(),
            );
        }
        hints::set(&mut current, hint, text, s.config.num_servers())?;
        rec.hints = Some(current);
        txn.put_object(&rec);
        txn.record_reply(&Empty {});
        Ok(())
    })?;
    Ok(Reply::default().with_syncs(syncs))
}

/// The value of a hint as its xattr shows it; ENODATA if it is not set.
pub(crate) fn get(s: &Service, r: &Request, h: Handle, hint: Hint) -> Result<Vec<u8>> {
    let value = hints::get(&of(&s.meta.get(r, h)?), hint)
        .ok_or_else(|| ShoalError::new(Errno::ENODATA, format!("{} is not set", hint.xattr())))?;
    Ok(value.into_bytes())
}

/// The xattr names of the hints set on object `rec` (none unless a directory).
pub(crate) fn names(rec: &ObjectRecord) -> Vec<String> {
    hints::list(&of(rec))
        .into_iter()
        .map(|(hint, _)| hint.xattr())
        .collect()
}

/// Clears a hint; ENODATA if it was not set.
pub(crate) fn unset(s: &Service, r: &Request, h: Handle, hint: Hint) -> Result<Reply<Empty>> {
    let ((), syncs) = s.change(r, |txn| {
        let mut rec = s.meta.get(r, h)?;
        let mut current = of(&rec);
        if !hints::unset(&mut current, hint) {
            return Err(
                ShoalError::new(Errno::ENODATA, format!("{} is not set", hint.xattr())).into(),
            );
        }
        rec.hints = Some(current);
        txn.put_object(&rec);
        txn.record_reply(&Empty {});
        Ok(())
    })?;
    Ok(Reply::default().with_syncs(syncs))
}
