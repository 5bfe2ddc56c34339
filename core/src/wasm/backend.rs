//! A slot backend running a Wasm module: one live instance at a time, its
//! spending held to every budget, failure classification,
//! discard-and-restart.

use std::sync::Arc;

use gangway_plugin_sdk::wire::KnownChanges;
use gangway_plugin_sdk::{ConfigForm, Manifest, SlotContract, TypeChoices, TypesView, wire};

use super::error::{WasmError, WasmErrorKind};
use super::live::{InstanceError, Live};
use super::module::PolicyModule;
use super::spending::Spending;
use super::store::{LogBook, classify};
use super::twins::TwinCheck;
use crate::policy::{
    Backend, BoxedBackend, PolicyError, PolicyErrorKind, PolicyOrigin, ViewChanges,
};

/// A backend of slot `S` running a Wasm module. It owns at most one
/// instance (and the one its twin checks enter through the slot's
/// function). When the module's manifest asks for view messages, each view
/// after the first may travel as a change from the view of the instance's
/// last answered call (a fresh instance gets the whole view), and replies
/// come back as reply messages. Any failed call (trap, budget, memory cap,
/// broken ABI, refusal, a reply that does not decode, or a decision the
/// core refused) discards the instance, and with it the view it held; the
/// next call starts a fresh one, running `init` again with the same
/// configuration. An instance that failed is never reused. Everything the
/// module costs is counted in its [`Spending`].
pub(crate) struct WasmBackend<S: SlotContract> {
    pub(crate) module: PolicyModule,
    /// The operator's configuration, as given (what reports show).
    pub(crate) config: Arc<[u8]>,
    /// What `init` is handed: the configuration as given, or for a module
    /// that reads its options as a tree, the tree made of it once here.
    pub(crate) init_config: Arc<[u8]>,
    /// The policy's manifest, without the glue's `view_changes` (kept apart
    /// in `view_changes`: it is how the views travel, not what the policy sees).
    pub(crate) manifest: Manifest,
    pub(crate) view_changes: bool,
    /// Boxed: a call takes it out and puts it back, which moves a pointer,
    /// not the store handle, the call and the held view.
    live: Option<Box<Live<S::View>>>,
    view: Vec<u8>,
    /// What changed since the held view, as the round's change log said.
    known: KnownChanges,
    /// What it has spent, against every budget.
    pub(crate) spending: Spending,
    /// What its instances logged, against its limits.
    pub(crate) book: Arc<LogBook>,
    /// How its `-buffered` twins are checked against the slot's function.
    pub(crate) twins: TwinCheck<S::View>,
    _slot: std::marker::PhantomData<S>,
}

impl<S: SlotContract> WasmBackend<S> {
    /// Instantiates the module for slot `S` and runs `init(config)`.
    pub(crate) fn start(
        module: PolicyModule,
        config: &[u8],
        twins: TwinCheck<S::View>,
    ) -> Result<Self, WasmError> {
        let engine = module.engine.clone();
        let book = Arc::new(LogBook::new(&engine.config, engine.logs.clone()));
        let init_config = Self::init_config(&module, config)?;
        let mut backend = WasmBackend {
            module,
            config: Arc::from(config),
            init_config,
            manifest: Manifest::default(),
            view_changes: false,
            live: None,
            view: Vec::new(),
            known: KnownChanges::default(),
            spending: Spending::default(),
            book,
            twins,
            _slot: std::marker::PhantomData,
        };
        if !backend.module.buffered_slots().contains(&S::SLOT) {
            backend.twins.every = 0;
        }
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

    /// What `init` is handed for `config`: the bytes as given, or the
    /// configuration tree made of them when the module's slot reads one
    /// (a TOML error is the configuration's refusal, naming line and
    /// column). Empty bytes stay empty (all defaults, as the contract
    /// says for either form).
    fn init_config(module: &PolicyModule, config: &[u8]) -> Result<Arc<[u8]>, WasmError> {
        match module.config_form(S::SLOT) {
            // Empty bytes are all defaults, in either form.
            _ if config.is_empty() => Ok(Arc::from(config)),
            ConfigForm::Text => Ok(Arc::from(config)),
            ConfigForm::Tree => gangway_plugin_sdk::config_tree(config)
                .map(Arc::from)
                .map_err(|e| {
                    WasmError::of(
                        module.name(),
                        WasmErrorKind::Config {
                            slot: S::SLOT,
                            message: e.to_string(),
                        },
                    )
                }),
        }
    }

    /// A fresh instance with `init(config)` done, and the manifest it
    /// answered: entered through the slot's twins unless they were declined.
    fn instantiate(&mut self) -> Result<(Live<S::View>, Manifest), InstanceError> {
        let twins = self.twins.declined.is_none();
        self.instantiate_with(twins)
    }
}

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
        self.decide_knowing(view, None, None).map(|(d, _)| d)
    }

    fn decide_with_changes(
        &mut self,
        view: &S::View,
        changes: &ViewChanges<'_>,
    ) -> Result<S::Decision, PolicyError> {
        self.decide_knowing(view, Some(changes), None)
            .map(|(d, _)| d)
    }

    fn decide_typed(
        &mut self,
        view: &S::View,
        types: &TypesView,
        changes: &ViewChanges<'_>,
    ) -> Result<(S::Decision, TypeChoices), PolicyError> {
        // Only a module whose manifest takes them is sent the types.
        let types = self.manifest.gpu_types.then_some(types);
        self.decide_knowing(view, Some(changes), types)
    }

    fn prepare_round(&mut self) {
        self.spending.new_round();
    }

    fn report(&mut self, outcome: Result<(), &PolicyError>) {
        // A decision the core refused: the next call starts afresh too.
        if outcome.is_err() {
            self.live = None;
        }
    }
}

/// Appends `types` to the message a module is sent (contract 2.2), when
/// its manifest takes them. A module that takes them and its views bare
/// (not as view messages, whose last byte says what they are) gets every
/// message typed, with no types on a cluster of one type, so that a bare
/// view ending in [`wire::TYPED`] is never read as a typed one.
pub(crate) fn frame_types(
    manifest: &Manifest,
    view_changes: bool,
    types: Option<&TypesView>,
    message: &mut Vec<u8>,
) {
    match types {
        Some(types) => wire::append_typed(types, message),
        None if manifest.gpu_types && !view_changes => {
            wire::append_typed(&TypesView::default(), message);
        }
        None => {}
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
        types: Option<&TypesView>,
    ) -> Result<(S::Decision, TypeChoices), PolicyError> {
        let engine = self.module.engine.clone();
        let config = &engine.config;
        if self.spending.renew_period(config) {
            self.book.renew();
        }
        self.spending.call();
        let mut live = self.live_instance()?;
        let mut grant = self
            .spending
            .grant(config, S::WORK.of_size(S::view_size(view)))
            .map_err(|kind| self.error(kind))?;
        self.encode(&live, view, changes);
        let changed = self.view.last() == Some(&wire::VIEW_CHANGE);
        frame_types(&self.manifest, self.view_changes, types, &mut self.view);
        self.arm(&mut live.store, &mut grant)
            .map_err(|kind| self.error(kind))?;
        let messages = self.view_changes;
        let typed = types.is_some();
        let answer = live.call(&self.view, |bytes| {
            decode_answer::<S>(bytes, view, messages, typed)
        });
        let used = self.used(&live.store, &grant);
        self.spend(&grant, used);
        match answer {
            Ok(Ok(Ok((decision, choices)))) => {
                self.hold(&mut live, view, changes, changed);
                self.live = Some(live);
                self.check_twins(view, types, (decision, choices))
            }
            // The instance is dropped here on every failure and never used
            // again: refusals and undecodable replies included.
            Ok(Ok(Err(e))) => Err(self.error(PolicyErrorKind::Decode(e.to_string()))),
            Ok(Err(message)) => Err(self.error(PolicyErrorKind::Refused(message))),
            Err(e) => {
                let kind = classify(&e, config);
                let kind = self.spending.error(config, &grant, used, kind);
                Err(self.error(kind))
            }
        }
    }

    /// The live instance, made afresh (its instantiation and `init`
    /// charged) when the last call failed.
    fn live_instance(&mut self) -> Result<Box<Live<S::View>>, PolicyError> {
        if let Some(live) = self.live.take() {
            return Ok(live);
        }
        match self.instantiate() {
            Ok((live, _)) => Ok(Box::new(live)),
            Err(e) => Err(self.error(e.kind())),
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
    fn hold(
        &self,
        live: &mut Live<S::View>,
        view: &S::View,
        changes: Option<&ViewChanges<'_>>,
        changed: bool,
    ) {
        if !(self.view_changes && <S::View as wire::WireView>::CHANGES) {
            return;
        }
        let message = match wire::split_typed(&self.view) {
            Ok((message, _)) => message,
            Err(_) => &self.view[..],
        };
        match &mut live.held {
            Some(held) => {
                // (A change that did not apply leaves a partial copy: the
                // whole view replaces it.)
                if !(changed && wire::decode_view_message::<S>(message, held).is_ok()) {
                    held.clone_from(view);
                }
            }
            None => live.held = Some(view.clone()),
        }
        debug_assert!(live.held.as_ref() == Some(view));
        live.held_at = changes.map(|c| c.stamp());
    }

    /// Drops the live instance (its twins were declined: the next call
    /// makes one entered through the slot's function).
    pub(crate) fn discard_live(&mut self) {
        self.live = None;
    }

    /// The log messages the live instance's last call kept, when kept.
    pub(crate) fn live_logs(&mut self) -> Option<Vec<String>> {
        self.live
            .as_mut()
            .and_then(|live| live.store.data_mut().captured.take())
    }
}

/// Decodes a module's reply to `view` (a reply message when the module
/// takes `messages`), and, to a `typed` call (contract 2.2), the GPU types
/// it chose if the reply carries them, at most one per job of the view. A
/// reply to a plain call is read as before, whatever its last byte.
pub(super) fn decode_answer<S: SlotContract>(
    bytes: &[u8],
    view: &S::View,
    messages: bool,
    typed: bool,
) -> Result<(S::Decision, TypeChoices), wire::WireError> {
    let (reply, extra) = if typed {
        wire::split_typed(bytes)?
    } else {
        (bytes, None)
    };
    let decision = if messages {
        wire::decode_reply_message::<S>(reply, view)?
    } else {
        wire::decode_decision::<S>(reply, view)?
    };
    let choices = match extra {
        // A choice is at most 11 bytes: a job id and a type.
        Some(extra) if extra.len() > (S::view_jobs(view) + 1).saturating_mul(11) => {
            return Err(wire::WireError {
                what: "TypeChoices",
                reason: format!("{} bytes, more than the view's jobs can need", extra.len()),
            });
        }
        Some(extra) => wire::decode_typed::<TypeChoices>(extra)?,
        None => TypeChoices::default(),
    };
    Ok((decision, choices))
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
        let twins = TwinCheck::sampled(self, S::SLOT);
        Ok(Box::new(WasmBackend::<S>::start(
            self.clone(),
            config,
            twins,
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
        Ok(Box::new(WasmBackend::<S>::start(
            self.clone(),
            config,
            TwinCheck::every_call(),
        )?))
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_taking_types_and_bare_views_gets_every_view_framed() {
        let typed = Manifest {
            gpu_types: true,
            ..Manifest::default()
        };
        let framed = |manifest: &Manifest, view_changes: bool, types: Option<&TypesView>| {
            let mut m = vec![7, 2];
            frame_types(manifest, view_changes, types, &mut m);
            m
        };
        // Bare views: framed even with no types (no types, length 1).
        let empty = framed(&typed, false, None);
        assert_eq!(empty.last(), Some(&wire::TYPED));
        let (body, types) = wire::split_typed(&empty).unwrap();
        assert_eq!(body, [7, 2]);
        let types: TypesView = wire::decode_typed(types.unwrap()).unwrap();
        assert_eq!(types, TypesView::default());
        // View messages say what they are: untouched without types.
        assert_eq!(framed(&typed, true, None), [7, 2]);
        assert_eq!(framed(&Manifest::default(), false, None), [7, 2]);
        // With types, always framed.
        let some = TypesView::default();
        assert_eq!(framed(&typed, true, Some(&some)), empty);
    }
}
