//! Handles on every slot of a policy set, by slot: what a long-lived host
//! (`gangway-slurm`, the Python bindings) keeps to stage, roll back and
//! watch policies while the scheduler owns the set.

use std::any::Any;
use std::sync::Arc;

use gangway_core::Slot;
use gangway_core::policy::{PolicySet, SlotHandle, SlotStatus};
use gangway_core::wasm::{PolicyModule, WasmError};
use gangway_plugin_sdk::{SlotContract, with_slot};

use crate::{CatalogError, CatalogSlot};

/// Why a policy could not be staged.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// The built-in policy is unknown or refused its configuration.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// The module does not implement the slot or refused its configuration.
    #[error(transparent)]
    Module(#[from] WasmError),
}

/// Handles on every guarded slot of a policy set, indexed by slot.
///
/// ```
/// use gangway_core::Slot;
/// use gangway_catalog::{self as catalog, handles::SlotHandles};
/// let set = catalog::preset("philly").unwrap().build_native().unwrap();
/// let handles = SlotHandles::of(&set);
/// let staged = handles.stage(Slot::Fairness, None, "las", b"").unwrap();
/// assert_eq!(staged, "las");
/// assert!(handles.status(Slot::Fairness).active.contains("vc-quota"));
/// ```
#[derive(Clone, Debug)]
pub struct SlotHandles {
    /// `handles[slot.index()]` is slot `slot`'s `SlotHandle<S>`.
    handles: [AnyHandle; Slot::COUNT],
}

/// Makes a backend for any slot: how a host stages a kind of policy the
/// catalog does not know (see [`SlotHandles::stage_from`]).
pub trait BackendFactory {
    /// A backend for slot `S`.
    fn make<S: SlotContract>(&self) -> gangway_core::policy::BoxedBackend<S>;
}

/// A slot's typed handle, whatever its slot.
#[derive(Clone)]
struct AnyHandle(Arc<dyn Any + Send + Sync>);

impl std::fmt::Debug for AnyHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SlotHandle")
    }
}

/// Stages in `handle` slot `S` of `module`, or the built-in policy `name`.
fn stage_in<S: CatalogSlot>(
    handle: &SlotHandle<S>,
    module: Option<&PolicyModule>,
    name: &str,
    config: &[u8],
) -> Result<String, StageError> {
    let backend = match module {
        Some(m) => m.backend::<S>(config)?,
        None => S::native(name, config)?,
    };
    let staged = backend.name().to_string();
    handle.stage(backend);
    Ok(staged)
}

impl SlotHandles {
    /// Handles on every slot of `set` (which the scheduler then owns).
    pub fn of(set: &PolicySet) -> SlotHandles {
        SlotHandles {
            handles: Slot::ALL
                .map(|slot| with_slot!(slot, |S| AnyHandle(Arc::new(set.slot::<S>().handle())))),
        }
    }

    /// Slot `S`'s handle.
    fn get<S: SlotContract>(&self) -> &SlotHandle<S> {
        self.handles[S::SLOT.index()]
            .0
            .downcast_ref()
            .expect("handles[S::SLOT.index()] holds a SlotHandle<S>")
    }

    /// Stages in `slot` its policy from `module`, or without one the
    /// built-in policy `name`, configured by `config`: it becomes active at
    /// the start of the next round. Returns the staged backend's name.
    pub fn stage(
        &self,
        slot: Slot,
        module: Option<&PolicyModule>,
        name: &str,
        config: &[u8],
    ) -> Result<String, StageError> {
        with_slot!(slot, |S| stage_in(self.get::<S>(), module, name, config))
    }

    /// Stages in `slot` the backend `factory` makes for it (a host's own
    /// kind of policy, e.g. one written in Python): it becomes active at the
    /// start of the next round. Returns the staged backend's name.
    pub fn stage_from<F: BackendFactory>(&self, slot: Slot, factory: &F) -> String {
        with_slot!(slot, |S| {
            let backend = factory.make::<S>();
            let name = backend.name().to_string();
            self.get::<S>().stage(backend);
            name
        })
    }

    /// Asks `slot` to go back to its previous policy at the next round.
    pub fn rollback(&self, slot: Slot) {
        with_slot!(slot, |S| self.get::<S>().rollback())
    }

    /// A snapshot of `slot`.
    pub fn status(&self, slot: Slot) -> SlotStatus {
        with_slot!(slot, |S| self.get::<S>().status())
    }
}
