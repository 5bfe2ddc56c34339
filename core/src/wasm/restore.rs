//! Rebuilding the policy set a snapshot recorded, from the modules' bytes.

use gangway_plugin_sdk::with_slot;
use sha2::{Digest, Sha256};

use super::PolicyEngine;
use crate::policy::{PolicyOrigin, PolicySet};
use crate::snapshot::{Snapshot, SnapshotError};

impl PolicyEngine {
    /// The policy set `snapshot` recorded ([`Snapshot::policies`]), for
    /// [`Scheduler::restore`](crate::Scheduler::restore): each slot that ran
    /// a Wasm module runs it again, loaded from the bytes `module` gives for
    /// its record and started with the recorded configuration; every other
    /// slot keeps `base`'s policy, which must be the one recorded (same
    /// name). Refuses, naming the slot, bytes that are missing or are not
    /// the recorded module (by SHA-256), a module that no longer loads or
    /// starts, and a native policy in `base` other than the recorded one. A
    /// version-1 snapshot recorded no policies and gives `base` back.
    ///
    /// ```
    /// use gangway_core::policy::{Fairness, PolicySet};
    /// use gangway_core::snapshot::Snapshot;
    /// use gangway_core::wasm::{PolicyEngine, SandboxConfig};
    /// use gangway_core::{Scheduler, Slot, Topology};
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// # let las_bytes = gangway_plugin_artifacts::module("las").ok_or("no las")?.to_vec();
    /// let engine = PolicyEngine::new(SandboxConfig::default())?;
    /// let las = engine.load("las.wasm", &las_bytes)?;
    /// let mut sched = Scheduler::new(Topology::uniform(1, 2, 8)?);
    /// sched.swap::<Fairness>(las.backend::<Fairness>(b"thresholds_gpu_s = [60]")?);
    /// let bytes = sched.snapshot().to_bytes()?;
    ///
    /// // After a restart: the host keeps its modules by hash (or by name).
    /// let snapshot = Snapshot::from_bytes(&bytes)?;
    /// let policies = engine.policies_of(&snapshot, PolicySet::fallbacks(), |_| Some(las_bytes.clone()))?;
    /// assert_eq!(policies.name(Slot::Fairness), "las.wasm");
    /// assert_eq!(policies.origins(), snapshot.policies());
    /// let restored = Scheduler::restore(Topology::uniform(1, 2, 8)?, policies, snapshot)?;
    /// assert_eq!(restored.policies().name(Slot::Fairness), "las.wasm");
    /// # Ok(())
    /// # }
    /// ```
    pub fn policies_of(
        &self,
        snapshot: &Snapshot,
        base: PolicySet,
        mut module: impl FnMut(&PolicyOrigin) -> Option<Vec<u8>>,
    ) -> Result<PolicySet, SnapshotError> {
        let mut set = base;
        for (slot, origin) in snapshot.policies() {
            let slot = *slot;
            let fail = |why: String| SnapshotError::Policy { slot, why };
            let Some(sha256) = &origin.module_sha256 else {
                let given = set.name(slot);
                if given != origin.name {
                    return Err(fail(format!(
                        "it was the native policy {:?}, the given set has {given:?} (pass it \
                         natively in the base set)",
                        origin.name
                    )));
                }
                continue;
            };
            let bytes = module(origin).ok_or_else(|| {
                fail(format!(
                    "no bytes given for its module {} (SHA-256 {sha256})",
                    origin.name
                ))
            })?;
            let found: String = Sha256::digest(&bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            if &found != sha256 {
                return Err(fail(format!(
                    "the bytes given for {} are another module (SHA-256 {found}, recorded {sha256})",
                    origin.name
                )));
            }
            let loaded = self
                .load(&origin.name, &bytes)
                .map_err(|e| fail(e.to_string()))?;
            set = with_slot!(slot, |S| set.with::<S>(
                loaded
                    .backend::<S>(&origin.config)
                    .map_err(|e| fail(e.to_string()))?
            ));
        }
        Ok(set)
    }
}
