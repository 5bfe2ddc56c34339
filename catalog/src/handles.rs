//! Handles on every slot of a policy set, by slot: what a long-lived host
//! (`gangway-slurm`, the Python bindings) keeps to stage, roll back and
//! watch policies while the scheduler owns the set. The one place that turns
//! a [`Slot`] named at run time into its typed handle.

use gangway_core::Slot;
use gangway_core::policy::{PolicySet, SlotHandle, SlotStatus};
use gangway_core::wasm::{PolicyModule, WasmError};
use gangway_plugin_sdk::{Defragment, Fairness, Gang, Locality, Reclaim, Retry};

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

/// Handles on the six guarded slots of a policy set.
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
    fairness: SlotHandle<Fairness>,
    locality: SlotHandle<Locality>,
    gang: SlotHandle<Gang>,
    reclaim: SlotHandle<Reclaim>,
    retry: SlotHandle<Retry>,
    defragment: SlotHandle<Defragment>,
}

/// Runs `$body` with `$h` bound to the typed handle of `$slot`.
macro_rules! on_slot {
    ($handles:expr, $slot:expr, |$h:ident| $body:expr) => {
        match $slot {
            Slot::Fairness => {
                let $h = &$handles.fairness;
                $body
            }
            Slot::Locality => {
                let $h = &$handles.locality;
                $body
            }
            Slot::Gang => {
                let $h = &$handles.gang;
                $body
            }
            Slot::Reclaim => {
                let $h = &$handles.reclaim;
                $body
            }
            Slot::Retry => {
                let $h = &$handles.retry;
                $body
            }
            Slot::Defragment => {
                let $h = &$handles.defragment;
                $body
            }
        }
    };
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
            fairness: set.slot::<Fairness>().handle(),
            locality: set.slot::<Locality>().handle(),
            gang: set.slot::<Gang>().handle(),
            reclaim: set.slot::<Reclaim>().handle(),
            retry: set.slot::<Retry>().handle(),
            defragment: set.slot::<Defragment>().handle(),
        }
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
        on_slot!(self, slot, |h| stage_in(h, module, name, config))
    }

    /// Asks `slot` to go back to its previous policy at the next round.
    pub fn rollback(&self, slot: Slot) {
        on_slot!(self, slot, |h| h.rollback())
    }

    /// A snapshot of `slot`.
    pub fn status(&self, slot: Slot) -> SlotStatus {
        on_slot!(self, slot, |h| h.status())
    }
}
