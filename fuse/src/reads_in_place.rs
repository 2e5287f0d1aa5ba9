//! Reads answered in place: with FUSE over io_uring, a read's reply is the
//! ring entry's payload buffer, which the kernel copies into the reader's
//! page cache. Lent to the client as a `Landing`, that buffer receives the
//! data of a read from one server straight from the socket, so the mount
//! copies none of it; through `/dev/fuse`, or for a read joined from
//! several servers, the data is copied into the reply as before.
//!
//! Measured before it was built (`bench/results/changes.md`): the copy
//! into the entry was 7% of the machine's CPU in a cold read through the
//! mount, and the mount spent 0.61-0.77 ms per MiB over io_uring against
//! 0.47-0.51 through `/dev/fuse`, which copies the reply straight from the
//! mount's buffer. Built, in the same run as the build before: four cold
//! readers 1.09x at 0.84-0.88x of the machine's CPU per MiB.

use fuser::ReplyBuffer;
use shoal_client::{Landing, ReadData};
use shoal_proto::error::Result;

use crate::errors::{fail, ErrorReply};
use crate::stats::MountStats;

/// A read's reply buffer, lent to the client.
pub struct EntryLanding(pub ReplyBuffer);

impl Landing for EntryLanding {
    fn space(&mut self) -> &mut [u8] {
        self.0.space()
    }
}

impl ErrorReply for EntryLanding {
    fn error(self, errno: fuser::Errno) {
        self.0.error(errno);
    }
}

/// Answers a read with its outcome, counting how its data got there.
pub fn answer(landing: EntryLanding, read: Result<ReadData>, stats: &MountStats) {
    match read {
        Ok(ReadData::Landed(n)) => {
            stats.ring_read(true, n);
            landing.0.ok(n);
        }
        Ok(ReadData::Bytes(data)) => {
            stats.ring_read(false, data.len());
            landing.0.data(&data);
        }
        Err(e) => fail("read", landing, e),
    }
}
