//! Hostile policy modules of every kind the sandbox review found, run the
//! way a user meets them: through `policy-check MODULE` and
//! `replay --fairness MODULE`. Each run ends with a clear verdict (a
//! `FAIL:` line, a typed load error, or a replay whose report records the
//! quarantine and the fallback), stays within 30 s and 512 MB of resident
//! memory, and writes at most 1 MB of output.
#![allow(clippy::unwrap_used)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The hostile guest builders of the core's Wasm tests.
#[allow(dead_code)]
#[path = "../../core/tests/wasm/guests.rs"]
mod guests;

const MAX_SECONDS: u64 = 30;
const MAX_RSS_BYTES: u64 = 512 << 20;
const MAX_OUTPUT_BYTES: usize = 1 << 20;

/// A finished run and what it cost.
struct Measured {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    output_bytes: usize,
    peak_rss_bytes: u64,
    elapsed: Duration,
}

/// The child's peak resident set so far (`VmHWM`), in bytes.
fn peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Runs `program` with `args`, sampling its peak memory until it exits.
fn measured(program: &str, args: &[&str]) -> Measured {
    let started = Instant::now();
    let mut child = Command::new(program)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut b = Vec::new();
        out.read_to_end(&mut b).unwrap();
        b
    });
    let err = std::thread::spawn(move || {
        let mut b = Vec::new();
        err.read_to_end(&mut b).unwrap();
        b
    });
    let mut peak = 0;
    let status = loop {
        if let Some(rss) = peak_rss(child.id()) {
            peak = peak.max(rss);
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(4 * MAX_SECONDS) {
            child.kill().unwrap();
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let (stdout, stderr) = (out.join().unwrap(), err.join().unwrap());
    Measured {
        status,
        output_bytes: stdout.len() + stderr.len(),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        peak_rss_bytes: peak,
        elapsed: started.elapsed(),
    }
}

/// Checks the run's cost and prints it (the note quotes these lines).
fn within_bounds(what: &str, m: &Measured) {
    println!(
        "{what}: {:.2} s, peak RSS {} MB, {} bytes of output, exit {:?}",
        m.elapsed.as_secs_f64(),
        m.peak_rss_bytes >> 20,
        m.output_bytes,
        m.status.code()
    );
    assert!(
        m.elapsed < Duration::from_secs(MAX_SECONDS),
        "{what} took {:?}",
        m.elapsed
    );
    assert!(
        m.peak_rss_bytes < MAX_RSS_BYTES,
        "{what}: peak RSS {} bytes",
        m.peak_rss_bytes
    );
    assert!(
        m.output_bytes <= MAX_OUTPUT_BYTES,
        "{what}: {} bytes of output",
        m.output_bytes
    );
    assert!(!m.stderr.contains("panicked"), "{what}: {}", m.stderr);
}

fn temp_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("gangway-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn save(name: &str, bytes: &[u8]) -> String {
    let path = temp_dir().join(name);
    std::fs::write(&path, bytes).unwrap();
    path.display().to_string()
}

/// When a module fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fails {
    /// At load (validation, limits, or its warm-up call).
    AtLoad,
    /// In real rounds only.
    InRounds,
}

/// Every kind of hostile module: (file name, bytes, when it fails, what
/// the verdict names).
fn hostile_modules() -> Vec<(&'static str, Vec<u8>, Fails, &'static str)> {
    let wat = |body: &str| guests::fairness(100, body, "");
    let mut two_memories = guests::fairness_wat("2.0.0", 100, "(unreachable)", "");
    two_memories = two_memories.replace(
        "(memory (export \"memory\") 1)",
        "(memory (export \"memory\") 1)\n  (memory $second 1)",
    );
    let locals = guests::fairness_wat("2.0.0", 100, "(unreachable)", "").replace(
        "(param $ptr i32) (param $len i32) (result i32)",
        &format!(
            "(param $ptr i32) (param $len i32) (result i32) {}",
            "(local i32)".repeat(40_000)
        ),
    );
    let flood = guests::with_log(&guests::fairness_wat(
        "2.0.0",
        0,
        r#"(drop (memory.grow (i32.const 900)))
           (loop $more
             (call $log (i32.const 2) (i32.const 65536) (i32.const 58720256))
             (br $more))"#,
        "",
    ));
    let componentize = |core: &str| guests::componentize(core, &[], guests::WIT, "fairness-policy");
    vec![
        (
            "infinite-loop.wasm",
            guests::hostile("infinite-loop"),
            Fails::InRounds,
            "ran out of fuel",
        ),
        (
            "memory-bomb.wasm",
            guests::hostile("memory-bomb"),
            Fails::InRounds,
            "memory cap",
        ),
        (
            "stack-overflow.wasm",
            guests::hostile("stack-overflow"),
            Fails::InRounds,
            "trapped",
        ),
        (
            "huge-refusal.wasm",
            wat(r#"(drop (memory.grow (i32.const 900)))
                   (memory.fill (i32.const 65536) (i32.const 120) (i32.const 58720256))
                   (i32.store8 (i32.const 16) (i32.const 1))
                   (i32.store (i32.const 20) (i32.const 65536))
                   (i32.store (i32.const 24) (i32.const 58720256))
                   (return (i32.const 16))"#),
            Fails::InRounds,
            "refused: xxxx",
        ),
        (
            "huge-reply.wasm",
            wat(r#"(drop (memory.grow (i32.const 900)))
                   (memory.fill (i32.const 65536) (i32.const 1) (i32.const 58720256))
                   (return (call $reply (i32.const 65536) (i32.const 58720256)))"#),
            Fails::InRounds,
            "reply does not decode",
        ),
        (
            "log-flood.wasm",
            componentize(&flood),
            Fails::AtLoad,
            "ran out of fuel",
        ),
        (
            "two-memories.wasm",
            componentize(&two_memories),
            Fails::AtLoad,
            "multiple memories",
        ),
        (
            "many-locals.wasm",
            componentize(&locals),
            Fails::AtLoad,
            "too large to compile safely",
        ),
    ]
}

#[test]
fn policy_check_bounds_every_hostile_module() {
    for (name, bytes, _, verdict) in hostile_modules() {
        let path = save(name, &bytes);
        let m = measured(env!("CARGO_BIN_EXE_policy-check"), &[&path]);
        within_bounds(&format!("policy-check {name}"), &m);
        assert_eq!(m.status.code(), Some(1), "{name}: {}", m.stdout);
        assert_eq!(m.stdout.lines().count(), 1, "{name}: {}", m.stdout);
        assert!(m.stdout.starts_with("FAIL: "), "{name}: {}", m.stdout);
        assert!(m.stdout.contains(verdict), "{name}: {}", m.stdout);
    }
}

#[test]
fn replay_quarantines_or_refuses_every_hostile_module() {
    let out = temp_dir().join("replay");
    for (name, bytes, fails, verdict) in hostile_modules() {
        let path = save(name, &bytes);
        let dir = out.join(name);
        let args = [
            "--fairness",
            &path,
            "--jobs",
            "2000",
            "--no-plots",
            "--out",
            dir.to_str().unwrap(),
        ];
        let m = measured(env!("CARGO_BIN_EXE_replay"), &args);
        within_bounds(&format!("replay --fairness {name}"), &m);
        match fails {
            Fails::AtLoad => {
                assert!(!m.status.success(), "{name}: {}", m.stdout);
                assert!(m.stderr.contains(name), "{name}: {}", m.stderr);
                assert!(m.stderr.contains(verdict), "{name}: {}", m.stderr);
            }
            Fails::InRounds => {
                assert!(m.status.success(), "{name}: {}", m.stderr);
                quarantined(&dir, name, verdict);
                assert!(
                    m.stdout
                        .contains(&format!("fairness policy {path} quarantined at")),
                    "{name}: {}",
                    m.stdout
                );
            }
        }
    }
}

/// The report names the quarantine, the error and the policy restored.
fn quarantined(dir: &Path, name: &str, verdict: &str) {
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap();
    let run = &report["runs"][0];
    let q = run["quarantines"].as_array().unwrap();
    assert_eq!(q.len(), 1, "{name}: {q:?}");
    assert_eq!(q[0]["slot"], "fairness");
    assert!(q[0]["module"].as_str().unwrap().ends_with(name), "{q:?}");
    assert!(
        q[0]["error"]
            .as_str()
            .unwrap()
            .contains(verdict.trim_start_matches("refused: "))
    );
    assert!(
        q[0]["restored"]
            .as_str()
            .is_some_and(|r| !r.is_empty() && r != name)
    );
    // Three failures in a row quarantine it; nothing fails after that.
    assert_eq!(run["policy_errors"], 3, "{name}");
    assert_eq!(run["jobs"]["never_started"], 0, "{name}");
}
