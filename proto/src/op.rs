//! The operation table: the code in each frame header, the request and reply
//! messages it carries, and whether it changes metadata, declared once in
//! `ops!` below. From it come the [`Op`] enum (the code on the wire), its
//! `ALL`, `from_code`, `name` and `modifies_metadata`, and one marker type
//! per operation in [`ops`] that ties the code to its messages
//! ([`Operation`]): a client calls `pool.call::<ops::Lookup>(server, cred,
//! &req)` and gets a `LookupReply`, so a request cannot be sent under the
//! wrong code or its reply read as the wrong message.

use crate::msg::*;

/// One operation of the table: its code and the messages it carries.
/// Implemented by the marker types in [`ops`].
pub trait Operation {
    /// The code in the frame header.
    const OP: Op;
    /// The request body.
    type Request: prost::Message + Default;
    /// The body of a successful reply (a failed one carries `ErrorReply`).
    type Reply: prost::Message + Default;
}

/// Declares the operation table. Each row:
/// `code => Name("name", Request => Reply, modifies metadata?)`.
macro_rules! ops {
    ($($(#[$doc:meta])* $code:literal => $op:ident($name:literal, $req:ty => $rep:ty, $modifies:literal),)*) => {
        /// One request type. The numeric code is on the wire: never renumber.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u16)]
        pub enum Op {
            $($(#[$doc])* $op = $code,)*
        }

        impl Op {
            /// Every operation, in code order.
            pub const ALL: [Op; [$($code),*].len()] = [$(Op::$op),*];

            pub fn from_code(code: u16) -> Option<Op> {
                match code {
                    $($code => Some(Op::$op),)*
                    _ => None,
                }
            }

            /// Lower-case name used in statistics and logs.
            pub fn name(self) -> &'static str {
                match self {
                    $(Op::$op => $name,)*
                }
            }

            /// Whether the request changes metadata and so must be durable
            /// before its reply.
            pub fn modifies_metadata(self) -> bool {
                match self {
                    $(Op::$op => $modifies,)*
                }
            }

            /// Whether `body` decodes as this operation's reply message.
            pub fn reply_decodes(self, body: &[u8]) -> bool {
                match self {
                    $(Op::$op => <$rep as prost::Message>::decode(body).is_ok(),)*
                }
            }
        }

        /// One marker type per operation, named as its [`Op`], that ties the
        /// code to its request and reply messages.
        pub mod ops {
            use super::*;
            $(
                $(#[$doc])*
                pub enum $op {}
                impl Operation for $op {
                    const OP: Op = Op::$op;
                    type Request = $req;
                    type Reply = $rep;
                }
            )*
        }
    };
}

ops! {
    1 => Ping("ping", Empty => PingReply, false),
    2 => Lookup("lookup", LookupRequest => LookupReply, false),
    3 => GetAttr("getattr", GetAttrRequest => GetAttrReply, false),
    4 => SetAttr("setattr", SetAttrRequest => SetAttrReply, true),
    5 => CreateObject("create_object", CreateObjectRequest => CreateObjectReply, true),
    6 => CreateDatafiles("create_datafiles", CreateDatafilesRequest => CreateDatafilesReply, true),
    7 => SetDist("set_dist", SetDistRequest => SetDistReply, true),
    8 => CrDirEnt("crdirent", CrDirEntRequest => CrDirEntReply, true),
    9 => RmDirEnt("rmdirent", RmDirEntRequest => RmDirEntReply, true),
    10 => RenameEntry("rename_entry", RenameEntryRequest => RenameEntryReply, true),
    11 => Readdir("readdir", ReaddirRequest => ReaddirReply, false),
    12 => Remove("remove", RemoveRequest => RemoveReply, true),
    13 => RmdirPrepare("rmdir_prepare", RmdirRequest => Empty, true),
    14 => RmdirAbort("rmdir_abort", RmdirRequest => Empty, true),
    15 => SetParent("set_parent", SetParentRequest => Empty, true),
    /// The data read travels as the reply's payload.
    16 => Read("read", ReadRequest => Empty, false),
    /// The data written travels as the request's payload.
    17 => Write("write", WriteRequest => WriteReply, false),
    18 => Truncate("truncate", TruncateRequest => TruncateReply, true),
    19 => Fsync("fsync", FsyncRequest => FsyncReply, false),
    20 => GetSizes("get_sizes", GetSizesRequest => GetSizesReply, false),
    21 => SetXattr("setxattr", SetXattrRequest => Empty, true),
    22 => GetXattr("getxattr", GetXattrRequest => GetXattrReply, false),
    23 => ListXattr("listxattr", ListXattrRequest => ListXattrReply, false),
    24 => RemoveXattr("removexattr", RemoveXattrRequest => Empty, true),
    25 => Statfs("statfs", Empty => StatfsReply, false),
    26 => Stats("stats", Empty => StatsReply, false),
    27 => CreateFile("create_file", CreateFileRequest => CreateFileReply, true),
    28 => Unstuff("unstuff", UnstuffRequest => UnstuffReply, true),
    29 => ListAttr("listattr", ListAttrRequest => ListAttrReply, false),
    30 => Rendezvous("rendezvous", RendezvousRequest => RendezvousReply, false),
    31 => Scan("scan", ScanRequest => ScanReply, false),
    32 => Link("link", LinkRequest => LinkReply, true),
    /// The extents' bytes travel as the request's payload.
    33 => GatherWrite("gather_write", GatherWriteRequest => GatherWriteReply, false),
    34 => GatherCommit("gather_commit", GatherCommitRequest => GatherCommitReply, false),
    /// A gathering server's write-out to a datafile: the pieces' offsets
    /// (in the datafile) and lengths in the body, their bytes in the
    /// payload.
    35 => WriteExtents("write_extents", GatherWriteRequest => WriteReply, false),
    /// A client's first request on a new connection with `sync = "replay"`:
    /// the changes it keeps, replayed if the server restarted and lost them.
    36 => Recover("recover", RecoverRequest => RecoverReply, false),
    /// Makes everything the server applied durable (with `sync = "replay"`,
    /// the metadata half of a client's fsync).
    37 => Commit("commit", CommitRequest => Empty, false),
    /// From a server to a client, on the client's own connection: drop what
    /// you cache of these objects (your leases on them end), then answer.
    /// A server refuses it from a client (EINVAL).
    38 => Recall("recall", RecallRequest => Empty, false),
    /// Takes, changes or drops a POSIX record lock on a file, at the
    /// file's server. One that waits (`wait`) is answered when granted.
    39 => Lock("lock", LockRequest => LockReply, false),
    /// F_GETLK: a lock of another owner in the way, if any.
    40 => TestLock("test_lock", TestLockRequest => TestLockReply, false),
    /// Many creates in one directory, one transaction.
    41 => CreateFiles("create_files", CreateFilesRequest => CreateFilesReply, true),
    /// Asks for a directory's delegation and handles for new files in it.
    42 => DelegateDir("delegate_dir", DelegateDirRequest => DelegateDirReply, false),
    /// Many unlinks in one directory, one transaction.
    43 => RemoveFiles("remove_files", RemoveFilesRequest => RemoveFilesReply, true),
    /// Withdraws an owner's waiting lock requests on a file (its caller
    /// was interrupted): each is answered EINTR.
    44 => WithdrawLock("withdraw_lock", WithdrawLockRequest => Empty, false),
    /// Server to server: a split's entries to the new partition.
    45 => PutPartition("put_partition", PutPartitionRequest => PutPartitionReply, true),
    /// Server to server: a new partition, entered in its directory's record.
    46 => AddPartition("add_partition", AddPartitionRequest => Empty, true),
}

impl Op {
    /// Whether the server keeps this request's reply in its reply cache,
    /// durably with its change, under the client's id and the request id.
    /// A client sends every request again whose connection broke under it
    /// (the server died or restarted). Most requests may simply be done
    /// twice: doing them again leaves what doing them once does (a write
    /// sent again after a restart is acknowledged under the new verifier,
    /// so the fsync after it still reports what the restart lost). Creating,
    /// naming, removing and linking may not: a second copy of one the
    /// server applied would fail (EEXIST, ENOENT) or apply twice, so the
    /// second copy is answered with the first one's reply instead.
    pub fn reply_cached(self) -> bool {
        use Op::*;
        match self {
            Ping | Lookup | GetAttr | SetAttr | Readdir | Read | Write | Truncate | Fsync
            | GetSizes | GetXattr | ListXattr | Statfs | Stats | Unstuff | ListAttr
            | Rendezvous | Scan | GatherWrite | GatherCommit | WriteExtents | Recover | Commit
            | Recall | Lock | TestLock | DelegateDir | WithdrawLock | PutPartition
            | AddPartition => false,
            CreateObject | CreateDatafiles | SetDist | CrDirEnt | RmDirEnt | RenameEntry
            | Remove | RmdirPrepare | RmdirAbort | SetParent | SetXattr | RemoveXattr
            | CreateFile | Link | CreateFiles | RemoveFiles => true,
        }
    }

    /// Whether a request may wait at the server for another client (a
    /// lock held elsewhere): it is answered when that ends, so neither side
    /// holds one of the connection's request slots for it meanwhile.
    pub fn may_wait(self) -> bool {
        self == Op::Lock
    }

    /// Index into per-operation tables (0-based, dense).
    pub fn index(self) -> usize {
        self as usize - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_index_densely() {
        for (i, op) in Op::ALL.iter().enumerate() {
            assert_eq!(Op::from_code(*op as u16), Some(*op));
            assert_eq!(op.index(), i);
        }
        assert_eq!(Op::from_code(0), None);
        assert_eq!(Op::from_code(Op::ALL.len() as u16 + 1), None);
    }

    /// The codes are on the wire: these must never change.
    #[test]
    fn codes_and_names_are_as_they_always_were() {
        let table: Vec<(u16, &str, bool)> = Op::ALL
            .iter()
            .map(|op| (*op as u16, op.name(), op.modifies_metadata()))
            .collect();
        let expected = [
            (1, "ping", false),
            (2, "lookup", false),
            (3, "getattr", false),
            (4, "setattr", true),
            (5, "create_object", true),
            (6, "create_datafiles", true),
            (7, "set_dist", true),
            (8, "crdirent", true),
            (9, "rmdirent", true),
            (10, "rename_entry", true),
            (11, "readdir", false),
            (12, "remove", true),
            (13, "rmdir_prepare", true),
            (14, "rmdir_abort", true),
            (15, "set_parent", true),
            (16, "read", false),
            (17, "write", false),
            (18, "truncate", true),
            (19, "fsync", false),
            (20, "get_sizes", false),
            (21, "setxattr", true),
            (22, "getxattr", false),
            (23, "listxattr", false),
            (24, "removexattr", true),
            (25, "statfs", false),
            (26, "stats", false),
            (27, "create_file", true),
            (28, "unstuff", true),
            (29, "listattr", false),
            (30, "rendezvous", false),
            (31, "scan", false),
            (32, "link", true),
            (33, "gather_write", false),
            (34, "gather_commit", false),
            (35, "write_extents", false),
            (36, "recover", false),
            (37, "commit", false),
            (38, "recall", false),
            (39, "lock", false),
            (40, "test_lock", false),
            (41, "create_files", true),
            (42, "delegate_dir", false),
            (43, "remove_files", true),
            (44, "withdraw_lock", false),
            (45, "put_partition", true),
            (46, "add_partition", true),
        ];
        assert_eq!(table, expected);
    }

    #[test]
    fn markers_carry_their_op() {
        fn op_of<O: Operation>() -> Op {
            O::OP
        }
        assert_eq!(op_of::<ops::Lookup>(), Op::Lookup);
        assert_eq!(op_of::<ops::CreateFile>() as u16, 27);
        assert!(Op::Ping.reply_decodes(&[]));
        assert!(!Op::Lookup.reply_decodes(&[0xff]));
    }
}
