//! Guest replies through a real Wasm guest and each call path. The guest
//! (an "echo" component exporting all six slots) answers every call with
//! what its configuration says: byte 0 picks `ok(rest)`, `error(rest)`, raw
//! ABI words (discriminant, pointer, length taken from the bytes), or a
//! misaligned return area; with no configuration it answers the empty
//! decision, so it passes the host's warm-up.
//!
//! The guest comes in several component shapes (the input's first byte
//! picks one with the slot): as wit-component makes it, with its memory
//! exported under another name, with UTF-16 strings, and nested in another
//! component. An engine set to the direct path takes it for the shapes it
//! can run as written and declines the others; on the direct target every
//! first answer is also asked of the component runtime and must be the same.

use std::cell::RefCell;

use gangway_catalog::CatalogSlot;
use gangway_core::policy::PolicyErrorKind;
use gangway_core::wasm::{CallPath, PolicyEngine, PolicyModule, SandboxConfig};
use gangway_plugin_sdk::testing::SlotViews;
use gangway_plugin_sdk::{SlotContract, wire};

use super::replies::reply_bytes;
use super::{by_slot, generate};

/// The contract as 2.0 guests were built.
const WIT_2_0: &str = include_str!("../../../plugin-sdk/wit-2.0/policy.wit");
/// The contract with the `-buffered` twins (2.1).
const WIT_2_1: &str = include_str!("../../../plugin-sdk/wit/policy.wit");

const SLOTS: [(&str, &str, u8); 6] = [
    ("fairness", "order", 1),
    ("locality", "spread", 1),
    ("gang", "on-blocked", 2),
    ("reclaim", "reclaim", 2),
    ("retry", "retry", 1),
    ("defragment", "plan", 2),
];

/// The echo world: every slot of contract `version`, with its `-buffered`
/// twin if `buffered`.
fn echo_world(version: &str, buffered: bool) -> String {
    let mut world = String::from("package test:echo;\nworld echo {\n");
    for (iface, _, _) in SLOTS {
        world.push_str(&format!("  export gangway:policy/{iface}@{version};\n"));
        if buffered {
            world.push_str(&format!(
                "  export gangway:policy/{iface}-buffered@{version};\n"
            ));
        }
    }
    world + "}\n"
}

/// The echo guest's core module, its interfaces of contract `version`; with
/// `buffered`, each slot's twin answers what the slot's function answers,
/// packed (an answer the 2.0 ABI refuses, a bad discriminant, a misaligned
/// return area or a length past 31 bits, packed as a reply outside memory,
/// which the buffered ABI refuses alike).
fn echo_wat(version: &str, buffered: bool) -> String {
    let mut slots = String::new();
    for (iface, call, empty) in SLOTS {
        slots.push_str(&format!(
            r#"
  (func (export "gangway:policy/{iface}@{version}#init") (param i32 i32) (result i32)
    (call $init (local.get 0) (local.get 1)))
  (func (export "gangway:policy/{iface}@{version}#{call}") (param i32 i32) (result i32)
    (call $answer (i32.const {empty})))"#
        ));
        if buffered {
            slots.push_str(&format!(
                r#"
  (func (export "gangway:policy/{iface}-buffered@{version}#view-buffer") (param $len i32) (result i32)
    (call $realloc (i32.const 0) (i32.const 0) (i32.const 1) (local.get $len)))
  (func (export "gangway:policy/{iface}-buffered@{version}#call") (param $len i32) (result i64)
    (call $pack (call $answer (i32.const {empty}))))"#
            ));
        }
    }
    slots.push_str(
        r#"
  (func $pack (param $area i32) (result i64)
    (local $tag i32) (local $len i32)
    (if (i32.and (local.get $area) (i32.const 3))
      (then (return (i64.const 0xffffffff7fffffff))))
    (local.set $tag (i32.load8_u (local.get $area)))
    (local.set $len (i32.load (i32.add (local.get $area) (i32.const 8))))
    (if (i32.or (i32.gt_u (local.get $tag) (i32.const 1)) (i32.lt_s (local.get $len) (i32.const 0)))
      (then (return (i64.const 0xffffffff7fffffff))))
    (i64.or
      (i64.shl (i64.extend_i32_u (i32.load (i32.add (local.get $area) (i32.const 4)))) (i64.const 32))
      (i64.or (i64.shl (i64.extend_i32_u (local.get $tag)) (i64.const 31))
              (i64.extend_i32_u (local.get $len)))))"#,
    );
    format!(
        r#"(module
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 1024))
  (global $cfg (mut i32) (i32.const 0))
  (global $cfg_len (mut i32) (i32.const 0))
  (data (i32.const 64) "\00\00")
  (func $realloc (export "cabi_realloc") (param $old i32) (param $old_size i32) (param $align i32) (param $size i32) (result i32)
    (local $p i32) (local $end i32) (local $have i32)
    (local.set $p (i32.and (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
                           (i32.sub (i32.const 0) (local.get $align))))
    (local.set $end (i32.add (local.get $p) (local.get $size)))
    (local.set $have (i32.mul (memory.size) (i32.const 65536)))
    (if (i32.gt_u (local.get $end) (local.get $have))
      (then
        (if (i32.eq (memory.grow (i32.add (i32.shr_u (i32.sub (local.get $end) (local.get $have)) (i32.const 16)) (i32.const 1)))
                    (i32.const -1))
          (then unreachable))))
    (global.set $heap (local.get $end))
    (local.get $p))
  (func $ret (param $tag i32) (param $ptr i32) (param $len i32) (result i32)
    (i32.store8 (i32.const 16) (local.get $tag))
    (i32.store (i32.const 20) (local.get $ptr))
    (i32.store (i32.const 24) (local.get $len))
    (i32.const 16))
  (func $init (param $p i32) (param $l i32) (result i32)
    (global.set $cfg (local.get $p))
    (global.set $cfg_len (local.get $l))
    (call $ret (i32.const 0) (i32.const 0) (i32.const 0)))
  (func $answer (param $empty i32) (result i32)
    (local $mode i32) (local $p i32) (local $l i32)
    (if (i32.eqz (global.get $cfg_len))
      (then (return (call $ret (i32.const 0) (i32.const 64) (local.get $empty)))))
    (local.set $mode (i32.and (i32.load8_u (global.get $cfg)) (i32.const 3)))
    (local.set $p (i32.add (global.get $cfg) (i32.const 1)))
    (local.set $l (i32.sub (global.get $cfg_len) (i32.const 1)))
    (if (i32.ge_u (local.get $l) (i32.const 9))
      (then
        ;; raw ABI words: discriminant, pointer, length
        (if (i32.eq (local.get $mode) (i32.const 2))
          (then (return (call $ret
            (i32.load8_u (local.get $p))
            (i32.load (i32.add (local.get $p) (i32.const 1)))
            (i32.load (i32.add (local.get $p) (i32.const 5)))))))
        ;; a misaligned return area holding ok(rest after 9 bytes)
        (if (i32.eq (local.get $mode) (i32.const 3))
          (then
            (i32.store8 (i32.const 33) (i32.const 0))
            (i32.store (i32.const 37) (i32.add (local.get $p) (i32.const 9)))
            (i32.store (i32.const 41) (i32.sub (local.get $l) (i32.const 9)))
            (return (i32.const 33))))))
    (call $ret (i32.and (local.get $mode) (i32.const 1)) (local.get $p) (local.get $l)))
  {slots}
)"#
    )
}

/// A component shape of the echo guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    Standard,
    MemoryRenamed,
    Utf16,
    Nested,
    /// Contract 2.1 with every slot's `-buffered` twin.
    Buffered,
}

impl Shape {
    const ALL: [Shape; 5] = [
        Shape::Standard,
        Shape::MemoryRenamed,
        Shape::Utf16,
        Shape::Nested,
        Shape::Buffered,
    ];

    /// The path an engine set to `asked` takes for this shape.
    fn path(self, asked: CallPath) -> CallPath {
        match (asked, self) {
            (CallPath::Direct, Shape::Standard | Shape::MemoryRenamed | Shape::Buffered) => {
                CallPath::Direct
            }
            _ => CallPath::Component,
        }
    }

    /// The echo guest in this shape.
    fn component(self) -> Vec<u8> {
        let encoding = match self {
            Shape::Utf16 => wit_component::StringEncoding::UTF16,
            _ => wit_component::StringEncoding::UTF8,
        };
        let bytes = echo_component(encoding, self == Shape::Buffered);
        let edited = match self {
            Shape::Standard | Shape::Utf16 | Shape::Buffered => return bytes,
            Shape::MemoryRenamed => printed(&bytes)
                .replacen(
                    r#"(export "memory" (memory 0))"#,
                    r#"(export "heap" (memory 0))"#,
                    1,
                )
                .replacen(
                    r#"(alias core export $main "memory""#,
                    r#"(alias core export $main "heap""#,
                    1,
                ),
            Shape::Nested => {
                let text = printed(&bytes);
                let inner = text
                    .strip_prefix("(component")
                    .expect("a printed component");
                let mut outer = format!(
                    "(component (component $inner {inner} (instance $echo (instantiate $inner))"
                );
                for iface in [
                    "fairness",
                    "locality",
                    "gang",
                    "reclaim",
                    "retry",
                    "defragment",
                ] {
                    outer.push_str(&format!(
                        r#" (alias export $echo "gangway:policy/{iface}@2.0.0" (instance ${iface}))
                            (export "gangway:policy/{iface}@2.0.0" (instance ${iface}))"#
                    ));
                }
                outer + ")"
            }
        };
        wat::parse_str(edited).expect("the echo guest's shape parses")
    }
}

/// `bytes` as text.
fn printed(bytes: &[u8]) -> String {
    wasmprinter::print_bytes(bytes).expect("the echo component prints")
}

/// The echo guest as a component of the real contract (2.0, or 2.1 with
/// the `-buffered` twins), its strings in `encoding`.
fn echo_component(encoding: wit_component::StringEncoding, buffered: bool) -> Vec<u8> {
    let (wit, version) = if buffered {
        (WIT_2_1, "2.1.0")
    } else {
        (WIT_2_0, "2.0.0")
    };
    let mut module =
        wat::parse_str(echo_wat(version, buffered)).expect("the echo guest's WAT parses");
    let mut resolve = wit_parser::Resolve::default();
    resolve
        .push_str("policy.wit", wit)
        .expect("the contract's WIT parses");
    let pkg = resolve
        .push_str("echo.wit", &echo_world(version, buffered))
        .expect("the echo world parses");
    let world = resolve
        .select_world(&[pkg], Some("echo"))
        .expect("the echo world");
    wit_component::embed_component_metadata(&mut module, &resolve, world, encoding)
        .expect("the echo guest embeds its world");
    wit_component::ComponentEncoder::default()
        .validate(true)
        .module(&module)
        .expect("the echo guest is a valid core module")
        .encode()
        .expect("the echo guest encodes as a component")
}

thread_local! {
    /// The echo module per call path and shape, loaded once per thread.
    static ECHO: RefCell<Vec<((CallPath, Shape), PolicyModule)>> = const { RefCell::new(Vec::new()) };
}

/// The echo module in `shape` loaded for `path` (once per thread).
fn echo(path: CallPath, shape: Shape) -> PolicyModule {
    ECHO.with(|cache| {
        let mut cache = cache.borrow_mut();
        if let Some((_, m)) = cache.iter().find(|(key, _)| *key == (path, shape)) {
            return m.clone();
        }
        let engine = PolicyEngine::new(SandboxConfig {
            call_path: path,
            ..SandboxConfig::default()
        })
        .expect("a policy engine");
        let module = engine
            .load("echo.wasm", &shape.component())
            .expect("the echo guest loads");
        cache.push(((path, shape), module.clone()));
        module
    })
}

/// A first answer, with the wording of ABI errors and traps (which differs
/// between the call paths) left out.
fn answer<D: PartialEq + std::fmt::Debug>(
    outcome: &Result<D, gangway_core::policy::PolicyError>,
) -> Result<&D, String> {
    outcome.as_ref().map_err(|e| match &e.kind {
        PolicyErrorKind::Abi(_) => "abi".to_string(),
        PolicyErrorKind::Trap(_) => "trap".to_string(),
        other => other.to_string(),
    })
}

fn one<S: CatalogSlot + SlotContract + SlotViews>(
    path: CallPath,
    shape: Shape,
    seed: &[u8],
    config: &[u8],
) {
    let module = echo(path, shape);
    assert_eq!(
        module.call_path(),
        shape.path(path),
        "the echo guest as {shape:?} runs on the wrong path"
    );
    let Some(view) = generate(S::views(), seed) else {
        return;
    };
    // Byte 0's high bits ask for a built-in's valid reply, mutated.
    let (mode, rest) = match config.split_first() {
        Some((&m, rest)) if m & 0x80 != 0 => {
            let mut c = vec![0u8];
            c.extend(reply_bytes::<S>(m | 1, &view, rest));
            (0, c)
        }
        Some((&m, _)) => (m & 3, config.to_vec()),
        None => (0, Vec::new()),
    };
    let mut policy = match module.backend::<S>(&rest) {
        Ok(p) => p,
        Err(e) => panic!("the echo guest's init failed: {e}"),
    };
    let first = policy.decide(&view);
    if path == CallPath::Direct {
        let mut runtime = echo(CallPath::Component, shape)
            .backend::<S>(&rest)
            .unwrap_or_else(|e| panic!("the echo guest's init failed: {e}"));
        assert_eq!(
            answer(&first),
            answer(&runtime.decide(&view)),
            "the call paths answer differently ({shape:?})"
        );
    }
    match (&first, mode) {
        (Ok(_), 1) => panic!("error(...) was read as a decision"),
        (Err(e), 1) => match &e.kind {
            PolicyErrorKind::Refused(text) => {
                assert!(text.len() <= 1024 + 3, "an unbounded refusal")
            }
            PolicyErrorKind::Abi(_) => {}
            other => panic!("error(...) read as {other}"),
        },
        (outcome, 0) if !rest.is_empty() => {
            let host = wire::decode_decision::<S>(&rest[1..], &view);
            assert_eq!(
                outcome.is_ok(),
                host.is_ok(),
                "the guest's ok(reply) and the host's decoder disagree"
            );
            if let (Ok(a), Ok(b)) = (outcome, &host) {
                assert_eq!(a, b);
            }
        }
        _ => {}
    }
    policy.report(first.as_ref().map(|_| ()));
    // A fresh instance after a failure answers the same. (After a success
    // the instance is kept, and a guest answering with raw ABI words may
    // read memory its last call left behind: a kept instance's answer may
    // differ, which the contract allows, so only failures are compared.)
    if first.is_ok() {
        return;
    }
    let second = policy.decide(&view);
    assert_eq!(
        first.as_ref().map_err(|e| std::mem::discriminant(&e.kind)),
        second.as_ref().map_err(|e| std::mem::discriminant(&e.kind)),
        "a second call answered differently"
    );
}

fn dispatch(path: CallPath, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    let slot = data[0];
    let shape = Shape::ALL[usize::from(slot) / gangway_plugin_sdk::Slot::COUNT % Shape::ALL.len()];
    let seed = &data[1..data.len().min(33)];
    let config = data.get(33..).unwrap_or(&[]);
    by_slot!(slot, one(path, shape, seed, config));
}

/// Replies through the direct call path.
pub(crate) fn replies_direct(data: &[u8]) {
    dispatch(CallPath::Direct, data);
}

/// Replies through wasmtime's component runtime.
pub(crate) fn replies_component(data: &[u8]) {
    dispatch(CallPath::Component, data);
}
