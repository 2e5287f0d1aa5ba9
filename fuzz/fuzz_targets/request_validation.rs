//! Sequences of hostile requests run through a real `Service` on the
//! in-memory engine: every reply is a well-formed reply frame, never a panic.
//! See src/lib.rs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    shoal_fuzz::request_validation(data);
});
