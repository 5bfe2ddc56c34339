//! What each built-in policy module costs a host that loads it cold: its
//! size, and the time to validate and compile it (no cache in memory or on
//! disk), the fastest of `runs` loads into a fresh engine each.
//!
//! `cargo run --release -p gangway-benches --example module_cost [runs]`

use std::time::{Duration, Instant};

use gangway_core::wasm::{PolicyEngine, SandboxConfig};

fn main() {
    let runs = std::env::args()
        .nth(1)
        .and_then(|a| a.parse::<u32>().ok())
        .unwrap_or(3)
        .max(1);
    let config = SandboxConfig {
        module_cache: None,
        ..SandboxConfig::default()
    };
    println!("{:<24} {:>9} {:>12}", "module", "bytes", "compile ms");
    let (mut bytes_total, mut time_total) = (0, Duration::ZERO);
    for (name, bytes) in gangway_plugin_artifacts::all() {
        let mut best = Duration::MAX;
        for _ in 0..runs {
            let engine = PolicyEngine::new(config.clone()).expect("engine");
            let start = Instant::now();
            engine.load(name, bytes).expect("load");
            best = best.min(start.elapsed());
        }
        println!(
            "{name:<24} {:>9} {:>12.1}",
            bytes.len(),
            best.as_secs_f64() * 1e3
        );
        bytes_total += bytes.len();
        time_total += best;
    }
    println!(
        "{:<24} {bytes_total:>9} {:>12.1}",
        "all",
        time_total.as_secs_f64() * 1e3
    );
}
