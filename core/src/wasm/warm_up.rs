//! A module's warm-up: every slot instantiated with empty configuration and
//! called once on a small view, its reply decoded and validated, before the
//! engine hands the module out.

use gangway_plugin_sdk::{
    ClusterSummary, Level, LevelSummary, SlotContract, VcId, VcUsage, with_slot,
};

use super::error::{WasmError, WasmErrorKind};
use super::module::PolicyModule;
use crate::policy::PolicyError;

impl PolicyModule {
    /// Instantiates every slot with empty configuration and calls it once on
    /// an empty view, checking the reply decodes and validates.
    pub(crate) fn warm_up(&self) -> Result<(), WasmError> {
        for slot in self.slots() {
            with_slot!(slot, |S| self.warm::<S>())?;
        }
        Ok(())
    }

    fn warm<S: SlotContract>(&self) -> Result<(), WasmError> {
        let mut backend = self.backend::<S>(b"")?;
        let view = S::idle_view(&warm_cluster(), &warm_vcs());
        let result = backend.decide(&view).and_then(|d| {
            S::validate(&view, &d).map_err(|e| PolicyError::new(S::SLOT, self.name(), e.into()))
        });
        result.map_err(|source| WasmError::of(&self.name, WasmErrorKind::WarmUp(source)))
    }
}

/// The cluster a slot is warmed up on: one rack of one 8-GPU server.
fn warm_cluster() -> ClusterSummary {
    let level = LevelSummary {
        domains: 1,
        max_domain_gpus: 8,
        max_free_gpus: 8,
    };
    ClusterSummary {
        total_gpus: 8,
        free_gpus: 8,
        server_level: Level(2),
        levels: vec![level, level, level],
    }
}

/// The one virtual cluster of the warm-up.
fn warm_vcs() -> Vec<VcUsage> {
    vec![VcUsage {
        id: VcId(0),
        weight: 1,
        ..VcUsage::default()
    }]
}
