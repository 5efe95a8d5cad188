//! Bytes as a tokens file and a permissions policy (also inside a `SetAccess` request):
//! `baton_node::fuzzing::Texts`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    baton_node::fuzzing::Texts::default().input(data);
});
