//! Guest-side glue, compiled only for `wasm32`: what the `export_*!` macros
//! call from inside a policy component.
//!
//! Each exported slot keeps one configured policy per instance in a
//! thread-local cell (a component instance is single-threaded). `init` builds
//! it with [`Configure::from_config`]; the bulk call decodes the postcard view,
//! runs the policy and encodes the decision. Decoding failures and calls before
//! `init` come back as `error(message)` replies; a panic inside the policy
//! aborts, which the host sees as a trap.

use std::cell::RefCell;
use std::sync::OnceLock;
use std::thread::LocalKey;

use crate::{
    Configure, FairnessPolicy, GangPolicy, LocalityPolicy, LogLevel, QueueView, RoundView, codec,
};

/// wit-bindgen, re-exported so policy crates need not depend on it.
#[doc(hidden)]
pub use wit_bindgen;

include!(concat!(env!("OUT_DIR"), "/generate.rs"));

/// The guest's allocator (feature `talc`, on by default); see the SDK's
/// Cargo features.
#[cfg(all(feature = "talc", not(target_feature = "atomics")))]
#[global_allocator]
static ALLOCATOR: crate::guest_alloc::GuestAllocator = crate::guest_alloc::guest_allocator();

/// A slot's configured policy, one per component instance.
pub type PolicyCell<P> = LocalKey<RefCell<Option<P>>>;

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

/// The `init` export: configures the slot's policy.
#[doc(hidden)]
pub fn init<P: Configure + 'static>(
    cell: &'static PolicyCell<P>,
    config: &[u8],
) -> Result<(), String> {
    let policy = P::from_config(config).map_err(|e| e.to_string())?;
    cell.with(|c| *c.borrow_mut() = Some(policy));
    Ok(())
}

fn with_policy<P: 'static, R>(
    cell: &'static PolicyCell<P>,
    f: impl FnOnce(&P) -> R,
) -> Result<R, String> {
    cell.with(|c| match &*c.borrow() {
        Some(p) => Ok(f(p)),
        None => Err("init was not called before the first round".to_string()),
    })
}

thread_local! {
    /// The last decoded views: their vectors' memory serves the next call,
    /// so a round's decoding allocates only when a view outgrows the last.
    static ROUND_VIEW: RefCell<RoundView> = const {
        RefCell::new(RoundView {
            now_s: 0,
            cluster: codec::EMPTY_CLUSTER,
            vcs: Vec::new(),
            jobs: Vec::new(),
        })
    };
    /// The buffer replies are encoded into before their exact-size copy.
    static REPLY: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    static QUEUE_VIEW: RefCell<QueueView> = const {
        RefCell::new(QueueView {
            now_s: 0,
            cluster: codec::EMPTY_CLUSTER,
            jobs: Vec::new(),
            spread: Vec::new(),
        })
    };
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

/// The fairness slot's bulk call: `RoundView` bytes in, `FairnessDecision` bytes out.
#[doc(hidden)]
pub fn fairness<P: FairnessPolicy + 'static>(
    cell: &'static PolicyCell<P>,
    bytes: &[u8],
) -> Result<Vec<u8>, String> {
    ROUND_VIEW.with(|scratch| {
        let view = &mut *scratch.borrow_mut();
        codec::decode_round_view_into(bytes, view).map_err(|e| e.to_string())?;
        with_policy(cell, |p| {
            exact(|out| codec::encode_fairness(&p.order(view), out))
        })
    })
}

/// Decodes `bytes` into the kept `QueueView` and runs `f` on it: the view
/// the locality and gang slots share.
fn with_queue_view(
    bytes: &[u8],
    f: impl FnOnce(&QueueView) -> Result<Vec<u8>, String>,
) -> Result<Vec<u8>, String> {
    QUEUE_VIEW.with(|scratch| {
        let view = &mut *scratch.borrow_mut();
        codec::decode_queue_view_into(bytes, view).map_err(|e| e.to_string())?;
        f(view)
    })
}

/// The locality slot's bulk call: `QueueView` bytes in, `LocalityDecision` bytes out.
#[doc(hidden)]
pub fn locality<P: LocalityPolicy + 'static>(
    cell: &'static PolicyCell<P>,
    bytes: &[u8],
) -> Result<Vec<u8>, String> {
    with_queue_view(bytes, |view| {
        with_policy(cell, |p| {
            exact(|out| codec::encode_locality(&p.spread(view), out))
        })
    })
}

/// The gang slot's bulk call: `QueueView` bytes in, `GangDecision` bytes out.
#[doc(hidden)]
pub fn gang<P: GangPolicy + 'static>(
    cell: &'static PolicyCell<P>,
    bytes: &[u8],
) -> Result<Vec<u8>, String> {
    with_queue_view(bytes, |view| {
        with_policy(cell, |p| {
            exact(|out| codec::encode_gang(&p.on_blocked(view), out))
        })
    })
}
