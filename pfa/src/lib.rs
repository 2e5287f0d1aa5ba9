//! Parallel file aggregation ([Kato 2011]): N processes write their many
//! small logical files into one shared container file through a
//! memory-mapped append API, instead of a file per process per step.
//!
//! ```no_run
//! use shoal_pfa::{Container, Mode, Options};
//! # fn main() -> std::io::Result<()> {
//! let (rank, nranks) = (0, 8);
//! let c = Container::open_or_create("out.pfa", &Options::new(nranks))?;
//! let mut buf = c.mmap("foo.txt", 272_383, rank, Mode::WriteIncremental)?; // pfa_mmap
//! for step in 0..10u8 {
//!     buf.as_mut_slice()[..100].fill(step); // edit data
//!     buf.append(272_383)?;                 // pfa_append
//! }
//! buf.munmap();                             // pfa_munmap
//! c.sync()?;                                // pfa_sync
//!
//! let mut buf = c.mmap("foo.txt", 272_383, rank, Mode::Read)?;
//! while !buf.eof() {                        // pfa_eof
//!     let _data = &buf.as_slice()[..buf.len()];
//!     buf.seek(std::io::SeekFrom::Current(1))?; // pfa_seek
//! }
//! # Ok(()) }
//! ```
//!
//! - [`format`]: the container format, and why chunks claimed by
//!   different ranks can never overlap (no locks, no shared counter).
//! - [`dirty`]: how the pages changed since the last store are found.
//! - [`tools`]: `shoal pfa ls|cat|extract|check`.
//! - [`ffi`]: the same API for C (`pfa.h`, generated).
//!
//! It works on any POSIX file system (a Shoal mount, ext4, tmpfs): chunks
//! are a multiple of the file system's strip (`st_blksize`, the strip on a
//! Shoal mount) and are written with direct I/O where the file system has it.

mod buffer;
mod container;
pub mod dirty;
pub mod ffi;
pub mod format;
pub mod index;
pub mod tools;

pub use buffer::{Mode, PfaBuf};
pub use container::{Container, Options, DEFAULT_CHUNK};
