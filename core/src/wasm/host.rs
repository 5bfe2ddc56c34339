//! The engine, the compiled-module cache, and loading: validate, compile,
//! warm up.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gangway_plugin_sdk::{
    ClusterSummary, Level, LevelSummary, QueueView, RoundView, VcId, VcUsage,
};
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, ComponentExportIndex, InstancePre, Linker, Val};
use wasmtime::{Config, Engine, StoreContextMut};

use super::call_name;
use super::config::{Budget, CallPath, SandboxConfig};
use super::direct::{DirectCode, TopLevel};
use super::error::WasmError;
use super::instance::{HostState, WasmBackend};
use crate::policy::{FairnessBackend, GangBackend, LocalityBackend, PolicyError, Slot};

/// The contract version this host speaks; any `1.x` module is accepted.
pub const CONTRACT_VERSION: &str = "1.0.0";
const PACKAGE: &str = "gangway:policy";
const LOG_INTERFACE: &str = "gangway:policy/log@1.0.0";

/// One shared wasmtime engine, its sandbox settings and a cache of compiled
/// modules keyed by the SHA-256 of their bytes. Cheap to clone; clones share
/// everything.
///
/// ```
/// use gangway_core::wasm::{PolicyEngine, SandboxConfig, WasmError};
///
/// let engine = PolicyEngine::new(SandboxConfig::default()).unwrap();
/// let err = engine.load("junk.wasm", b"not wasm").unwrap_err();
/// assert!(matches!(err, WasmError::NotWasm { .. }));
/// assert_eq!(err.to_string(), "module junk.wasm is not WebAssembly (no \\0asm header)");
/// ```
#[derive(Clone)]
pub struct PolicyEngine {
    inner: Arc<EngineInner>,
}

pub(crate) struct EngineInner {
    pub(crate) engine: Engine,
    linker: Linker<HostState>,
    pub(crate) config: SandboxConfig,
    /// Epoch ticks per deadline (deadline budgets only).
    pub(crate) deadline_ticks: u64,
    cache: Mutex<HashMap<[u8; 32], Arc<Compiled>>>,
    ticker_stop: Option<Arc<AtomicBool>>,
}

impl Drop for EngineInner {
    fn drop(&mut self) {
        if let Some(stop) = &self.ticker_stop {
            stop.store(true, Ordering::Relaxed);
        }
    }
}

/// A slot's functions inside a compiled component.
pub(crate) struct SlotExport {
    pub(crate) slot: Slot,
    /// The exported interface name, e.g. `gangway:policy/fairness@1.0.0`.
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
    slots: Vec<Slot>,
    version: String,
    hash: [u8; 32],
    pub(crate) instantiations: AtomicU64,
}

impl Compiled {
    pub(crate) fn exports(&self, slot: Slot) -> bool {
        self.slots.contains(&slot)
    }
}

impl std::fmt::Debug for PolicyEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyEngine")
            .field("config", &self.inner.config)
            .field("cached_modules", &self.cached_modules())
            .finish()
    }
}

impl PolicyEngine {
    /// Creates the engine for `config`: fuel metering or epoch interruption
    /// (with a ticker thread that lives as long as the engine), the stack
    /// limit, and a linker that provides only `gangway:policy/log`.
    pub fn new(config: SandboxConfig) -> Result<PolicyEngine, WasmError> {
        match config.budget {
            Budget::Fuel(0) => return Err(WasmError::Sandbox("a fuel budget of 0".into())),
            Budget::Deadline(d) if d.is_zero() => {
                return Err(WasmError::Sandbox("a deadline of 0".into()));
            }
            _ => {}
        }
        if config.memory_bytes < 64 << 10 {
            return Err(WasmError::Sandbox(format!(
                "a memory cap of {} bytes is below one Wasm page",
                config.memory_bytes
            )));
        }
        let mut wt = Config::new();
        wt.wasm_component_model(true)
            .consume_fuel(matches!(config.budget, Budget::Fuel(_)))
            .epoch_interruption(matches!(config.budget, Budget::Deadline(_)))
            .max_wasm_stack(config.stack_bytes);
        let engine = Engine::new(&wt).map_err(|e| WasmError::Engine(e.to_string()))?;

        let mut linker = Linker::<HostState>::new(&engine);
        linker
            .instance(LOG_INTERFACE)
            .and_then(|mut log| log.func_new("log", host_log))
            .map_err(|e| WasmError::Engine(e.to_string()))?;

        let (deadline_ticks, ticker_stop) = match config.budget {
            Budget::Deadline(deadline) => {
                let tick =
                    (deadline / 10).clamp(Duration::from_millis(1), Duration::from_millis(100));
                let ticks = deadline.as_nanos().div_ceil(tick.as_nanos()) + 1;
                let stop = Arc::new(AtomicBool::new(false));
                spawn_ticker(&engine, tick, stop.clone())?;
                (u64::try_from(ticks).unwrap_or(u64::MAX), Some(stop))
            }
            Budget::Fuel(_) => (0, None),
        };
        Ok(PolicyEngine {
            inner: Arc::new(EngineInner {
                engine,
                linker,
                config,
                deadline_ticks,
                cache: Mutex::new(HashMap::new()),
                ticker_stop,
            }),
        })
    }

    /// The sandbox settings.
    pub fn config(&self) -> &SandboxConfig {
        &self.inner.config
    }

    /// How many distinct modules are compiled and cached.
    pub fn cached_modules(&self) -> usize {
        self.inner.cache.lock().map(|c| c.len()).unwrap_or(0)
    }

    /// Loads a policy module under `name` (used in every error and report).
    ///
    /// A module already in the cache (same bytes) is returned at once.
    /// Otherwise the bytes must be a component; its imports must be at most
    /// `gangway:policy/log@1.x`; it must export at least one slot interface
    /// of `gangway:policy@1.x` with both of its functions; then it is
    /// compiled, and each slot is instantiated, initialised with empty
    /// configuration and called once on an empty view (the warm-up), under
    /// the sandbox's limits.
    pub fn load(&self, name: &str, bytes: &[u8]) -> Result<PolicyModule, WasmError> {
        let hash: [u8; 32] = Sha256::digest(bytes).into();
        let cached = self
            .inner
            .cache
            .lock()
            .ok()
            .and_then(|c| c.get(&hash).cloned());
        if let Some(compiled) = cached {
            return Ok(self.module(name, compiled));
        }
        let compiled = Arc::new(self.compile(name, bytes, hash)?);
        let module = self.module(name, compiled.clone());
        module.warm_up()?;
        if let Ok(mut cache) = self.inner.cache.lock() {
            cache.insert(hash, compiled);
        }
        Ok(module)
    }

    fn module(&self, name: &str, compiled: Arc<Compiled>) -> PolicyModule {
        PolicyModule {
            name: Arc::from(name),
            compiled,
            engine: self.inner.clone(),
        }
    }

    fn compile(&self, name: &str, bytes: &[u8], hash: [u8; 32]) -> Result<Compiled, WasmError> {
        let module = || name.to_string();
        if !bytes.starts_with(b"\0asm") {
            return Err(WasmError::NotWasm { module: module() });
        }
        // The preamble's layer field (bytes 6..8) is 0 for a core module, 1
        // for a component.
        if bytes.get(6..8) == Some(&[0, 0]) {
            return Err(WasmError::NotAComponent { module: module() });
        }
        let engine = &self.inner.engine;
        if self.inner.config.call_path == CallPath::Direct
            && let Some(compiled) = compile_direct(engine, bytes, hash)
        {
            return Ok(compiled);
        }
        let component = Component::new(engine, bytes).map_err(|e| WasmError::Compile {
            module: module(),
            reason: error_text(&e),
        })?;
        let ty = component.component_type();

        for (import, _) in ty.imports(engine) {
            match parse_name(import) {
                Some(("log", version)) if major(version) == Some(1) => {}
                Some(("log", _)) => {
                    return Err(WasmError::IncompatibleVersion {
                        module: module(),
                        found: import.to_string(),
                        host: CONTRACT_VERSION.into(),
                    });
                }
                _ => {
                    return Err(WasmError::ForbiddenImport {
                        module: module(),
                        import: import.to_string(),
                    });
                }
            }
        }

        let mut slots = Vec::new();
        let mut versions = Vec::new();
        let mut exports = Vec::new();
        for (export, _) in ty.exports(engine) {
            exports.push(export.to_string());
            let Some((slot, version)) = slot_export(export) else {
                continue;
            };
            if major(version) != Some(1) {
                return Err(WasmError::IncompatibleVersion {
                    module: module(),
                    found: export.to_string(),
                    host: CONTRACT_VERSION.into(),
                });
            }
            let call = call_name(slot);
            let inst =
                component
                    .get_export_index(None, export)
                    .ok_or_else(|| WasmError::NoSlots {
                        module: module(),
                        exports: export.to_string(),
                    })?;
            let func = |function: &str| {
                component
                    .get_export_index(Some(&inst), function)
                    .ok_or_else(|| WasmError::MissingExport {
                        module: module(),
                        slot,
                        interface: export.to_string(),
                        function: function.to_string(),
                    })
            };
            slots.push(SlotExport {
                slot,
                interface: export.to_string(),
                init: func("init")?,
                call: func(call)?,
            });
            versions.push(version.to_string());
        }
        if slots.is_empty() {
            return Err(WasmError::NoSlots {
                module: module(),
                exports: exports.join(", "),
            });
        }
        slots.sort_by_key(|s| s.slot);
        versions.sort();
        let pre = self
            .inner
            .linker
            .instantiate_pre(&component)
            .map_err(|e| WasmError::Link {
                module: module(),
                reason: error_text(&e),
            })?;
        Ok(Compiled {
            slots: slots.iter().map(|s| s.slot).collect(),
            code: Code::Component {
                pre,
                exports: slots,
            },
            version: versions.swap_remove(0),
            hash,
            instantiations: AtomicU64::new(0),
        })
    }
}

/// Compiles `bytes` for the direct call path if the component passes every
/// check [`PolicyEngine::load`] makes (only `log@1.x` imported, slots of
/// contract 1.x exported) and has the standard shape; `None` otherwise, and
/// the component runtime takes over (and reports what is wrong, if anything).
fn compile_direct(engine: &Engine, bytes: &[u8], hash: [u8; 32]) -> Option<Compiled> {
    let top = TopLevel::read(bytes)?;
    let imports_ok = top
        .imports
        .iter()
        .all(|i| matches!(parse_name(i), Some(("log", v)) if major(v) == Some(1)));
    if !imports_ok {
        return None;
    }
    let mut slots: Vec<(Slot, &str)> = Vec::new();
    let mut versions = Vec::new();
    for export in &top.exports {
        let Some((slot, version)) = slot_export(export) else {
            continue;
        };
        if major(version) != Some(1) || slots.iter().any(|(s, _)| *s == slot) {
            return None;
        }
        slots.push((slot, export));
        versions.push(version);
    }
    slots.sort_by_key(|(slot, _)| *slot);
    let version = versions.into_iter().min()?.to_string();
    let code = DirectCode::prepare(engine, bytes, &top, &slots)?;
    Some(Compiled {
        code: Code::Direct(code),
        slots: slots.iter().map(|(slot, _)| *slot).collect(),
        version,
        hash,
        instantiations: AtomicU64::new(0),
    })
}

/// A loaded policy module: validated, compiled, warmed up. Cheap to clone.
/// Each slot backend made from it owns its own instance.
#[derive(Clone)]
pub struct PolicyModule {
    name: Arc<str>,
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

    /// The slots it implements, in pipeline order.
    pub fn slots(&self) -> Vec<Slot> {
        self.compiled.slots.clone()
    }

    /// The contract version it was built against (e.g. `1.0.0`; the lowest
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

    /// A fairness backend running this module, configured with `config`.
    pub fn fairness(&self, config: &[u8]) -> Result<Box<dyn FairnessBackend>, WasmError> {
        Ok(Box::new(self.backend(Slot::Fairness, config)?))
    }

    /// A locality backend running this module, configured with `config`.
    pub fn locality(&self, config: &[u8]) -> Result<Box<dyn LocalityBackend>, WasmError> {
        Ok(Box::new(self.backend(Slot::Locality, config)?))
    }

    /// A gang backend running this module, configured with `config`.
    pub fn gang(&self, config: &[u8]) -> Result<Box<dyn GangBackend>, WasmError> {
        Ok(Box::new(self.backend(Slot::Gang, config)?))
    }

    pub(crate) fn backend(&self, slot: Slot, config: &[u8]) -> Result<WasmBackend, WasmError> {
        if !self.compiled.exports(slot) {
            return Err(WasmError::SlotNotExported {
                module: self.name.to_string(),
                slot,
                implemented: self
                    .slots()
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        WasmBackend::start(self.clone(), slot, config)
    }

    /// Instantiates every slot with empty configuration and calls it once on
    /// an empty view, checking the reply decodes and validates.
    fn warm_up(&self) -> Result<(), WasmError> {
        let (round, queue) = warm_up_views();
        for slot in self.slots() {
            let mut backend = self.backend(slot, b"")?;
            let result = match slot {
                Slot::Fairness => FairnessBackend::order(&mut backend, &round).and_then(|d| {
                    check(
                        slot,
                        self.name(),
                        crate::policy::validate::fairness(&round, &d),
                    )
                }),
                Slot::Locality => LocalityBackend::spread(&mut backend, &queue).and_then(|d| {
                    check(
                        slot,
                        self.name(),
                        crate::policy::validate::locality(&queue, &d),
                    )
                }),
                Slot::Gang => GangBackend::on_blocked(&mut backend, &queue).and_then(|d| {
                    check(slot, self.name(), crate::policy::validate::gang(&queue, &d))
                }),
            };
            result.map_err(|source| WasmError::WarmUp {
                module: self.name.to_string(),
                source,
            })?;
        }
        Ok(())
    }
}

fn check(
    slot: Slot,
    module: &str,
    r: Result<(), crate::policy::PolicyErrorKind>,
) -> Result<(), PolicyError> {
    r.map_err(|kind| PolicyError::new(slot, module, kind))
}

/// The views of the warm-up call: a small cluster, one VC, no jobs.
pub(crate) fn warm_up_views() -> (RoundView, QueueView) {
    let level = LevelSummary {
        domains: 1,
        max_domain_gpus: 8,
        max_free_gpus: 8,
    };
    let cluster = ClusterSummary {
        total_gpus: 8,
        free_gpus: 8,
        server_level: Level(2),
        levels: vec![level.clone(), level.clone(), level],
    };
    let round = RoundView {
        now_s: 0,
        cluster: cluster.clone(),
        vcs: vec![VcUsage {
            id: VcId(0),
            quota_gpus: None,
            weight: 1,
            held_gpus: 0,
            pending_gpus: 0,
            attained_gpu_s: 0,
        }],
        jobs: vec![],
    };
    let queue = QueueView {
        now_s: 0,
        cluster,
        jobs: vec![],
        spread: vec![],
    };
    (round, queue)
}

/// `gangway:policy/x@v` -> (`x`, `v`).
fn parse_name(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix(PACKAGE)?.strip_prefix('/')?;
    rest.split_once('@')
}

/// The slot and contract version of an export named
/// `gangway:policy/<slot>@<version>`; `None` for any other export.
fn slot_export(name: &str) -> Option<(Slot, &str)> {
    let (iface, version) = parse_name(name)?;
    let slot = Slot::ALL.into_iter().find(|s| s.as_str() == iface)?;
    Some((slot, version))
}

fn major(version: &str) -> Option<u64> {
    version.split('.').next()?.parse().ok()
}

/// wasmtime's error with its causes, on one line.
pub(crate) fn error_text(e: &wasmtime::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}

fn spawn_ticker(engine: &Engine, tick: Duration, stop: Arc<AtomicBool>) -> Result<(), WasmError> {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("gangway-epoch".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(tick);
                match weak.upgrade() {
                    Some(engine) => engine.increment_epoch(),
                    None => break,
                }
            }
        })
        .map(|_| ())
        .map_err(|e| WasmError::Engine(format!("cannot start the epoch ticker: {e}")))
}

/// The `gangway:policy/log.log` import: a bounded number of truncated
/// messages per call, forwarded to `tracing`.
fn host_log(
    mut store: StoreContextMut<'_, HostState>,
    _ty: wasmtime::component::types::ComponentFunc,
    params: &[Val],
    _results: &mut [Val],
) -> wasmtime::Result<()> {
    let level = match params.first() {
        Some(Val::Enum(l)) => l.as_str(),
        _ => "info",
    };
    let message = match params.get(1) {
        Some(Val::String(s)) => s.clone(),
        _ => String::new(),
    };
    record_log(store.data_mut(), level, message);
    Ok(())
}

/// Forwards one `log` message to `tracing`: at most the per-call number of
/// messages, each truncated to the configured length.
pub(crate) fn record_log(state: &mut HostState, level: &str, mut message: String) {
    if state.logs_left == 0 {
        return;
    }
    state.logs_left -= 1;
    if message.len() > state.log_bytes {
        let mut cut = state.log_bytes;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
        message.push_str("...");
    }
    let module = &*state.module;
    match level {
        "error" => tracing::error!(module, "{message}"),
        "warn" => tracing::warn!(module, "{message}"),
        "debug" => tracing::debug!(module, "{message}"),
        _ => tracing::info!(module, "{message}"),
    }
}
