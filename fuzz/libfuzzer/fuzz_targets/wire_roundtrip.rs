//! libFuzzer entry for the `wire_roundtrip` target of `gangway_fuzz::targets`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| gangway_fuzz::targets::run_named("wire_roundtrip", data));
