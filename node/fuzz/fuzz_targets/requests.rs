//! Bytes as every write request (validated, and applied when valid), as the Raft messages
//! peers send, and as a backup: `baton_node::fuzzing::Requests`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    baton_node::fuzzing::Requests::default().input(data);
});
