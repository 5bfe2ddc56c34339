//! Policies for the Python `Scheduler`: presets and built-in policies (native,
//! from the catalog), Wasm modules (files, bytes, or the built-in ones), and
//! the guarded slots that swap them between rounds.
//!
//! Everything that touches the slot API of gangway-core is in this file.

use gangway_catalog as catalog;
use gangway_catalog::handles::SlotHandles;
use gangway_core::Slot;
use gangway_core::policy::{PolicySet, SlotEvent, SlotStatus};
use gangway_core::wasm::{
    Budget, LoadLimits, PolicyEngine, PolicyModule, SandboxConfig, WorkBudget,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors;
use crate::py_policy::{PyFactory, name_of};
use gangway_catalog::handles::BackendFactory;

/// A policy as Python gives it: a Wasm module's bytes, text that is a
/// built-in policy name or a path to a `.wasm` file, or a Python object
/// (a policy written in Python, run natively).
#[derive(FromPyObject)]
pub(crate) enum PolicyArg {
    /// Component bytes.
    Bytes(Vec<u8>),
    /// A built-in name, or a path ending in `.wasm`.
    Text(std::path::PathBuf),
    /// A Python policy: an object with the slot's method (or `decide`), or
    /// a function of the view.
    Object(Py<PyAny>),
}

/// A slot configuration as Python gives it: TOML text or bytes.
#[derive(FromPyObject)]
pub(crate) enum ConfigArg {
    /// TOML text.
    Text(String),
    /// Raw bytes.
    Bytes(Vec<u8>),
}

impl ConfigArg {
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        match self {
            ConfigArg::Text(t) => t.into_bytes(),
            ConfigArg::Bytes(b) => b,
        }
    }
}

/// A slot by its name (`fairness`, `locality`, `gang`, `reclaim`, `retry`,
/// `defragment`).
pub(crate) fn slot(name: &str) -> PyResult<Slot> {
    Slot::from_name(name).ok_or_else(|| {
        let known: Vec<&str> = Slot::ALL.iter().map(|s| s.as_str()).collect();
        PyValueError::new_err(format!(
            "unknown slot {name:?} (slots: {})",
            known.join(", ")
        ))
    })
}

/// The names of the presets in the built-in catalog.
#[pyfunction]
pub(crate) fn presets() -> PyResult<Vec<String>> {
    catalog::presets()
        .map(|ps| ps.into_iter().map(|p| p.name).collect())
        .map_err(errors::policy)
}

/// The built-in policy names of a slot.
#[pyfunction]
pub(crate) fn builtin_policies(slot: &str) -> PyResult<Vec<String>> {
    Ok(catalog::names(self::slot(slot)?)
        .iter()
        .map(|s| s.to_string())
        .collect())
}

/// The names of the built-in policies' Wasm modules.
#[pyfunction]
pub(crate) fn policy_module_names() -> Vec<String> {
    gangway_plugin_artifacts::names()
        .map(str::to_string)
        .collect()
}

/// The bytes of a built-in policy's Wasm module (a component implementing
/// `gangway:policy`), e.g. to write it to a file or load it in a slot.
#[pyfunction]
pub(crate) fn policy_module(name: &str) -> PyResult<Vec<u8>> {
    gangway_plugin_artifacts::module(name)
        .map(<[u8]>::to_vec)
        .ok_or_else(|| {
            errors::PolicyError::new_err(format!(
                "no built-in Wasm module {name:?} (modules: {})",
                policy_module_names().join(", ")
            ))
        })
}

/// A preset's policies, built natively, and the preset (for its placement
/// tie-break and its per-slot choices).
pub(crate) fn preset(name: &str) -> PyResult<(PolicySet, catalog::PolicyChoice)> {
    let p = catalog::preset(name).map_err(errors::policy)?;
    let set = p.build_native().map_err(errors::policy)?;
    Ok((set, p))
}

/// The host's side of the six guarded slots, and the engine Wasm modules
/// load into.
pub(crate) struct Slots {
    handles: SlotHandles,
    engine: Option<PolicyEngine>,
    /// The fuel a module may use in one slot over the scheduler's life.
    fuel_per_backend: Option<u64>,
    /// What a module may use relative to its slot's built-in policies.
    work_budget: Option<WorkBudget>,
    /// The bounds modules are held to before they compile.
    limits: LoadLimits,
}

impl Slots {
    /// Handles on every slot of `set` (which the scheduler then owns), its
    /// modules each allowed `fuel_per_backend` in a slot, held to
    /// `work_budget` and to `limits`.
    pub(crate) fn of(
        set: &PolicySet,
        fuel_per_backend: Option<u64>,
        work_budget: Option<WorkBudget>,
        limits: LoadLimits,
    ) -> Slots {
        Slots {
            handles: SlotHandles::of(set),
            engine: None,
            fuel_per_backend,
            work_budget,
            limits,
        }
    }

    fn engine(&mut self) -> PyResult<&PolicyEngine> {
        if self.engine.is_none() {
            // Fuel, not a deadline: the same decisions on every machine.
            let engine = PolicyEngine::new(SandboxConfig {
                budget: Budget::for_limits(&self.limits),
                fuel_per_backend: self.fuel_per_backend,
                work_budget: self.work_budget,
                limits: self.limits,
                ..SandboxConfig::default()
            })
            .map_err(errors::policy)?;
            self.engine = Some(engine);
        }
        self.engine
            .as_ref()
            .ok_or_else(|| errors::PolicyError::new_err("no policy engine"))
    }

    /// The Wasm module `arg` names, or `None` for a built-in policy name.
    fn module(&mut self, slot: Slot, arg: &PolicyArg) -> PyResult<Option<PolicyModule>> {
        let (name, bytes) = match arg {
            PolicyArg::Bytes(b) => ("<bytes>".to_string(), b.clone()),
            PolicyArg::Text(p) if p.extension().is_some_and(|e| e == "wasm") => {
                let name = p.display().to_string();
                let bytes = std::fs::read(p).map_err(|e| {
                    errors::PolicyError::new_err(format!("{name}: cannot read: {e}"))
                })?;
                (name, bytes)
            }
            PolicyArg::Text(_) | PolicyArg::Object(_) => return Ok(None),
        };
        let module = self.engine()?.load(&name, &bytes).map_err(|e| {
            let option = "Scheduler(..., large_policies=True)";
            match catalog::resolve::large_policy_hint(&e, &self.limits, option) {
                Some(hint) => errors::PolicyError::new_err(format!("{e} ({hint})")),
                None => errors::policy(e),
            }
        })?;
        if !module.slots().contains(&slot) {
            return Err(errors::PolicyError::new_err(format!(
                "{name} does not implement the {slot} slot (it implements {:?})",
                module.slots()
            )));
        }
        Ok(Some(module))
    }

    /// Loads `arg` for `slot` with `config` and stages it: it becomes active
    /// at the start of the next round. Returns the staged backend's name.
    pub(crate) fn stage(&mut self, slot: Slot, arg: &PolicyArg, config: &[u8]) -> PyResult<String> {
        if let PolicyArg::Object(object) = arg {
            if !config.is_empty() {
                return Err(PyValueError::new_err(
                    "a Python policy takes no config: configure the object itself",
                ));
            }
            let factory = Python::attach(|py| PyFactory {
                name: name_of(object.bind(py)),
                policy: object.clone_ref(py),
            });
            return Ok(self.handles.stage_from(slot, &factory));
        }
        let module = self.module(slot, arg)?;
        let module = module.as_ref();
        let name = match arg {
            PolicyArg::Text(p) => p.display().to_string(),
            PolicyArg::Bytes(_) | PolicyArg::Object(_) => String::new(),
        };
        self.handles
            .stage(slot, module, &name, config)
            .map_err(errors::policy)
    }

    /// Stages every slot's policy of a preset.
    pub(crate) fn stage_choice(&mut self, choice: &catalog::PolicyChoice) -> PyResult<()> {
        for slot in Slot::ALL {
            let c = choice.slot(slot);
            let arg = PolicyArg::Text(c.policy.into());
            self.stage(slot, &arg, &c.config)?;
        }
        Ok(())
    }

    /// Asks `slot` to go back to its previous policy at the next round.
    pub(crate) fn rollback(&self, slot: Slot) {
        self.handles.rollback(slot)
    }

    /// A snapshot of `slot`.
    pub(crate) fn status(&self, slot: Slot) -> SlotStatus {
        self.handles.status(slot)
    }
}

/// A slot's status as a Python dict: `active`, `active_identity` (the name
/// and, for a Wasm module, the start of its hash: what events call it),
/// `previous`, `consecutive_failures`, `recent_failures`, `calls`,
/// `failures`, `swaps`, `quarantined` and `events` (dicts with a `kind`).
pub(crate) fn status_dict<'py>(py: Python<'py>, s: &SlotStatus) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("active", &s.active)?;
    d.set_item("active_identity", &s.active_identity)?;
    d.set_item("previous", &s.previous)?;
    d.set_item("consecutive_failures", s.health.consecutive)?;
    d.set_item("recent_failures", s.health.recent_failures)?;
    d.set_item("calls", s.health.calls)?;
    d.set_item("failures", s.health.failures)?;
    d.set_item("swaps", s.swaps)?;
    d.set_item("quarantined", s.quarantined())?;
    let mut events = Vec::new();
    for e in &s.events {
        let ev = PyDict::new(py);
        match e {
            SlotEvent::Swapped { from, to } => {
                ev.set_item("kind", "swapped")?;
                ev.set_item("from", from)?;
                ev.set_item("to", to)?;
            }
            SlotEvent::Quarantined {
                module,
                restored,
                error,
            } => {
                ev.set_item("kind", "quarantined")?;
                ev.set_item("module", module)?;
                ev.set_item("restored", restored)?;
                ev.set_item("error", error.to_string())?;
            }
            SlotEvent::RolledBack { from, to } => {
                ev.set_item("kind", "rolled-back")?;
                ev.set_item("from", from)?;
                ev.set_item("to", to)?;
            }
            SlotEvent::RollbackRefused { active } => {
                ev.set_item("kind", "rollback-refused")?;
                ev.set_item("active", active)?;
            }
            other => {
                ev.set_item("kind", "other")?;
                ev.set_item("detail", format!("{other:?}"))?;
            }
        }
        events.push(ev);
    }
    d.set_item("events", events)?;
    Ok(d)
}

/// Runs the conformance kit on a Python policy for `slot`: `cases`
/// generated views (and scheduler scenarios), shrinking a failure to the
/// smallest view. Returns `None` if it passed, else the finding as text
/// (with the smallest failing view).
#[pyfunction]
#[pyo3(signature = (slot, policy, cases = 64, scenarios = 4, seed = 1))]
pub(crate) fn check_policy(
    py: Python<'_>,
    slot: &str,
    policy: Py<PyAny>,
    cases: u32,
    scenarios: u32,
    seed: u64,
) -> PyResult<Option<String>> {
    use gangway_core::conformance::{self, Options};
    let slot = self::slot(slot)?;
    let factory = PyFactory {
        name: name_of(policy.bind(py)),
        policy,
    };
    let options = Options {
        cases,
        scenarios,
        seed,
        // Python is slower than the kit's Rust budget assumes.
        time_per_job: std::time::Duration::from_millis(20),
        time_base: std::time::Duration::from_secs(2),
        ..Options::default()
    };
    let outcome = gangway_plugin_sdk::with_slot!(slot, |S| {
        let mut make = || Ok(BackendFactory::make::<S>(&factory));
        conformance::check::<S>(&factory.name, &mut make, &options).map(|_| ())
    });
    Ok(outcome.err().map(|finding| finding.to_string()))
}
