//! The operation table: the code in each frame header and the messages it carries.

/// One request type. The numeric code is on the wire: never renumber.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u16)]
pub enum Op {
    Ping = 1,
    Lookup = 2,
    GetAttr = 3,
    SetAttr = 4,
    CreateObject = 5,
    CreateDatafiles = 6,
    SetDist = 7,
    CrDirEnt = 8,
    RmDirEnt = 9,
    RenameEntry = 10,
    Readdir = 11,
    Remove = 12,
    RmdirPrepare = 13,
    RmdirAbort = 14,
    SetParent = 15,
    Read = 16,
    Write = 17,
    Truncate = 18,
    Fsync = 19,
    GetSizes = 20,
    SetXattr = 21,
    GetXattr = 22,
    ListXattr = 23,
    RemoveXattr = 24,
    Statfs = 25,
    Stats = 26,
    CreateFile = 27,
    Unstuff = 28,
    ListAttr = 29,
    Rendezvous = 30,
    Scan = 31,
    Link = 32,
}

impl Op {
    pub const ALL: [Op; 32] = [
        Op::Ping,
        Op::Lookup,
        Op::GetAttr,
        Op::SetAttr,
        Op::CreateObject,
        Op::CreateDatafiles,
        Op::SetDist,
        Op::CrDirEnt,
        Op::RmDirEnt,
        Op::RenameEntry,
        Op::Readdir,
        Op::Remove,
        Op::RmdirPrepare,
        Op::RmdirAbort,
        Op::SetParent,
        Op::Read,
        Op::Write,
        Op::Truncate,
        Op::Fsync,
        Op::GetSizes,
        Op::SetXattr,
        Op::GetXattr,
        Op::ListXattr,
        Op::RemoveXattr,
        Op::Statfs,
        Op::Stats,
        Op::CreateFile,
        Op::Unstuff,
        Op::ListAttr,
        Op::Rendezvous,
        Op::Scan,
        Op::Link,
    ];

    pub fn from_code(code: u16) -> Option<Op> {
        Op::ALL.iter().copied().find(|op| *op as u16 == code)
    }

    /// Index into per-operation tables (0-based, dense).
    pub fn index(self) -> usize {
        self as usize - 1
    }

    /// Lower-case name used in statistics and logs.
    pub fn name(self) -> &'static str {
        match self {
            Op::Ping => "ping",
            Op::Lookup => "lookup",
            Op::GetAttr => "getattr",
            Op::SetAttr => "setattr",
            Op::CreateObject => "create_object",
            Op::CreateDatafiles => "create_datafiles",
            Op::SetDist => "set_dist",
            Op::CrDirEnt => "crdirent",
            Op::RmDirEnt => "rmdirent",
            Op::RenameEntry => "rename_entry",
            Op::Readdir => "readdir",
            Op::Remove => "remove",
            Op::RmdirPrepare => "rmdir_prepare",
            Op::RmdirAbort => "rmdir_abort",
            Op::SetParent => "set_parent",
            Op::Read => "read",
            Op::Write => "write",
            Op::Truncate => "truncate",
            Op::Fsync => "fsync",
            Op::GetSizes => "get_sizes",
            Op::SetXattr => "setxattr",
            Op::GetXattr => "getxattr",
            Op::ListXattr => "listxattr",
            Op::RemoveXattr => "removexattr",
            Op::Statfs => "statfs",
            Op::Stats => "stats",
            Op::CreateFile => "create_file",
            Op::Unstuff => "unstuff",
            Op::ListAttr => "listattr",
            Op::Rendezvous => "rendezvous",
            Op::Scan => "scan",
            Op::Link => "link",
        }
    }

    /// Whether the request changes metadata and so must be durable before its reply.
    pub fn modifies_metadata(self) -> bool {
        matches!(
            self,
            Op::SetAttr
                | Op::CreateObject
                | Op::CreateDatafiles
                | Op::SetDist
                | Op::CrDirEnt
                | Op::RmDirEnt
                | Op::RenameEntry
                | Op::Remove
                | Op::RmdirPrepare
                | Op::RmdirAbort
                | Op::SetParent
                | Op::Truncate
                | Op::SetXattr
                | Op::RemoveXattr
                | Op::CreateFile
                | Op::Unstuff
                | Op::Link
        )
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
}
