//! What a connection opened with a user credential may send
//! (`shoal_proto::credential`): requests that act for the credential's user
//! and no one else, and none of what only the servers and administrators
//! send. The listener asks [`admit`] for every request frame of such a
//! connection before it is handled; a refusal answers that request alone
//! and is counted (`Stats::identity_refusals`).
//!
//! A connection opened with the cluster secret (a server, the mount, root's
//! programs) is trusted to say whom it acts for, as before.

use prost::Message;
use shoal_proto::error::{Errno, ShoalError};
use shoal_proto::frame::Frame;
use shoal_proto::msg::{LinkRequest, RecoverRequest, RemoveRequest};
use shoal_proto::{Cred, Op};

/// Whether the request in `frame`, on a connection whose credential names
/// `user`, may be handled; Err answers it.
pub fn admit(user: &Cred, frame: &Frame) -> Result<(), ShoalError> {
    let h = &frame.header;
    admit_one(user, h.op, &h.cred, &frame.body)
}

fn admit_one(user: &Cred, op: Op, acts_for: &Cred, body: &[u8]) -> Result<(), ShoalError> {
    if acts_for != user {
        return Err(ShoalError::new(
            Errno::EACCES,
            format!(
                "{}: the connection's credential is for {user:?}; the request acts for {acts_for:?}",
                op.name()
            ),
        ));
    }
    let servers_only = |what: &str| {
        Err(ShoalError::new(
            Errno::EPERM,
            format!(
                "{}: {what} is for the servers and administrators, not a user credential",
                op.name()
            ),
        ))
    };
    let decoded =
        |e: prost::DecodeError| ShoalError::protocol(format!("{} request body: {e}", op.name()));
    match op {
        // fsck's scans, a gathering server's write-out, a server's recall.
        Op::Scan | Op::WriteExtents | Op::Recall | Op::PutPartition | Op::AddPartition => {
            servers_only("the operation")
        }
        // What no entry names, or a directory whose entry went (fsck
        // removes anything).
        Op::Remove => {
            let q = RemoveRequest::decode(body).map_err(decoded)?;
            if q.unlinked_only || q.expect_parent != 0 {
                Ok(())
            } else {
                servers_only("removing an object whatever names it")
            }
        }
        Op::Link => {
            let q = LinkRequest::decode(body).map_err(decoded)?;
            match q.fsck_set {
                Some(_) => servers_only("setting a link count (fsck)"),
                None => Ok(()),
            }
        }
        // Each change replayed must be one this user could send.
        Op::Recover => {
            let q = RecoverRequest::decode(body).map_err(decoded)?;
            for item in &q.items {
                let op = u16::try_from(item.op)
                    .ok()
                    .and_then(Op::from_code)
                    .ok_or_else(|| ShoalError::protocol(format!("replayed op {}", item.op)))?;
                if op == Op::Recover {
                    return Err(ShoalError::protocol("a replayed recover"));
                }
                let acts_for = Cred::from_wire(item.uid, item.gid, &item.groups)
                    .ok_or_else(|| ShoalError::protocol("a replayed change's groups"))?;
                admit_one(user, op, &acts_for, &item.body)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use shoal_proto::frame::Frame;
    use shoal_proto::msg::{Empty, Replayed, ScanRequest};

    fn frame<M: Message>(op: Op, cred: Cred, body: &M) -> Frame {
        Frame::request(op, 1, cred, Bytes::from(body.encode_to_vec()), Bytes::new())
    }

    #[test]
    fn a_user_connection_acts_only_for_its_user_and_never_as_a_server() {
        let alice = Cred::new(1001, 1001).with_groups(&[20]);
        assert!(admit(&alice, &frame(Op::Ping, alice, &Empty {})).is_ok());
        for other in [
            Cred::ROOT,
            Cred::new(1002, 1001),
            Cred::new(1001, 0),
            Cred::new(1001, 1001),
        ] {
            let e = admit(&alice, &frame(Op::Ping, other, &Empty {})).unwrap_err();
            assert_eq!(e.errno, Errno::EACCES, "{other:?}");
        }
        let e = admit(&alice, &frame(Op::Scan, alice, &ScanRequest::default())).unwrap_err();
        assert_eq!(e.errno, Errno::EPERM);
        let remove = |unlinked_only, expect_parent| RemoveRequest {
            handle: 7,
            unlinked_only,
            expect_parent,
        };
        assert!(admit(&alice, &frame(Op::Remove, alice, &remove(true, 0))).is_ok());
        assert!(admit(&alice, &frame(Op::Remove, alice, &remove(false, 9))).is_ok());
        assert!(admit(&alice, &frame(Op::Remove, alice, &remove(false, 0))).is_err());
        let fsck = LinkRequest {
            handle: 7,
            fsck_set: Some(3),
            ..Default::default()
        };
        assert!(admit(&alice, &frame(Op::Link, alice, &fsck)).is_err());
    }

    #[test]
    fn a_replayed_change_must_be_the_users_own_too() {
        let alice = Cred::new(1001, 1001);
        let item = |uid, op: Op| Replayed {
            op: op as u32,
            uid,
            gid: 1001,
            body: Empty {}.encode_to_vec().into(),
            ..Default::default()
        };
        let recover = |items| frame(Op::Recover, alice, &RecoverRequest { boot: 1, items });
        assert!(admit(&alice, &recover(vec![item(1001, Op::CreateFile)])).is_ok());
        let forged = recover(vec![item(1001, Op::CreateFile), item(0, Op::CreateFile)]);
        assert_eq!(admit(&alice, &forged).unwrap_err().errno, Errno::EACCES);
        assert!(admit(&alice, &recover(vec![item(1001, Op::Scan)])).is_err());
    }
}
