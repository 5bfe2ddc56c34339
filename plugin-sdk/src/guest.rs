//! Guest-side glue, compiled only for `wasm32`: what the `export_*!` macros
//! call from inside a policy component. One generic implementation serves
//! every slot, through the slot's [`SlotContract`].
//!
//! Each exported slot keeps one configured policy per instance in a
//! thread-local cell (a component instance is single-threaded). `init`
//! builds it with [`Configure::from_config`] and answers the policy's
//! [`crate::Manifest`], with [`crate::Manifest::view_changes`] set; the
//! per-round call decodes the view message into the view kept from the
//! last call (whole, or as a change from it), runs the policy and encodes
//! the decision as a reply message (compact when shorter).
//! Decoding failures and calls before `init` come back as `error(message)`
//! replies; a panic inside the policy aborts, which the host sees as a trap.

use std::cell::RefCell;
use std::sync::OnceLock;
use std::thread::LocalKey;

use crate::{Configure, LogLevel, Manifest, Policy, SlotContract};

/// wit-bindgen, re-exported so policy crates need not depend on it.
#[doc(hidden)]
pub use wit_bindgen;

include!(concat!(env!("OUT_DIR"), "/generate.rs"));

/// The guest's allocator (feature `talc`, on by default); see the SDK's
/// Cargo features.
#[cfg(all(feature = "talc", not(target_feature = "atomics")))]
#[global_allocator]
static ALLOCATOR: gangway_guest_alloc::GuestAllocator = gangway_guest_alloc::guest_allocator();

/// A slot's configured policy, one per component instance.
pub type PolicyCell<P> = LocalKey<RefCell<Option<P>>>;

/// A slot's view, decoded in place every call.
pub type ViewCell<S> = LocalKey<RefCell<<S as SlotContract>::View>>;

static LOG: OnceLock<fn(LogLevel, &str)> = OnceLock::new();

/// Installs the bridge to the `gangway:policy/log` import (first call wins).
#[doc(hidden)]
pub fn install_log(bridge: fn(LogLevel, &str)) {
    let _ = LOG.set(bridge);
}

/// Sends a message through the installed bridge, if any.
pub(crate) fn emit(level: LogLevel, message: &str) {
    if let Some(bridge) = LOG.get() {
        bridge(level, message);
    }
}

thread_local! {
    /// The buffer replies are encoded into before their exact-size copy.
    static REPLY: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The `init` export of slot `S`: configures the policy and answers its
/// manifest's bytes.
#[doc(hidden)]
pub fn init<S: SlotContract, P: Policy<S> + Configure + 'static>(
    cell: &'static PolicyCell<P>,
    config: &[u8],
) -> Result<Vec<u8>, String> {
    let policy = P::from_config(config).map_err(|e| e.to_string())?;
    let manifest = Manifest {
        view_changes: true,
        ..Policy::<S>::manifest(&policy)
    }
    .encode();
    cell.with(|c| *c.borrow_mut() = Some(policy));
    Ok(manifest)
}

/// The per-round export of slot `S`: view bytes in, decision bytes out.
#[doc(hidden)]
pub fn call<S: SlotContract, P: Policy<S> + 'static>(
    cell: &'static PolicyCell<P>,
    view: &'static ViewCell<S>,
    bytes: &[u8],
) -> Result<Vec<u8>, String> {
    view.with(|scratch| {
        let view = &mut *scratch.borrow_mut();
        crate::wire::decode_view_message::<S>(bytes, view).map_err(|e| e.to_string())?;
        cell.with(|c| match &*c.borrow() {
            Some(p) => Ok(exact(|out| {
                crate::wire::encode_reply_message::<S>(&p.decide(view), view, out)
            })),
            None => Err("init was not called before the first round".to_string()),
        })
    })
}

/// The bytes `encode` writes, in a vector of exactly their length: the
/// export glue hands it over as a boxed slice, which would otherwise cost a
/// shrinking reallocation of a buffer sized for the worst case.
fn exact(encode: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    REPLY.with(|scratch| {
        let out = &mut *scratch.borrow_mut();
        encode(out);
        out.as_slice().to_vec()
    })
}
