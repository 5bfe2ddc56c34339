//! The daemon's policies: a catalog preset, each slot optionally replaced by
//! a Wasm module, every slot guarded so that modules can be hot-swapped,
//! rolled back and quarantined while the daemon runs.
//!
//! [`build`] is the one place that turns the configuration into a policy
//! set; everything else goes through the [`Policies`] handles it returns.

use std::path::Path;

use gangway_core::policy::{PolicySet, SlotStatus};
use gangway_core::wasm::{
    Budget, LoadLimits, PolicyEngine, PolicyModule, SandboxConfig, WorkBudget,
};
use gangway_core::{PlacementStrategy, Slot};

use super::SlurmError;
use super::config::Config;
use gangway_catalog as catalog;
use gangway_catalog::handles::SlotHandles;

/// The host's side of the six guarded slots, and the engine that loads
/// modules for them.
pub struct Policies {
    engine: PolicyEngine,
    handles: SlotHandles,
}

impl std::fmt::Debug for Policies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policies").finish_non_exhaustive()
    }
}

fn policy_err(e: impl std::fmt::Display) -> SlurmError {
    SlurmError::Policy(e.to_string())
}

/// Builds the policy set the configuration names: the preset's policies
/// (native) as each slot's baseline, with the configured Wasm modules
/// staged on top (active from the first round). Returns the set for the
/// scheduler, the preset's placement strategy, and the handles.
pub fn build(cfg: &Config) -> Result<(PolicySet, PlacementStrategy, Policies), SlurmError> {
    let preset = catalog::preset(&cfg.preset).map_err(policy_err)?;
    let set = preset.build_native().map_err(policy_err)?;
    let limits = if cfg.large_policies {
        LoadLimits::for_interpreters()
    } else {
        LoadLimits::default()
    };
    let engine = PolicyEngine::new(SandboxConfig {
        budget: Budget::for_limits(&limits),
        work_budget: Some(WorkBudget::for_limits(&limits)),
        limits,
        fuel_per_backend: (cfg.policy_fuel_per_day > 0).then_some(cfg.policy_fuel_per_day),
        fuel_period: Some(std::time::Duration::from_secs(24 * 3600)),
        ..SandboxConfig::default()
    })
    .map_err(policy_err)?;
    let policies = Policies {
        engine,
        handles: SlotHandles::of(&set),
    };
    for (&slot, path) in &cfg.modules {
        let wasm = read_module(path)?;
        policies.swap(slot, &path.display().to_string(), &wasm, b"")?;
    }
    Ok((set, preset.placement, policies))
}

/// A slot by name.
pub fn slot_named(name: &str) -> Result<Slot, SlurmError> {
    Slot::from_name(name).ok_or_else(|| {
        SlurmError::Policy(format!(
            "unknown slot {name:?} ({})",
            super::config::slot_names()
        ))
    })
}

impl Policies {
    /// Loads a Wasm module (the host's validation: a component of the
    /// contract, implementing `slot`) without staging it.
    pub fn load(&self, slot: Slot, name: &str, wasm: &[u8]) -> Result<PolicyModule, SlurmError> {
        let module: PolicyModule = self.engine.load(name, wasm).map_err(policy_err)?;
        if !module.slots().contains(&slot) {
            return Err(SlurmError::Policy(format!(
                "{name} does not implement the {slot} slot (it implements {:?})",
                module.slots()
            )));
        }
        Ok(module)
    }

    /// Stages a loaded module in the slot, with its configuration (which
    /// it must accept); it becomes active at the start of the next round.
    pub fn stage(
        &self,
        slot: Slot,
        module: &PolicyModule,
        name: &str,
        config: &[u8],
    ) -> Result<String, SlurmError> {
        self.handles
            .stage(slot, Some(module), name, config)
            .map_err(policy_err)?;
        Ok(format!(
            "{name} staged in the {slot} slot (contract {}); active from the next round",
            module.contract_version()
        ))
    }

    /// [`Policies::load`] and [`Policies::stage`].
    pub fn swap(
        &self,
        slot: Slot,
        name: &str,
        wasm: &[u8],
        config: &[u8],
    ) -> Result<String, SlurmError> {
        let module = self.load(slot, name, wasm)?;
        self.stage(slot, &module, name, config)
    }

    /// Why the compiled-module cache is not used, if another user could
    /// write it.
    pub fn cache_refused(&self) -> Option<String> {
        self.engine.module_cache_refused().map(str::to_string)
    }

    /// Asks a slot to go back to its previous policy at the next round.
    pub fn rollback(&self, slot: Slot) {
        self.handles.rollback(slot)
    }

    /// Every slot's status in the slots' declaration order, fairness first
    /// (the order `gangway status` prints).
    pub fn status(&self) -> Vec<(Slot, SlotStatus)> {
        Slot::DECLARED
            .into_iter()
            .map(|slot| (slot, self.handles.status(slot)))
            .collect()
    }
}

/// Reads a module file for `swap`, naming it in errors.
pub fn read_module(path: &Path) -> Result<Vec<u8>, SlurmError> {
    std::fs::read(path).map_err(|e| SlurmError::io(format!("reading {}", path.display()), e))
}
