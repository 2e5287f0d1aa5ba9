//! The interposed C functions, by what they act on. Each asks the state
//! whether its descriptor or path is Shoal's; if not, it calls the next
//! definition (libc's) with the same arguments.

mod dirs;
mod files;
mod meta;
mod process;
mod stdio;
mod temp;
