//! A policy crate made by `policy-check new`, as a user outside the
//! workspace meets it: its conformance test passes, it builds to a Wasm
//! module with the toolchain and target its `rust-toolchain.toml` brings,
//! `policy-check` accepts the module as cargo built it (a core module, made
//! a component on load), and `replay` runs with it in the fairness slot.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

use gangway_catalog::new_policy;
use gangway_catalog::policy_check::{CheckOptions, check_module};

/// Runs `cargo ARGS` in `dir` as a user's shell would: through rustup's
/// proxy (so the crate's `rust-toolchain.toml` applies), with its own
/// target folder kept between runs.
fn cargo(dir: &Path, target: &Path, args: &[&str]) {
    let out = Command::new("cargo")
        .args(args)
        .current_dir(dir)
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("CARGO")
        .env_remove("RUSTC")
        .env_remove("RUSTDOC")
        .env("CARGO_TARGET_DIR", target)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo {args:?} failed in {}:\n{}\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_new_policy_crate_tests_builds_checks_and_replays() {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = tmp.join(format!("template-{}", std::process::id()));
    let target = tmp.join("template-target");
    let _ = std::fs::remove_dir_all(&dir);
    let root = new_policy::create(&dir, "wait-longest", &new_policy::built_from()).unwrap();
    // As `policy-check new` does: the Wasm target for the crate's toolchain.
    new_policy::ensure_wasm_target().unwrap();

    cargo(&root, &target, &["test"]);
    cargo(
        &root,
        &target,
        &["build", "--release", "--target", "wasm32-unknown-unknown"],
    );
    let wasm = target.join("wasm32-unknown-unknown/release/wait_longest.wasm");
    let bytes = std::fs::read(&wasm).unwrap();
    assert_eq!(&bytes[4..8], &[1, 0, 0, 0], "cargo builds a core module");

    let report = check_module(
        "wait_longest.wasm",
        &bytes,
        b"max_gpus = 64",
        &CheckOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.slots, vec![gangway_core::Slot::Fairness]);

    let out_dir = dir.join("replay");
    let out = Command::new(env!("CARGO_BIN_EXE_replay"))
        .args(["--jobs", "600", "--no-plots", "--fairness"])
        .arg(&wasm)
        .arg("--out")
        .arg(&out_dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(
        report["runs"][0]["policies"]["fairness"],
        wasm.display().to_string()
    );
    assert_eq!(report["runs"][0]["policy_errors"], 0);
    std::fs::remove_dir_all(&dir).unwrap();
}
