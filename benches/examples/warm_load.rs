//! What loading each built-in module costs with its compiled code on disk.
//!
//! `cargo run --release -p gangway-benches --example warm_load`
use std::time::Instant;

use gangway_core::wasm::{PolicyEngine, SandboxConfig};

fn main() {
    let dir = std::env::temp_dir().join(format!("gw-warm-{}", std::process::id()));
    let config = SandboxConfig {
        module_cache: Some(dir.clone()),
        ..SandboxConfig::default()
    };
    {
        let engine = PolicyEngine::new(config.clone()).expect("engine");
        for (name, bytes) in gangway_plugin_artifacts::all() {
            engine.load(name, bytes).expect("load");
        }
    }
    let t = Instant::now();
    let engine = PolicyEngine::new(config).expect("engine");
    println!("engine: {:.2} ms", t.elapsed().as_secs_f64() * 1e3);
    let mut total = 0.0;
    for (name, bytes) in gangway_plugin_artifacts::all() {
        let t = Instant::now();
        engine.load(name, bytes).expect("load");
        let ms = t.elapsed().as_secs_f64() * 1e3;
        total += ms;
        println!("{name:24} {:>7} B  {ms:6.2} ms", bytes.len());
    }
    println!("all: {total:.2} ms");
    // `perf record` this with a count to see where a warm load goes.
    let repeat: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(0);
    for _ in 0..repeat {
        let engine = PolicyEngine::new(SandboxConfig {
            module_cache: Some(dir.clone()),
            ..SandboxConfig::default()
        })
        .expect("engine");
        for (name, bytes) in gangway_plugin_artifacts::all() {
            engine.load(name, bytes).expect("load");
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}
