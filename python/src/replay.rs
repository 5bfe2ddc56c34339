//! `replay_json`: the `replay` command, called with its own arguments.

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use pyo3::prelude::*;

use crate::errors::ReplayError;

/// How often, at most, a running replay looks for a signal (Ctrl-C) and
/// calls the progress callback.
const WATCH_EVERY: Duration = Duration::from_millis(100);

/// Runs the `replay` command with `args` (the arguments after the program
/// name) and returns the text of the `report.json` it wrote to `--out`. The
/// GIL is released while it runs; the progress bar shows on stderr when
/// stderr is a terminal. About every 0.1 s it takes the GIL to let Python
/// handle signals (Ctrl-C stops the replay with `KeyboardInterrupt`) and
/// calls `progress(set_index, set_name, jobs_done, jobs, simulated_s)` if
/// given; an exception from it stops the replay and is raised.
#[pyfunction]
#[pyo3(signature = (args, progress=None))]
pub(crate) fn replay_json(
    py: Python<'_>,
    args: Vec<String>,
    progress: Option<Py<PyAny>>,
) -> PyResult<String> {
    let mut raised: Option<PyErr> = None;
    let mut last = Instant::now();
    let result = py.detach(|| {
        gangway_replay::json::replay_json_observed(args, &mut |index, w| {
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
