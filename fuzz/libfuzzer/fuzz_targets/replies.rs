//! libFuzzer entry for the `replies` target of `gangway_fuzz::targets`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| gangway_fuzz::targets::run_named("replies", data));
