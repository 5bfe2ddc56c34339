//! Turning `--policies/--fairness/--locality/--gang/--config/--compare` into
//! policy sets: built-in policies by name (as Wasm modules, or natively with
//! `--native`), or `.wasm` files.

use gangway_core::policy::{FairnessBackend, GangBackend, LocalityBackend, PolicySet, Slot};
use gangway_core::wasm::{Budget, PolicyEngine, PolicyModule, SandboxConfig};

use crate::catalog;

use crate::replay_cli::Cli;
use crate::report::Policies;

/// One slot's choice: a policy name or module path, and its configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotChoice {
    /// A built-in name or a path ending in `.wasm`.
    pub policy: String,
    /// Configuration bytes (empty: defaults).
    pub config: Vec<u8>,
}

/// A named set of three slot choices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyChoice {
    /// Preset or set name (used in reports).
    pub name: String,
    /// Fairness slot.
    pub fairness: SlotChoice,
    /// Locality slot.
    pub locality: SlotChoice,
    /// Gang slot.
    pub gang: SlotChoice,
    /// How placement search breaks ties.
    pub placement: gangway_core::PlacementStrategy,
}

/// A policy choice that cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum PolicyResolveError {
    /// No such policy for the slot.
    #[error("unknown {slot} policy {name:?} (built in: {known}; or give a path to a .wasm module)")]
    UnknownPolicy {
        /// The slot.
        slot: Slot,
        /// The name given.
        name: String,
        /// The built-in names.
        known: String,
    },
    /// A bad `--config` argument or file.
    #[error("{0}")]
    Config(String),
    /// The catalog refused a name or configuration.
    #[error("{0}")]
    Catalog(String),
    /// A Wasm module could not be loaded or instantiated.
    #[error("{0}")]
    Module(String),
}

fn slot_of(name: &str) -> Option<Slot> {
    Slot::ALL.into_iter().find(|s| s.as_str() == name)
}

/// The policy sets the command line asks for, in order.
pub fn choices(cli: &Cli) -> Result<Vec<PolicyChoice>, PolicyResolveError> {
    let names: Vec<String> = if cli.compare.is_empty() {
        vec![cli.policies.clone().unwrap_or_else(|| "philly".into())]
    } else {
        cli.compare.clone()
    };
    let mut configs: Vec<(Slot, Vec<u8>)> = Vec::new();
    for c in &cli.config {
        let (slot, file) = c.split_once('=').ok_or_else(|| {
            PolicyResolveError::Config(format!("--config {c:?}: expected SLOT=FILE"))
        })?;
        let slot = slot_of(slot).ok_or_else(|| {
            PolicyResolveError::Config(format!(
                "--config {c:?}: unknown slot {slot:?} (fairness, locality or gang)"
            ))
        })?;
        let bytes = std::fs::read(file)
            .map_err(|e| PolicyResolveError::Config(format!("{file}: cannot read: {e}")))?;
        configs.push((slot, bytes));
    }
    let mut out = Vec::new();
    for name in names {
        let mut choice = preset(&name)?;
        for (slot, policy) in [
            (Slot::Fairness, &cli.fairness),
            (Slot::Locality, &cli.locality),
            (Slot::Gang, &cli.gang),
        ] {
            if let Some(p) = policy {
                let s = slot_choice(&mut choice, slot);
                s.policy = p.clone();
                s.config.clear();
            }
        }
        for (slot, bytes) in &configs {
            slot_choice(&mut choice, *slot).config = bytes.clone();
        }
        if cli.fairness.is_some() || cli.locality.is_some() || cli.gang.is_some() {
            choice.name = format!(
                "{}+{}+{}",
                choice.fairness.policy, choice.locality.policy, choice.gang.policy
            );
        }
        out.push(choice);
    }
    Ok(out)
}

fn slot_choice(c: &mut PolicyChoice, slot: Slot) -> &mut SlotChoice {
    match slot {
        Slot::Fairness => &mut c.fairness,
        Slot::Locality => &mut c.locality,
        Slot::Gang => &mut c.gang,
    }
}

/// A preset of the catalog (`host-examples/presets.toml`) as a choice.
pub fn preset(name: &str) -> Result<PolicyChoice, PolicyResolveError> {
    let p = catalog::preset(name).map_err(|e| PolicyResolveError::Catalog(e.to_string()))?;
    let spec = |s: &catalog::SlotSpec| SlotChoice {
        policy: s.policy.clone(),
        config: s.config.clone().into_bytes(),
    };
    Ok(PolicyChoice {
        name: p.name.clone(),
        fairness: spec(&p.fairness),
        locality: spec(&p.locality),
        gang: spec(&p.gang),
        placement: p.placement,
    })
}

/// The Wasm module holding a built-in policy: its own crate's, except the
/// core's defaults, which live together in the `builtin` module.
fn module_of(policy: &str) -> &str {
    match policy {
        "fifo-quota" => "builtin",
        other => other,
    }
}

/// Loads Wasm modules once per engine and remembers them by name.
pub struct Loader {
    engine: PolicyEngine,
}

impl Loader {
    /// A loader with a deterministic fuel budget per call (replays reproduce
    /// exactly) and the default memory cap.
    pub fn new() -> Result<Loader, PolicyResolveError> {
        let engine = PolicyEngine::new(SandboxConfig {
            budget: Budget::Fuel(Budget::DEFAULT_FUEL),
            ..SandboxConfig::default()
        })
        .map_err(|e| PolicyResolveError::Module(e.to_string()))?;
        Ok(Loader { engine })
    }

    fn module(
        &self,
        slot: Slot,
        choice: &SlotChoice,
        native: bool,
    ) -> Result<Option<PolicyModule>, PolicyResolveError> {
        let p = choice.policy.as_str();
        if p.ends_with(".wasm") {
            let bytes = std::fs::read(p)
                .map_err(|e| PolicyResolveError::Module(format!("{p}: cannot read: {e}")))?;
            let module = self
                .engine
                .load(p, &bytes)
                .map_err(|e| PolicyResolveError::Module(e.to_string()))?;
            if !module.slots().contains(&slot) {
                return Err(PolicyResolveError::Module(format!(
                    "{p} does not implement the {slot} slot (it implements {:?})",
                    module.slots()
                )));
            }
            return Ok(Some(module));
        }
        if !catalog::names(slot).contains(&p) {
            return Err(PolicyResolveError::UnknownPolicy {
                slot,
                name: p.into(),
                known: catalog::names(slot).join(", "),
            });
        }
        if native {
            return Ok(None);
        }
        let name = module_of(p);
        let bytes = gangway_plugin_artifacts::module(name).ok_or_else(|| {
            PolicyResolveError::Module(format!("built-in policy {p} has no Wasm module {name:?}"))
        })?;
        self.engine
            .load(name, bytes)
            .map(Some)
            .map_err(|e| PolicyResolveError::Module(e.to_string()))
    }
}

fn module_err(e: impl std::fmt::Display) -> PolicyResolveError {
    PolicyResolveError::Module(e.to_string())
}

/// Builds the policy set of a choice (built-ins as Wasm modules unless
/// `native`); also returns its names for the report.
pub fn build(
    loader: &Loader,
    choice: &PolicyChoice,
    native: bool,
) -> Result<(PolicySet, Policies), PolicyResolveError> {
    let catalog_err = |e: catalog::CatalogError| PolicyResolveError::Catalog(e.to_string());
    let f = &choice.fairness;
    let fairness: Box<dyn FairnessBackend> = match loader.module(Slot::Fairness, f, native)? {
        Some(m) => m.fairness(&f.config).map_err(module_err)?,
        None => catalog::fairness(&f.policy, &f.config).map_err(catalog_err)?,
    };
    let l = &choice.locality;
    let locality: Box<dyn LocalityBackend> = match loader.module(Slot::Locality, l, native)? {
        Some(m) => m.locality(&l.config).map_err(module_err)?,
        None => catalog::locality(&l.policy, &l.config).map_err(catalog_err)?,
    };
    let g = &choice.gang;
    let gang: Box<dyn GangBackend> = match loader.module(Slot::Gang, g, native)? {
        Some(m) => m.gang(&g.config).map_err(module_err)?,
        None => catalog::gang(&g.policy, &g.config).map_err(catalog_err)?,
    };
    let names = Policies {
        fairness: f.policy.clone(),
        locality: l.policy.clone(),
        gang: g.policy.clone(),
        placement: match choice.placement {
            gangway_core::PlacementStrategy::BestFit => "best-fit".into(),
            gangway_core::PlacementStrategy::Spread => "spread".into(),
        },
    };
    Ok((
        PolicySet {
            fairness,
            locality,
            gang,
        },
        names,
    ))
}
