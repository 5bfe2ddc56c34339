//! `replay_json`, the library entry other languages call: the same report as
//! the `replay` binary for the same arguments, byte for byte, and the same
//! error messages.
#![allow(clippy::unwrap_used)]

use std::process::Command;

use gangway_replay::json::{ReplayJsonError, replay_help, replay_json};

mod common;
use common::dir;

fn cli(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_replay"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn the_report_is_the_commands_byte_for_byte() {
    let (a, b) = (dir("cli"), dir("lib"));
    let common = [
        "--jobs",
        "1200",
        "--compare",
        "philly,fifo",
        "--time-scale",
        "0.5",
        "--seed",
        "5",
        "--no-plots",
    ];
    let a_s = a.display().to_string();
    let out = cli(&[&common[..], &["--out", &a_s]].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let b_s = b.display().to_string();
    let json = replay_json([&common[..], &["--out", &b_s]].concat()).unwrap();
    let file = std::fs::read(a.join("report.json")).unwrap();
    assert_eq!(json.as_bytes(), &file[..]);
    assert_eq!(std::fs::read(b.join("report.json")).unwrap(), file);
}

#[test]
fn errors_carry_the_commands_messages() {
    let d = dir("errors");
    let out_dir = d.display().to_string();
    let missing = d.join("missing.csv").display().to_string();
    let args = ["--trace", &missing, "--format", "csv", "--out", &out_dir];
    let out = cli(&args);
    assert!(!out.status.success());
    let err = replay_json(args).unwrap_err();
    assert!(matches!(err, ReplayJsonError::Replay(_)), "{err:?}");
    assert_eq!(
        format!("replay: {err}"),
        String::from_utf8_lossy(&out.stderr).trim()
    );

    let args = ["--no-such-flag", "--out", &out_dir];
    let out = cli(&args);
    let err = replay_json(args).unwrap_err();
    assert!(matches!(err, ReplayJsonError::Args(_)), "{err:?}");
    assert_eq!(
        err.to_string().trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

#[test]
fn help_lists_the_flags() {
    let help = replay_help();
    for flag in ["--trace", "--compare", "--time-scale", "--out"] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
}

/// `reproduce.args` run again give the same report, byte for byte, and so
/// do the same options in another order.
#[test]
fn the_reproduce_record_reproduces_the_report() {
    let dir = |tag: &str| {
        std::env::temp_dir()
            .join(format!("gangway-reproduce-{tag}-{}", std::process::id()))
            .display()
            .to_string()
    };
    let (a, b, c) = (dir("a"), dir("b"), dir("c"));
    let first = replay_json([
        "--jobs",
        "600",
        "--compare",
        "philly,fifo",
        "--seed",
        "3",
        "--without",
        "retry-gap,warm-start",
        "--native",
        "--no-plots",
        "--quiet",
        "--out",
        &a,
    ])
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&first).unwrap();
    let mut args: Vec<String> = v["reproduce"]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect();
    assert!(!args.iter().any(|a| a.starts_with("--out")), "{args:?}");
    args.extend(["--out".into(), b.clone()]);
    assert_eq!(replay_json(args).unwrap(), first);
    let reordered = replay_json([
        "--out",
        &c,
        "--quiet",
        "--without",
        "retry-gap,warm-start",
        "--seed=3",
        "--no-plots",
        "--compare",
        "philly,fifo",
        "--jobs",
        "600",
    ])
    .unwrap();
    // Options in another order (a list's values keep theirs: `--compare`
    // orders the runs, a later `--set` wins), `--native` left out.
    assert_eq!(reordered, first);
    for d in [a, b, c] {
        let _ = std::fs::remove_dir_all(d);
    }
}
