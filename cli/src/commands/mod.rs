//! One module per subcommand (or family of small ones).

pub mod agent;
pub mod config;
pub mod copy;
pub mod docs;
pub mod down;
pub mod files;
pub mod fsck;
pub mod hint;
pub mod lsplus;
pub mod mount;
pub mod server;
pub mod starting;
pub mod stats;
pub mod up;
pub mod up_hosts;
