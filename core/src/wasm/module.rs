//! What a loaded module is made of: the shared engine's state, a compiled
//! component (its slots, how calls enter it), and the [`PolicyModule`]
//! handle the host holds. Made by the engine (`engine.rs`); a module's slot
//! backends are in `backend.rs`, its warm-up in `warm_up.rs`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use gangway_plugin_sdk::{ConfigForm, Slot};
use wasmtime::Engine;
use wasmtime::component::{ComponentExportIndex, InstancePre, Linker};

use super::config::{CallPath, SandboxConfig};
use super::direct::DirectCode;
use super::disk_cache::DiskCache;
use super::store::{HostState, LogTally};

/// The engine's state shared by every module it loaded.
pub(crate) struct EngineInner {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<HostState>,
    pub(crate) config: SandboxConfig,
    /// Epoch ticks per call (0: no epoch deadline).
    pub(crate) deadline_ticks: u64,
    /// How often the epoch advances (zero: no epoch deadline).
    pub(crate) tick: std::time::Duration,
    pub(crate) cache: Mutex<HashMap<[u8; 32], Arc<Compiled>>>,
    /// Compiled code kept on disk across processes.
    pub(crate) disk: DiskCache,
    /// What every module's instances logged.
    pub(crate) logs: Arc<LogTally>,
    pub(crate) ticker: Option<Arc<Ticker>>,
}

/// The epoch ticker's controls: whether to stop, and how many ticks it
/// has made (the engine's coarse clock).
#[derive(Debug, Default)]
pub(crate) struct Ticker {
    pub(crate) stop: AtomicBool,
    pub(crate) ticks: AtomicU64,
}

impl EngineInner {
    /// The engine's clock: its ticker's ticks if it has one.
    pub(crate) fn clock(&self) -> super::spending::Clock<'_> {
        super::spending::Clock {
            ticks: self.ticker.as_deref().map(|t| (&t.ticks, self.tick)),
        }
    }
}

impl Drop for EngineInner {
    fn drop(&mut self) {
        if let Some(ticker) = &self.ticker {
            ticker.stop.store(true, Ordering::Relaxed);
        }
    }
}

/// A slot's functions inside a compiled component.
pub(crate) struct SlotExport {
    pub(crate) slot: Slot,
    /// The exported interface name, e.g. `gangway:policy/fairness@2.0.0`.
    pub(crate) interface: String,
    pub(crate) init: ComponentExportIndex,
    pub(crate) call: ComponentExportIndex,
}

/// How a compiled module's calls are entered (see [`CallPath`]).
pub(crate) enum Code {
    /// Through the component runtime.
    Component {
        pre: InstancePre<HostState>,
        exports: Vec<SlotExport>,
    },
    /// Straight into the main core module.
    Direct(DirectCode),
}

/// A validated, compiled component, shared by every module loaded from the
/// same bytes.
pub(crate) struct Compiled {
    pub(crate) code: Code,
    /// The slots it exports, in pipeline order.
    pub(crate) slots: Vec<Slot>,
    /// The slots whose policies read their options as a configuration
    /// tree (its `gangway:config-tree` section).
    pub(crate) config_tree: Vec<Slot>,
    pub(crate) version: String,
    pub(crate) hash: [u8; 32],
    pub(crate) instantiations: AtomicU64,
    /// Fuel used by every instance of it so far.
    pub(crate) fuel_used: AtomicU64,
}

/// A loaded policy module: validated, compiled, warmed up. Cheap to clone.
/// Each slot backend made from it owns its own instance.
#[derive(Clone)]
pub struct PolicyModule {
    pub(crate) name: Arc<str>,
    pub(crate) compiled: Arc<Compiled>,
    pub(crate) engine: Arc<EngineInner>,
}

impl std::fmt::Debug for PolicyModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyModule")
            .field("name", &self.name)
            .field("slots", &self.slots())
            .field("contract_version", &self.contract_version())
            .finish()
    }
}

impl PolicyModule {
    /// The name it was loaded under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The slots it implements, in the order a round consults them.
    pub fn slots(&self) -> Vec<Slot> {
        let mut slots = self.compiled.slots.clone();
        slots.sort_by_key(|s| Slot::ALL.iter().position(|a| a == s));
        slots
    }

    /// The contract version it was built against (e.g. `2.1.0`; the lowest
    /// if its slots disagree).
    pub fn contract_version(&self) -> String {
        self.compiled.version.clone()
    }

    /// How its calls are entered: [`CallPath::Direct`] if the engine allows
    /// it and the component has the standard shape, else
    /// [`CallPath::Component`].
    pub fn call_path(&self) -> CallPath {
        match self.compiled.code {
            Code::Direct(_) => CallPath::Direct,
            Code::Component { .. } => CallPath::Component,
        }
    }

    /// The slots whose calls enter the guest once, through the slot's
    /// `-buffered` functions (contract 2.1, on the direct call path); the
    /// others' calls enter it three times (allocate the view, call, free
    /// the reply).
    pub fn buffered_slots(&self) -> Vec<Slot> {
        match &self.compiled.code {
            Code::Direct(code) => code.buffered_slots(),
            Code::Component { .. } => Vec::new(),
        }
    }

    /// How its policy in `slot` takes its configuration:
    /// [`ConfigForm::Tree`] if the module says so (its `gangway:config-tree`
    /// section), and then the host parses the TOML and hands `init` the
    /// tree ([`gangway_plugin_sdk::config_tree`]); else [`ConfigForm::Text`],
    /// the operator's bytes as given (every module built before the tree).
    pub fn config_form(&self, slot: Slot) -> ConfigForm {
        if self.compiled.config_tree.contains(&slot) {
            ConfigForm::Tree
        } else {
            ConfigForm::Text
        }
    }

    /// The SHA-256 of its bytes, in hex: the key of the compiled-module cache.
    pub fn hash(&self) -> String {
        self.compiled
            .hash
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// How many instances of this module (under any name) have been created
    /// so far, warm-up included. A failed call discards its instance, so this
    /// grows by one per recovery.
    pub fn instantiations(&self) -> u64 {
        self.compiled.instantiations.load(Ordering::Relaxed)
    }

    /// How much fuel every instance of this module (under any name) has
    /// used so far: calls, instantiation and `init`, the host's twin
    /// checks, the host's reading of what it logged and refused, and the
    /// warm-up (0 under a deadline budget, which meters no fuel).
    pub fn fuel_used(&self) -> u64 {
        self.compiled.fuel_used.load(Ordering::Relaxed)
    }
}
