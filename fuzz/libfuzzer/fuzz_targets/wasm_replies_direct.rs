//! libFuzzer entry for the `wasm_replies_direct` target of `gangway_fuzz::targets`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| gangway_fuzz::targets::run_named("wasm_replies_direct", data));
