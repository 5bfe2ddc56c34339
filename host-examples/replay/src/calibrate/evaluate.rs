//! Running a calibration's replays: the evaluator type a caller supplies
//! (threads here, Ray tasks from Python), the in-process one, and reading
//! what a replay's `report.json` says of its fit.

use std::path::PathBuf;

use serde::Deserialize;

use super::fit::Fit;

/// Runs replays: takes argument lists (without `--out`) and returns, for
/// each, the text of its `report.json` or why it failed.
pub type Evaluate<'a> = dyn FnMut(&[Vec<String>]) -> Vec<Result<String, String>> + 'a;

/// What a calibration reads of one replay's `report.json`.
#[derive(Clone, Debug, PartialEq)]
pub struct Replayed {
    /// Its fit to the targets (`runs[0].fit`).
    pub fit: Fit,
    /// The mean share of the cluster's GPUs allocated (`runs[0].gpu_allocation_mean`).
    pub gpu_allocation_mean: f64,
}

impl Replayed {
    /// Reads a report's text.
    pub fn of(report: &str) -> Result<Replayed, String> {
        let v: serde_json::Value =
            serde_json::from_str(report).map_err(|e| format!("report.json: {e}"))?;
        let fit = v
            .pointer("/runs/0/fit")
            .ok_or("report.json has no fit (was --fit given?)")?;
        Ok(Replayed {
            fit: Fit::deserialize(fit).map_err(|e| format!("fit: {e}"))?,
            gpu_allocation_mean: v
                .pointer("/runs/0/gpu_allocation_mean")
                .and_then(serde_json::Value::as_f64)
                .unwrap_or(f64::NAN),
        })
    }
}

/// Runs `argvs` through `evaluate` and reads each report, naming the
/// replay in an error.
pub(crate) fn replay_all(
    evaluate: &mut Evaluate<'_>,
    argvs: &[Vec<String>],
) -> Result<Vec<Result<Replayed, String>>, crate::cli::ReplayError> {
    let results = evaluate(argvs);
    if results.len() != argvs.len() {
        return Err(crate::cli::ReplayError::Usage(format!(
            "the evaluator returned {} reports for {} replays",
            results.len(),
            argvs.len()
        )));
    }
    Ok(results
        .into_iter()
        .map(|r| r.and_then(|text| Replayed::of(&text)))
        .collect())
}

/// An evaluator running replays in this process on `threads` threads,
/// each in a fresh temporary folder.
pub fn local_evaluator(
    threads: usize,
) -> impl FnMut(&[Vec<String>]) -> Vec<Result<String, String>> {
    let threads = threads.max(1);
    move |argvs: &[Vec<String>]| {
        let next = std::sync::atomic::AtomicUsize::new(0);
        let results: Vec<std::sync::Mutex<Option<Result<String, String>>>> =
            argvs.iter().map(|_| std::sync::Mutex::new(None)).collect();
        std::thread::scope(|s| {
            for _ in 0..threads.min(argvs.len()) {
                s.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(argv) = argvs.get(i) else { break };
                        let r = run_one(argv);
                        if let Ok(mut slot) = results[i].lock() {
                            *slot = Some(r);
                        }
                    }
                });
            }
        });
        results
            .into_iter()
            .map(|m| {
                m.into_inner()
                    .ok()
                    .flatten()
                    .unwrap_or_else(|| Err("the replay did not run".into()))
            })
            .collect()
    }
}

/// One replay into a temporary folder, removed after.
fn run_one(argv: &[String]) -> Result<String, String> {
    static SERIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir: PathBuf =
        std::env::temp_dir().join(format!("gangway-calibrate-{}-{n}", std::process::id()));
    let mut a = argv.to_vec();
    a.extend(["--out".into(), dir.display().to_string()]);
    let r = crate::json::replay_json(a).map_err(|e| e.to_string());
    let _ = std::fs::remove_dir_all(&dir);
    r
}
