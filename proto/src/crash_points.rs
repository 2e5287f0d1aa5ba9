//! The names of the crash points (see [`crate::crash_point!`]): where a
//! process may die with consequences worth testing on purpose.

/// Server: a modifying request's changes are applied (visible), not yet
/// durable. The request was never acknowledged: it must be gone after a
/// restart, and nothing else with it.
pub const COMMIT_AFTER_APPLY: &str = "commit-after-apply";
/// Server: a modifying request's changes are durable, its reply not sent:
/// the client cannot tell whether it was applied, and must not undo what
/// depends on it as if it were not (a link's count, say).
pub const COMMIT_BEFORE_REPLY: &str = "commit-before-reply";
/// Server: the metadata log turned to its other file and its checkpoint has
/// not finished: recovery must replay both files in order.
pub const LOG_TURNED: &str = "log-turned";
/// Server: a peer created a batch of datafiles for this server's precreate
/// pool, which has not recorded them yet: they are orphans on the peer.
pub const REFILL_AFTER_CREATE: &str = "refill-after-create";
/// Server, unstuff without precreate: datafiles were created on the peers,
/// the distribution does not name them yet: orphans on the peers.
pub const UNSTUFF_AFTER_CREATE: &str = "unstuff-after-create";
/// Client, a create the client composes (baseline, no_metafile without
/// colocate, mkdir, symlink): the objects exist, the entry that names them
/// does not: orphans.
pub const CREATE_BEFORE_ENTRY: &str = "create-before-entry";
/// Client, move to another directory: the new entry is there and the old
/// one too. A directory's parent still says the old one is true; anything
/// else has both names counted (two true names).
pub const MOVE_AFTER_LINK: &str = "move-after-link";
/// Client, move of a directory to another directory: both entries are
/// there and the directory's parent says the new one is true.
pub const MOVE_AFTER_PARENT: &str = "move-after-parent";
/// Client, remove without colocate: the entry is gone, the object's link
/// is still counted: an orphan, or a count one too high.
pub const UNLINK_AFTER_ENTRY: &str = "unlink-after-entry";
/// Client, hard link: the new link is counted, its entry not made yet: a
/// count one too high.
pub const LINK_BEFORE_ENTRY: &str = "link-before-entry";

/// Server, `sync = "replay"`: a group flush is about to make durable the
/// changes answered since the last one: they are lost with the process,
/// and their clients must replay them.
pub const GROUP_FLUSH: &str = "group-flush";
/// Server, a split of a directory partition (server/src/partitions.rs): the
/// entries moving are on the new partition's server, and still here too,
/// where the partition is frozen: after a restart the split must finish,
/// with no entry lost or listed twice.
pub const SPLIT_AFTER_MOVE: &str = "split-after-move";

/// Client, a batch of creates this client answered itself came back from
/// its server: the files' attributes are read off the reply, not yet
/// cached. Not a crash point but a pause point: a test holds the client
/// here (`fail::cfg_callback`) to make its own write of such a file land
/// before the reply is cached, which must not put back the size from
/// before the write.
pub const CREATE_FILES_BEFORE_CACHING: &str = "create-files-before-caching";

pub const ALL: [&str; 12] = [
    COMMIT_AFTER_APPLY,
    COMMIT_BEFORE_REPLY,
    LOG_TURNED,
    REFILL_AFTER_CREATE,
    UNSTUFF_AFTER_CREATE,
    CREATE_BEFORE_ENTRY,
    MOVE_AFTER_LINK,
    MOVE_AFTER_PARENT,
    UNLINK_AFTER_ENTRY,
    LINK_BEFORE_ENTRY,
    GROUP_FLUSH,
    SPLIT_AFTER_MOVE,
];
