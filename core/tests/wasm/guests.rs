//! Hostile and broken guests, written as core-module WAT and turned into
//! components against the contract's real WIT (or a doctored copy of it).

use gangway_core::wasm::{CallPath, PolicyEngine, SandboxConfig};

/// The contract as 2.0 modules were built (they must still load; the
/// 2.1 contract adds only the `-buffered` interfaces).
pub(crate) const WIT: &str = include_str!("../../../plugin-sdk/wit-2.0/policy.wit");

/// Views longer than this many bytes trigger the misbehaviour; the warm-up
/// view (no jobs) is shorter, so a conditional guest loads fine and fails
/// only in real rounds.
pub(crate) const TRIGGER_BYTES: u32 = 100;

/// Embeds `world` of `wit` (plus any `deps` packages pushed first) into the
/// core module and encodes a component.
pub(crate) fn componentize(core_wat: &str, deps: &[&str], wit: &str, world: &str) -> Vec<u8> {
    wit_component::ComponentEncoder::default()
        .validate(true)
        .module(&with_metadata(core_wat, deps, wit, world))
        .unwrap()
        .encode()
        .unwrap()
}

/// The core module of `core_wat` with `world` of `wit` (plus any `deps`)
/// embedded as its component type, as the SDK's export macros leave it.
pub(crate) fn with_metadata(core_wat: &str, deps: &[&str], wit: &str, world: &str) -> Vec<u8> {
    with_metadata_in(
        core_wat,
        deps,
        wit,
        world,
        wit_component::StringEncoding::UTF8,
    )
}

/// [`with_metadata`] with its strings lifted and lowered in `encoding`.
pub(crate) fn with_metadata_in(
    core_wat: &str,
    deps: &[&str],
    wit: &str,
    world: &str,
    encoding: wit_component::StringEncoding,
) -> Vec<u8> {
    let mut module = wat::parse_str(core_wat).unwrap();
    let mut resolve = wit_parser::Resolve::default();
    resolve.push_str("policy.wit", WIT).unwrap();
    for (i, dep) in deps.iter().enumerate() {
        resolve.push_str(format!("dep{i}.wit"), dep).unwrap();
    }
    let pkg = if wit == WIT {
        resolve
            .push_str("main.wit", "package test:main; world unused {}")
            .unwrap();
        resolve
            .packages
            .iter()
            .find(|(_, p)| p.name.name == "policy")
            .map(|(id, _)| id)
            .unwrap()
    } else {
        resolve.push_str("main.wit", wit).unwrap()
    };
    let world = resolve.select_world(&[pkg], Some(world)).unwrap();
    wit_component::embed_component_metadata(&mut module, &resolve, world, encoding).unwrap();
    module
}

/// Embeds `world` of a doctored contract `wit` (built alone, so it cannot
/// clash with the real package) into the core module and encodes a
/// component, without validating it against the real contract.
pub(crate) fn componentize_doctored(core_wat: &str, wit: &str, world: &str) -> Vec<u8> {
    let mut module = wat::parse_str(core_wat).unwrap();
    let mut resolve = wit_parser::Resolve::default();
    let pkg = resolve.push_str("doctored.wit", wit).unwrap();
    let world = resolve.select_world(&[pkg], Some(world)).unwrap();
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )
    .unwrap();
    wit_component::ComponentEncoder::default()
        .module(&module)
        .unwrap()
        .encode()
        .unwrap()
}

/// A bump allocator that grows memory as needed, the reply area at 16 and
/// `init` for interface `iface` (`fairness@2.0.0`).
fn runtime(iface: &str) -> String {
    format!(
        r#"
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 1024))
  (func (export "cabi_realloc") (param $old i32) (param $old_size i32) (param $align i32) (param $size i32) (result i32)
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
  (func (export "gangway:policy/{iface}#init") (param i32 i32) (result i32)
    (i32.store8 (i32.const 16) (i32.const 0))
    (i32.const 16))
  ;; Answers `ok(bytes[ptr..ptr+len])`.
  (func $reply (param $ptr i32) (param $len i32) (result i32)
    (global.set $heap (i32.const 1024))
    (i32.store8 (i32.const 16) (i32.const 0))
    (i32.store (i32.const 20) (local.get $ptr))
    (i32.store (i32.const 24) (local.get $len))
    (i32.const 16))
"#
    )
}

/// A fairness guest (contract version `version`) that answers the empty
/// decision to small views and runs `body` (which must end by returning an
/// i32 reply pointer, or never return) on views of more than `trigger`
/// bytes. `data` adds data segments.
pub(crate) fn fairness_wat(version: &str, trigger: u32, body: &str, data: &str) -> String {
    let iface = format!("fairness@{version}");
    format!(
        r#"(module
  {runtime}
  (data (i32.const 64) "\00")
  {data}
  (func (export "gangway:policy/{iface}#order") (param $ptr i32) (param $len i32) (result i32)
    (if (i32.gt_u (local.get $len) (i32.const {trigger}))
      (then {body}))
    (call $reply (i32.const 64) (i32.const 1)))
)"#,
        runtime = runtime(&iface)
    )
}

/// A fairness guest componentized against the real contract.
pub(crate) fn fairness(trigger: u32, body: &str, data: &str) -> Vec<u8> {
    componentize(
        &fairness_wat("2.0.0", trigger, body, data),
        &[],
        WIT,
        "fairness-policy",
    )
}

/// Loop iterations a slow call makes: about 8 fuel units each, so about
/// 180 million units, just under the default per-call budget (200 million).
const BURN: u32 = 22_000_000;

/// A reclaim guest that answers the empty decision (stop nothing), after
/// burning just under a call's fuel on real views from its `after`-th
/// such call on.
pub(crate) fn slow_reclaim(after: u32) -> Vec<u8> {
    slow_stopper("reclaim", "reclaim", after)
}

/// A defragment guest that answers the empty decision (move nothing),
/// after burning just under a call's fuel on real views from its
/// `after`-th such call on.
#[allow(dead_code)] // the hosts' tests use it
pub(crate) fn slow_defragment(after: u32) -> Vec<u8> {
    slow_stopper("defragment", "plan", after)
}

/// A guest of `slot` (whose function is `call`, whose empty decision is
/// two zero bytes) that burns just under a call's fuel on real views from
/// its `after`-th such call on.
fn slow_stopper(slot: &str, call: &str, after: u32) -> Vec<u8> {
    let body = format!(
        r#"(global.set $calls (i32.add (global.get $calls) (i32.const 1)))
           (if (i32.gt_u (global.get $calls) (i32.const {after}))
             (then
               (global.set $i (i32.const 0))
               (loop $burn
                 (global.set $i (i32.add (global.get $i) (i32.const 1)))
                 (br_if $burn (i32.lt_u (global.get $i) (i32.const {BURN}))))))"#
    );
    let globals = "(global $i (mut i32) (i32.const 0)) (global $calls (mut i32) (i32.const 0))";
    let core = fairness_wat("2.0.0", TRIGGER_BYTES, &body, globals)
        .replace("fairness@2.0.0", &format!("{slot}@2.0.0"))
        .replace("#order", &format!("#{call}"))
        .replace(
            r#"(data (i32.const 64) "\00")"#,
            r#"(data (i32.const 64) "\00\00")"#,
        )
        .replace(
            "(call $reply (i32.const 64) (i32.const 1))",
            "(call $reply (i32.const 64) (i32.const 2))",
        );
    componentize(&core, &[], WIT, &format!("{slot}-policy"))
}

/// Reads a 2.0 fairness view (postcard) at `$p` and writes the decision
/// that keeps the view's order with every job eligible after the heap:
/// WAT helpers for [`slow_fairness`].
pub(crate) const ECHO: &str = r#"
  (global $p (mut i32) (i32.const 0))
  (global $out (mut i32) (i32.const 0))
  (func $skip
    (loop $more
      (global.set $p (i32.add (global.get $p) (i32.const 1)))
      (br_if $more (i32.and (i32.load8_u (i32.sub (global.get $p) (i32.const 1))) (i32.const 128)))))
  (func $skipn (param $n i32)
    (loop $l
      (if (local.get $n)
        (then (call $skip) (local.set $n (i32.sub (local.get $n) (i32.const 1))) (br $l)))))
  (func $read (result i32) (local $v i32) (local $s i32) (local $b i32)
    (loop $more
      (local.set $b (i32.load8_u (global.get $p)))
      (global.set $p (i32.add (global.get $p) (i32.const 1)))
      (local.set $v (i32.or (local.get $v)
        (i32.shl (i32.and (local.get $b) (i32.const 127)) (local.get $s))))
      (local.set $s (i32.add (local.get $s) (i32.const 7)))
      (br_if $more (i32.and (local.get $b) (i32.const 128))))
    (local.get $v))
  (func $put (param $b i32)
    (i32.store8 (global.get $out) (local.get $b))
    (global.set $out (i32.add (global.get $out) (i32.const 1))))
  (func $putv (param $v i32)
    (loop $more
      (if (i32.ge_u (local.get $v) (i32.const 128))
        (then
          (call $put (i32.or (i32.and (local.get $v) (i32.const 127)) (i32.const 128)))
          (local.set $v (i32.shr_u (local.get $v) (i32.const 7)))
          (br $more))))
    (call $put (local.get $v)))
  ;; The decision for the view at $ptr of $len bytes: (address, length).
  (func $echo (param $ptr i32) (param $len i32) (result i32) (local $n i32) (local $start i32) (local $b i32)
    (local.set $start (i32.and (i32.add (global.get $heap) (i32.const 7)) (i32.const -8)))
    (if (i32.gt_u (i32.add (i32.add (local.get $start) (local.get $len)) (i32.const 16))
                  (i32.mul (memory.size) (i32.const 65536)))
      (then (drop (memory.grow (i32.add (i32.shr_u (local.get $len) (i32.const 16)) (i32.const 1))))))
    (global.set $out (local.get $start))
    (global.set $p (local.get $ptr))
    (call $skip) (call $skipn (i32.const 2))
    (global.set $p (i32.add (global.get $p) (i32.const 1)))
    (call $skipn (i32.mul (call $read) (i32.const 3)))
    (local.set $n (call $read))
    (loop $vc
      (if (local.get $n)
        (then
          (call $skip)
          (local.set $b (i32.load8_u (global.get $p)))
          (global.set $p (i32.add (global.get $p) (i32.const 1)))
          (if (local.get $b) (then (call $skip)))
          (call $skipn (i32.const 5))
          (local.set $n (i32.sub (local.get $n) (i32.const 1)))
          (br $vc))))
    (local.set $n (call $read))
    (call $putv (local.get $n))
    (loop $job
      (if (local.get $n)
        (then
          ;; the id's bytes, then eligible
          (loop $id
            (local.set $b (i32.load8_u (global.get $p)))
            (global.set $p (i32.add (global.get $p) (i32.const 1)))
            (call $put (local.get $b))
            (br_if $id (i32.and (local.get $b) (i32.const 128))))
          (call $put (i32.const 1))
          (call $skipn (i32.const 7))
          (global.set $p (i32.add (global.get $p) (i32.const 1)))
          (call $skip)
          (local.set $n (i32.sub (local.get $n) (i32.const 1)))
          (br $job))))
    (call $reply (local.get $start) (i32.sub (global.get $out) (local.get $start))))
"#;

/// A fairness guest that keeps the view's order (every job eligible: a
/// valid decision), after burning just under a call's fuel on real views
/// from its `after`-th such call on.
pub(crate) fn slow_fairness(after: u32) -> Vec<u8> {
    let body = format!(
        r#"(if (i32.gt_u (local.get $len) (i32.const {TRIGGER_BYTES}))
             (then
               (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
               (if (i32.gt_u (global.get $calls) (i32.const {after}))
                 (then
                   (global.set $i (i32.const 0))
                   (loop $burn
                     (global.set $i (i32.add (global.get $i) (i32.const 1)))
                     (br_if $burn (i32.lt_u (global.get $i) (i32.const {BURN}))))))))
           (return (call $echo (local.get $ptr) (local.get $len)))"#
    );
    let globals = format!(
        "(global $i (mut i32) (i32.const 0)) (global $calls (mut i32) (i32.const 0)) {ECHO}"
    );
    // Every view is answered by the echo; only real ones burn.
    fairness(0, &body, &globals)
}

/// A fairness guest that keeps the view's order on every view (a valid
/// decision) and runs `extra` (WAT statements, with `$calls` counting the
/// real views so far, this one included) before answering real ones;
/// `globals` adds declarations (`$calls` is declared).
fn echoing_fairness(extra: &str, globals: &str) -> String {
    let body = format!(
        r#"(if (i32.gt_u (local.get $len) (i32.const {TRIGGER_BYTES}))
             (then
               (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
               {extra}))
           (return (call $echo (local.get $ptr) (local.get $len)))"#
    );
    let globals = format!("(global $calls (mut i32) (i32.const 0)) {globals} {ECHO}");
    fairness_wat("2.0.0", 0, &body, &globals)
}

/// A fairness guest that answers validly but logs 16 messages of 1 KiB
/// (16 KiB) on every real call (the text far above its heap).
pub(crate) fn chatty_fairness() -> Vec<u8> {
    let extra = r#"(global.set $i (i32.const 0))
        (loop $more
          (call $log (i32.const 0) (i32.const 1048576) (i32.const 1024))
          (global.set $i (i32.add (global.get $i) (i32.const 1)))
          (br_if $more (i32.lt_u (global.get $i) (i32.const 16))))"#;
    let text = format!(
        "(global $i (mut i32) (i32.const 0)) (data (i32.const 1048576) \"{}\")",
        "x".repeat(1024)
    );
    let core = echoing_fairness(extra, &text).replace(
        "(memory (export \"memory\") 1)",
        "(memory (export \"memory\") 17)",
    );
    componentize(&with_log(&core), &[], WIT, "fairness-policy")
}

/// A fairness guest that answers validly but traps on every fifth real
/// call: four failures in every twenty calls.
#[allow(dead_code)] // the hosts' tests use it
pub(crate) fn every_fifth_fails() -> Vec<u8> {
    let extra = "(if (i32.eqz (i32.rem_u (global.get $calls) (i32.const 5))) (then (unreachable)))";
    componentize(&echoing_fairness(extra, ""), &[], WIT, "fairness-policy")
}

/// A fairness guest that refuses every real view with `mib` MiB of NUL
/// bytes (valid UTF-8, and free to make: fresh memory is zero).
pub(crate) fn huge_nul_refusal(mib: u32) -> Vec<u8> {
    let pages = mib * 16 + 1;
    let bytes = mib << 20;
    fairness(
        TRIGGER_BYTES,
        &format!(
            r#"(if (i32.lt_u (memory.size) (i32.const {pages}))
                 (then (drop (memory.grow (i32.const {pages})))))
               (i32.store8 (i32.const 16) (i32.const 1))
               (i32.store (i32.const 20) (i32.const 65536))
               (i32.store (i32.const 24) (i32.const {bytes}))
               (return (i32.const 16))"#
        ),
        "",
    )
}

/// A fairness guest whose `init` burns about `units` fuel units (8 a loop
/// iteration) before it answers (empty configuration or not).
pub(crate) fn init_burner(units: u32) -> Vec<u8> {
    let iterations = units / 8;
    let core = fairness_wat(
        "2.0.0",
        TRIGGER_BYTES,
        "(unreachable)",
        "(global $i (mut i32) (i32.const 0))",
    )
    .replace(
        "(param i32 i32) (result i32)\n    (i32.store8 (i32.const 16) (i32.const 0))",
        &format!(
            r#"(param i32 i32) (result i32)
    (loop $burn
      (global.set $i (i32.add (global.get $i) (i32.const 1)))
      (br_if $burn (i32.lt_u (global.get $i) (i32.const {iterations}))))
    (i32.store8 (i32.const 16) (i32.const 0))"#
        ),
    );
    assert!(core.contains("$burn"), "init not found");
    componentize(&core, &[], WIT, "fairness-policy")
}

/// [`ECHO`] with each job's eligibility read from the global `$eligible`
/// (1 as declared), so a guest can answer otherwise, still validly.
fn echo_with_eligibility() -> String {
    format!(
        "(global $eligible (mut i32) (i32.const 1)) {}",
        ECHO.replace(
            "(call $put (i32.const 1))",
            "(call $put (global.get $eligible))"
        )
    )
}

/// A 2.0 fairness guest (the slot's function only) that keeps the view's
/// order with every job eligible for its first `calls` real calls, then
/// with none eligible: a valid answer that depends on its history.
#[allow(dead_code)] // the hosts' tests use it
pub(crate) fn history_dependent(calls: u32) -> Vec<u8> {
    let body = format!(
        r#"(if (i32.gt_u (local.get $len) (i32.const {TRIGGER_BYTES}))
             (then
               (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
               (if (i32.gt_u (global.get $calls) (i32.const {calls}))
                 (then (global.set $eligible (i32.const 0))))))
           (return (call $echo (local.get $ptr) (local.get $len)))"#
    );
    let globals = format!(
        "(global $calls (mut i32) (i32.const 0)) {}",
        echo_with_eligibility()
    );
    componentize(
        &fairness_wat("2.0.0", 0, &body, &globals),
        &[],
        WIT,
        "fairness-policy",
    )
}

/// A 2.1 fairness guest whose slot function keeps the view's order with
/// every job eligible, and whose `-buffered` twin counts its calls and,
/// after `after` of them, answers with no job eligible (still valid) on
/// every call a host checking its 1st and every 64th call would not check.
pub(crate) fn counting_twin(after: u32) -> Vec<u8> {
    let call = format!(
        r#"(block (result i64)
             (global.set $n (i32.add (global.get $n) (i32.const 1)))
             (global.set $eligible (i32.const 1))
             (if (i32.and (i32.gt_u (global.get $n) (i32.const {after}))
                          (i32.ne (i32.rem_u (i32.sub (global.get $n) (i32.const 1)) (i32.const 64))
                                  (i32.const 0)))
               (then (global.set $eligible (i32.const 0))))
             (drop (call $echo (i32.const 32768) (local.get $len)))
             (i64.or (i64.shl (i64.extend_i32_u (i32.load (i32.const 20))) (i64.const 32))
                     (i64.extend_i32_u (i32.load (i32.const 24)))))"#
    );
    let echo = "(then (return (call $echo (local.get $ptr) (local.get $len))))";
    let globals = format!(
        "(global $n (mut i32) (i32.const 0)) {}",
        echo_with_eligibility()
    );
    let core =
        buffered_wat("(i32.const 32768)", &call, &globals).replace("(then (unreachable))", echo);
    // Both answer every view, however small, so every answer is valid.
    let core = core.replace(
        &format!("(i32.gt_u (local.get $len) (i32.const {TRIGGER_BYTES}))"),
        "(i32.gt_u (local.get $len) (i32.const 0))",
    );
    componentize_doctored(&core, WIT_2_1, "fairness-policy-buffered")
}

/// The hostile behaviours, by name: (WAT body, data segments).
pub(crate) fn behaviour(name: &str) -> (&'static str, &'static str) {
    match name {
        "infinite-loop" => ("(loop $spin (br $spin)) (unreachable)", ""),
        "memory-bomb" => (
            "(loop $grow (drop (memory.grow (i32.const 16))) (br $grow)) (unreachable)",
            "",
        ),
        "trap" => ("(unreachable)", ""),
        "stack-overflow" => (
            "(call $recurse) (unreachable)",
            "(func $recurse (call $recurse))",
        ),
        "lift-out-of-bounds" => (
            "(return (call $reply (i32.const -65536) (i32.const 4096)))",
            "",
        ),
        "garbage-reply" => (
            "(return (call $reply (i32.const 300) (i32.const 3)))",
            r#"(data (i32.const 300) "\80\80\80")"#,
        ),
        // FairnessDecision { order: [job 999999 eligible] }
        "unknown-job" => (
            "(return (call $reply (i32.const 300) (i32.const 5)))",
            r#"(data (i32.const 300) "\01\bf\84\3d\01")"#,
        ),
        // FairnessDecision { order: [job 0 eligible, job 0 eligible] }
        "duplicate-job" => (
            "(return (call $reply (i32.const 300) (i32.const 5)))",
            r#"(data (i32.const 300) "\02\00\01\00\01")"#,
        ),
        // A result discriminant that is neither ok nor error.
        "bad-discriminant" => (
            "(i32.store8 (i32.const 16) (i32.const 2)) (return (i32.const 16))",
            "",
        ),
        // A return area at an address not aligned for its i32s.
        "misaligned-return" => (
            r#"(i32.store8 (i32.const 17) (i32.const 0))
               (i32.store (i32.const 21) (i32.const 64))
               (i32.store (i32.const 25) (i32.const 1))
               (return (i32.const 17))"#,
            "",
        ),
        // error(<bytes that are not UTF-8>)
        "refuse-not-utf8" => (
            r#"(i32.store8 (i32.const 16) (i32.const 1))
               (i32.store (i32.const 20) (i32.const 300))
               (i32.store (i32.const 24) (i32.const 2))
               (return (i32.const 16))"#,
            r#"(data (i32.const 300) "\ff\fe")"#,
        ),
        // log(level 9, "hi"): no such level.
        "log-bad-level" => (
            "(call $log (i32.const 9) (i32.const 300) (i32.const 2)) (unreachable)",
            r#"(data (i32.const 300) "hi")"#,
        ),
        // log(info, <bytes that are not UTF-8>)
        "log-not-utf8" => (
            "(call $log (i32.const 2) (i32.const 300) (i32.const 2)) (unreachable)",
            r#"(data (i32.const 300) "\ff\fe")"#,
        ),
        // log(info, <a message past the end of memory>)
        "log-out-of-bounds" => (
            "(call $log (i32.const 2) (i32.const -16) (i32.const 64)) (unreachable)",
            "",
        ),
        // error("no opinion today")
        "refuse" => (
            r#"(i32.store8 (i32.const 16) (i32.const 1))
               (i32.store (i32.const 20) (i32.const 300))
               (i32.store (i32.const 24) (i32.const 16))
               (return (i32.const 16))"#,
            r#"(data (i32.const 300) "no opinion today")"#,
        ),
        other => panic!("no behaviour {other}"),
    }
}

/// Every behaviour [`behaviour`] knows.
pub(crate) const BEHAVIOURS: [&str; 15] = [
    "infinite-loop",
    "memory-bomb",
    "trap",
    "stack-overflow",
    "lift-out-of-bounds",
    "garbage-reply",
    "unknown-job",
    "duplicate-job",
    "bad-discriminant",
    "misaligned-return",
    "refuse-not-utf8",
    "log-bad-level",
    "log-not-utf8",
    "log-out-of-bounds",
    "refuse",
];

/// The core module of the hostile fairness guest `name`, misbehaving on
/// real views only (the `log-*` ones import `log`).
pub(crate) fn hostile_wat(name: &str) -> String {
    let (body, data) = behaviour(name);
    let core = fairness_wat("2.0.0", TRIGGER_BYTES, body, data);
    if name.starts_with("log-") {
        with_log(&core)
    } else {
        core
    }
}

/// The hostile fairness guest `name` as a component ([`hostile_wat`]).
pub(crate) fn hostile(name: &str) -> Vec<u8> {
    componentize(&hostile_wat(name), &[], WIT, "fairness-policy")
}

/// Both ways into a module; hostile guests must fail alike on each.
pub(crate) const PATHS: [CallPath; 2] = [CallPath::Direct, CallPath::Component];

/// A sandbox with a small fuel budget, so runaway guests stop quickly.
pub(crate) fn sandbox() -> SandboxConfig {
    SandboxConfig {
        budget: gangway_core::wasm::Budget::Fuel(20_000_000),
        memory_bytes: 16 << 20,
        // Each call held to its own budget only (`budgets.rs` tests the
        // work budget).
        work_budget: None,
        ..SandboxConfig::default()
    }
}

/// An engine on [`sandbox`] (the direct call path where possible).
pub(crate) fn engine() -> PolicyEngine {
    PolicyEngine::new(sandbox()).unwrap()
}

/// An engine on [`sandbox`] that enters modules by `path`.
pub(crate) fn engine_on(path: CallPath) -> PolicyEngine {
    PolicyEngine::new(SandboxConfig {
        call_path: path,
        ..sandbox()
    })
    .unwrap()
}

/// `core_wat` (a module) importing the contract's `log` as `$log`.
pub(crate) fn with_log(core_wat: &str) -> String {
    core_wat.replacen(
        "(module",
        "(module\n  (import \"gangway:policy/log@2.0.0\" \"log\" (func $log (param i32 i32 i32)))",
        1,
    )
}

/// A fairness guest exporting the slot twice: as
/// `gangway:policy/fairness@2.0.0` and as `...@2.1.0` (the same functions).
pub(crate) fn twice_exported_fairness() -> Vec<u8> {
    let v21 = WIT.replace(
        "package gangway:policy@2.0.0;",
        "package gangway:policy@2.1.0;",
    );
    let world = "package test:twice;\nworld twice {\n  export gangway:policy/fairness@2.0.0;\n  export gangway:policy/fairness@2.1.0;\n}";
    let core = fairness_wat("2.0.0", 100, "(unreachable)", "")
        .replace(
            "(func (export \"gangway:policy/fairness@2.0.0#init\")",
            "(func (export \"gangway:policy/fairness@2.0.0#init\") (export \"gangway:policy/fairness@2.1.0#init\")",
        )
        .replace(
            "(func (export \"gangway:policy/fairness@2.0.0#order\")",
            "(func (export \"gangway:policy/fairness@2.0.0#order\") (export \"gangway:policy/fairness@2.1.0#order\")",
        );
    componentize(&core, &[&v21], world, "twice")
}

/// The contract this host speaks, with the `-buffered` interfaces.
pub(crate) const WIT_2_1: &str = include_str!("../../../plugin-sdk/wit/policy.wit");

/// A 2.1 fairness guest: the 2.0 functions answer the empty decision; the
/// buffered `view-buffer` answers `buffer` and `call` runs `call` (which
/// must leave the packed answer, an i64) on views longer than the trigger,
/// and otherwise answer as the 2.0 functions do. `data` adds data segments.
pub(crate) fn buffered_wat(buffer: &str, call: &str, data: &str) -> String {
    let core = fairness_wat("2.1.0", TRIGGER_BYTES, "(unreachable)", data);
    let trigger = TRIGGER_BYTES;
    let buffered = format!(
        r#"
  (func (export "gangway:policy/fairness-buffered@2.1.0#view-buffer") (param $len i32) (result i32)
    (if (i32.lt_u (memory.size) (i32.const 4))
      (then (drop (memory.grow (i32.const 4)))))
    (if (i32.gt_u (local.get $len) (i32.const {trigger}))
      (then (return {buffer})))
    (i32.const 32768))
  (func (export "gangway:policy/fairness-buffered@2.1.0#call") (param $len i32) (result i64)
    (if (i32.gt_u (local.get $len) (i32.const {trigger}))
      (then (return {call})))
    ;; ok: the empty decision, one byte at 64
    (i64.or (i64.shl (i64.const 64) (i64.const 32)) (i64.const 1)))
)"#
    );
    // Replace the module's closing parenthesis with the buffered functions.
    let end = core.trim_end().len() - 1;
    format!("{}{buffered}", &core[..end])
}

/// A 2.1 guest whose slot function keeps the view's order (a valid
/// decision) while its `-buffered` twin answers the empty order: twins
/// that disagree.
pub(crate) fn disagreeing_twins() -> Vec<u8> {
    let echo = "(then (return (call $echo (local.get $ptr) (local.get $len))))";
    let core = buffered_wat(
        "(i32.const 32768)",
        "(i64.or (i64.shl (i64.const 64) (i64.const 32)) (i64.const 1))",
        &format!("(global $i (mut i32) (i32.const 0)) {}", ECHO),
    )
    .replace("(then (unreachable))", echo);
    componentize_doctored(&core, WIT_2_1, "fairness-policy-buffered")
}

/// A 2.1 guest whose `-buffered` twin and slot function both answer the
/// empty order, the twin logging `hello` on real views and the function
/// not: twins that answer alike but log differently.
pub(crate) fn twin_that_logs() -> Vec<u8> {
    let core = buffered_wat(
        "(i32.const 32768)",
        r#"(block (result i64)
             (call $log (i32.const 2) (i32.const 300) (i32.const 5))
             (i64.or (i64.shl (i64.const 64) (i64.const 32)) (i64.const 1)))"#,
        r#"(data (i32.const 300) "hello")"#,
    )
    .replace("(then (unreachable))", "(then (nop))")
    .replacen(
        "(module",
        "(module\n  (import \"gangway:policy/log@2.1.0\" \"log\" (func $log (param i32 i32 i32)))",
        1,
    );
    componentize_doctored(&core, WIT_2_1, "fairness-policy-buffered")
}
