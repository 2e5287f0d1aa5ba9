//! The receiving side of a connection: how much of what arrived is read
//! ahead into a buffer before frames are cut from it.

/// Bytes a connection's reader buffers ahead of the frame it is reading.
/// Small frames (requests and replies of metadata operations, a few hundred
/// bytes) still arrive many to a read of the socket; a large payload is read
/// past the buffer, straight into its destination, except for what arrived
/// in the buffer with the frame's head and what the buffer takes in at its
/// end, which are copied out. With 256 KiB those copies took up to half of a
/// 1 MiB read reply (the mount's `memmove`, 3.9% of the machine in a profile
/// of four cold readers, 0.3% with this); this bounds them to 32 KiB each.
pub const RECEIVE_BUFFER: usize = 32 << 10;
