//! The daemon's policies: a catalog preset, each slot optionally replaced by
//! a Wasm module, every slot guarded so that modules can be hot-swapped,
//! rolled back and quarantined while the daemon runs.
//!
//! [`build`] is the one place that turns the configuration into a policy
//! set; everything else goes through the [`Policies`] handles it returns.

use std::path::Path;

use gangway_core::PlacementStrategy;
use gangway_core::policy::{FairnessBackend, GangBackend, LocalityBackend, PolicySet, Slot};
use gangway_core::wasm::{
    Budget, GuardPolicy, GuardedSlot, PolicyEngine, PolicyModule, SandboxConfig, SlotHandle,
    SlotStatus,
};

use super::SlurmError;
use super::config::Config;
use crate::catalog;

/// The host's side of the three guarded slots, and the engine that loads
/// modules for them.
pub struct Policies {
    engine: PolicyEngine,
    fairness: SlotHandle<dyn FairnessBackend>,
    locality: SlotHandle<dyn LocalityBackend>,
    gang: SlotHandle<dyn GangBackend>,
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
    let base = preset.build().map_err(policy_err)?;
    let guard = GuardPolicy::default();
    let (fairness, fh) = GuardedSlot::<dyn FairnessBackend>::new(base.fairness, guard);
    let (locality, lh) = GuardedSlot::<dyn LocalityBackend>::new(base.locality, guard);
    let (gang, gh) = GuardedSlot::<dyn GangBackend>::new(base.gang, guard);
    let engine = PolicyEngine::new(SandboxConfig {
        budget: Budget::Fuel(Budget::DEFAULT_FUEL),
        ..SandboxConfig::default()
    })
    .map_err(policy_err)?;
    let policies = Policies {
        engine,
        fairness: fh,
        locality: lh,
        gang: gh,
    };
    for (slot, path) in [
        (Slot::Fairness, &cfg.fairness),
        (Slot::Locality, &cfg.locality),
        (Slot::Gang, &cfg.gang),
    ] {
        if let Some(path) = path {
            let wasm = std::fs::read(path)
                .map_err(|e| SlurmError::io(format!("reading {}", path.display()), e))?;
            policies.swap(slot, &path.display().to_string(), &wasm, b"")?;
        }
    }
    let set = PolicySet {
        fairness: Box::new(fairness),
        locality: Box::new(locality),
        gang: Box::new(gang),
    };
    Ok((set, preset.placement, policies))
}

/// A slot by name.
pub fn slot_named(name: &str) -> Result<Slot, SlurmError> {
    Slot::ALL
        .into_iter()
        .find(|s| s.as_str() == name)
        .ok_or_else(|| {
            SlurmError::Policy(format!(
                "unknown slot {name:?} (fairness, locality or gang)"
            ))
        })
}

impl Policies {
    /// Loads a Wasm module (the host's validation: a component of the
    /// contract, implementing `slot`, accepting `config`) and stages it in
    /// the slot; it becomes active at the start of the next round.
    pub fn swap(
        &self,
        slot: Slot,
        name: &str,
        wasm: &[u8],
        config: &[u8],
    ) -> Result<String, SlurmError> {
        let module: PolicyModule = self.engine.load(name, wasm).map_err(policy_err)?;
        if !module.slots().contains(&slot) {
            return Err(SlurmError::Policy(format!(
                "{name} does not implement the {slot} slot (it implements {:?})",
                module.slots()
            )));
        }
        match slot {
            Slot::Fairness => self
                .fairness
                .stage(module.fairness(config).map_err(policy_err)?),
            Slot::Locality => self
                .locality
                .stage(module.locality(config).map_err(policy_err)?),
            Slot::Gang => self.gang.stage(module.gang(config).map_err(policy_err)?),
        }
        Ok(format!(
            "{name} staged in the {slot} slot (contract {}); active from the next round",
            module.contract_version()
        ))
    }

    /// Asks a slot to go back to its previous policy at the next round.
    pub fn rollback(&self, slot: Slot) {
        match slot {
            Slot::Fairness => self.fairness.rollback(),
            Slot::Locality => self.locality.rollback(),
            Slot::Gang => self.gang.rollback(),
        }
    }

    /// Every slot's status.
    pub fn status(&self) -> Vec<(Slot, SlotStatus)> {
        vec![
            (Slot::Fairness, self.fairness.status()),
            (Slot::Locality, self.locality.status()),
            (Slot::Gang, self.gang.status()),
        ]
    }
}

/// Reads a module file for `swap`, naming it in errors.
pub fn read_module(path: &Path) -> Result<Vec<u8>, SlurmError> {
    std::fs::read(path).map_err(|e| SlurmError::io(format!("reading {}", path.display()), e))
}
