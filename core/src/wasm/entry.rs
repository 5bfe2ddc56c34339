//! Entering a backend's instances: making one (its store, the slot's
//! entry, `init`) with what its spending allows, arming each entry's
//! budget, counting what it used, and the twin checks (see `twins.rs`).

use gangway_plugin_sdk::{Manifest, SlotContract, TypeChoices, TypesView, wire};
use wasmtime::Store;
use wasmtime::component::InstancePre;

use super::backend::WasmBackend;
use super::config::Budget;
use super::live::{Entry, InitOutcome, InstanceError, Live, MANIFEST_BYTES, SlotCall, refusal};
use super::module::{Code, SlotExport};
use super::spending::Grant;
use super::store::{HostState, classify, error_text, new_store};
use crate::policy::{PolicyError, PolicyErrorKind};

impl<S: SlotContract> WasmBackend<S> {
    /// Arms the budget of the next entry into `store` as `grant` says: its
    /// fuel, and the epoch deadline (the call's own, no later than the
    /// engine's `deadline_at` or the time `grant` leaves); resets the
    /// call's log allowance. The component runtime may copy out of the
    /// guest at most as many bytes as the entry has fuel.
    pub(crate) fn arm(
        &self,
        store: &mut Store<HostState>,
        grant: &mut Grant,
    ) -> Result<(), PolicyErrorKind> {
        let engine = &self.module.engine;
        let config = &engine.config;
        if let Budget::Fuel(_) = config.budget {
            store
                .set_fuel(grant.fuel)
                .map_err(|e| PolicyErrorKind::Trap(error_text(&e)))?;
            store.set_hostcall_fuel(
                usize::try_from(grant.fuel)
                    .unwrap_or(usize::MAX)
                    .min(HOSTCALL_BYTES),
            );
        }
        if engine.deadline_ticks > 0 {
            let tick = engine.tick.as_nanos().max(1);
            let ticks_of = |d: std::time::Duration| {
                u64::try_from(d.as_nanos().div_ceil(tick)).unwrap_or(u64::MAX)
            };
            let mut ticks = engine.deadline_ticks;
            if let Some(at) = config.deadline_at {
                ticks = ticks.min(ticks_of(
                    at.saturating_duration_since(std::time::Instant::now()),
                ));
            }
            if let Some(left) = grant.time {
                ticks = ticks.min(ticks_of(left).saturating_add(1));
            }
            store.set_epoch_deadline(ticks);
        }
        let data = store.data_mut();
        data.logs_left = config.log_messages_per_call;
        data.log_bytes_left = config.log_bytes_per_call;
        // The kit compares the twin's and the function's log messages too.
        data.captured = self.twins.fail.then(Vec::new);
        grant.started = Some(engine.clock().now());
        Ok(())
    }

    /// The fuel `store`'s last entry, armed with `grant`, used.
    pub(crate) fn used(&self, store: &Store<HostState>, grant: &Grant) -> u64 {
        match store.get_fuel() {
            Ok(left) if grant.fuel > 0 => grant.fuel.saturating_sub(left),
            _ => 0,
        }
    }

    /// Counts an entry's `used` fuel, granted `grant`: the backend's
    /// spending and the module's total.
    pub(crate) fn spend(&mut self, grant: &Grant, used: u64) {
        let engine = &self.module.engine;
        self.spending
            .record(&engine.config, engine.clock(), grant, used);
        self.module
            .compiled
            .fuel_used
            .fetch_add(used, std::sync::atomic::Ordering::Relaxed);
    }

    /// A fresh instance with `init(config)` done, and the manifest it
    /// answered: entered through the slot's twins if `twins`. Its
    /// instantiation and `init` are an entry of their own, measured as a
    /// call of the slot's built-ins on an empty view and charged to every
    /// budget.
    pub(crate) fn instantiate_with(
        &mut self,
        twins: bool,
    ) -> Result<(Live<S::View>, Manifest), InstanceError> {
        let engine = self.module.engine.clone();
        let config = &engine.config;
        self.module
            .compiled
            .instantiations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut grant = self
            .spending
            .grant(config, S::WORK.of(0))
            .map_err(InstanceError::Kind)?;
        let mut store = new_store(
            &engine.engine,
            self.module.name(),
            config,
            self.book.clone(),
        );
        self.arm(&mut store, &mut grant)
            .map_err(InstanceError::Kind)?;
        let made = self.make(&mut store, twins);
        let used = self.used(&store, &grant);
        self.spend(&grant, used);
        let mut named = |kind| InstanceError::Kind(self.spending.error(config, &grant, used, kind));
        let (entry, init) = match made {
            Ok(made) => made,
            Err(InstanceError::Kind(kind)) => return Err(named(kind)),
            Err(e) => return Err(e),
        };
        match init {
            Ok(Ok(bytes)) => {
                let manifest =
                    Manifest::decode(&bytes).map_err(|e| InstanceError::Manifest(e.to_string()))?;
                Ok((Live::new(store, entry), manifest))
            }
            Ok(Err(message)) => Err(InstanceError::Kind(PolicyErrorKind::Refused(message))),
            Err(e) => Err(named(classify(&e, config))),
        }
    }

    /// Instantiates the module in `store` and runs `init`: the slot's entry
    /// and `init`'s outcome.
    fn make(
        &self,
        store: &mut Store<HostState>,
        twins: bool,
    ) -> Result<(Entry, InitOutcome), InstanceError> {
        let config = &self.module.engine.config;
        match &self.module.compiled.code {
            Code::Component { pre, exports } => self.instantiate_component(store, pre, exports),
            Code::Direct(code) => {
                let direct = code
                    .instantiate(store, S::SLOT, twins)
                    .map_err(|e| InstanceError::Kind(classify(&e, config)))?;
                let init = direct.init(store, &self.init_config, MANIFEST_BYTES);
                Ok((Entry::Direct(Box::new(direct)), init))
            }
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
            .call(&mut *store, (&self.init_config,))
            .and_then(|(answer,)| match answer {
                Ok(bytes) => Ok(Ok(bytes)),
                Err(text) => refusal(store, &text).map(Err),
            });
        Ok((Entry::Component(call), init))
    }

    /// The error of slot `S` of this module.
    pub(crate) fn error(&self, kind: PolicyErrorKind) -> PolicyError {
        PolicyError::new(S::SLOT, self.module.name(), kind)
    }
}

/// What the slot's own function answered a twin check: its decision and
/// the GPU types it chose (contract 2.2), or why it failed.
type FunctionAnswer<S> = Result<(<S as SlotContract>::Decision, TypeChoices), PolicyErrorKind>;

/// The most bytes one entry may make the component runtime copy out of
/// the guest (wasmtime's default for a host call), and at most its fuel.
const HOSTCALL_BYTES: usize = 128 << 20;

impl<S: SlotContract> WasmBackend<S> {
    /// The twin's answer to `view` checked against the slot's function's,
    /// when a check is due (see the module docs).
    pub(crate) fn check_twins(
        &mut self,
        view: &S::View,
        types: Option<&TypesView>,
        twin: (S::Decision, TypeChoices),
    ) -> Result<(S::Decision, TypeChoices), PolicyError> {
        if !self.twins.due() {
            return Ok(twin);
        }
        let twin_logs = self.captured_logs();
        let (function, logs) = self.call_function(view, types);
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
            // The function's own failure (a budget, a trap) is the finding.
            return Err(self.error(match function {
                Err(kind) => kind,
                Ok(_) => PolicyErrorKind::TwinsDisagree(reason),
            }));
        }
        tracing::warn!(
            module = self.module.name(),
            slot = %S::SLOT,
            "declining the module's -buffered twins, its calls go through the slot's function from now on: {reason}"
        );
        self.twins.declined = Some(reason);
        self.twins.checker = None;
        self.discard_live();
        function.map_err(|kind| self.error(kind))
    }

    /// The log messages the live instance's last call kept (when kept).
    fn captured_logs(&mut self) -> Vec<String> {
        self.live_logs().unwrap_or_default()
    }

    /// The answer of the instance entered through the slot's own function
    /// to the whole of `view` (made now if there is none), charged as a
    /// call is, and what it logged (when kept). The instance is kept for
    /// the next check if it answered.
    fn call_function(
        &mut self,
        view: &S::View,
        types: Option<&TypesView>,
    ) -> (FunctionAnswer<S>, Vec<String>) {
        let mut checker = match self.twins.checker.take() {
            Some(checker) => checker,
            None => match self.instantiate_with(false) {
                Ok((live, _)) => Box::new(live),
                Err(e) => return (Err(e.kind()), Vec::new()),
            },
        };
        let engine = self.module.engine.clone();
        let config = &engine.config;
        let mut grant = match self
            .spending
            .grant(config, S::WORK.of_size(S::view_size(view)))
        {
            Ok(grant) => grant,
            Err(kind) => return (Err(kind), Vec::new()),
        };
        if let Err(kind) = self.arm(&mut checker.store, &mut grant) {
            return (Err(kind), Vec::new());
        }
        let mut message = Vec::new();
        if self.view_changes {
            wire::encode_view_message_known::<S>(None, view, None, &mut message);
        } else {
            wire::encode_view_into::<S>(view, &mut message);
        }
        super::backend::frame_types(&self.manifest, self.view_changes, types, &mut message);
        let typed = types.is_some();
        let messages = self.view_changes;
        let answer = checker.call(&message, |bytes| {
            super::backend::decode_answer::<S>(bytes, view, messages, typed)
        });
        let used = self.used(&checker.store, &grant);
        self.spend(&grant, used);
        let answer = match answer {
            Ok(Ok(Ok(decision))) => Ok(decision),
            Ok(Ok(Err(e))) => Err(PolicyErrorKind::Decode(e.to_string())),
            Ok(Err(message)) => Err(PolicyErrorKind::Refused(message)),
            Err(e) => Err(self
                .spending
                .error(config, &grant, used, classify(&e, config))),
        };
        let logs = checker.store.data_mut().captured.take().unwrap_or_default();
        if answer.is_ok() {
            self.twins.checker = Some(checker);
        }
        (answer, logs)
    }
}
