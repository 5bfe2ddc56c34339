//! Any bytes as a Philly machine list: an error or a valid topology, never a panic.
#![no_main]

use gangway_core::{RackGrouping, Topology};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        for grouping in [
            RackGrouping::default(),
            RackGrouping::Consecutive { servers_per_rack: 3 },
        ] {
            if let Ok(topo) = Topology::from_machine_list_str("fuzz.csv", text, grouping) {
                assert!(topo.servers().iter().all(|s| s.gpus <= 64));
            }
        }
    }
});
