//! Any bytes as a topology file: an error naming a line, or a valid topology.
#![no_main]

use gangway_core::{Topology, TopologyError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        match Topology::from_toml_str("fuzz.toml", text) {
            Ok(topo) => assert!(!topo.servers().is_empty()),
            Err(TopologyError::Parse { line, .. }) => assert!(line >= 1),
            Err(_) => {}
        }
    }
});
