//! The protobuf messages generated from `shoal.proto` (by `build.rs`).

include!(concat!(env!("OUT_DIR"), "/shoal.rs"));
