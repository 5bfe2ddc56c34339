//! Every fuzz target on stable Rust: its committed corpus (`fuzz/corpus/`),
//! then seeded mutations for `GANGWAY_FUZZ_SECONDS` (default 3; CI sets
//! more) with `GANGWAY_FUZZ_SEED`. A crash fails the test, names the input
//! and saves it under `target/fuzz-crashes/`.

use std::path::Path;

use gangway_fuzz::{runner, targets};

fn fuzz(name: &str) {
    let target = targets::find(name).unwrap_or_else(|| panic!("no fuzz target {name}"));
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(name);
    let corpus = runner::corpus(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    assert!(!corpus.is_empty(), "{}: no corpus", dir.display());
    let budget = runner::Budget::from_env().unwrap_or_else(|e| panic!("{e}"));
    match runner::run(target, &corpus, &budget) {
        Ok(stats) => println!(
            "fuzz {name}: {} inputs ({} from the corpus) in {:.1} s, seed {}, no crash",
            stats.executions,
            stats.corpus,
            stats.elapsed.as_secs_f64(),
            stats.seed
        ),
        Err(crash) => panic!("{crash}"),
    }
}

macro_rules! fuzz_tests {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            fuzz(stringify!($name));
        }
    )*};
}

fuzz_tests!(
    machine_list,
    topology_toml,
    philly_log,
    csv_jobs,
    rfold,
    adaptdl,
    presets,
    policy_config,
    view_decode,
    wire_roundtrip,
    manifest,
    replies,
    wasm_replies_direct,
    wasm_replies_component,
    scheduler_events,
);

/// Every registered target has a test above and a corpus.
#[test]
fn every_target_is_run() {
    let source = include_str!("fuzz.rs");
    for t in targets::ALL {
        assert!(
            source.contains(&format!("    {},\n", t.name)),
            "{} has no test",
            t.name
        );
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("corpus")
            .join(t.name);
        assert!(dir.is_dir(), "{} has no corpus directory", t.name);
    }
}
