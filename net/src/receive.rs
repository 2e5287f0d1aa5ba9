//! The receiving side of a connection: how much of what arrived is read
//! ahead into a buffer before frames are cut from it.

/// Bytes a connection's reader buffers ahead of the frame it is reading.
/// Small frames (requests and replies of metadata operations, a few hundred
/// bytes) arrive many to a read of the socket all the same; a large payload
/// is read past the buffer, straight into its destination, except for the
/// part that arrived in the buffer with the frame's head, or with the frame
/// before it, which is copied out. With 256 KiB that copy took up to half of
/// every 1 MiB read reply (`memmove` at 4.3% of the machine in a profile of
/// four cold readers through the mount); this bounds it to 32 KiB.
pub const READ_AHEAD: usize = 32 << 10;
