//! Native vs Wasm: for random views, every built-in policy (the core's
//! defaults, through the `builtin` plugin, and every plugin under
//! `plugins/`) gives the same decisions natively and as a sandboxed
//! component. And a whole scheduler run with the defaults as Wasm matches the
//! native run round by round.

use std::sync::OnceLock;

use gangway_core::policy::{FairnessBackend, GangBackend, LocalityBackend, PolicySet, Slot};
use gangway_core::wasm::{CallPath, PolicyEngine, PolicyModule, SandboxConfig};
use gangway_plugin_sdk::{
    ClusterSummary, Configure, FairnessDecision, FairnessPolicy, GangAction, GangDecision,
    GangPolicy, JobId, Level, LevelSummary, LocalityDecision, LocalityPolicy, PendingJob,
    QueueView, Ranked, RoundView, VcId, VcUsage, codec, wire,
};
use proptest::prelude::*;

use crate::support::{accounted, run, scheduler};

/// The native twin of every module's slots (default configuration).
enum Native {
    Fairness(Box<dyn FairnessPolicy>),
    Locality(Box<dyn LocalityPolicy>),
    Gang(Box<dyn GangPolicy>),
}

fn cfg<P: Configure>() -> P {
    P::from_config(b"").unwrap()
}

fn natives(module: &str) -> Option<Vec<Native>> {
    use Native::*;
    Some(match module {
        "builtin" => vec![
            Fairness(Box::new(cfg::<gangway_core::policy::defaults::FifoQuota>())),
            Locality(Box::new(cfg::<
                gangway_core::policy::defaults::StrictLocality,
            >())),
            Gang(Box::new(cfg::<gangway_core::policy::defaults::Backfill>())),
        ],
        "fifo" => vec![Fairness(Box::new(cfg::<gangway_policy_fifo::Fifo>()))],
        "vc-quota" => vec![Fairness(
            Box::new(cfg::<gangway_policy_vc_quota::VcQuota>()),
        )],
        "max-min" => vec![Fairness(Box::new(cfg::<gangway_policy_max_min::MaxMin>()))],
        "las" => vec![Fairness(Box::new(cfg::<gangway_policy_las::Las>()))],
        "example-smallest-first" => vec![Fairness(Box::new(cfg::<
            gangway_policy_example_smallest_first::SmallestFirst,
        >()))],
        "delay" => vec![Locality(Box::new(cfg::<gangway_policy_delay::Delay>()))],
        "strict" => vec![Locality(Box::new(cfg::<gangway_policy_strict::Strict>()))],
        "greedy" => vec![Locality(Box::new(cfg::<gangway_policy_greedy::Greedy>()))],
        "backfill" => vec![Gang(Box::new(cfg::<gangway_policy_backfill::Backfill>()))],
        "fifo-block" => vec![Gang(
            Box::new(cfg::<gangway_policy_fifo_block::FifoBlock>()),
        )],
        "reserve" => vec![Gang(Box::new(cfg::<gangway_policy_reserve::Reserve>()))],
        _ => return None,
    })
}

/// Every plugin, loaded once per call path.
fn modules(path: CallPath) -> &'static [PolicyModule] {
    static DIRECT: OnceLock<Vec<PolicyModule>> = OnceLock::new();
    static COMPONENT: OnceLock<Vec<PolicyModule>> = OnceLock::new();
    let cell = match path {
        CallPath::Direct => &DIRECT,
        CallPath::Component => &COMPONENT,
    };
    cell.get_or_init(|| {
        let engine = PolicyEngine::new(SandboxConfig {
            call_path: path,
            ..SandboxConfig::default()
        })
        .unwrap();
        gangway_plugin_artifacts::all()
            .iter()
            .map(|(name, bytes)| engine.load(name, bytes).unwrap())
            .collect()
    })
}

/// Every built-in plugin is of the standard shape, so an engine that allows
/// it enters each directly; one that does not goes through the component
/// runtime.
#[test]
fn every_plugin_takes_the_call_path_asked_for() {
    for path in crate::guests::PATHS {
        for m in modules(path) {
            assert_eq!(m.call_path(), path, "{}", m.name());
        }
    }
}

#[test]
fn every_plugin_has_a_native_twin_with_the_same_slots() {
    let names: Vec<&str> = modules(CallPath::Direct).iter().map(|m| m.name()).collect();
    for required in ["builtin", "fifo"] {
        assert!(names.contains(&required), "{names:?}");
    }
    for m in modules(CallPath::Direct) {
        let natives = natives(m.name()).unwrap_or_else(|| {
            panic!(
                "plugin {} has no native twin in core/tests/wasm/differential.rs",
                m.name()
            )
        });
        let slots: Vec<Slot> = natives
            .iter()
            .map(|n| match n {
                Native::Fairness(_) => Slot::Fairness,
                Native::Locality(_) => Slot::Locality,
                Native::Gang(_) => Slot::Gang,
            })
            .collect();
        assert_eq!(m.slots(), slots, "{}", m.name());
    }
}

/// A consistent random view: `levels` topology levels, VCs indexed by id,
/// jobs in submit order with sensible waits and minimum levels.
fn round_view() -> impl Strategy<Value = RoundView> {
    (1u8..4, 1usize..5, 0usize..80, any::<u64>())
        .prop_flat_map(|(depth, vcs, jobs, seed)| {
            let vcs_s = prop::collection::vec(
                (
                    prop::option::of(0u32..200),
                    1u32..4,
                    0u32..128,
                    0u64..1_000_000,
                ),
                vcs,
            );
            let jobs_s = prop::collection::vec(
                (
                    0..vcs as u32,
                    0u32..20,
                    prop_oneof![Just(1u32), Just(2), Just(4), Just(8), Just(16), Just(32)],
                    0u64..5_000,
                    0u32..3,
                    0u64..500_000,
                    0..=depth,
                ),
                jobs,
            );
            (Just(depth), vcs_s, jobs_s, Just(seed), 0u32..256)
        })
        .prop_map(|(depth, vcs, jobs, seed, free)| {
            let now = 10_000u64;
            let mut jobs: Vec<PendingJob> = jobs
                .into_iter()
                .enumerate()
                .map(
                    |(i, (vc, user, gpus, submitted, attempts, attained, min))| PendingJob {
                        id: JobId(seed % 1_000 + i as u64 * 7),
                        vc: VcId(vc),
                        user,
                        gpus,
                        submitted_s: submitted,
                        waiting_s: now - submitted,
                        attempts,
                        attained_gpu_s: attained,
                        min_level: Level(min),
                    },
                )
                .collect();
            jobs.sort_by_key(|j| (j.submitted_s, j.id));
            let mut pending = vec![0u32; vcs.len()];
            for j in &jobs {
                pending[j.vc.0 as usize] += j.gpus;
            }
            RoundView {
                now_s: now,
                cluster: ClusterSummary {
                    total_gpus: 256,
                    free_gpus: free,
                    server_level: Level(depth),
                    levels: (0..=depth)
                        .map(|l| LevelSummary {
                            domains: 1 << (2 * u32::from(l)),
                            max_domain_gpus: 256 >> (2 * u32::from(l)),
                            max_free_gpus: free >> (2 * u32::from(l)),
                        })
                        .collect(),
                },
                vcs: vcs
                    .into_iter()
                    .enumerate()
                    .map(|(i, (quota, weight, held, attained))| VcUsage {
                        id: VcId(i as u32),
                        quota_gpus: quota,
                        weight,
                        held_gpus: held,
                        pending_gpus: pending[i],
                        attained_gpu_s: attained,
                    })
                    .collect(),
                jobs,
            }
        })
}

/// The queue the locality and gang slots see: a subset of the round's jobs
/// in some order, with spread limits for the gang slot.
fn queue_view(round: &RoundView, keep: &[bool], spread_seed: u64) -> QueueView {
    let mut jobs: Vec<PendingJob> = round
        .jobs
        .iter()
        .zip(keep.iter().cycle())
        .filter(|(_, k)| **k)
        .map(|(j, _)| j.clone())
        .collect();
    jobs.reverse();
    let deepest = round.cluster.server_level.0;
    let spread = jobs
        .iter()
        .enumerate()
        .map(|(i, j)| {
            Level(
                j.min_level
                    .0
                    .min(((spread_seed >> (i % 60)) % 4) as u8)
                    .min(deepest),
            )
        })
        .collect();
    QueueView {
        now_s: round.now_s,
        cluster: round.cluster.clone(),
        jobs,
        spread,
    }
}

/// One backend per slot of every module on each call path.
struct Backends {
    name: String,
    fairness: Option<Box<dyn FairnessBackend>>,
    locality: Option<Box<dyn LocalityBackend>>,
    gang: Option<Box<dyn GangBackend>>,
    natives: Vec<Native>,
}

fn backends() -> Vec<Backends> {
    crate::guests::PATHS
        .iter()
        .flat_map(|path| modules(*path).iter().map(move |m| (path, m)))
        .map(|(path, m)| {
            let slots = m.slots();
            Backends {
                name: format!("{} ({path:?})", m.name()),
                fairness: slots
                    .contains(&Slot::Fairness)
                    .then(|| m.fairness(b"").unwrap()),
                locality: slots
                    .contains(&Slot::Locality)
                    .then(|| m.locality(b"").unwrap()),
                gang: slots.contains(&Slot::Gang).then(|| m.gang(b"").unwrap()),
                natives: natives(m.name()).unwrap(),
            }
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn native_and_wasm_decide_alike(
        round in round_view(),
        keep in prop::collection::vec(any::<bool>(), 1..8),
        spread_seed in any::<u64>(),
    ) {
        let queue = queue_view(&round, &keep, spread_seed);
        let mut locality_queue = queue.clone();
        locality_queue.spread.clear();
        for b in &mut backends() {
            for native in &b.natives {
                match native {
                    Native::Fairness(p) => {
                        let wasm = b.fairness.as_mut().unwrap().order(&round).unwrap();
                        prop_assert_eq!(wasm, p.order(&round), "{} fairness", b.name);
                    }
                    Native::Locality(p) => {
                        let wasm = b.locality.as_mut().unwrap().spread(&locality_queue).unwrap();
                        prop_assert_eq!(wasm, p.spread(&locality_queue), "{} locality", b.name);
                    }
                    Native::Gang(p) => {
                        let wasm = b.gang.as_mut().unwrap().on_blocked(&queue).unwrap();
                        prop_assert_eq!(wasm, p.on_blocked(&queue), "{} gang", b.name);
                    }
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// The hand-written view codec is byte for byte postcard.
    #[test]
    fn the_fast_codec_is_postcard(
        round in round_view(),
        keep in prop::collection::vec(any::<bool>(), 1..8),
        spread_seed in any::<u64>(),
    ) {
        let queue = queue_view(&round, &keep, spread_seed);
        let mut buf = vec![0xAA; 3];
        codec::encode_round_view(&round, &mut buf);
        prop_assert_eq!(&buf, &wire::encode(&round));
        prop_assert_eq!(codec::decode_round_view(&buf).unwrap(), round);
        codec::encode_queue_view(&queue, &mut buf);
        prop_assert_eq!(&buf, &wire::encode(&queue));
        prop_assert_eq!(codec::decode_queue_view(&buf).unwrap(), queue);
    }

    /// Decisions too.
    #[test]
    fn the_fast_decision_codec_is_postcard(
        order in prop::collection::vec((any::<u64>(), any::<bool>()), 0..300),
        spread in prop::collection::vec(any::<u8>(), 0..300),
        actions in prop::collection::vec(0u8..3, 0..300),
        max_reservations in any::<u32>(),
    ) {
        let f = FairnessDecision {
            order: order.iter().map(|(j, e)| Ranked { job: JobId(*j), eligible: *e }).collect(),
        };
        let l = LocalityDecision { spread: spread.iter().map(|b| Level(*b)).collect() };
        let g = GangDecision {
            on_blocked: actions
                .iter()
                .map(|a| [GangAction::Backfill, GangAction::Block, GangAction::Reserve][*a as usize])
                .collect(),
            max_reservations,
        };
        let mut buf = Vec::new();
        codec::encode_fairness(&f, &mut buf);
        prop_assert_eq!(&buf, &wire::encode(&f));
        prop_assert_eq!(codec::decode_fairness(&buf).unwrap(), f);
        codec::encode_locality(&l, &mut buf);
        prop_assert_eq!(&buf, &wire::encode(&l));
        prop_assert_eq!(codec::decode_locality(&buf).unwrap(), l);
        codec::encode_gang(&g, &mut buf);
        prop_assert_eq!(&buf, &wire::encode(&g));
        prop_assert_eq!(codec::decode_gang(&buf).unwrap(), g);
    }

    /// On arbitrary bytes (a hostile reply) the fast decoders never panic and
    /// accept exactly what postcard accepts, with the same value.
    #[test]
    fn the_fast_decoders_agree_with_postcard_on_garbage(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        prop_assert_eq!(codec::decode_round_view(&bytes).ok(), wire::decode::<RoundView>(&bytes).ok());
        prop_assert_eq!(codec::decode_queue_view(&bytes).ok(), wire::decode::<QueueView>(&bytes).ok());
        prop_assert_eq!(codec::decode_fairness(&bytes).ok(), wire::decode::<FairnessDecision>(&bytes).ok());
        prop_assert_eq!(codec::decode_locality(&bytes).ok(), wire::decode::<LocalityDecision>(&bytes).ok());
        prop_assert_eq!(codec::decode_gang(&bytes).ok(), wire::decode::<GangDecision>(&bytes).ok());
    }
}

#[test]
fn the_fast_decoder_refuses_what_postcard_refuses() {
    // A u32 varint past u32::MAX, a u64 varint of 11 bytes, trailing bytes,
    // a length longer than the input.
    assert!(codec::decode_queue_view(&[0, 0xff, 0xff, 0xff, 0xff, 0x7f]).is_err());
    let mut long = vec![0xffu8; 10];
    long.push(0x01);
    assert!(codec::decode_queue_view(&long).is_err());
    assert!(codec::decode_queue_view(&[0, 0, 0, 1, 0, 0, 0, 7]).is_err());
    assert!(codec::decode_queue_view(&[0, 0, 0, 1, 0, 0xff, 0xff, 0x03]).is_err());
    let ok = [0u8, 0, 0, 1, 0, 0, 0];
    assert!(codec::decode_queue_view(&ok).is_ok());
    assert!(wire::decode::<QueueView>(&ok).is_ok());
}

/// The defaults as one Wasm module drive a scheduler exactly as the native
/// defaults do, round by round.
#[test]
fn a_scheduler_on_wasm_defaults_matches_the_native_one() {
    for path in crate::guests::PATHS {
        a_scheduler_on_wasm_defaults_matches_the_native_one_on(path);
    }
}

fn a_scheduler_on_wasm_defaults_matches_the_native_one_on(path: CallPath) {
    let builtin = modules(path)
        .iter()
        .find(|m| m.name() == "builtin")
        .unwrap();
    let wasm = PolicySet {
        fairness: builtin.fairness(b"").unwrap(),
        locality: builtin.locality(b"").unwrap(),
        gang: builtin.gang(b"").unwrap(),
    };
    let mut sandboxed = scheduler(120);
    let mut native = scheduler(120);
    sandboxed.swap_fairness(wasm.fairness);
    sandboxed.swap_locality(wasm.locality);
    sandboxed.swap_gang(wasm.gang);
    let a = run(&mut sandboxed, 50, 12);
    let b = run(&mut native, 50, 12);
    assert!(
        a.iter().all(|r| r.policy_errors.is_empty()),
        "{:?}",
        a[0].policy_errors
    );
    assert_eq!(a, b);
    assert!(a.iter().map(|r| r.starts.len()).sum::<usize>() > 100);
    accounted(&sandboxed, 121);
}
