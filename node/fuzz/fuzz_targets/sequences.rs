//! Bytes as the choices of a command sequence against the core, every invariant checked:
//! `baton_node::fuzzing::sequence`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    baton_node::fuzzing::sequence(data, "this input");
});
