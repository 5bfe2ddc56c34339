//! The engine, the compiled-module cache, and loading: bound, validate,
//! compile, warm up.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gangway_plugin_sdk::Slot;
use sha2::{Digest, Sha256};
use wasmparser::{Parser, Payload, Validator};
use wasmtime::component::{ComponentType, Lift, Linker, WasmStr};
use wasmtime::{Config, Engine, StoreContextMut};

use super::config::{Budget, CallPath, LoadLimits, SandboxConfig};
use super::contract::{self, check_version, is_log, slot_export};
use super::direct::{DirectCode, TopLevel};
use super::disk_cache::DiskCache;
use super::error::{WasmError, WasmErrorKind};
use super::module::{Code, Compiled, EngineInner, PolicyModule, SlotExport, Ticker};
use super::store::{HostState, LogCounts, charge_log, error_text, record_log, take_log_slot};

/// One shared wasmtime engine, its sandbox settings and a cache of compiled
/// modules keyed by the SHA-256 of their bytes. Cheap to clone; clones share
/// everything.
///
/// ```
/// use gangway_core::wasm::{PolicyEngine, SandboxConfig, WasmErrorKind};
///
/// let engine = PolicyEngine::new(SandboxConfig::default()).unwrap();
/// let err = engine.load("junk.wasm", b"not wasm").unwrap_err();
/// assert!(matches!(err.kind, WasmErrorKind::NotWasm));
/// ```
#[derive(Clone)]
pub struct PolicyEngine {
    inner: Arc<EngineInner>,
}

impl std::fmt::Debug for PolicyEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyEngine")
            .field("config", &self.inner.config)
            .field("cached_modules", &self.cached_modules())
            .finish()
    }
}

/// The `log.level` enum of the contract, as the component runtime lifts it
/// (its variants are made by lifting, never in Rust code).
#[allow(dead_code)]
#[derive(ComponentType, Lift, Clone, Copy, Debug)]
#[component(enum)]
#[repr(u8)]
enum LogLevel {
    #[component(name = "error")]
    Error,
    #[component(name = "warn")]
    Warn,
    #[component(name = "info")]
    Info,
    #[component(name = "debug")]
    Debug,
}

impl PolicyEngine {
    /// Creates the engine for `config`: fuel metering and/or epoch
    /// interruption (with a ticker thread that lives as long as the engine),
    /// the stack limit, the WebAssembly features a policy may use, and a
    /// linker that provides only `gangway:policy/log`.
    pub fn new(config: SandboxConfig) -> Result<PolicyEngine, WasmError> {
        let invalid = |m: &str| Err(WasmError::engine(WasmErrorKind::Sandbox(m.into())));
        match config.budget {
            Budget::Fuel(0) => return invalid("a fuel budget of 0"),
            Budget::Deadline(d) if d.is_zero() => return invalid("a deadline of 0"),
            _ => {}
        }
        if config.wall_clock_cap.is_some_and(|d| d.is_zero()) {
            return invalid("a wall-clock cap of 0");
        }
        if config.memory_bytes < 64 << 10 {
            return Err(WasmError::engine(WasmErrorKind::Sandbox(format!(
                "a memory cap of {} bytes is below one Wasm page",
                config.memory_bytes
            ))));
        }
        let deadline = match config.budget {
            Budget::Deadline(d) => Some(d),
            Budget::Fuel(_) => config.wall_clock_cap,
        };
        if config.deadline_at.is_some() && deadline.is_none() {
            return invalid("a deadline_at without a wall-clock cap (no epoch interruption)");
        }
        let mut wt = Config::new();
        wt.wasm_component_model(true)
            .consume_fuel(matches!(config.budget, Budget::Fuel(_)))
            .epoch_interruption(deadline.is_some())
            .max_wasm_stack(config.stack_bytes)
            .wasm_multi_memory(false)
            .wasm_memory64(false)
            .wasm_tail_call(false)
            .wasm_relaxed_simd(false)
            .wasm_extended_const(true)
            .signals_based_traps(config.signal_traps);
        // `GANGWAY_PERFMAP=1` names the guests' compiled functions for
        // `perf` (docs/performance.md, "Profiling a policy").
        if std::env::var_os("GANGWAY_PERFMAP").is_some_and(|v| v != "0") {
            wt.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let engine_err =
            |e: wasmtime::Error| WasmError::engine(WasmErrorKind::Engine(e.to_string()));
        let engine = Engine::new(&wt).map_err(engine_err)?;

        let mut linker = Linker::<HostState>::new(&engine);
        linker
            .instance(&format!(
                "gangway:policy/log@{}",
                contract::CONTRACT_VERSION
            ))
            .and_then(|mut log| log.func_wrap("log", host_log))
            .map_err(engine_err)?;
        let (deadline_ticks, tick, ticker) = match deadline {
            Some(deadline) => epoch_ticker(&engine, &config, deadline)?,
            None => (0, Duration::ZERO, None),
        };
        let disk = DiskCache::new(config.module_cache.clone());
        Ok(PolicyEngine {
            inner: Arc::new(EngineInner {
                engine,
                linker,
                config,
                deadline_ticks,
                tick,
                cache: Mutex::new(HashMap::new()),
                disk,
                logs: Arc::default(),
                ticker,
            }),
        })
    }

    /// The sandbox settings.
    pub fn config(&self) -> &SandboxConfig {
        &self.inner.config
    }

    /// Why the configured module cache folder is not used, when another
    /// user could have written it (see [`SandboxConfig::module_cache`]);
    /// the engine then compiles every module and keeps nothing.
    pub fn module_cache_refused(&self) -> Option<&str> {
        self.inner.disk.refused()
    }

    /// How many `log` messages its modules sent so far, kept and dropped
    /// past the limits (take the difference of two counts for a run).
    pub fn log_counts(&self) -> LogCounts {
        self.inner.logs.counts()
    }

    /// How many distinct modules are compiled and cached.
    pub fn cached_modules(&self) -> usize {
        self.inner.cache.lock().map(|c| c.len()).unwrap_or(0)
    }

    /// Loads a policy module under `name` (used in every error and report).
    ///
    /// A module already in the cache (same bytes) is returned at once.
    /// Otherwise the bytes must be a component, or a core module built for
    /// `wasm32-unknown-unknown` with the SDK (whose export macros embed the
    /// component type; it is made a component here), within the engine's
    /// [`LoadLimits`], using only the WebAssembly features a policy may use;
    /// its imports must be at most `gangway:policy/log@2.x`; it must export
    /// at least one slot interface of `gangway:policy@2.x`, each at most
    /// once, with both of its functions; then it is compiled (within the
    /// time limit), and each slot is instantiated, initialised with empty
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
        let of = |kind| WasmError::of(name, kind);
        if !bytes.starts_with(b"\0asm") {
            return Err(of(WasmErrorKind::NotWasm));
        }
        // The preamble's layer field (bytes 6..8) is 0 for a core module, 1
        // for a component. A core module built with the SDK carries its
        // component type (the export macros embed it): it is made a
        // component here, as `wasm-tools component new` would.
        let componentized;
        let bytes = if bytes.get(6..8) == Some(&[0, 0]) {
            check_limits(bytes, &self.inner.config.limits).map_err(of)?;
            let typed = Parser::new(0).parse_all(bytes).any(|p| {
                matches!(p, Ok(Payload::CustomSection(c)) if c.name().starts_with("component-type"))
            });
            if !typed {
                return Err(of(WasmErrorKind::NotAComponent(
                    "it carries no component type".into(),
                )));
            }
            componentized = wit_component::ComponentEncoder::default()
                .validate(true)
                .module(bytes)
                .and_then(|mut encoder| encoder.encode())
                .map_err(|e| of(WasmErrorKind::NotAComponent(format!("{e:#}"))))?;
            &componentized[..]
        } else {
            bytes
        };
        check_limits(bytes, &self.inner.config.limits).map_err(of)?;
        // A module this engine's cache records as valid was validated by an
        // earlier load (with these features, by this wasmtime).
        let features = format!("{:?}", contract::features());
        let engine = &self.inner.engine;
        let known_valid = self.inner.disk.known_valid(engine, &features, &hash);
        if !known_valid {
            let mut validator = Validator::new_with_features(contract::features());
            validator.validate_all(bytes).map_err(|e| {
                of(WasmErrorKind::Compile(format!(
                    "{e} (a policy may use the core WebAssembly of wasm32-unknown-unknown and the \
                     component model: no multiple memories, 64-bit memories, threads, exceptions or GC)"
                )))
            })?;
        }
        let compiled = Arc::new(self.compile_bounded(name, bytes, hash)?);
        let module = self.module(name, compiled.clone());
        module.warm_up()?;
        if !known_valid {
            self.inner.disk.record_valid(engine, &features, &hash);
        }
        if let Ok(mut cache) = self.inner.cache.lock() {
            cache.insert(hash, compiled);
        }
        Ok(module)
    }

    /// Reads the module at `path` and [loads](PolicyEngine::load) it under
    /// its file name (`las.wasm`). A file that cannot be read is a
    /// [`WasmErrorKind::Unreadable`] naming the path.
    ///
    /// ```
    /// use gangway_core::wasm::{PolicyEngine, SandboxConfig, WasmErrorKind};
    ///
    /// let engine = PolicyEngine::new(SandboxConfig::default()).unwrap();
    /// let err = engine.load_file("no/such/policy.wasm").unwrap_err();
    /// assert_eq!(err.module.as_deref(), Some("no/such/policy.wasm"));
    /// assert!(matches!(err.kind, WasmErrorKind::Unreadable(_)));
    /// ```
    pub fn load_file(&self, path: impl AsRef<std::path::Path>) -> Result<PolicyModule, WasmError> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| {
            WasmError::of(
                &path.display().to_string(),
                WasmErrorKind::Unreadable(e.to_string()),
            )
        })?;
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        self.load(&name, &bytes)
    }

    fn module(&self, name: &str, compiled: Arc<Compiled>) -> PolicyModule {
        PolicyModule {
            name: Arc::from(name),
            compiled,
            engine: self.inner.clone(),
        }
    }

    /// [`PolicyEngine::compile`] on a helper thread, given up on after the
    /// compile time limit.
    fn compile_bounded(
        &self,
        name: &str,
        bytes: &[u8],
        hash: [u8; 32],
    ) -> Result<Compiled, WasmError> {
        let limit = self.inner.config.limits.compile_time;
        let deadline = std::time::Instant::now() + limit;
        let (tx, rx) = std::sync::mpsc::channel();
        let engine = self.clone();
        let (owned_name, owned) = (name.to_string(), bytes.to_vec());
        // What the compile says goes where the caller's events go, also
        // under a subscriber scoped to the caller's thread.
        let dispatch = tracing::dispatcher::get_default(|d| d.clone());
        std::thread::Builder::new()
            .name("gangway-compile".into())
            .spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    let _ = tx.send(engine.compile(&owned_name, &owned, hash, deadline));
                });
            })
            .map_err(|e| {
                WasmError::engine(WasmErrorKind::Engine(format!(
                    "cannot start a compiler thread: {e}"
                )))
            })?;
        match rx.recv_timeout(limit) {
            Ok(result) => result,
            Err(_) => Err(WasmError::of(
                name,
                WasmErrorKind::CompileTimeout(limit.as_secs()),
            )),
        }
    }

    fn compile(
        &self,
        name: &str,
        bytes: &[u8],
        hash: [u8; 32],
        deadline: std::time::Instant,
    ) -> Result<Compiled, WasmError> {
        let of = |kind| WasmError::of(name, kind);
        let engine = &self.inner.engine;
        let top = TopLevel::read(bytes).ok_or_else(|| {
            of(WasmErrorKind::Compile(
                "the component does not parse".into(),
            ))
        })?;
        for import in &top.imports {
            match contract::parse_name(import) {
                Some((_, version)) if is_log(import) => {
                    check_version(import, version).map_err(of)?;
                }
                _ => return Err(of(WasmErrorKind::ForbiddenImport(import.to_string()))),
            }
        }
        let mut slots: Vec<(Slot, &str)> = Vec::new();
        let mut versions = Vec::new();
        for export in &top.exports {
            let Some((slot, version)) = slot_export(export) else {
                continue;
            };
            check_version(export, version).map_err(of)?;
            if let Some((_, first)) = slots.iter().find(|(s, _)| *s == slot) {
                return Err(of(WasmErrorKind::DuplicateSlot {
                    slot,
                    first: first.to_string(),
                    second: export.to_string(),
                }));
            }
            slots.push((slot, export));
            versions.push(version.to_string());
        }
        if slots.is_empty() {
            return Err(of(WasmErrorKind::NoSlots(top.exports.join(", "))));
        }
        slots.sort_by_key(|(slot, _)| *slot);
        versions.sort();
        let version = versions.swap_remove(0);
        let slot_list: Vec<Slot> = slots.iter().map(|(s, _)| *s).collect();
        let config_tree = contract::config_tree_slots(bytes, &slot_list).map_err(of)?;
        if self.inner.config.call_path == CallPath::Direct {
            match DirectCode::prepare(
                engine,
                &self.inner.disk,
                deadline,
                bytes,
                &top,
                &slots,
                self.inner.config.buffered_calls,
            ) {
                Ok(code) => {
                    return Ok(Compiled {
                        code: Code::Direct(code),
                        slots: slot_list,
                        config_tree,
                        version,
                        hash,
                        instantiations: AtomicU64::new(0),
                        fuel_used: AtomicU64::new(0),
                    });
                }
                Err(decline) => tracing::info!(
                    module = name,
                    "the direct call path declines ({decline}); the component runtime runs it"
                ),
            }
        }
        let component = self
            .inner
            .disk
            .component(engine, bytes, deadline)
            .map_err(|e| of(WasmErrorKind::Compile(error_text(&e))))?;
        let mut exports = Vec::new();
        for (slot, interface) in &slots {
            let inst = component
                .get_export_index(None, interface)
                .ok_or_else(|| of(WasmErrorKind::NoSlots(interface.to_string())))?;
            let func = |function: &str| {
                component
                    .get_export_index(Some(&inst), function)
                    .ok_or_else(|| {
                        of(WasmErrorKind::MissingExport {
                            slot: *slot,
                            interface: interface.to_string(),
                            function: function.to_string(),
                        })
                    })
            };
            exports.push(SlotExport {
                slot: *slot,
                interface: interface.to_string(),
                init: func("init")?,
                call: func(slot.call())?,
            });
        }
        let pre = self
            .inner
            .linker
            .instantiate_pre(&component)
            .map_err(|e| of(WasmErrorKind::Link(error_text(&e))))?;
        Ok(Compiled {
            code: Code::Component { pre, exports },
            slots: slot_list,
            config_tree,
            version,
            hash,
            instantiations: AtomicU64::new(0),
            fuel_used: AtomicU64::new(0),
        })
    }
}

/// Checks `bytes` against `limits` before anything is compiled: the
/// module's size, and in each core module the number of functions, each
/// function's body size and locals.
fn check_limits(bytes: &[u8], limits: &LoadLimits) -> Result<(), WasmErrorKind> {
    let too_large =
        |what: String, found: u64, limit: u64| Err(WasmErrorKind::TooLarge { what, found, limit });
    if bytes.len() > limits.module_bytes {
        return too_large(
            "the module".into(),
            bytes.len() as u64,
            limits.module_bytes as u64,
        );
    }
    let mut module = 0u32;
    let mut function = 0u32;
    let mut core_instances = 0u64;
    for payload in Parser::new(0).parse_all(bytes) {
        let Ok(payload) = payload else {
            // The validator names the problem.
            return Ok(());
        };
        match payload {
            Payload::ModuleSection { .. } => {
                module += 1;
                function = 0;
            }
            Payload::InstanceSection(reader) => {
                core_instances = core_instances.saturating_add(u64::from(reader.count()));
                if core_instances > u64::from(limits.core_instances) {
                    return too_large(
                        "the core instances of the component".into(),
                        core_instances,
                        u64::from(limits.core_instances),
                    );
                }
            }
            Payload::FunctionSection(reader) if reader.count() > limits.functions => {
                return too_large(
                    format!("the number of functions of core module {module}"),
                    u64::from(reader.count()),
                    u64::from(limits.functions),
                );
            }
            Payload::CodeSectionEntry(body) => {
                function += 1;
                let size = body.range().len();
                if size > limits.function_bytes {
                    return too_large(
                        format!("function {function} of core module {module}"),
                        size as u64,
                        limits.function_bytes as u64,
                    );
                }
                let mut locals = 0u64;
                if let Ok(reader) = body.get_locals_reader() {
                    for l in reader {
                        locals += u64::from(l.map(|(n, _)| n).unwrap_or(u32::MAX));
                    }
                }
                if locals > u64::from(limits.locals) {
                    return too_large(
                        format!("the locals of function {function} of core module {module}"),
                        locals,
                        u64::from(limits.locals),
                    );
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// The epoch ticker of an engine whose calls have `deadline`: started,
/// with how many ticks a call may take, how often it ticks (fine enough for
/// the round budget's time too) and how to stop it.
fn epoch_ticker(
    engine: &Engine,
    config: &SandboxConfig,
    deadline: Duration,
) -> Result<(u64, Duration, Option<Arc<Ticker>>), WasmError> {
    let finest = config
        .round_budget
        .map_or(deadline, |r| r.scaled(&config.budget).1.min(deadline));
    let tick = (finest / 10).clamp(Duration::from_millis(1), Duration::from_millis(100));
    let ticks = deadline.as_nanos().div_ceil(tick.as_nanos()) + 1;
    let ticker = Arc::new(Ticker::default());
    spawn_ticker(engine, tick, ticker.clone())?;
    Ok((u64::try_from(ticks).unwrap_or(u64::MAX), tick, Some(ticker)))
}

fn spawn_ticker(engine: &Engine, tick: Duration, ticker: Arc<Ticker>) -> Result<(), WasmError> {
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("gangway-epoch".into())
        .spawn(move || {
            while !ticker.stop.load(Ordering::Relaxed) {
                std::thread::sleep(tick);
                match weak.upgrade() {
                    Some(engine) => {
                        engine.increment_epoch();
                        ticker.ticks.fetch_add(1, Ordering::Relaxed);
                    }
                    None => break,
                }
            }
        })
        .map(|_| ())
        .map_err(|e| {
            WasmError::engine(WasmErrorKind::Engine(format!(
                "cannot start the epoch ticker: {e}"
            )))
        })
}

/// The `gangway:policy/log.log` import through the component runtime:
/// typed as the contract says (a component whose `log` has another type does
/// not link), charged to the call's fuel (the runtime lifts the message
/// whole first, within the bytes the entry may make the host copy: see
/// `arm` in `backend.rs`), at most the per-call and per-backend messages and
/// bytes kept, each truncated.
fn host_log(
    mut store: StoreContextMut<'_, HostState>,
    (level, message): (LogLevel, WasmStr),
) -> wasmtime::Result<()> {
    let (len, text) = {
        let full = message.to_str(&store)?;
        (full.len(), contract::bounded(&full, store.data().log_bytes))
    };
    charge_log(&mut store, len)?;
    if take_log_slot(store.data_mut(), len) {
        let level = match level {
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
        };
        record_log(store.data_mut(), level, &text);
    }
    Ok(())
}
