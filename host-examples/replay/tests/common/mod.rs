//! What the `replay` binary's test files share: running it, a fresh
//! folder, its output and report.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// Runs the `replay` binary with `args`.
pub(crate) fn replay(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_replay"))
        .args(args)
        .output()
        .unwrap()
}

/// A fresh, empty folder for this test process's `name`.
pub(crate) fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("gangway-replay-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The standard output of a run that must have succeeded.
pub(crate) fn ok(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "replay failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The `report.json` a run wrote to `d`.
pub(crate) fn report(d: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(d.join("report.json")).unwrap()).unwrap()
}
