//! `replay_json`: the `replay` command, called with its own arguments.

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use pyo3::prelude::*;

use crate::errors::ReplayError;

/// How often, at most, a running replay looks for a signal (Ctrl-C) and
/// calls the progress callback.
const WATCH_EVERY: Duration = Duration::from_millis(100);

/// Runs the `replay` command with `args` (the arguments after the program
/// name) and returns the text of the `report.json` it wrote to `--out`;
/// `policies` maps slots to Python policy objects that replace the slot in
/// every policy set. The
/// GIL is released while it runs; the progress bar shows on stderr when
/// stderr is a terminal. About every 0.1 s it takes the GIL to let Python
/// handle signals (Ctrl-C stops the replay with `KeyboardInterrupt`) and
/// calls `progress(set_index, set_name, jobs_done, jobs, simulated_s)` if
/// given; an exception from it stops the replay and is raised.
#[pyfunction]
#[pyo3(signature = (args, progress=None, policies=None))]
pub(crate) fn replay_json(
    py: Python<'_>,
    args: Vec<String>,
    progress: Option<Py<PyAny>>,
    policies: Option<std::collections::BTreeMap<String, Py<PyAny>>>,
) -> PyResult<String> {
    let mut overrides = Vec::new();
    for (slot, policy) in policies.unwrap_or_default() {
        let slot = crate::policy::slot(&slot)?;
        let factory = std::sync::Arc::new(crate::py_policy::PyFactory {
            name: crate::py_policy::name_of(policy.bind(py)),
            policy,
        });
        let name = factory.name.clone();
        overrides.push(gangway_replay::cli::PolicyOverride {
            slot,
            name,
            apply: std::sync::Arc::new(move |set: gangway_core::policy::PolicySet| {
                use gangway_catalog::handles::BackendFactory;
                gangway_plugin_sdk::with_slot!(slot, |S| set.with::<S>(factory.make::<S>()))
            }),
        });
    }
    let mut raised: Option<PyErr> = None;
    let mut last = Instant::now();
    let result = py.detach(|| {
        gangway_replay::json::replay_json_with(args, overrides, &mut |index, w| {
            if last.elapsed() < WATCH_EVERY {
                return ControlFlow::Continue(());
            }
            last = Instant::now();
            let outcome = Python::attach(|py| -> PyResult<()> {
                py.check_signals()?;
                if let Some(callback) = &progress {
                    callback.call1(
                        py,
                        (index, w.set, w.progress.finished, w.jobs, w.progress.now_s),
                    )?;
                }
                Ok(())
            });
            match outcome {
                Ok(()) => ControlFlow::Continue(()),
                Err(e) => {
                    raised = Some(e);
                    ControlFlow::Break(())
                }
            }
        })
    });
    match (result, raised) {
        (_, Some(e)) => Err(e),
        (Ok(json), None) => Ok(json),
        (Err(e), None) => Err(ReplayError::new_err(e.to_string())),
    }
}

/// The text of `replay --help`: every argument `gangway.replay` accepts.
#[pyfunction]
pub(crate) fn replay_help() -> String {
    gangway_replay::json::replay_help()
}

/// Runs `replay calibrate` with `args` (the arguments after `calibrate`)
/// and returns the text of the `calibrate.json` it wrote. Without
/// `evaluate`, candidate replays run on threads in this process (the GIL
/// released); with it, each batch of replays is handed to
/// `evaluate(argvs)` (a list of argument lists, without `--out`), which
/// returns one `(report_json_text, None)` or `(None, error)` per replay,
/// e.g. by running them as Ray tasks.
#[pyfunction]
#[pyo3(signature = (args, evaluate=None))]
pub(crate) fn calibrate_json(
    py: Python<'_>,
    args: Vec<String>,
    evaluate: Option<Py<PyAny>>,
) -> PyResult<String> {
    use gangway_replay::calibrate::command::{self, CalibrateCli};
    let cli = CalibrateCli::from_args(args).map_err(ReplayError::new_err)?;
    let Some(evaluate) = evaluate else {
        return py
            .detach(|| command::run_local(&cli))
            .map_err(|e| ReplayError::new_err(e.to_string()));
    };
    let mut raised: Option<PyErr> = None;
    let result = py.detach(|| {
        let mut hand_over = |argvs: &[Vec<String>]| -> Vec<Result<String, String>> {
            let outcome = Python::attach(|py| -> PyResult<Vec<Result<String, String>>> {
                py.check_signals()?;
                let answer = evaluate.call1(py, (argvs.to_vec(),))?;
                let pairs: Vec<(Option<String>, Option<String>)> = answer.extract(py)?;
                Ok(pairs
                    .into_iter()
                    .map(|(text, error)| match (text, error) {
                        (Some(t), None) => Ok(t),
                        (_, Some(e)) => Err(e),
                        (None, None) => {
                            Err("the evaluator gave neither a report nor an error".into())
                        }
                    })
                    .collect())
            });
            match outcome {
                Ok(v) => v,
                Err(e) => {
                    let message = e.to_string();
                    raised.get_or_insert(e);
                    argvs.iter().map(|_| Err(message.clone())).collect()
                }
            }
        };
        command::run(&cli, &mut hand_over)
    });
    match (result, raised) {
        (_, Some(e)) => Err(e),
        (Ok(json), None) => Ok(json),
        (Err(e), None) => Err(ReplayError::new_err(e.to_string())),
    }
}

/// The targets file (TOML text) `replay targets` measures in the job log
/// at `log` (Philly `cluster_job_log` JSON), counting only jobs that ran
/// `min_run_s` seconds or more for the waits.
#[pyfunction]
#[pyo3(signature = (log, min_run_s=0, name="observed".to_string()))]
pub(crate) fn targets_toml(
    py: Python<'_>,
    log: std::path::PathBuf,
    min_run_s: u64,
    name: String,
) -> PyResult<String> {
    use gangway_replay::calibrate::observed::{ObserveOptions, targets_from_log, to_toml};
    use gangway_replay::calibrate::targets_command::TargetsCommandError;
    let options = ObserveOptions { name, min_run_s };
    py.detach(|| -> Result<String, TargetsCommandError> {
        Ok(to_toml(&targets_from_log(&log, &options)?)?)
    })
    .map_err(|e| ReplayError::new_err(e.to_string()))
}
