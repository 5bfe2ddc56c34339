//! Turning [`PolicyChoice`]s into policy sets: built-in policies by name (as
//! Wasm modules, or natively), or `.wasm` files; and the command line's way
//! of naming a choice (`philly`, `philly+retry=failure-aware`).

use std::collections::HashMap;

use gangway_core::Slot;
use gangway_core::policy::{BoxedBackend, PolicySet};
use gangway_core::wasm::{
    Budget, LoadLimits, PolicyEngine, PolicyModule, RoundBudget, SandboxConfig, WasmError,
    WasmErrorKind, WorkBudget,
};
use gangway_plugin_sdk::with_slot;

use crate as catalog;
use crate::{CatalogSlot, PolicyChoice, SlotChoice};

/// A policy choice that cannot be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// A malformed choice (`preset+slot=policy`) or configuration argument.
    #[error("{0}")]
    Choice(String),
    /// The catalog refused a name or configuration.
    #[error(transparent)]
    Catalog(#[from] catalog::CatalogError),
    /// A Wasm module could not be loaded or started.
    #[error("{0}")]
    Module(String),
}

/// Parses `preset[+slot=policy[@config.toml]...]`, e.g.
/// `philly+retry=failure-aware`: the preset with the named slots replaced,
/// named as written. A replaced slot runs with its defaults unless a
/// configuration file follows `@` (`philly+fairness=my.wasm@my.toml`);
/// `slot@config.toml` keeps the preset's policy and gives it that
/// configuration instead of the preset's (`philly+fairness@strict.toml`).
/// The file is read here; one that cannot be read is an error naming it
/// and the entry.
///
/// ```
/// use gangway_core::Slot;
/// use gangway_catalog::resolve::parse_choice;
///
/// let c = parse_choice("philly+retry=failure-aware+defragment=gandiva").unwrap();
/// assert_eq!(c.name, "philly+retry=failure-aware+defragment=gandiva");
/// assert_eq!(c.slot(Slot::Retry).policy, "failure-aware");
/// assert_eq!(c.slot(Slot::Fairness).policy, "vc-quota");
/// assert!(parse_choice("philly+color=red").is_err());
///
/// let dir = std::env::temp_dir().join(format!("gangway-choice-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let strict = dir.join("strict.toml");
/// std::fs::write(&strict, "lend = false\n").unwrap();
/// let c = parse_choice(&format!("philly+fairness@{}", strict.display())).unwrap();
/// assert_eq!(c.slot(Slot::Fairness).policy, "vc-quota");
/// assert_eq!(c.slot(Slot::Fairness).config, b"lend = false\n");
/// let c = parse_choice(&format!("philly+fairness=las@{}", strict.display())).unwrap();
/// assert_eq!(c.slot(Slot::Fairness).policy, "las");
/// let err = parse_choice("philly+fairness=las@no/such.toml").unwrap_err();
/// assert!(err.to_string().contains("no/such.toml"), "{err}");
/// # std::fs::remove_dir_all(&dir).unwrap();
/// ```
pub fn parse_choice(spec: &str) -> Result<PolicyChoice, PolicyResolveError> {
    let mut parts = spec.split('+');
    let base = parts.next().unwrap_or_default();
    let mut choice = catalog::preset(base)?;
    for part in parts {
        let (head, config_file) = match part.split_once('@') {
            Some((head, file)) => (head, Some(file)),
            None => (part, None),
        };
        let (slot, policy) = match head.split_once('=') {
            Some((slot, policy)) => (slot, Some(policy)),
            None if config_file.is_some() => (head, None),
            None => {
                return Err(PolicyResolveError::Choice(format!(
                    "{spec:?}: {part:?} is not SLOT=POLICY, SLOT=POLICY@CONFIG.toml or \
                     SLOT@CONFIG.toml (e.g. retry=failure-aware)"
                )));
            }
        };
        let slot = slot_named(slot, spec)?;
        let config = match config_file {
            Some(file) => std::fs::read(file).map_err(|e| {
                PolicyResolveError::Choice(format!(
                    "{spec:?}: the {slot} configuration {file}: cannot read: {e}"
                ))
            })?,
            None => Vec::new(),
        };
        let policy = match policy {
            Some(p) => p.to_string(),
            None => choice.slot(slot).policy,
        };
        choice.slots.insert(slot, SlotChoice { policy, config });
    }
    choice.name = spec.to_string();
    Ok(choice)
}

/// The slot called `name`, or an error naming `context` and the slots.
pub fn slot_named(name: &str, context: &str) -> Result<Slot, PolicyResolveError> {
    Slot::from_name(name).ok_or_else(|| {
        PolicyResolveError::Choice(format!(
            "{context:?}: unknown slot {name:?} ({})",
            Slot::DECLARED.map(Slot::as_str).join(", ")
        ))
    })
}

/// Loads Wasm modules once per engine and builds policy sets.
pub struct Loader {
    engine: PolicyEngine,
    modules: HashMap<String, PolicyModule>,
}

impl Loader {
    /// The fuel one module may use in one slot over a whole replay by
    /// default, besides its work budget: about a minute of guest CPU here
    /// (the built-in policies use at most 44 G units in the heaviest runs
    /// measured, `las` reclaiming on 20,000 jobs).
    pub const DEFAULT_FUEL_PER_BACKEND: u64 = 1_000_000_000_000;

    /// The default fuel per module and slot over a run for modules that
    /// carry an interpreter (`LoadLimits::for_interpreters`): a hundred
    /// times [`Loader::DEFAULT_FUEL_PER_BACKEND`], as for each call
    /// (`Budget::INTERPRETER_FUEL`).
    pub const INTERPRETER_FUEL_PER_BACKEND: u64 = 100 * Loader::DEFAULT_FUEL_PER_BACKEND;

    /// A loader with a deterministic fuel budget per call (replays reproduce
    /// exactly), [`Loader::DEFAULT_FUEL_PER_BACKEND`] over a run, and the
    /// default memory cap.
    pub fn new() -> Result<Loader, PolicyResolveError> {
        Loader::with_fuel_per_backend(Some(Loader::DEFAULT_FUEL_PER_BACKEND))
    }

    /// A loader as [`Loader::new`], each module in each slot allowed
    /// `fuel_per_backend` over its run (`None`: no bound; see
    /// `SandboxConfig::fuel_per_backend`).
    pub fn with_fuel_per_backend(
        fuel_per_backend: Option<u64>,
    ) -> Result<Loader, PolicyResolveError> {
        Loader::with_limits(fuel_per_backend, LoadLimits::default())
    }

    /// A loader as [`Loader::with_fuel_per_backend`] whose modules are held
    /// to `limits` before they compile, e.g.
    /// [`LoadLimits::for_interpreters`] for Python policies built with
    /// componentize-py, and to the work budget for those limits
    /// ([`WorkBudget::for_limits`]).
    pub fn with_limits(
        fuel_per_backend: Option<u64>,
        limits: LoadLimits,
    ) -> Result<Loader, PolicyResolveError> {
        Loader::with_budgets(
            fuel_per_backend,
            Some(WorkBudget::for_limits(&limits)),
            limits,
        )
    }

    /// A loader as [`Loader::with_limits`] with the work budget given
    /// (`None`: none, and no round budget either; each module in each slot
    /// is then bounded only by `fuel_per_backend` over its run, everything
    /// it costs counted, and the per-call budget).
    pub fn with_budgets(
        fuel_per_backend: Option<u64>,
        work_budget: Option<WorkBudget>,
        limits: LoadLimits,
    ) -> Result<Loader, PolicyResolveError> {
        Loader::with_sandbox(Loader::sandbox(fuel_per_backend, work_budget, limits))
    }

    /// The sandbox of [`Loader::with_budgets`]: the per-call budget for
    /// `limits`, `fuel_per_backend` over a run, `work_budget`, and with a
    /// work budget the default round budget (scaled with the per-call
    /// budget).
    pub fn sandbox(
        fuel_per_backend: Option<u64>,
        work_budget: Option<WorkBudget>,
        limits: LoadLimits,
    ) -> SandboxConfig {
        SandboxConfig {
            budget: Budget::for_limits(&limits),
            fuel_per_backend,
            work_budget,
            round_budget: work_budget.map(|_| RoundBudget::default()),
            limits,
            ..SandboxConfig::default()
        }
    }

    /// A loader whose modules run in `sandbox` (e.g. [`Loader::sandbox`]
    /// with the host's seed).
    pub fn with_sandbox(sandbox: SandboxConfig) -> Result<Loader, PolicyResolveError> {
        let engine =
            PolicyEngine::new(sandbox).map_err(|e| PolicyResolveError::Module(e.to_string()))?;
        Ok(Loader {
            engine,
            modules: HashMap::new(),
        })
    }

    /// The engine modules are loaded on.
    pub fn engine(&self) -> &PolicyEngine {
        &self.engine
    }

    fn module(&mut self, name: &str, bytes: &[u8]) -> Result<PolicyModule, PolicyResolveError> {
        if let Some(m) = self.modules.get(name) {
            return Ok(m.clone());
        }
        let m = self.engine.load(name, bytes).map_err(|e| {
            let option = "`replay --large-policies` (`large_policies=True` from Python)";
            match large_policy_hint(&e, &self.engine.config().limits, option) {
                Some(hint) => PolicyResolveError::Module(format!("{e} ({hint})")),
                None => PolicyResolveError::Module(e.to_string()),
            }
        })?;
        self.modules.insert(name.to_string(), m.clone());
        Ok(m)
    }

    /// The backend of slot `S` for `choice`: a `.wasm` file, or a built-in
    /// policy as its Wasm module (natively if `native`, and always for
    /// `none`).
    pub fn backend<S: CatalogSlot>(
        &mut self,
        choice: &SlotChoice,
        native: bool,
    ) -> Result<BoxedBackend<S>, PolicyResolveError> {
        let p = choice.policy.as_str();
        if p.ends_with(".wasm") {
            let bytes = std::fs::read(p)
                .map_err(|e| PolicyResolveError::Module(format!("{p}: cannot read: {e}")))?;
            let module = self.module(p, &bytes)?;
            return module
                .backend::<S>(&choice.config)
                .map_err(|e| PolicyResolveError::Module(e.to_string()));
        }
        if !catalog::names(S::SLOT).contains(&p) {
            return Err(PolicyResolveError::UnknownPolicy {
                slot: S::SLOT,
                name: p.into(),
                known: catalog::names(S::SLOT).join(", "),
            });
        }
        match catalog::module_of(S::SLOT, p) {
            Some(name) if !native => {
                let bytes = gangway_plugin_artifacts::module(name).ok_or_else(|| {
                    PolicyResolveError::Module(format!(
                        "built-in policy {p} has no Wasm module {name:?}"
                    ))
                })?;
                let module = self.module(name, bytes)?;
                module
                    .backend::<S>(&choice.config)
                    .map_err(|e| PolicyResolveError::Module(e.to_string()))
            }
            _ => Ok(S::native(p, &choice.config)?),
        }
    }

    /// Builds the policy set of `choice` (built-ins as Wasm modules unless
    /// `native`).
    pub fn build(
        &mut self,
        choice: &PolicyChoice,
        native: bool,
    ) -> Result<PolicySet, PolicyResolveError> {
        let mut set = PolicySet::fallbacks();
        for slot in Slot::ALL {
            set = with_slot!(slot, |S| set
                .with::<S>(self.backend::<S>(&choice.slot(slot), native)?));
        }
        Ok(set)
    }
}

/// For a load refused as too large under limits smaller than
/// [`LoadLimits::for_interpreters`]: a sentence naming `option`, the host's
/// way to load modules that carry an interpreter. `None` for any other
/// error, or when those limits were already in force.
///
/// ```
/// use gangway_catalog::resolve::large_policy_hint;
/// use gangway_core::wasm::{LoadLimits, PolicyEngine, SandboxConfig};
/// let engine = PolicyEngine::new(SandboxConfig {
///     limits: LoadLimits { module_bytes: 8, ..LoadLimits::default() },
///     ..SandboxConfig::default()
/// })
/// .unwrap();
/// let refused = engine.load("big", b"\0asm\x01\0\0\0 more than eight bytes").unwrap_err();
/// let hint = large_policy_hint(&refused, &engine.config().limits, "--large-policies");
/// assert!(hint.unwrap().ends_with("loads with --large-policies"));
/// ```
pub fn large_policy_hint(error: &WasmError, limits: &LoadLimits, option: &str) -> Option<String> {
    let large = limits.core_instances >= LoadLimits::for_interpreters().core_instances;
    (matches!(error.kind, WasmErrorKind::TooLarge { .. }) && !large).then(|| {
        format!(
            "a module that carries an interpreter, such as a Python policy built with \
             componentize-py, loads with {option}"
        )
    })
}
