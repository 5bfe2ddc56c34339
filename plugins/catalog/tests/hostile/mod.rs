//! Hostile policy modules of every kind the sandbox review found, and how
//! a run over one is measured: shared by `policy-check`'s test
//! (`plugins/catalog/tests/hostile_modules.rs`) and `replay`'s
//! (`host-examples/replay/tests/hostile_runs.rs`). Each run must end with a clear verdict,
//! stay within 30 s and 512 MB of resident memory, and write at most 1 MB
//! of output.
// Each test binary uses a part of it.
#![allow(dead_code)]

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// The hostile guest builders of the core's Wasm tests.
#[allow(dead_code)]
#[path = "../../../../core/tests/wasm/guests.rs"]
pub(crate) mod guests;

pub(crate) const MAX_SECONDS: u64 = 30;
const MAX_RSS_BYTES: u64 = 512 << 20;
const MAX_OUTPUT_BYTES: usize = 1 << 20;

/// A finished run and what it cost.
pub(crate) struct Measured {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    pub(crate) output_bytes: usize,
    pub(crate) peak_rss_bytes: u64,
    pub(crate) elapsed: Duration,
}

/// The child's peak resident set so far (`VmHWM`), in bytes.
fn peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Runs `program` with `args`, sampling its peak memory until it exits.
pub(crate) fn measured(program: &str, args: &[&str]) -> Measured {
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
pub(crate) fn within_bounds(what: &str, m: &Measured) {
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

pub(crate) fn temp_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("gangway-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub(crate) fn save(name: &str, bytes: &[u8]) -> String {
    let path = temp_dir().join(name);
    std::fs::write(&path, bytes).unwrap();
    path.display().to_string()
}

/// When a module fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fails {
    /// At load (validation, limits, or its warm-up call).
    AtLoad,
    /// In real rounds only.
    InRounds,
}

/// Every kind of hostile module: (file name, bytes, when it fails, what
/// the verdict names).
pub(crate) fn hostile_modules() -> Vec<(&'static str, Vec<u8>, Fails, &'static str)> {
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
            "work budget",
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
            // Filling 56 MB costs more than its work budget allows (the
            // core's tests check huge refusals without one).
            "work budget",
        ),
        (
            "huge-reply.wasm",
            wat(r#"(drop (memory.grow (i32.const 900)))
                   (memory.fill (i32.const 65536) (i32.const 1) (i32.const 58720256))
                   (return (call $reply (i32.const 65536) (i32.const 58720256)))"#),
            Fails::InRounds,
            "work budget",
        ),
        (
            "log-flood.wasm",
            componentize(&flood),
            Fails::AtLoad,
            "work budget",
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
