//! `replay_json`: the `replay` command, called with its own arguments.

use pyo3::prelude::*;

use crate::errors::ReplayError;

/// Runs the `replay` command with `args` (the arguments after the program
/// name) and returns the text of the `report.json` it wrote to `--out`. The
/// GIL is released while it runs; the progress bar shows on stderr when
/// stderr is a terminal.
#[pyfunction]
pub(crate) fn replay_json(py: Python<'_>, args: Vec<String>) -> PyResult<String> {
    py.detach(move || gangway_replay::json::replay_json(args))
        .map_err(|e| ReplayError::new_err(e.to_string()))
}

/// The text of `replay --help`: every argument `gangway.replay` accepts.
#[pyfunction]
pub(crate) fn replay_help() -> String {
    gangway_replay::json::replay_help()
}
