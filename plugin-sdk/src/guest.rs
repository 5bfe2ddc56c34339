//! Guest-side glue, compiled only for `wasm32`: what the `export!` macro
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

use crate::{ConfigForm, Configure, LogLevel, Manifest, Policy, SlotContract};

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
    /// The buffer replies are encoded into (before their exact-size copy,
    /// or kept for the host to read, contract 2.1).
    static REPLY: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The length of slot `S`'s entry in the module's `gangway:config-tree`
/// custom section ([`crate::CONFIG_TREE_SECTION`]) when its policy is `P`:
/// its name and a newline if `P` reads a configuration tree, else 0.
#[doc(hidden)]
pub const fn config_tree_len<S: SlotContract, P: Configure>() -> usize {
    match P::CONFIG_FORM {
        ConfigForm::Tree => S::NAME.len() + 1,
        ConfigForm::Text => 0,
    }
}

/// Slot `S`'s entry in the `gangway:config-tree` section, of
/// [`config_tree_len`] bytes.
#[doc(hidden)]
pub const fn config_tree_entry<S: SlotContract, P: Configure, const N: usize>() -> [u8; N] {
    let mut out = [0u8; N];
    let name = S::NAME.as_bytes();
    let mut i = 0;
    while i < N && i < name.len() {
        out[i] = name[i];
        i += 1;
    }
    if N > 0 {
        out[N - 1] = b'\n';
    }
    out
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

/// A slot's view bytes as the host writes them (contract 2.1), kept
/// between calls.
pub type ViewBytesCell = LocalKey<RefCell<Vec<u8>>>;

/// The per-round export of slot `S`: view bytes in, decision bytes out.
#[doc(hidden)]
pub fn call<S: SlotContract, P: Policy<S> + 'static>(
    cell: &'static PolicyCell<P>,
    view: &'static ViewCell<S>,
    bytes: &[u8],
) -> Result<Vec<u8>, String> {
    REPLY.with(|scratch| {
        let out = &mut *scratch.borrow_mut();
        decide_into(cell, view, bytes, out)?;
        // An exact-size copy: the export glue hands it over as a boxed
        // slice, which would otherwise cost a shrinking reallocation of a
        // buffer sized for the worst case.
        Ok(out.as_slice().to_vec())
    })
}

/// Decodes `bytes` into the kept view, decides and encodes the reply into
/// `out` (cleared first).
fn decide_into<S: SlotContract, P: Policy<S> + 'static>(
    cell: &'static PolicyCell<P>,
    view: &'static ViewCell<S>,
    bytes: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), String> {
    view.with(|scratch| {
        let view = &mut *scratch.borrow_mut();
        // Contract 2.2: the GPU types after the view message, if sent (only
        // to a policy that takes them; one that does not has no code for
        // them: `P::GPU_TYPES` is a constant).
        let (message, types) = crate::wire::split_typed(bytes).map_err(|e| e.to_string())?;
        let types = match types {
            Some(t) if P::GPU_TYPES => {
                Some(crate::wire::decode_typed::<crate::TypesView>(t).map_err(|e| e.to_string())?)
            }
            _ => None,
        };
        crate::wire::decode_view_message::<S>(message, view).map_err(|e| e.to_string())?;
        cell.with(|c| match (&*c.borrow(), &types) {
            (Some(p), None) => {
                crate::wire::encode_reply_message::<S>(&p.decide(view), view, out);
                Ok(())
            }
            (Some(p), Some(types)) => {
                let (decision, choices) = p.decide_typed(view, types);
                crate::wire::encode_reply_message::<S>(&decision, view, out);
                crate::wire::append_typed(&choices, out);
                Ok(())
            }
            (None, _) => Err("init was not called before the first round".to_string()),
        })
    })
}

/// The `view-buffer` export of a slot's `-buffered` interface (contract
/// 2.1): the address of a buffer of at least `len` bytes for the host to
/// write views into.
#[doc(hidden)]
pub fn view_buffer(bytes: &'static ViewBytesCell, len: u32) -> u32 {
    bytes.with(|b| {
        let b = &mut *b.borrow_mut();
        let len = len as usize;
        if b.len() < len {
            b.resize(len, 0);
        }
        // (wasm32: addresses are 32 bits.)
        b.as_ptr() as usize as u32
    })
}

/// The `call` export of a slot's `-buffered` interface (contract 2.1): the
/// slot's call on the first `len` bytes of the view buffer, answered as
/// `address << 32 | error << 31 | length` of the reply (or refusal text)
/// kept in the guest until it is next entered.
#[doc(hidden)]
pub fn call_buffered<S: SlotContract, P: Policy<S> + 'static>(
    cell: &'static PolicyCell<P>,
    view: &'static ViewCell<S>,
    bytes: &'static ViewBytesCell,
    len: u32,
) -> u64 {
    REPLY.with(|scratch| {
        let out = &mut *scratch.borrow_mut();
        let answer = bytes.with(|b| match b.borrow().get(..len as usize) {
            Some(message) => decide_into(cell, view, message, out),
            None => Err(format!(
                "a view of {len} bytes is longer than the view buffer"
            )),
        });
        let error = match answer {
            Ok(()) => 0,
            Err(text) => {
                out.clear();
                out.extend_from_slice(text.as_bytes());
                1
            }
        };
        // (wasm32: addresses are 32 bits; a reply is far below 2 GiB.)
        ((out.as_ptr() as usize as u64) << 32) | (error << 31) | (out.len() as u64 & 0x7fff_ffff)
    })
}
