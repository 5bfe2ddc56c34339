//! The direct call path against the component runtime: a guest whose return
//! area, discriminant, reply pointer, length and bytes are chosen at random
//! must get the same outcome on both paths (the same decision, refusal
//! message, decode error, or an ABI error on each), and a damaged real
//! plugin must be accepted or refused alike and then run alike.

use gangway_core::policy::PolicyErrorKind;
use gangway_core::wasm::{CallPath, PolicyEngine, SandboxConfig};
use gangway_plugin_sdk::Fairness;
use gangway_plugin_sdk::{FairnessDecision, FairnessView, JobId, Ranked, wire};
use proptest::prelude::*;

use crate::guests;
use crate::support::{past_trigger, run, scheduler};

/// One page: the guests' memory while they answer (views here are small).
const PAGE: u64 = 65_536;

/// What a guest answers: the return area's address, its discriminant and
/// payload, and the bytes at address 300.
#[derive(Clone, Debug)]
struct Reply {
    area: u32,
    tag: u8,
    ptr: u32,
    len: u32,
    bytes: Vec<u8>,
}

fn reply() -> impl Strategy<Value = Reply> {
    let decision = FairnessDecision {
        order: vec![Ranked {
            job: JobId(0),
            eligible: true,
        }],
    };
    let bytes = prop_oneof![
        Just(wire::encode(&decision)),
        Just(b"no opinion".to_vec()),
        Just(vec![0xff, 0xfe, 0x01]),
        Just(vec![0x00]),
        prop::collection::vec(any::<u8>(), 0..12),
    ];
    (
        prop_oneof![
            Just(16u32),
            Just(17),
            Just(18),
            Just(PAGE as u32 - 12),
            Just(PAGE as u32 - 8),
            Just(u32::MAX - 3),
        ],
        prop_oneof![Just(0u8), Just(1), Just(2), Just(255)],
        prop_oneof![
            Just(300u32),
            Just(PAGE as u32 - 2),
            Just(PAGE as u32),
            Just(u32::MAX)
        ],
        bytes,
        prop_oneof![Just(None), Just(Some(0u32)), Just(Some(100_000))],
    )
        .prop_map(|(area, tag, ptr, bytes, len)| Reply {
            area,
            tag,
            ptr,
            len: len.unwrap_or(bytes.len() as u32),
            bytes,
        })
}

/// A fairness guest answering `r` to views of more than 100 bytes.
fn guest(r: &Reply) -> Vec<u8> {
    let escaped: String = r.bytes.iter().map(|b| format!("\\{b:02x}")).collect();
    let data = format!(r#"(data (i32.const 300) "{escaped}")"#);
    let area = r.area as i32;
    // The area is written only where it fits in memory.
    let body = if u64::from(r.area) + 12 <= PAGE {
        format!(
            "(i32.store8 (i32.const {area}) (i32.const {tag}))
             (i32.store (i32.const {a4}) (i32.const {ptr}))
             (i32.store (i32.const {a8}) (i32.const {len}))
             (return (i32.const {area}))",
            tag = r.tag,
            a4 = area + 4,
            a8 = area + 8,
            ptr = r.ptr as i32,
            len = r.len as i32,
        )
    } else {
        format!("(return (i32.const {area}))")
    };
    guests::fairness(100, &body, &data)
}

/// A call's outcome, with the ABI errors' wording (which differs between
/// the paths) left out.
#[derive(Debug, PartialEq)]
enum Outcome {
    Decided(FairnessDecision),
    Failed(PolicyErrorKind),
    BrokeAbi,
}

fn outcome(kind: PolicyErrorKind) -> Outcome {
    match kind {
        PolicyErrorKind::Abi(_) => Outcome::BrokeAbi,
        kind => Outcome::Failed(kind),
    }
}

fn call(path: CallPath, bytes: &[u8], view: &FairnessView) -> Outcome {
    let engine = guests::engine_on(path);
    let module = engine.load("reply", bytes).unwrap();
    assert_eq!(module.call_path(), path);
    let mut backend = module.backend::<Fairness>(b"").unwrap();
    match backend.decide(view) {
        Ok(d) => Outcome::Decided(d),
        Err(e) => outcome(e.kind),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn both_paths_lift_any_reply_alike(r in reply()) {
        let bytes = guest(&r);
        let view = past_trigger();
        let direct = call(CallPath::Direct, &bytes, &view);
        let component = call(CallPath::Component, &bytes, &view);
        prop_assert_eq!(direct, component, "{:?}", r);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// A real plugin with a few bytes changed: loading never panics, the two
    /// paths accept or refuse it alike, and where both accept it they run a
    /// scheduler alike (same starts, same waits, same kinds of failure) when
    /// the direct path enters the functions the component runtime calls.
    /// Entered once per call through its `-buffered` twins (the direct
    /// path's default for a 2.1 module), the damaged plugin may load or fail
    /// where its plain functions do not, or the reverse (the contract has
    /// twins answer alike; damage can break that), so there it need only
    /// run: its failures typed, the scheduler's invariants kept.
    #[test]
    fn both_paths_treat_a_damaged_plugin_alike(
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
    ) {
        let mut bytes = gangway_plugin_artifacts::module("fifo").unwrap().to_vec();
        let len = bytes.len();
        for (at, xor) in &flips {
            bytes[at.index(len)] ^= xor;
        }
        let three_entries = PolicyEngine::new(SandboxConfig {
            call_path: CallPath::Direct,
            buffered_calls: false,
            ..guests::sandbox()
        })
        .unwrap()
        .load("damaged", &bytes);
        let buffered = guests::engine_on(CallPath::Direct).load("damaged", &bytes);
        let component = guests::engine_on(CallPath::Component).load("damaged", &bytes);
        prop_assert_eq!(three_entries.is_ok(), component.is_ok(), "{:?} / {:?}", three_entries.as_ref().err(), component.as_ref().err());
        if let Ok(buffered) = buffered {
            let mut c = scheduler(30);
            c.swap::<Fairness>(buffered.backend::<Fairness>(b"").unwrap());
            // `run` checks the scheduler's invariants after every round.
            let _ = run(&mut c, 100, 3);
        }
        if let (Ok(direct), Ok(component)) = (three_entries, component) {
            let mut a = scheduler(30);
            let mut b = scheduler(30);
            a.swap::<Fairness>(direct.backend::<Fairness>(b"").unwrap());
            b.swap::<Fairness>(component.backend::<Fairness>(b"").unwrap());
            let (a, b) = (run(&mut a, 100, 3), run(&mut b, 100, 3));
            let starts = |r: &[gangway_core::RoundReport]| -> Vec<_> {
                r.iter().map(|r| (r.starts.clone(), r.waiting.clone())).collect()
            };
            let kinds = |r: &[gangway_core::RoundReport]| -> Vec<Vec<Outcome>> {
                r.iter()
                    .map(|r| r.policy_errors.iter().map(|e| outcome(e.kind.clone())).collect())
                    .collect()
            };
            prop_assert_eq!(starts(&a), starts(&b));
            prop_assert_eq!(kinds(&a), kinds(&b));
        }
    }
}

/// A component whose slot functions lift their strings as UTF-16 or
/// latin1+UTF-16 (valid canonical options) is not read as UTF-8 by the
/// direct path: it takes the component runtime on an engine set to the
/// direct path, and answers there exactly as on the component runtime.
#[test]
fn strings_in_another_encoding_are_read_as_the_component_says() {
    use wit_component::StringEncoding;
    // Refuses with 5 code units of text at address 300.
    let body = "(i32.store8 (i32.const 16) (i32.const 1))
                (i32.store (i32.const 20) (i32.const 300))
                (i32.store (i32.const 24) (i32.const 5))
                (return (i32.const 16))";
    let data = r#"(data (i32.const 300) "no opinion")"#;
    let wat = guests::fairness_wat("2.0.0", 100, body, data);
    let view = past_trigger();
    let answer = |path: CallPath, bytes: &[u8]| {
        let module = guests::engine_on(path).load("encoded", bytes).unwrap();
        let taken = module.call_path();
        let mut backend = module.backend::<Fairness>(b"").unwrap();
        (taken, backend.decide(&view).map_err(|e| e.kind))
    };
    for encoding in [StringEncoding::UTF16, StringEncoding::CompactUTF16] {
        let core = guests::with_metadata_in(&wat, &[], guests::WIT, "fairness-policy", encoding);
        let component = wit_component::ComponentEncoder::default()
            .validate(true)
            .module(&core)
            .unwrap()
            .encode()
            .unwrap();
        let (direct_path, direct) = answer(CallPath::Direct, &component);
        let (_, runtime) = answer(CallPath::Component, &component);
        assert_eq!(direct_path, CallPath::Component, "{encoding:?}");
        assert_eq!(direct, runtime, "{encoding:?}");
        assert!(
            matches!(runtime, Err(PolicyErrorKind::Refused(_))),
            "{encoding:?}: {runtime:?}"
        );
    }
    // The same guest in UTF-8 takes the direct path and is read as UTF-8.
    let utf8 = guests::componentize(&wat, &[], guests::WIT, "fairness-policy");
    let (path, answer) = answer(CallPath::Direct, &utf8);
    assert_eq!(path, CallPath::Direct);
    assert_eq!(answer, Err(PolicyErrorKind::Refused("no op".into())));
}
