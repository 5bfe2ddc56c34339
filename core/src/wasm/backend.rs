//! A slot backend running a Wasm module: one live instance at a time, a
//! budget per call, failure classification, discard-and-restart.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use gangway_plugin_sdk::wire::KnownChanges;
use gangway_plugin_sdk::{Manifest, SlotContract, wire};
use wasmtime::Store;
use wasmtime::component::{Func, InstancePre, TypedFunc};

use super::config::Budget;
use super::direct::DirectInstance;
use super::error::{WasmError, WasmErrorKind};
use super::module::{Code, PolicyModule, SlotExport};
use super::store::{HostState, classify, error_text, new_store};
use super::work::{Allowance, WorkMeter};
use crate::policy::{
    Backend, BoxedBackend, PolicyError, PolicyErrorKind, PolicyOrigin, Stamp, ViewChanges,
};

/// A live instance: its store, how to call the slot, and the view of its
/// last answered call (the base of the next view change) with the stamp of
/// the state it was built from, when the round said.
struct Live<V> {
    store: Store<HostState>,
    entry: Entry,
    held: Option<V>,
    held_at: Option<Stamp>,
}

/// The slot's call in a live instance.
enum Entry {
    /// A component function, type-checked against [`SlotCall`] when the
    /// instance was made.
    Component(Func),
    /// The main core module, entered directly (boxed: its typed functions
    /// make it much bigger than a component function handle).
    Direct(Box<DirectInstance>),
}

/// The type of every slot's call and `init`: bytes in, bytes or a refusal
/// out. (The runtime copies the reply out before the guest's post-return
/// runs; both are bounded by the instance's memory cap, and the reply is
/// refused unheard if longer than any answer to its view can be.)
type SlotCall<'a> = TypedFunc<(&'a [u8],), (Result<Vec<u8>, String>,)>;

/// A refusal's text, bounded as log messages are.
fn refusal(store: &Store<HostState>, text: &str) -> String {
    super::contract::bounded(text, store.data().log_bytes)
}

impl<V> Live<V> {
    /// Calls the slot with `view`; `read` sees the reply bytes in the
    /// guest's memory. The outer error is a trap, an exhausted budget or a
    /// broken ABI; the inner one the guest's refusal.
    fn call<R>(
        &mut self,
        view: &[u8],
        read: impl FnOnce(&[u8]) -> R,
    ) -> wasmtime::Result<Result<R, String>> {
        match &self.entry {
            Entry::Component(func) => {
                let (answer,) = typed_slot_call(*func).call(&mut self.store, (view,))?;
                Ok(match answer {
                    Ok(reply) => Ok(read(&reply)),
                    Err(text) => Err(refusal(&self.store, &text)),
                })
            }
            Entry::Direct(direct) => direct.call(&mut self.store, view, read),
        }
    }
}

#[allow(unsafe_code)]
fn typed_slot_call<'a>(func: Func) -> SlotCall<'a> {
    // SAFETY: `instantiate_component` checked with `Func::typed` that
    // `func` has exactly this type before making the `Live` holding it, and
    // a component function's type never changes.
    unsafe { SlotCall::new_unchecked(func) }
}

/// A backend of slot `S` running a Wasm module. It owns at most one
/// instance. When the module's manifest asks for view messages, each view
/// after the first may travel as a change from the view of the instance's
/// last answered call (a fresh instance gets the whole view), and replies
/// come back as reply messages. Any failed call (trap, budget, memory cap,
/// broken ABI, refusal, a reply that does not decode, or a decision the
/// core refused) discards the instance, and with it the view it held; the
/// next call starts a fresh one, running `init` again with the same
/// configuration. An instance that failed is never reused.
pub(crate) struct WasmBackend<S: SlotContract> {
    module: PolicyModule,
    config: Arc<[u8]>,
    /// The policy's manifest, without the glue's `view_changes` (kept apart
    /// in `view_changes`: it is how the views travel, not what the policy sees).
    manifest: Manifest,
    view_changes: bool,
    /// Boxed: a call takes it out and puts it back, which moves a pointer,
    /// not the store handle, the call and the held view.
    live: Option<Box<Live<S::View>>>,
    view: Vec<u8>,
    /// What changed since the held view, as the round's change log said.
    known: KnownChanges,
    /// Fuel used so far by every instance of this backend (see
    /// `SandboxConfig::fuel_per_backend`).
    spent_fuel: u64,
    /// Its recent calls under the engine's work budget.
    work: WorkMeter,
    /// How its `-buffered` twins are checked against the slot's function.
    twins: TwinCheck,
    /// When the current fuel period began (`SandboxConfig::fuel_period`),
    /// from the first call.
    period_start: Option<std::time::Instant>,
    _slot: std::marker::PhantomData<S>,
}

/// Why an instance could not be made.
pub(crate) enum InstanceError {
    Kind(PolicyErrorKind),
    Signature { function: String, reason: String },
    Manifest(String),
}

impl<S: SlotContract> WasmBackend<S> {
    /// Instantiates the module for slot `S` and runs `init(config)`.
    pub(crate) fn start(
        module: PolicyModule,
        config: &[u8],
        mut twins: TwinCheck,
    ) -> Result<Self, WasmError> {
        if !module.buffered_slots().contains(&S::SLOT) {
            twins.every = 0;
        }
        let mut backend = WasmBackend {
            module,
            config: Arc::from(config),
            manifest: Manifest::default(),
            view_changes: false,
            live: None,
            view: Vec::new(),
            known: KnownChanges::default(),
            spent_fuel: 0,
            work: WorkMeter::default(),
            twins,
            period_start: None,
            _slot: std::marker::PhantomData,
        };
        let slot = S::SLOT;
        match backend.instantiate() {
            Ok((live, manifest)) => {
                backend.live = Some(Box::new(live));
                backend.view_changes = manifest.view_changes;
                backend.manifest = Manifest {
                    view_changes: false,
                    ..manifest
                };
                Ok(backend)
            }
            Err(e) => {
                let module = backend.module.name().to_string();
                let kind = match e {
                    InstanceError::Kind(PolicyErrorKind::Refused(message)) => {
                        WasmErrorKind::Config { slot, message }
                    }
                    InstanceError::Kind(kind) => WasmErrorKind::Instantiate {
                        slot,
                        source: PolicyError::new(slot, module.clone(), kind),
                    },
                    InstanceError::Signature { function, reason } => {
                        WasmErrorKind::WrongSignature {
                            slot,
                            function,
                            reason,
                        }
                    }
                    InstanceError::Manifest(reason) => WasmErrorKind::Manifest { slot, reason },
                };
                Err(WasmError::of(&module, kind))
            }
        }
    }

    fn error(&self, kind: PolicyErrorKind) -> PolicyError {
        PolicyError::new(S::SLOT, self.module.name(), kind)
    }

    /// Arms the CPU budget for the next entry into the instance: the
    /// per-call fuel, or `cap` if less (what the work budget has left), and
    /// the epoch deadline, no later than the engine's `deadline_at`.
    /// Returns the fuel armed (0 without fuel metering).
    fn arm(&self, store: &mut Store<HostState>, cap: Option<u64>) -> Result<u64, InstanceError> {
        let engine = &self.module.engine;
        let mut armed = 0;
        if let Budget::Fuel(n) = engine.config.budget {
            armed = cap.map_or(n, |cap| cap.min(n));
            store
                .set_fuel(armed)
                .map_err(|e| InstanceError::Kind(PolicyErrorKind::Trap(error_text(&e))))?;
        }
        if engine.deadline_ticks > 0 {
            let ticks = match engine.config.deadline_at {
                Some(at) => {
                    let left = at.saturating_duration_since(std::time::Instant::now());
                    let left = left.as_nanos().div_ceil(engine.tick.as_nanos().max(1));
                    u64::try_from(left)
                        .unwrap_or(u64::MAX)
                        .min(engine.deadline_ticks)
                }
                None => engine.deadline_ticks,
            };
            store.set_epoch_deadline(ticks);
        }
        store.data_mut().logs_left = engine.config.log_messages_per_call;
        // The kit compares the twin's and the function's log messages too.
        store.data_mut().captured = self.twins.fail.then(Vec::new);
        Ok(armed)
    }

    /// Adds the fuel `store`'s last call (or instantiation), armed with
    /// `armed`, used to what this backend has spent, and returns it.
    fn spend(&mut self, store: &Store<HostState>, armed: u64) -> u64 {
        let used = match store.get_fuel() {
            Ok(left) if armed > 0 => armed.saturating_sub(left),
            _ => 0,
        };
        self.spent_fuel = self.spent_fuel.saturating_add(used);
        used
    }

    /// A fresh instance with `init(config)` done, and the manifest it
    /// answered: entered through the slot's twins unless they were declined.
    fn instantiate(&self) -> Result<(Live<S::View>, Manifest), InstanceError> {
        self.instantiate_with(self.twins.declined.is_none())
    }

    /// [`WasmBackend::instantiate`], through the twins if `twins`.
    fn instantiate_with(&self, twins: bool) -> Result<(Live<S::View>, Manifest), InstanceError> {
        let engine = &self.module.engine;
        self.module
            .compiled
            .instantiations
            .fetch_add(1, Ordering::Relaxed);
        let mut store = new_store(&engine.engine, self.module.name(), &engine.config);
        self.arm(&mut store, None)?;
        let classify = |e: &wasmtime::Error| InstanceError::Kind(classify(e, &engine.config));
        let (entry, init) = match &self.module.compiled.code {
            Code::Component { pre, exports } => {
                self.instantiate_component(&mut store, pre, exports)?
            }
            Code::Direct(code) => {
                let direct = code
                    .instantiate(&mut store, S::SLOT, twins)
                    .map_err(|e| classify(&e))?;
                let init = direct.init(&mut store, &self.config, MANIFEST_BYTES);
                (Entry::Direct(Box::new(direct)), init)
            }
        };
        match init {
            Ok(Ok(bytes)) => {
                let manifest =
                    Manifest::decode(&bytes).map_err(|e| InstanceError::Manifest(e.to_string()))?;
                Ok((
                    Live {
                        store,
                        entry,
                        held: None,
                        held_at: None,
                    },
                    manifest,
                ))
            }
            Ok(Err(message)) => Err(InstanceError::Kind(PolicyErrorKind::Refused(message))),
            Err(e) => Err(classify(&e)),
        }
    }

    /// Instantiates the component, type-checks the slot's functions and
    /// runs `init`, returning the slot call and `init`'s outcome.
    fn instantiate_component(
        &self,
        store: &mut Store<HostState>,
        pre: &InstancePre<HostState>,
        exports: &[SlotExport],
    ) -> Result<(Entry, InitOutcome), InstanceError> {
        let config = &self.module.engine.config;
        let export = exports.iter().find(|e| e.slot == S::SLOT).ok_or_else(|| {
            InstanceError::Kind(PolicyErrorKind::Trap(format!(
                "module does not export the {} slot",
                S::SLOT
            )))
        })?;
        let instance = pre
            .instantiate(&mut *store)
            .map_err(|e| InstanceError::Kind(classify(&e, config)))?;
        let missing = |function: &str| InstanceError::Signature {
            function: function.to_string(),
            reason: format!("not exported by {}", export.interface),
        };
        let init = instance
            .get_func(&mut *store, export.init)
            .ok_or_else(|| missing("init"))?;
        let call = instance
            .get_func(&mut *store, export.call)
            .ok_or_else(|| missing(S::SLOT.call()))?;
        let typed_init: SlotCall<'_> =
            init.typed(&*store).map_err(|e| InstanceError::Signature {
                function: "init".into(),
                reason: error_text(&e),
            })?;
        call.typed::<(&[u8],), (Result<Vec<u8>, String>,)>(&*store)
            .map(|_: SlotCall<'_>| ())
            .map_err(|e| InstanceError::Signature {
                function: S::SLOT.call().into(),
                reason: error_text(&e),
            })?;
        let init = typed_init
            .call(&mut *store, (&self.config,))
            .map(|(answer,)| answer.map_err(|text| refusal(store, &text)));
        Ok((Entry::Component(call), init))
    }
}

/// What `init` answered: the manifest's bytes or a refusal, or a trap.
type InitOutcome = wasmtime::Result<Result<Vec<u8>, String>>;

/// The most manifest bytes the host reads (the manifest decoder refuses more).
const MANIFEST_BYTES: usize = 1024;

impl<S: SlotContract> Backend<S> for WasmBackend<S> {
    fn name(&self) -> &str {
        self.module.name()
    }

    fn manifest(&self) -> Manifest {
        self.manifest.clone()
    }

    fn origin(&self) -> PolicyOrigin {
        PolicyOrigin {
            name: self.module.name().to_string(),
            module_sha256: Some(self.module.hash()),
            config: self.config.to_vec(),
        }
    }

    fn decide(&mut self, view: &S::View) -> Result<S::Decision, PolicyError> {
        self.decide_knowing(view, None)
    }

    fn decide_with_changes(
        &mut self,
        view: &S::View,
        changes: &ViewChanges<'_>,
    ) -> Result<S::Decision, PolicyError> {
        self.decide_knowing(view, Some(changes))
    }

    fn report(&mut self, outcome: Result<(), &PolicyError>) {
        // A decision the core refused: the next call starts afresh too.
        if outcome.is_err() {
            self.live = None;
        }
    }
}

impl<S: SlotContract> WasmBackend<S> {
    /// [`Backend::decide`], with the round's change log when there is one:
    /// a view change then keeps the entries the log says did not change
    /// without comparing them.
    fn decide_knowing(
        &mut self,
        view: &S::View,
        changes: Option<&ViewChanges<'_>>,
    ) -> Result<S::Decision, PolicyError> {
        self.check_run_budget()?;
        let allowance = self.work_allowance(view)?;
        let mut live = self.live_instance()?;
        self.encode(&live, view, changes);
        let armed = match self.arm(&mut live.store, allowance.map(|a| a.fuel)) {
            Ok(armed) => armed,
            Err(InstanceError::Kind(kind)) => return Err(self.error(kind)),
            Err(_) => return Err(self.error(PolicyErrorKind::Trap("cannot arm".into()))),
        };
        let messages = self.view_changes;
        let answer = live.call(&self.view, |bytes| {
            if messages {
                wire::decode_reply_message::<S>(bytes, view)
            } else {
                wire::decode_decision::<S>(bytes, view)
            }
        });
        let used = self.spend(&live.store, armed);
        if let (Some(a), Some(budget)) = (allowance, self.module.engine.config.work_budget) {
            self.work.record(&budget, a.measure, used);
        }
        match answer {
            Ok(Ok(Ok(decision))) => {
                self.hold(&mut live, view, changes);
                self.live = Some(live);
                self.check_twins(view, decision)
            }
            // The instance is dropped here on every failure and never used
            // again: refusals and undecodable replies included.
            Ok(Ok(Err(e))) => Err(self.error(PolicyErrorKind::Decode(e.to_string()))),
            Ok(Err(message)) => Err(self.error(PolicyErrorKind::Refused(message))),
            Err(e) => {
                let kind = match (classify(&e, &self.module.engine.config), allowance) {
                    // Out of what the work budget left, not of the call's own budget.
                    (PolicyErrorKind::OutOfFuel(n), Some(a)) if armed < n => {
                        self.over_budget(a.allowed, a.spent.saturating_add(used))
                    }
                    (kind, _) => kind,
                };
                Err(self.error(kind))
            }
        }
    }

    /// Starts a new fuel period when the last one is over, and fails the
    /// call at once when the backend's fuel for its run (or period) is spent.
    fn check_run_budget(&mut self) -> Result<(), PolicyError> {
        let config = &self.module.engine.config;
        if let Some(period) = config.fuel_period {
            let now = std::time::Instant::now();
            let start = *self.period_start.get_or_insert(now);
            if now.duration_since(start) >= period {
                self.period_start = Some(now);
                self.spent_fuel = 0;
            }
        }
        if let Some(limit) = config.fuel_per_backend
            && self.spent_fuel >= limit
        {
            self.live = None;
            return Err(self.error(PolicyErrorKind::RunBudget(limit)));
        }
        Ok(())
    }

    /// What the work budget lets the call on `view` use (`None`: no work
    /// budget); a call that finds nothing left fails at once, counted in
    /// the window as a call that used nothing.
    fn work_allowance(&mut self, view: &S::View) -> Result<Option<Allowance>, PolicyError> {
        let config = &self.module.engine.config;
        let (Budget::Fuel(_), Some(budget)) = (config.budget, config.work_budget) else {
            return Ok(None);
        };
        let allowance = self.work.allowance(&budget, S::WORK, S::view_jobs(view));
        if allowance.fuel == 0 {
            self.work.record(&budget, allowance.measure, 0);
            let kind = self.over_budget(allowance.allowed, allowance.spent);
            return Err(self.error(kind));
        }
        Ok(Some(allowance))
    }

    /// The error of a call past its work budget.
    fn over_budget(&self, allowed: u64, spent: u64) -> PolicyErrorKind {
        let budget = self.module.engine.config.work_budget.unwrap_or_default();
        PolicyErrorKind::WorkBudget {
            spent,
            allowed,
            factor: budget.factor,
            window: budget.window,
        }
    }

    /// The live instance, made afresh (its `init` fuel counted against the
    /// run's) when the last call failed.
    fn live_instance(&mut self) -> Result<Box<Live<S::View>>, PolicyError> {
        if let Some(live) = self.live.take() {
            return Ok(live);
        }
        match self.instantiate() {
            Ok((live, _)) => {
                let full = match self.module.engine.config.budget {
                    Budget::Fuel(n) => n,
                    Budget::Deadline(_) => 0,
                };
                self.spend(&live.store, full);
                Ok(Box::new(live))
            }
            Err(InstanceError::Kind(kind)) => Err(self.error(kind)),
            Err(InstanceError::Signature { function, reason }) => Err(self.error(
                PolicyErrorKind::Abi(format!("`{function}` has the wrong type: {reason}")),
            )),
            Err(InstanceError::Manifest(reason)) => {
                Err(self.error(PolicyErrorKind::Decode(reason)))
            }
        }
    }

    /// Writes the call's message for `view` into `self.view`: a change from
    /// the view the instance holds where the module takes changes.
    fn encode(&mut self, live: &Live<S::View>, view: &S::View, changes: Option<&ViewChanges<'_>>) {
        if self.view_changes {
            let known = match (changes, live.held_at) {
                (Some(changes), Some(at)) if changes.since(at, &mut self.known) => {
                    Some(&self.known)
                }
                _ => None,
            };
            wire::encode_view_message_known::<S>(live.held.as_ref(), view, known, &mut self.view);
        } else {
            wire::encode_view_into::<S>(view, &mut self.view);
        }
    }

    /// After an answered call: the instance now holds `view`, so the next
    /// view may be a change from it. A change is applied to the copy the
    /// way the guest applied it (kept entries advanced in place, new ones
    /// decoded): for a standing backlog that is an addition per job, not a
    /// copy of every job.
    fn hold(&self, live: &mut Live<S::View>, view: &S::View, changes: Option<&ViewChanges<'_>>) {
        if !(self.view_changes && <S::View as wire::WireView>::CHANGES) {
            return;
        }
        let changed = self.view.last() == Some(&wire::VIEW_CHANGE);
        match &mut live.held {
            Some(held) => {
                // (A change that did not apply leaves a partial copy: the
                // whole view replaces it.)
                if !(changed && wire::decode_view_message::<S>(&self.view, held).is_ok()) {
                    held.clone_from(view);
                }
            }
            None => live.held = Some(view.clone()),
        }
        debug_assert!(live.held.as_ref() == Some(view));
        live.held_at = changes.map(|c| c.stamp());
    }
}

impl PolicyModule {
    /// A backend of slot `S` running this module, configured with `config`
    /// (its own instance).
    ///
    /// ```no_run
    /// use gangway_core::wasm::{PolicyEngine, SandboxConfig};
    /// use gangway_plugin_sdk::Fairness;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let engine = PolicyEngine::new(SandboxConfig::default())?;
    /// let module = engine.load("fifo.wasm", &std::fs::read("fifo.wasm")?)?;
    /// let fairness = module.backend::<Fairness>(b"")?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn backend<S: SlotContract>(&self, config: &[u8]) -> Result<BoxedBackend<S>, WasmError> {
        self.exports::<S>()?;
        Ok(Box::new(WasmBackend::<S>::start(
            self.clone(),
            config,
            TwinCheck::default(),
        )?))
    }

    /// [`PolicyModule::backend`] checking the slot's `-buffered` twin
    /// against its own function on every call: a difference fails the call
    /// with [`PolicyErrorKind::TwinsDisagree`] (what the conformance kit
    /// uses).
    #[cfg(feature = "conformance")]
    pub(crate) fn backend_checking_twins<S: SlotContract>(
        &self,
        config: &[u8],
    ) -> Result<BoxedBackend<S>, WasmError> {
        self.exports::<S>()?;
        let twins = TwinCheck {
            every: 1,
            fail: true,
            ..TwinCheck::default()
        };
        Ok(Box::new(WasmBackend::<S>::start(
            self.clone(),
            config,
            twins,
        )?))
    }
}

impl PolicyModule {
    /// Whether the module exports slot `S`, else the error naming what it
    /// implements.
    fn exports<S: SlotContract>(&self) -> Result<(), WasmError> {
        if self.compiled.slots.contains(&S::SLOT) {
            return Ok(());
        }
        Err(WasmError::of(
            &self.name,
            WasmErrorKind::SlotNotExported {
                slot: S::SLOT,
                implemented: self
                    .slots()
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            },
        ))
    }
}

/// How a backend checks a 2.1 module's `-buffered` twin against the slot's
/// own function (which the component runtime calls): on its first call and
/// every `every`-th after (0: never), the same view is also given to a
/// fresh instance entered through the function. On a difference a host's
/// backend declines the twins (the function's answer stands, and every
/// later call goes through the function), saying why; the conformance kit's
/// fails the call.
#[derive(Clone, Debug)]
pub(crate) struct TwinCheck {
    pub(crate) every: u64,
    pub(crate) fail: bool,
    calls: u64,
    declined: Option<String>,
}

impl Default for TwinCheck {
    fn default() -> Self {
        TwinCheck {
            every: 64,
            fail: false,
            calls: 0,
            declined: None,
        }
    }
}

impl<S: SlotContract> WasmBackend<S> {
    /// The twin's answer to `view` checked against the slot's function's,
    /// when a check is due (see [`TwinCheck`]).
    fn check_twins(
        &mut self,
        view: &S::View,
        twin: S::Decision,
    ) -> Result<S::Decision, PolicyError> {
        let t = &mut self.twins;
        if t.every == 0 || t.declined.is_some() {
            return Ok(twin);
        }
        let due = t.calls.is_multiple_of(t.every);
        t.calls += 1;
        if !due {
            return Ok(twin);
        }
        let twin_logs = self
            .live
            .as_mut()
            .and_then(|live| live.store.data_mut().captured.take())
            .unwrap_or_default();
        let (function, logs) = self.call_function(view);
        let same_answer = function.as_ref().is_ok_and(|d| *d == twin);
        if same_answer && logs == twin_logs {
            return Ok(twin);
        }
        let said = |text: String| -> String { text.chars().take(300).collect() };
        let reason = if same_answer {
            format!(
                "on a view of {} jobs the twin logged {}, the function {}",
                S::view_jobs(view),
                said(format!("{twin_logs:?}")),
                said(format!("{logs:?}"))
            )
        } else {
            format!(
                "on a view of {} jobs the twin answered {}, the function {}",
                S::view_jobs(view),
                said(format!("{twin:?}")),
                match &function {
                    Ok(d) => said(format!("{d:?}")),
                    Err(kind) => format!("an error ({kind})"),
                }
            )
        };
        if self.twins.fail {
            return Err(self.error(PolicyErrorKind::TwinsDisagree(reason)));
        }
        tracing::warn!(
            module = self.module.name(),
            slot = %S::SLOT,
            "declining the module's -buffered twins, its calls go through the slot's function from now on: {reason}"
        );
        self.twins.declined = Some(reason);
        self.live = None;
        function.map_err(|kind| self.error(kind))
    }

    /// The answer of a fresh instance entered through the slot's own
    /// function to the whole of `view`, and what it logged (when kept).
    fn call_function(
        &mut self,
        view: &S::View,
    ) -> (Result<S::Decision, PolicyErrorKind>, Vec<String>) {
        let mut live = match self.instantiate_with(false) {
            Ok((live, _)) => live,
            Err(e) => {
                let kind = match e {
                    InstanceError::Kind(kind) => kind,
                    InstanceError::Signature { function, reason } => {
                        PolicyErrorKind::Abi(format!("`{function}` has the wrong type: {reason}"))
                    }
                    InstanceError::Manifest(reason) => PolicyErrorKind::Decode(reason),
                };
                return (Err(kind), Vec::new());
            }
        };
        if let Err(InstanceError::Kind(kind)) = self.arm(&mut live.store, None) {
            return (Err(kind), Vec::new());
        }
        let mut message = Vec::new();
        if self.view_changes {
            wire::encode_view_message_known::<S>(None, view, None, &mut message);
        } else {
            wire::encode_view_into::<S>(view, &mut message);
        }
        let messages = self.view_changes;
        let answer = match live.call(&message, |bytes| {
            if messages {
                wire::decode_reply_message::<S>(bytes, view)
            } else {
                wire::decode_decision::<S>(bytes, view)
            }
        }) {
            Ok(Ok(Ok(decision))) => Ok(decision),
            Ok(Ok(Err(e))) => Err(PolicyErrorKind::Decode(e.to_string())),
            Ok(Err(message)) => Err(PolicyErrorKind::Refused(message)),
            Err(e) => Err(classify(&e, &self.module.engine.config)),
        };
        let logs = live.store.data_mut().captured.take().unwrap_or_default();
        (answer, logs)
    }
}
