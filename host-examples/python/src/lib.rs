//! `gangway._native`: the Rust half of the `gangway` Python package.
//!
//! Python sees it through `gangway/__init__.py`, which re-exports what is
//! public; `gangway/_native.pyi` types it. Each file wraps one thing:
//! [`replay`] the `replay` command, [`topology`] topologies, [`scheduler`]
//! the scheduler and [`policy`] policy modules and their hot swap.

use gangway_plugin_sdk::Slot;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

mod errors;
mod policy;
mod py_policy;
mod replay;
mod scheduler;
mod topology;
mod wire;

/// Replay, the scheduler and policy modules of Gangway (Rust, through PyO3).
#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    // Python's process is not ours: Ray's driver, for one, installs its own
    // SIGILL and SIGSEGV handlers when `ray.init` runs, after which a
    // guest's trap that relied on wasmtime's handlers would kill the
    // interpreter. Every engine this module makes checks explicitly.
    gangway_core::wasm::set_signal_traps_default(false);
    m.add_function(wrap_pyfunction!(replay::replay_json, m)?)?;
    m.add_function(wrap_pyfunction!(replay::replay_help, m)?)?;
    m.add_function(wrap_pyfunction!(replay::calibrate_json, m)?)?;
    m.add_function(wrap_pyfunction!(replay::targets_toml, m)?)?;
    m.add_function(wrap_pyfunction!(policy::presets, m)?)?;
    m.add_function(wrap_pyfunction!(policy::builtin_policies, m)?)?;
    m.add_function(wrap_pyfunction!(policy::policy_module_names, m)?)?;
    m.add_function(wrap_pyfunction!(policy::policy_module, m)?)?;
    m.add_function(wrap_pyfunction!(policy::check_policy, m)?)?;
    m.add_function(wrap_pyfunction!(wire::wire_samples, m)?)?;
    m.add_function(wrap_pyfunction!(wire::wire_reencode, m)?)?;
    m.add_class::<topology::PyTopology>()?;
    m.add_class::<topology::PyTopologyBuilder>()?;
    m.add_class::<topology::PyServer>()?;
    m.add_class::<scheduler::PyScheduler>()?;
    m.add_class::<scheduler::PyRound>()?;
    m.add_class::<scheduler::PyStart>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // The contract's slots, from its registry (declaration order): the
    // package's per-slot keywords follow it.
    m.add(
        "SLOTS",
        PyTuple::new(m.py(), Slot::DECLARED.map(Slot::as_str))?,
    )?;
    // The contract's WIT, for `python -m gangway.componentize`.
    m.add(
        "POLICY_WIT",
        include_str!("../../../plugin-sdk/wit/policy.wit"),
    )?;
    Ok(())
}
