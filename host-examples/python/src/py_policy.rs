//! Policies written in Python, run natively: a Python object fills a slot of
//! the scheduler like any other backend. Each call hands the slot's view to
//! `gangway.policy._call` as postcard bytes (the wire format of every
//! host), which reads them with the package's pure-Python codec
//! (`gangway.wire`, the same one a componentized Python policy runs),
//! gives the policy the view as objects and returns its decision's bytes;
//! the scheduler validates the decision by the slot's rules, and a policy
//! that raises, answers what does not decode or breaks a rule falls back
//! to the built-in policy for that round and is quarantined after repeated
//! failures, as a Wasm module is.

use gangway_catalog::handles::BackendFactory;
use gangway_core::policy::{Backend, BoxedBackend, PolicyError, PolicyErrorKind, ViewChanges};
use gangway_plugin_sdk::{
    Manifest, QueueOrder, RunningScope, SlotContract, TypeChoices, TypesView, wire,
};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// A slot backend calling a Python policy object.
pub(crate) struct PyBackend<S> {
    name: String,
    policy: Py<PyAny>,
    manifest: Manifest,
    _slot: std::marker::PhantomData<fn() -> S>,
}

impl<S: SlotContract> PyBackend<S> {
    fn error(&self, kind: PolicyErrorKind) -> PolicyError {
        PolicyError::new(S::SLOT, self.name.clone(), kind)
    }
}

impl<S: SlotContract> Backend<S> for PyBackend<S> {
    fn name(&self) -> &str {
        &self.name
    }

    fn manifest(&self) -> Manifest {
        self.manifest.clone()
    }

    fn decide(&mut self, view: &S::View) -> Result<S::Decision, PolicyError> {
        let view_bytes = wire::encode_view::<S>(view);
        let answer = Python::attach(|py| -> PyResult<Vec<u8>> {
            let call = py.import("gangway.policy")?.getattr("_call")?;
            let bytes = PyBytes::new(py, &view_bytes);
            call.call1((self.policy.clone_ref(py), S::NAME, bytes))?
                .extract()
        })
        .map_err(|e| self.error(PolicyErrorKind::Refused(format!("raised {e}"))))?;
        wire::decode_decision::<S>(&answer, view).map_err(|e| self.unread(&e))
    }

    /// Contract 2.2: a policy whose `GPU_TYPES` is true gets the GPU types
    /// beside its view (`gangway.policy._call_typed`, its `order_typed` or
    /// `reclaim_typed`) and answers type choices beside its decision, the
    /// typed message and reply a Wasm module exchanges.
    fn decide_typed(
        &mut self,
        view: &S::View,
        types: &TypesView,
        changes: &ViewChanges<'_>,
    ) -> Result<(S::Decision, TypeChoices), PolicyError> {
        if !self.manifest.gpu_types {
            return self
                .decide_with_changes(view, changes)
                .map(|d| (d, TypeChoices::default()));
        }
        let mut message = wire::encode_view::<S>(view);
        wire::append_typed(types, &mut message);
        let answer = Python::attach(|py| -> PyResult<Vec<u8>> {
            let call = py.import("gangway.policy")?.getattr("_call_typed")?;
            let bytes = PyBytes::new(py, &message);
            call.call1((self.policy.clone_ref(py), S::NAME, bytes))?
                .extract()
        })
        .map_err(|e| self.error(PolicyErrorKind::Refused(format!("raised {e}"))))?;
        let (reply, extra) = wire::split_typed(&answer).map_err(|e| self.unread(&e))?;
        let decision = wire::decode_decision::<S>(reply, view).map_err(|e| self.unread(&e))?;
        let choices = match extra {
            Some(extra) => wire::decode_typed::<TypeChoices>(extra).map_err(|e| self.unread(&e))?,
            None => TypeChoices::default(),
        };
        Ok((decision, choices))
    }
}

impl<S: SlotContract> PyBackend<S> {
    /// The error of an answer that does not read.
    fn unread(&self, e: &wire::WireError) -> PolicyError {
        self.error(PolicyErrorKind::Decode(format!(
            "the {} decision does not read: {e}",
            S::NAME
        )))
    }
}

/// Makes a [`PyBackend`] for any slot from one Python object.
pub(crate) struct PyFactory {
    pub(crate) name: String,
    pub(crate) policy: Py<PyAny>,
}

impl BackendFactory for PyFactory {
    fn make<S: SlotContract>(&self) -> BoxedBackend<S> {
        let (policy, mut manifest) =
            Python::attach(|py| (self.policy.clone_ref(py), manifest_of(self.policy.bind(py))));
        // Only fairness and reclaim policies are shown the GPU types.
        manifest.gpu_types &= matches!(
            S::SLOT,
            gangway_plugin_sdk::Slot::Fairness | gangway_plugin_sdk::Slot::Reclaim
        );
        // A reclaim policy that takes them also gets the servers' types.
        manifest.server_types = manifest.gpu_types && S::SLOT == gangway_plugin_sdk::Slot::Reclaim;
        Box::new(PyBackend::<S> {
            name: self.name.clone(),
            policy,
            manifest,
            _slot: std::marker::PhantomData,
        })
    }
}

/// What a Python policy declares beside its decisions: its `queue_order`
/// (`"All"`, `"Submit"`, `"Smallest"` or `{"AttainedBands": [...]}`: a
/// fairness policy that follows it sees only each VC's first jobs in that
/// order), `running` (`"All"` or `"Borrowed"`, for reclaim) and
/// `GPU_TYPES` (true: a fairness or reclaim policy that takes the GPU
/// types, contract 2.2). Missing or unreadable attributes keep the
/// defaults (every job, no types).
fn manifest_of(policy: &Bound<'_, PyAny>) -> Manifest {
    fn read<T: serde::de::DeserializeOwned>(policy: &Bound<'_, PyAny>, attr: &str) -> Option<T> {
        let value = policy.getattr(attr).ok()?;
        let json = policy.py().import("json").ok()?.getattr("dumps").ok()?;
        let text: String = json.call1((value,)).ok()?.extract().ok()?;
        serde_json::from_str(&text).ok()
    }
    Manifest {
        queue_order: read::<QueueOrder>(policy, "queue_order").unwrap_or_default(),
        running: read::<RunningScope>(policy, "running").unwrap_or_default(),
        view_changes: false,
        gpu_types: read::<bool>(policy, "GPU_TYPES").unwrap_or(false),
        server_types: false,
    }
}

/// The name a Python policy object goes by: its `name` attribute, else its
/// class's (or function's) name, prefixed `python:`.
pub(crate) fn name_of(policy: &Bound<'_, PyAny>) -> String {
    let own = policy
        .getattr("name")
        .ok()
        .and_then(|n| n.extract::<String>().ok());
    let name = own.or_else(|| {
        let named = if policy.is_callable() && policy.hasattr("__name__").unwrap_or(false) {
            policy.clone()
        } else {
            policy.get_type().into_any()
        };
        named
            .getattr("__name__")
            .ok()
            .and_then(|n| n.extract::<String>().ok())
    });
    format!("python:{}", name.unwrap_or_else(|| "policy".into()))
}
