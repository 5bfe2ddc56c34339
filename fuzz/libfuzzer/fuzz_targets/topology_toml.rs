//! libFuzzer entry for the `topology_toml` target of `gangway_fuzz::targets`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| gangway_fuzz::targets::run_named("topology_toml", data));
