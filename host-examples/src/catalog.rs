//! The built-in policy library by name, and presets of all three slots.
//!
//! Every policy crate under `plugins/` is listed here by its name (the
//! crate's directory) and slot. [`fairness`], [`locality`] and [`gang`] build
//! one natively from its configuration bytes (TOML; empty means defaults),
//! as the core backend the scheduler calls. [`Preset`]s are named sets of the
//! three slots with their configurations, read from `host-examples/presets.toml`
//! (data, not code); [`parse_presets`] reads the same format from any file.
//!
//! ```
//! use gangway_core::policy::Slot;
//! use gangway_host_examples::catalog;
//!
//! assert!(catalog::names(Slot::Locality).contains(&"delay"));
//! let delay = catalog::locality("delay", b"widen_after_s = [120]").unwrap();
//! assert_eq!(delay.name(), "delay");
//! assert!(catalog::locality("delay", b"widen_after = 1").is_err());
//!
//! let philly = catalog::preset("philly").unwrap();
//! assert_eq!(philly.fairness.policy, "vc-quota");
//! let set = philly.build().unwrap();
//! assert_eq!(set.names(), ["vc-quota", "delay", "backfill"]);
//! ```

use gangway_core::PlacementStrategy;
use gangway_core::policy::{
    FairnessBackend, GangBackend, LocalityBackend, Native, PolicySet, Slot, defaults,
};
use gangway_plugin_sdk::{ConfigError, Configure, config_text};
use serde::Deserialize;

use gangway_policy_backfill::Backfill;
use gangway_policy_delay::Delay;
use gangway_policy_example_smallest_first::SmallestFirst;
use gangway_policy_fifo::Fifo;
use gangway_policy_fifo_block::FifoBlock;
use gangway_policy_greedy::Greedy;
use gangway_policy_las::Las;
use gangway_policy_max_min::MaxMin;
use gangway_policy_reserve::Reserve;
use gangway_policy_strict::Strict;
use gangway_policy_vc_quota::VcQuota;

/// Built-in fairness policies. `fifo-quota` is the core's own default
/// (FIFO within host-set quotas); it has no plugin crate.
pub const FAIRNESS: &[&str] = &[
    "vc-quota",
    "max-min",
    "las",
    "fifo",
    "fifo-quota",
    "example-smallest-first",
];

/// Built-in locality-relaxation policies.
pub const LOCALITY: &[&str] = &["delay", "strict", "greedy"];

/// Built-in gang policies.
pub const GANG: &[&str] = &["backfill", "fifo-block", "reserve"];

/// The presets file compiled into the catalog.
pub const PRESETS_TOML: &str = include_str!("../presets.toml");

/// The built-in policy names of `slot`.
///
/// ```
/// use gangway_core::policy::Slot;
/// assert_eq!(gangway_host_examples::catalog::names(Slot::Gang), ["backfill", "fifo-block", "reserve"]);
/// ```
pub fn names(slot: Slot) -> &'static [&'static str] {
    match slot {
        Slot::Fairness => FAIRNESS,
        Slot::Locality => LOCALITY,
        Slot::Gang => GANG,
    }
}

/// The slot of a built-in policy name (names are unique across slots).
pub fn slot_of(name: &str) -> Option<Slot> {
    Slot::ALL.into_iter().find(|s| names(*s).contains(&name))
}

/// A policy or preset the catalog cannot provide.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    /// No built-in policy of that name in the slot.
    #[error("unknown {slot} policy {name:?} (built in: {known})")]
    UnknownPolicy {
        /// The slot asked for.
        slot: Slot,
        /// The name given.
        name: String,
        /// The slot's built-in names, comma-separated.
        known: String,
    },
    /// The policy refused its configuration.
    #[error("{slot} policy {name:?}: {source}")]
    Config {
        /// The slot.
        slot: Slot,
        /// The policy.
        name: String,
        /// What the policy said.
        #[source]
        source: ConfigError,
    },
    /// No preset of that name.
    #[error("unknown preset {name:?} (known: {known})")]
    UnknownPreset {
        /// The name given.
        name: String,
        /// The known presets, comma-separated.
        known: String,
    },
    /// A presets file that does not parse or names an unknown policy.
    #[error("presets: {0}")]
    Presets(String),
}

fn configure<P: Configure>(slot: Slot, name: &str, config: &[u8]) -> Result<P, CatalogError> {
    P::from_config(config).map_err(|source| CatalogError::Config {
        slot,
        name: name.to_string(),
        source,
    })
}

fn native<P: Configure>(slot: Slot, name: &str, config: &[u8]) -> Result<Native<P>, CatalogError> {
    Ok(Native::new(name, configure::<P>(slot, name, config)?))
}

fn unknown(slot: Slot, name: &str) -> CatalogError {
    CatalogError::UnknownPolicy {
        slot,
        name: name.to_string(),
        known: names(slot).join(", "),
    }
}

/// The core's `fifo-quota` default takes no options.
struct FifoQuota(defaults::FifoQuota);

impl Configure for FifoQuota {
    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        if config_text(config)?.trim().is_empty() {
            Ok(FifoQuota(defaults::FifoQuota))
        } else {
            Err(ConfigError("fifo-quota takes no configuration".to_string()))
        }
    }
}

/// Builds the built-in fairness policy `name` natively from `config` (TOML
/// bytes; empty means defaults).
pub fn fairness(name: &str, config: &[u8]) -> Result<Box<dyn FairnessBackend>, CatalogError> {
    let s = Slot::Fairness;
    Ok(match name {
        "vc-quota" => Box::new(native::<VcQuota>(s, name, config)?),
        "max-min" => Box::new(native::<MaxMin>(s, name, config)?),
        "las" => Box::new(native::<Las>(s, name, config)?),
        "fifo" => Box::new(native::<Fifo>(s, name, config)?),
        "fifo-quota" => Box::new(Native::new(
            name,
            configure::<FifoQuota>(s, name, config)?.0,
        )),
        "example-smallest-first" => Box::new(native::<SmallestFirst>(s, name, config)?),
        _ => return Err(unknown(s, name)),
    })
}

/// Builds the built-in locality policy `name` natively from `config`.
pub fn locality(name: &str, config: &[u8]) -> Result<Box<dyn LocalityBackend>, CatalogError> {
    let s = Slot::Locality;
    Ok(match name {
        "delay" => Box::new(native::<Delay>(s, name, config)?),
        "strict" => Box::new(native::<Strict>(s, name, config)?),
        "greedy" => Box::new(native::<Greedy>(s, name, config)?),
        _ => return Err(unknown(s, name)),
    })
}

/// Builds the built-in gang policy `name` natively from `config`.
pub fn gang(name: &str, config: &[u8]) -> Result<Box<dyn GangBackend>, CatalogError> {
    let s = Slot::Gang;
    Ok(match name {
        "backfill" => Box::new(native::<Backfill>(s, name, config)?),
        "fifo-block" => Box::new(native::<FifoBlock>(s, name, config)?),
        "reserve" => Box::new(native::<Reserve>(s, name, config)?),
        _ => return Err(unknown(s, name)),
    })
}

/// One slot of a [`Preset`]: a policy name and its configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotSpec {
    /// A built-in policy name of the slot.
    pub policy: String,
    /// Its configuration as TOML text (empty: defaults).
    pub config: String,
}

/// A named set of the three slots' policies with their configurations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Preset {
    /// The preset's name (`philly`, `locality-first`, ...).
    pub name: String,
    /// One line on what it models.
    pub description: String,
    /// Fairness slot.
    pub fairness: SlotSpec,
    /// Locality slot.
    pub locality: SlotSpec,
    /// Gang slot.
    pub gang: SlotSpec,
    /// How placement search breaks ties (`placement = "spread"` in the file
    /// models a YARN-style scheduler; best fit by default).
    pub placement: PlacementStrategy,
}

impl Preset {
    /// The spec of one slot.
    pub fn slot(&self, slot: Slot) -> &SlotSpec {
        match slot {
            Slot::Fairness => &self.fairness,
            Slot::Locality => &self.locality,
            Slot::Gang => &self.gang,
        }
    }

    /// Builds the three policies natively.
    pub fn build(&self) -> Result<PolicySet, CatalogError> {
        Ok(PolicySet {
            fairness: fairness(&self.fairness.policy, self.fairness.config.as_bytes())?,
            locality: locality(&self.locality.policy, self.locality.config.as_bytes())?,
            gang: gang(&self.gang.policy, self.gang.config.as_bytes())?,
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    preset: Vec<RawPreset>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPreset {
    name: String,
    #[serde(default)]
    description: String,
    fairness: RawSlot,
    locality: RawSlot,
    gang: RawSlot,
    #[serde(default)]
    placement: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSlot {
    policy: String,
    #[serde(default)]
    config: toml::Table,
}

/// Parses a presets file (the format of `host-examples/presets.toml`):
/// checks that names are unique and every policy exists in its slot. Policy
/// configurations are checked when a preset is built.
///
/// ```
/// let text = r#"
/// [[preset]]
/// name = "mine"
/// fairness = { policy = "las", config = { thresholds_gpu_s = [600] } }
/// locality = { policy = "strict" }
/// gang = { policy = "reserve", config = { max_reservations = 2 } }
/// "#;
/// let presets = gangway_host_examples::catalog::parse_presets(text).unwrap();
/// assert_eq!(presets[0].gang.config.trim(), "max_reservations = 2");
/// assert!(presets[0].build().is_ok());
/// ```
pub fn parse_presets(text: &str) -> Result<Vec<Preset>, CatalogError> {
    let raw: RawFile = toml::from_str(text).map_err(|e| CatalogError::Presets(e.to_string()))?;
    let mut out: Vec<Preset> = Vec::with_capacity(raw.preset.len());
    for p in raw.preset {
        if out.iter().any(|q| q.name == p.name) {
            return Err(CatalogError::Presets(format!(
                "preset {:?} is defined twice",
                p.name
            )));
        }
        let spec = |slot: Slot, s: RawSlot| -> Result<SlotSpec, CatalogError> {
            if !names(slot).contains(&s.policy.as_str()) {
                return Err(CatalogError::Presets(format!(
                    "preset {:?}: {}",
                    p.name,
                    unknown(slot, &s.policy)
                )));
            }
            let config = toml::to_string(&s.config).map_err(|e| {
                CatalogError::Presets(format!("preset {:?}: {slot} config: {e}", p.name))
            })?;
            Ok(SlotSpec {
                policy: s.policy,
                config,
            })
        };
        let placement = match p.placement.as_deref() {
            None | Some("best-fit") => PlacementStrategy::BestFit,
            Some("spread") => PlacementStrategy::Spread,
            Some(other) => {
                return Err(CatalogError::Presets(format!(
                    "preset {:?}: placement {other:?} is not \"best-fit\" or \"spread\"",
                    p.name
                )));
            }
        };
        let fairness = spec(Slot::Fairness, p.fairness)?;
        let locality = spec(Slot::Locality, p.locality)?;
        let gang = spec(Slot::Gang, p.gang)?;
        out.push(Preset {
            name: p.name,
            description: p.description,
            fairness,
            locality,
            gang,
            placement,
        });
    }
    Ok(out)
}

/// Every built-in preset, in the order of `presets.toml`.
///
/// ```
/// let names: Vec<String> = gangway_host_examples::catalog::presets()
///     .unwrap()
///     .into_iter()
///     .map(|p| p.name)
///     .collect();
/// assert_eq!(names, ["philly", "locality-first", "tiresias", "fifo", "defaults"]);
/// ```
pub fn presets() -> Result<Vec<Preset>, CatalogError> {
    parse_presets(PRESETS_TOML)
}

/// The built-in preset `name`.
pub fn preset(name: &str) -> Result<Preset, CatalogError> {
    let all = presets()?;
    let known = all
        .iter()
        .map(|p| p.name.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    all.iter()
        .find(|p| p.name == name)
        .cloned()
        .ok_or_else(|| CatalogError::UnknownPreset {
            name: name.to_string(),
            known,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use gangway_core::{AttemptEnd, JobSpec, Scheduler, Topology};
    use gangway_plugin_sdk::JobId;
    use proptest::prelude::*;

    #[test]
    fn every_listed_name_builds_with_defaults() {
        for name in FAIRNESS {
            assert_eq!(fairness(name, b"").unwrap().name(), *name);
        }
        for name in LOCALITY {
            assert_eq!(locality(name, b"").unwrap().name(), *name);
        }
        for name in GANG {
            assert_eq!(gang(name, b"").unwrap().name(), *name);
        }
        for slot in Slot::ALL {
            for name in names(slot) {
                assert_eq!(slot_of(name), Some(slot));
            }
        }
    }

    #[test]
    fn unknown_names_and_bad_configs_say_what_is_wrong() {
        let e = gang("easy", b"").err().unwrap();
        assert_eq!(
            e.to_string(),
            "unknown gang policy \"easy\" (built in: backfill, fifo-block, reserve)"
        );
        // A locality name in the fairness slot is unknown there.
        assert!(matches!(
            fairness("delay", b""),
            Err(CatalogError::UnknownPolicy { .. })
        ));
        let e = fairness("vc-quota", b"lending = 1").err().unwrap();
        assert!(matches!(e, CatalogError::Config { .. }));
        assert!(e.to_string().contains("unknown field `lending`"), "{e}");
        assert!(fairness("fifo-quota", b"x = 1").is_err());
    }

    #[test]
    fn every_preset_builds_and_names_match() {
        let all = presets().unwrap();
        assert!(all.len() >= 4);
        for p in &all {
            let set = p.build().unwrap();
            assert_eq!(
                set.names(),
                [
                    p.fairness.policy.as_str(),
                    p.locality.policy.as_str(),
                    p.gang.policy.as_str()
                ]
            );
            assert!(!p.description.is_empty(), "{} has no description", p.name);
        }
        let lf = preset("locality-first").unwrap();
        assert_eq!(lf.slot(Slot::Locality).policy, "strict");
        assert_eq!(lf.gang.config.trim(), "after_s = 300");
        let e = preset("yarn").unwrap_err();
        assert!(e.to_string().contains("philly"), "{e}");
    }

    #[test]
    fn bad_preset_files_are_rejected() {
        let twice = "[[preset]]\nname='a'\nfairness={policy='fifo'}\nlocality={policy='strict'}\ngang={policy='backfill'}\n";
        let e = parse_presets(&format!("{twice}{twice}")).unwrap_err();
        assert!(e.to_string().contains("defined twice"), "{e}");
        let wrong_slot = "[[preset]]\nname='a'\nfairness={policy='strict'}\nlocality={policy='strict'}\ngang={policy='backfill'}\n";
        let e = parse_presets(wrong_slot).unwrap_err();
        assert!(e.to_string().contains("unknown fairness policy"), "{e}");
        let e = parse_presets("[[preset]]\nname='a'\n").unwrap_err();
        assert!(e.to_string().contains("missing field"), "{e}");
        // A bad option is caught when the preset is built.
        let bad = "[[preset]]\nname='a'\nfairness={policy='fifo'}\nlocality={policy='delay', config={wait=1}}\ngang={policy='backfill'}\n";
        let p = parse_presets(bad).unwrap();
        assert!(matches!(
            p[0].build(),
            Err(CatalogError::Config {
                slot: Slot::Locality,
                ..
            })
        ));
    }

    /// 2 racks x 4 servers x 8 GPUs, filled with 64 one-GPU jobs; then a
    /// 16-GPU gang (one rack under strict locality) arrives, and while the
    /// original jobs end in `release` order, a new 1-GPU job arrives for each.
    /// Returns the step at which the gang started, if it did, and checks every
    /// reservation and the round invariant on the way.
    fn big_gang_under_a_stream(gang: Box<dyn GangBackend>, release: &[usize]) -> Option<usize> {
        let set = PolicySet {
            fairness: fairness("fifo", b"").unwrap(),
            locality: locality("strict", b"").unwrap(),
            gang,
        };
        let topo = Topology::uniform(2, 4, 8).unwrap();
        let racks = topo.domains_at(gangway_plugin_sdk::Level(1)).to_vec();
        let mut sched = Scheduler::with_policies(topo, set);
        let vc = sched.virtual_cluster("all");
        let spec = |id: u64, gpus: u32, t: u64| JobSpec {
            id: JobId(id),
            vc,
            user: 0,
            gpus,
            submitted_s: t,
        };
        for i in 0..64 {
            sched.submit(spec(i, 1, 0)).unwrap();
        }
        assert_eq!(sched.round(0).unwrap().starts.len(), 64);
        let big = JobId(10_000);
        sched.submit(spec(big.0, 16, 1)).unwrap();
        let first = sched.round(1).unwrap();
        assert!(first.starts.is_empty());
        for (step, &i) in release.iter().enumerate() {
            let now = 2 + step as u64;
            sched
                .end_attempt(JobId(i as u64), now, AttemptEnd::Passed)
                .unwrap();
            sched.submit(spec(1_000 + step as u64, 1, now)).unwrap();
            let room = racks.iter().any(|r| sched.state().domain_free(*r) >= 16);
            let report = sched.round(now).unwrap();
            for r in &report.reservations {
                assert_eq!(r.job, big);
                assert!(r.held_gpus <= 16, "held {} for a 16-GPU gang", r.held_gpus);
            }
            let started = report.starts.iter().any(|s| s.job == big);
            // The gang is first in FIFO order: room in a rack means it starts.
            assert_eq!(started, room, "step {step}: room {room}, started {started}");
            sched.check_invariants().unwrap();
            if started {
                return Some(step);
            }
        }
        None
    }

    fn reserve_now() -> Box<dyn GangBackend> {
        gang("reserve", b"after_s = 0\nmax_reservations = 1").unwrap()
    }

    #[test]
    fn backfill_starves_the_gang_that_reserve_lets_start() {
        let order: Vec<usize> = (0..64).collect();
        let backfill = gang("backfill", b"").unwrap();
        assert_eq!(big_gang_under_a_stream(backfill, &order), None);
        assert!(big_gang_under_a_stream(reserve_now(), &order).is_some());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn reserved_gang_starts_once_enough_capacity_frees(
            release in Just((0..64usize).collect::<Vec<_>>()).prop_shuffle()
        ) {
            // Inside: every reservation held at most the gang's 16 GPUs, and
            // the gang started in the first round with room for it. Held GPUs
            // are never refilled by the stream, so its rack only gains free
            // GPUs: at worst the other rack's 32 jobs end first, then 16 of
            // its own, so it starts by the 48th release (step 47).
            let step = big_gang_under_a_stream(reserve_now(), &release);
            prop_assert!(step.is_some_and(|s| s <= 47), "started at step {:?}", step);
        }
    }
}
