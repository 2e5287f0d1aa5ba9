//! Any bytes given to `Frame::decode` and `read_frame`: an error or a frame
//! that re-encodes to the same bytes, never a panic. See src/lib.rs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    shoal_fuzz::frame_decode(data);
});
