//! The Python exceptions: one base, one per kind of refusal. Every message is
//! the Rust error's own text, which names what was wrong and where.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    gangway,
    GangwayError,
    PyException,
    "Base of every error Gangway raises."
);
create_exception!(
    gangway,
    ReplayError,
    GangwayError,
    "A replay that could not run; the message is the one the `replay` command prints."
);
create_exception!(
    gangway,
    TopologyError,
    GangwayError,
    "A topology that cannot be built or loaded (names the file and line)."
);
create_exception!(
    gangway,
    SchedulerError,
    GangwayError,
    "An event the scheduler refused; the scheduler is unchanged."
);
create_exception!(
    gangway,
    PolicyError,
    GangwayError,
    "A policy, preset, configuration or Wasm module that cannot be used."
);
create_exception!(
    gangway,
    InvariantViolation,
    GangwayError,
    "The scheduler's state disagrees with itself (a bug: please report it)."
);

/// Adds the exception types to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("GangwayError", py.get_type::<GangwayError>())?;
    m.add("ReplayError", py.get_type::<ReplayError>())?;
    m.add("TopologyError", py.get_type::<TopologyError>())?;
    m.add("SchedulerError", py.get_type::<SchedulerError>())?;
    m.add("PolicyError", py.get_type::<PolicyError>())?;
    m.add("InvariantViolation", py.get_type::<InvariantViolation>())?;
    Ok(())
}

/// A topology error as a Python exception.
pub(crate) fn topology(e: gangway_core::TopologyError) -> PyErr {
    TopologyError::new_err(e.to_string())
}

/// A scheduler error as a Python exception.
pub(crate) fn scheduler(e: gangway_core::SchedulerError) -> PyErr {
    SchedulerError::new_err(e.to_string())
}

/// A policy error (any displayable one) as a Python exception.
pub(crate) fn policy(e: impl std::fmt::Display) -> PyErr {
    PolicyError::new_err(e.to_string())
}
