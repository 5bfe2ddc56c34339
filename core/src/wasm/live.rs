//! A backend's live instance: its store, the slot's entry into it, and
//! calling it.

use wasmtime::Store;
use wasmtime::component::{Func, TypedFunc};

use super::direct::DirectInstance;
use super::store::{HostState, charge_read};
use crate::policy::{PolicyErrorKind, Stamp};

/// A live instance: its store, how to call the slot, and the view of its
/// last answered call (the base of the next view change) with the stamp of
/// the state it was built from, when the round said.
pub(crate) struct Live<V> {
    pub(crate) store: Store<HostState>,
    pub(crate) entry: Entry,
    pub(crate) held: Option<V>,
    pub(crate) held_at: Option<Stamp>,
}

/// The slot's call in a live instance.
pub(crate) enum Entry {
    /// A component function, type-checked against [`SlotCall`] when the
    /// instance was made.
    Component(Func),
    /// The main core module, entered directly (boxed: its typed functions
    /// make it much bigger than a component function handle).
    Direct(Box<DirectInstance>),
}

/// The type of every slot's call and `init`: bytes in, bytes or a refusal
/// out. (The runtime copies the reply out before the guest's post-return
/// runs; both are bounded by the instance's memory cap and by the bytes
/// the entry may make the host copy, and the reply is refused unheard if
/// longer than any answer to its view can be.)
pub(crate) type SlotCall<'a> = TypedFunc<(&'a [u8],), (Result<Vec<u8>, String>,)>;

/// A refusal's text the component runtime lifted: charged to the call's
/// fuel, then bounded as log messages are.
pub(crate) fn refusal(store: &mut Store<HostState>, text: &str) -> wasmtime::Result<String> {
    charge_read(&mut *store, text.len())?;
    Ok(super::contract::bounded(text, store.data().log_bytes))
}

impl<V> Live<V> {
    /// A live instance of `store` entered by `entry`, holding no view yet.
    pub(crate) fn new(store: Store<HostState>, entry: Entry) -> Live<V> {
        Live {
            store,
            entry,
            held: None,
            held_at: None,
        }
    }

    /// Calls the slot with `view`; `read` sees the reply bytes in the
    /// guest's memory. The outer error is a trap, an exhausted budget or a
    /// broken ABI; the inner one the guest's refusal.
    pub(crate) fn call<R>(
        &mut self,
        view: &[u8],
        read: impl FnOnce(&[u8]) -> R,
    ) -> wasmtime::Result<Result<R, String>> {
        match &self.entry {
            Entry::Component(func) => {
                let (answer,) = typed_slot_call(*func).call(&mut self.store, (view,))?;
                Ok(match answer {
                    Ok(reply) => Ok(read(&reply)),
                    Err(text) => Err(refusal(&mut self.store, &text)?),
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

/// Why an instance could not be made.
pub(crate) enum InstanceError {
    Kind(PolicyErrorKind),
    Signature { function: String, reason: String },
    Manifest(String),
}

impl InstanceError {
    /// What a call that needed the instance failed with.
    pub(crate) fn kind(self) -> PolicyErrorKind {
        match self {
            InstanceError::Kind(kind) => kind,
            InstanceError::Signature { function, reason } => {
                PolicyErrorKind::Abi(format!("`{function}` has the wrong type: {reason}"))
            }
            InstanceError::Manifest(reason) => PolicyErrorKind::Decode(reason),
        }
    }
}

/// What `init` answered: the manifest's bytes or a refusal, or a trap.
pub(crate) type InitOutcome = wasmtime::Result<Result<Vec<u8>, String>>;

/// The most manifest bytes the host reads (the manifest decoder refuses more).
pub(crate) const MANIFEST_BYTES: usize = 1024;
