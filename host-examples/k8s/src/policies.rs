//! The scheduler's policies: a catalog preset (native) in every slot, and
//! Wasm modules hot-swapped from a ConfigMap.
//!
//! The ConfigMap (`policies_configmap` in the scheduler's namespace) holds
//! a module per slot as `binaryData` key `<slot>.wasm` and, optionally, its
//! configuration as `data` key `<slot>.toml`. When a slot's module or
//! configuration changes the module is loaded, checked (a component of the
//! contract that implements the slot) and staged: it is active from the
//! next round. When its key goes away the preset's policy is staged again.
//! `gangway-k8s swap` writes these keys.

use std::collections::BTreeMap;

use gangway_catalog as catalog;
use gangway_catalog::handles::SlotHandles;
use gangway_core::policy::{PolicySet, SlotStatus};
use gangway_core::wasm::{PolicyEngine, SandboxConfig};
use gangway_core::{PlacementStrategy, Slot};
use k8s_openapi::api::core::v1::ConfigMap;

use super::K8sError;

/// The host's side of the six guarded slots.
pub struct Policies {
    engine: PolicyEngine,
    handles: SlotHandles,
    preset: catalog::PolicyChoice,
    /// Per slot, a digest of the module and configuration staged from the
    /// ConfigMap (absent: the preset's policy).
    applied: BTreeMap<Slot, u64>,
    /// The locality ladder staged for the cluster's size, if any.
    ladder: Option<Vec<u64>>,
}

/// The locality ladder (seconds a gang waits before it may span one level
/// more) for a cluster of `gpus` GPUs: the `delay` policy's own defaults,
/// 60 s for a server and 600 s for a rack, on clusters of 512 GPUs or more,
/// in proportion below, at least 5 s and 30 s (a 64-GPU cluster: 7 s and
/// 75 s). A small cluster has few places to wait for; holding a gang that
/// fits in one rack for minutes there wastes GPUs.
pub fn sized_ladder(gpus: u32) -> Vec<u64> {
    let scale = |full: u64, least: u64| (full * u64::from(gpus.min(512)) / 512).max(least);
    vec![scale(60, 5), scale(600, 30)]
}

impl std::fmt::Debug for Policies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Policies")
            .field("applied", &self.applied)
            .finish_non_exhaustive()
    }
}

fn policy_err(e: impl std::fmt::Display) -> K8sError {
    K8sError::Policy(e.to_string())
}

/// The policy set of `preset` (native), its placement strategy, and the
/// handles that swap modules into it.
pub fn build(preset: &str) -> Result<(PolicySet, PlacementStrategy, Policies), K8sError> {
    let choice = catalog::preset(preset).map_err(policy_err)?;
    let set = choice.build_native().map_err(policy_err)?;
    let engine = PolicyEngine::new(SandboxConfig::default()).map_err(policy_err)?;
    let handles = SlotHandles::of(&set);
    let strategy = choice.placement;
    Ok((
        set,
        strategy,
        Policies {
            engine,
            handles,
            preset: choice,
            applied: BTreeMap::new(),
            ladder: None,
        },
    ))
}

/// A slot by name.
pub fn slot_named(name: &str) -> Result<Slot, K8sError> {
    Slot::from_name(name).ok_or_else(|| {
        K8sError::Policy(format!(
            "unknown slot {name:?} ({})",
            Slot::DECLARED.map(Slot::as_str).join(", ")
        ))
    })
}

/// A digest of bytes (FNV-1a), to notice a changed module.
fn digest(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.iter().chain(&[0xff]) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

impl Policies {
    /// Loads a Wasm module and stages it in `slot` with `config`; it is
    /// active from the next round. Returns a sentence saying so.
    pub fn swap(
        &self,
        slot: Slot,
        name: &str,
        wasm: &[u8],
        config: &[u8],
    ) -> Result<String, K8sError> {
        let module = self.engine.load(name, wasm).map_err(policy_err)?;
        if !module.slots().contains(&slot) {
            return Err(K8sError::Policy(format!(
                "{name} does not implement the {slot} slot (it implements {:?})",
                module.slots()
            )));
        }
        self.handles
            .stage(slot, Some(&module), name, config)
            .map_err(policy_err)?;
        Ok(format!(
            "{name} staged in the {slot} slot (contract {}); active from the next round",
            module.contract_version()
        ))
    }

    /// Applies the policies ConfigMap (`None`: it does not exist): stages
    /// every slot whose module or configuration changed, and the preset's
    /// policy in every slot whose module was removed. Returns one line per
    /// change (or error: a bad module leaves its slot as it was).
    pub fn sync(&mut self, cm: Option<&ConfigMap>, source: &str) -> Vec<Result<String, String>> {
        let mut out = Vec::new();
        let empty = BTreeMap::new();
        let bin = cm.and_then(|c| c.binary_data.as_ref()).unwrap_or(&empty);
        let empty_data = BTreeMap::new();
        let data = cm.and_then(|c| c.data.as_ref()).unwrap_or(&empty_data);
        for slot in Slot::DECLARED {
            let wasm = bin.get(&format!("{slot}.wasm")).map(|b| b.0.as_slice());
            let config = data
                .get(&format!("{slot}.toml"))
                .map_or(&b""[..], |s| s.as_bytes());
            match wasm {
                Some(w) => {
                    let d = digest(&[w, config]);
                    if self.applied.get(&slot) == Some(&d) {
                        continue;
                    }
                    self.applied.insert(slot, d);
                    let name = format!("{source}:{slot}.wasm");
                    out.push(self.swap(slot, &name, w, config).map_err(|e| e.to_string()));
                }
                None if self.applied.remove(&slot).is_some() => {
                    if slot == Slot::Locality {
                        self.ladder = None;
                    }
                    let choice = self.preset.slot(slot);
                    let r = self
                        .handles
                        .stage(slot, None, &choice.policy, &choice.config)
                        .map(|n| format!("{n} (the preset's) staged in the {slot} slot again"))
                        .map_err(|e| e.to_string());
                    out.push(r);
                }
                None => {}
            }
        }
        out
    }

    /// Sizes the preset's `delay` locality ladder to a cluster of `gpus`
    /// GPUs ([`sized_ladder`], or `fixed` if not empty), with the same
    /// waits for every gang (`deadline_spread = 0`): staged when it
    /// changes, unless the slot holds a module from the ConfigMap or the
    /// preset's locality policy is not `delay`. Returns what it did.
    pub fn size_locality(&mut self, gpus: u32, fixed: &[u64]) -> Option<Result<String, String>> {
        let choice = self.preset.slot(Slot::Locality);
        if self.applied.contains_key(&Slot::Locality) || choice.policy != "delay" {
            return None;
        }
        let ladder = if fixed.is_empty() {
            sized_ladder(gpus)
        } else {
            fixed.to_vec()
        };
        if self.ladder.as_ref() == Some(&ladder) {
            return None;
        }
        let mut table: toml::Table = std::str::from_utf8(&choice.config)
            .ok()
            .and_then(|t| toml::from_str(t).ok())
            .unwrap_or_default();
        let seconds = ladder
            .iter()
            .map(|s| toml::Value::Integer(*s as i64))
            .collect();
        table.insert("widen_after_s".into(), toml::Value::Array(seconds));
        table.insert("deadline_spread".into(), toml::Value::Float(0.0));
        let config = toml::to_string(&table).unwrap_or_default();
        self.ladder = Some(ladder.clone());
        let staged = self
            .handles
            .stage(Slot::Locality, None, &choice.policy, config.as_bytes())
            .map(|_| format!("locality ladder {ladder:?} s for {gpus} GPUs staged"))
            .map_err(|e| e.to_string());
        Some(staged)
    }

    /// Every slot's status, fairness first.
    pub fn status(&self) -> Vec<(Slot, SlotStatus)> {
        Slot::DECLARED
            .into_iter()
            .map(|slot| (slot, self.handles.status(slot)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn ladders_sized_to_the_cluster() {
        assert_eq!(sized_ladder(3205), [60, 600]);
        assert_eq!(sized_ladder(512), [60, 600]);
        assert_eq!(sized_ladder(64), [7, 75]);
        assert_eq!(sized_ladder(8), [5, 30]);
        let (_, _, mut p) = build("philly").unwrap();
        let r = p.size_locality(64, &[]).unwrap().unwrap();
        assert!(r.contains("[7, 75]"), "{r}");
        assert!(p.size_locality(64, &[]).is_none(), "staged once");
        assert!(p.size_locality(64, &[30, 300]).unwrap().is_ok());
        // A preset whose locality is not delay keeps it.
        let (_, _, mut f) = build("fifo").unwrap();
        assert!(f.size_locality(64, &[]).is_none());
    }

    #[test]
    fn digests_tell_modules_apart() {
        assert_ne!(digest(&[b"a", b""]), digest(&[b"", b"a"]));
        assert_eq!(digest(&[b"ab", b"c"]), digest(&[b"ab", b"c"]));
        assert!(slot_named("fairness").is_ok());
        assert!(
            slot_named("nope")
                .unwrap_err()
                .to_string()
                .contains("unknown slot")
        );
    }
}
