//! libFuzzer entry for the `philly_log` target of `gangway_fuzz::targets`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| gangway_fuzz::targets::run_named("philly_log", data));
