//! One live instance of a module serving one slot, and the backend that owns
//! it: budget per call, failure classification, discard-and-restart.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use gangway_plugin_sdk::{
    FairnessDecision, GangDecision, LocalityDecision, QueueView, RoundView, codec,
};
use wasmtime::component::{Func, InstancePre, TypedFunc};
use wasmtime::{ResourceLimiter, Store, Trap};

use super::call_name;
use super::config::Budget;
use super::direct::DirectInstance;
use super::error::WasmError;
use super::host::{Code, PolicyModule, SlotExport, error_text};
use crate::policy::{
    FairnessBackend, GangBackend, LocalityBackend, PolicyError, PolicyErrorKind, Slot,
};

/// Per-store host state: the limiter and log accounting.
pub(crate) struct HostState {
    limits: Limits,
    pub(crate) module: Arc<str>,
    pub(crate) logs_left: u32,
    pub(crate) log_bytes: usize,
    /// Whether the guest may call `log` now: not from inside `cabi_realloc`
    /// or a post-return function (the canonical ABI forbids it; the direct
    /// call path enforces it as the component runtime does).
    pub(crate) may_leave: bool,
}

/// The memory cap (and small fixed caps on tables and instances).
struct Limits {
    memory_bytes: u64,
}

/// The error a `memory.grow` past the cap traps with.
#[derive(Debug, thiserror::Error)]
#[error("memory cap of {cap} bytes hit (the module asked for {desired} bytes)")]
struct MemoryCapHit {
    cap: u64,
    desired: u64,
}

impl ResourceLimiter for Limits {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let desired = desired as u64;
        if desired > self.memory_bytes {
            return Err(MemoryCapHit {
                cap: self.memory_bytes,
                desired,
            }
            .into());
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }

    fn instances(&self) -> usize {
        64
    }

    fn tables(&self) -> usize {
        64
    }

    fn memories(&self) -> usize {
        8
    }
}

/// A live instance: its store and how to call the slot.
struct Live {
    store: Store<HostState>,
    entry: Entry,
}

/// The slot's bulk call in a live instance.
enum Entry {
    /// A component function, type-checked against [`SlotCall`] when the
    /// instance was made.
    Component(Func),
    /// The main core module, entered directly (boxed: its typed functions
    /// make it much bigger than a component function handle).
    Direct(Box<DirectInstance>),
}

/// The type of every slot's bulk call: view bytes in, decision bytes or a
/// refusal out.
type SlotCall<'a> = TypedFunc<(&'a [u8],), (Result<Vec<u8>, String>,)>;

impl Live {
    /// Calls the slot with `view`; `read` sees the reply bytes. The outer
    /// error is a trap, an exhausted budget or a broken ABI; the inner one
    /// the guest's refusal.
    fn call<R>(
        &mut self,
        view: &[u8],
        read: impl FnOnce(&[u8]) -> R,
    ) -> wasmtime::Result<Result<R, String>> {
        match &self.entry {
            Entry::Component(func) => {
                // The bulk call, typed without checking the type again on
                // every call (a measurable share of a small call).
                let (answer,) = typed_slot_call(*func).call(&mut self.store, (view,))?;
                Ok(answer.map(|reply| read(&reply)))
            }
            Entry::Direct(direct) => direct.call(&mut self.store, view, read),
        }
    }
}

#[allow(unsafe_code)]
fn typed_slot_call<'a>(func: Func) -> SlotCall<'a> {
    // SAFETY: `instantiate` checked with `Func::typed` that `func` has
    // exactly this type before making the `Live` holding it, and a
    // component function's type never changes.
    unsafe { SlotCall::new_unchecked(func) }
}

/// A slot backend running a Wasm module. It owns at most one instance; any
/// call that traps, runs out of budget, hits the memory cap or breaks the ABI
/// discards it, and the next call starts a fresh one (running `init` again
/// with the same configuration). An instance that failed is never reused.
pub(crate) struct WasmBackend {
    module: PolicyModule,
    slot: Slot,
    config: Arc<[u8]>,
    live: Option<Live>,
    view: Vec<u8>,
}

impl WasmBackend {
    /// Instantiates the module for `slot` and runs `init(config)`.
    pub(crate) fn start(
        module: PolicyModule,
        slot: Slot,
        config: &[u8],
    ) -> Result<WasmBackend, WasmError> {
        let mut backend = WasmBackend {
            module,
            slot,
            config: Arc::from(config),
            live: None,
            view: Vec::new(),
        };
        match backend.instantiate() {
            Ok(live) => backend.live = Some(live),
            Err(e) => {
                let module = backend.module.name().to_string();
                return Err(match e {
                    Failure::Kind(PolicyErrorKind::Refused(message)) => WasmError::Config {
                        module,
                        slot,
                        message,
                    },
                    Failure::Kind(kind) => WasmError::Instantiate {
                        source: PolicyError::new(slot, module.clone(), kind),
                        module,
                        slot,
                    },
                    Failure::Signature { function, reason } => WasmError::WrongSignature {
                        module,
                        slot,
                        function,
                        reason,
                    },
                });
            }
        }
        Ok(backend)
    }

    fn error(&self, kind: PolicyErrorKind) -> PolicyError {
        PolicyError::new(self.slot, self.module.name(), kind)
    }

    /// Arms the CPU budget for the next entry into the instance.
    fn arm(&self, store: &mut Store<HostState>) -> Result<(), Failure> {
        let inner = &self.module.engine;
        match inner.config.budget {
            Budget::Fuel(n) => store
                .set_fuel(n)
                .map_err(|e| Failure::Kind(PolicyErrorKind::Trap(error_text(&e))))?,
            Budget::Deadline(_) => store.set_epoch_deadline(inner.deadline_ticks),
        }
        store.data_mut().logs_left = inner.config.log_messages_per_call;
        Ok(())
    }

    fn classify(&self, e: &wasmtime::Error) -> PolicyErrorKind {
        let config = &self.module.engine.config;
        if e.downcast_ref::<MemoryCapHit>().is_some() {
            return PolicyErrorKind::MemoryLimit(config.memory_bytes);
        }
        match e.downcast_ref::<Trap>() {
            Some(Trap::OutOfFuel) => PolicyErrorKind::OutOfFuel(match config.budget {
                Budget::Fuel(n) => n,
                Budget::Deadline(_) => 0,
            }),
            Some(Trap::Interrupt) => PolicyErrorKind::DeadlineExceeded(match config.budget {
                Budget::Deadline(d) => u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
                Budget::Fuel(_) => 0,
            }),
            Some(trap) => {
                let text = trap.to_string();
                PolicyErrorKind::Trap(
                    text.strip_prefix("wasm trap: ")
                        .unwrap_or(&text)
                        .to_string(),
                )
            }
            None => PolicyErrorKind::Abi(error_text(e)),
        }
    }

    /// A fresh instance with `init(config)` done.
    fn instantiate(&self) -> Result<Live, Failure> {
        let inner = &self.module.engine;
        self.module
            .compiled
            .instantiations
            .fetch_add(1, Ordering::Relaxed);
        let mut store = Store::new(
            &inner.engine,
            HostState {
                limits: Limits {
                    memory_bytes: inner.config.memory_bytes,
                },
                module: Arc::from(self.module.name()),
                logs_left: inner.config.log_messages_per_call,
                log_bytes: inner.config.log_message_bytes,
                may_leave: true,
            },
        );
        store.limiter(|s| &mut s.limits);
        if matches!(inner.config.budget, Budget::Deadline(_)) {
            store.epoch_deadline_trap();
        }
        self.arm(&mut store)?;
        let (entry, init) = match &self.module.compiled.code {
            Code::Component { pre, exports } => {
                self.instantiate_component(&mut store, pre, exports)?
            }
            Code::Direct(code) => {
                let direct = code
                    .instantiate(&mut store, self.slot)
                    .map_err(|e| Failure::Kind(self.classify(&e)))?;
                let init = direct.init(&mut store, &self.config);
                (Entry::Direct(Box::new(direct)), init)
            }
        };
        match init {
            Ok(Ok(())) => Ok(Live { store, entry }),
            Ok(Err(message)) => Err(Failure::Kind(PolicyErrorKind::Refused(message))),
            Err(e) => Err(Failure::Kind(self.classify(&e))),
        }
    }

    /// Instantiates the component, type-checks the slot's functions and
    /// runs `init`, returning the slot call and `init`'s outcome.
    fn instantiate_component(
        &self,
        store: &mut Store<HostState>,
        pre: &InstancePre<HostState>,
        exports: &[SlotExport],
    ) -> Result<(Entry, wasmtime::Result<Result<(), String>>), Failure> {
        let export = exports
            .iter()
            .find(|e| e.slot == self.slot)
            .ok_or_else(|| {
                Failure::Kind(PolicyErrorKind::Trap(format!(
                    "module does not export the {} slot",
                    self.slot
                )))
            })?;
        let instance = pre
            .instantiate(&mut *store)
            .map_err(|e| Failure::Kind(self.classify(&e)))?;
        let missing = |function: &str| Failure::Signature {
            function: function.to_string(),
            reason: format!("not exported by {}", export.interface),
        };
        let init = instance
            .get_func(&mut *store, export.init)
            .ok_or_else(|| missing("init"))?;
        let call = instance
            .get_func(&mut *store, export.call)
            .ok_or_else(|| missing(call_name(self.slot)))?;
        let typed_init = init
            .typed::<(&[u8],), (Result<(), String>,)>(&*store)
            .map_err(|e| Failure::Signature {
                function: "init".into(),
                reason: error_text(&e),
            })?;
        call.typed::<(&[u8],), (Result<Vec<u8>, String>,)>(&*store)
            .map(|_: SlotCall<'_>| ())
            .map_err(|e| Failure::Signature {
                function: call_name(self.slot).into(),
                reason: error_text(&e),
            })?;
        let init = typed_init
            .call(&mut *store, (&self.config,))
            .map(|(answer,)| answer);
        Ok((Entry::Component(call), init))
    }

    /// Encodes the view with `encode`, calls the slot, decodes the reply.
    fn call<D>(
        &mut self,
        encode: impl FnOnce(&mut Vec<u8>),
        decode: impl FnOnce(&[u8]) -> Result<D, gangway_plugin_sdk::wire::WireError>,
    ) -> Result<D, PolicyError> {
        if self.live.is_none() {
            match self.instantiate() {
                Ok(live) => self.live = Some(live),
                Err(Failure::Kind(kind)) => return Err(self.error(kind)),
                Err(Failure::Signature { function, reason }) => {
                    return Err(self.error(PolicyErrorKind::Abi(format!(
                        "`{function}` has the wrong type: {reason}"
                    ))));
                }
            }
        }
        encode(&mut self.view);
        let Some(mut live) = self.live.take() else {
            return Err(self.error(PolicyErrorKind::Trap("no instance".into())));
        };
        if let Err(Failure::Kind(kind)) = self.arm(&mut live.store) {
            return Err(self.error(kind));
        }
        let answer = live.call(&self.view, decode);
        let decoded = match answer {
            Ok(Ok(decoded)) => {
                self.live = Some(live);
                decoded
            }
            Ok(Err(message)) => {
                // The guest returned normally: its instance is sound.
                self.live = Some(live);
                return Err(self.error(PolicyErrorKind::Refused(message)));
            }
            // Trapped, out of budget, over the memory cap or broke the ABI:
            // the instance is dropped here and never used again.
            Err(e) => return Err(self.error(self.classify(&e))),
        };
        decoded.map_err(|e| self.error(PolicyErrorKind::Decode(e.to_string())))
    }
}

/// Why an instance could not be made.
enum Failure {
    Kind(PolicyErrorKind),
    Signature { function: String, reason: String },
}

impl FairnessBackend for WasmBackend {
    fn name(&self) -> &str {
        self.module.name()
    }
    fn order(&mut self, view: &RoundView) -> Result<FairnessDecision, PolicyError> {
        self.call(
            |buf| codec::encode_round_view(view, buf),
            codec::decode_fairness,
        )
    }
}

impl LocalityBackend for WasmBackend {
    fn name(&self) -> &str {
        self.module.name()
    }
    fn spread(&mut self, view: &QueueView) -> Result<LocalityDecision, PolicyError> {
        self.call(
            |buf| codec::encode_queue_view(view, buf),
            codec::decode_locality,
        )
    }
}

impl GangBackend for WasmBackend {
    fn name(&self) -> &str {
        self.module.name()
    }
    fn on_blocked(&mut self, view: &QueueView) -> Result<GangDecision, PolicyError> {
        self.call(
            |buf| codec::encode_queue_view(view, buf),
            codec::decode_gang,
        )
    }
}
