//! Unit tests of both slots on hand-built views.

use super::*;
use gangway_plugin_sdk::{
    ClassSpeeds, GpuTypeId, GpuTypeSummary, JobId, JobTypes, Level, ReclaimDecision, ReclaimPolicy,
    ReclaimView, RunningJob, ServerId, ServerState, SpreadLimit, WaitReason, WaitingJob,
};
use proptest::prelude::*;

const K80: GpuTypeId = GpuTypeId(0);
const V100: GpuTypeId = GpuTypeId(1);

fn job(id: u64, gpus: u32, attained_gpu_s: u64) -> PendingJob {
    PendingJob {
        id: JobId(id),
        gpus,
        submitted_s: id,
        attained_gpu_s,
        min_level: Level(1),
        min_servers: 1,
        ..PendingJob::default()
    }
}

fn gpu_type(id: GpuTypeId, total_gpus: u32, free_gpus: u32) -> GpuTypeSummary {
    GpuTypeSummary {
        id,
        memory_gb: 0,
        total_gpus,
        free_gpus,
    }
}

fn job_types(id: u64, allowed: Vec<GpuTypeId>, class: u32) -> JobTypes {
    JobTypes {
        job: JobId(id),
        allowed,
        running: None,
        class,
    }
}

fn fairness_view(jobs: Vec<PendingJob>) -> FairnessView {
    FairnessView {
        jobs,
        ..FairnessView::default()
    }
}

/// Two types with one free GPU each; job 1 gains 1.2x on a V100, job 2
/// 10x; both prefer the V100, and job 1 comes first.
fn two_jobs_two_types() -> (FairnessView, TypesView) {
    let view = fairness_view(vec![job(1, 1, 0), job(2, 1, 0)]);
    let types = TypesView {
        types: vec![gpu_type(K80, 4, 1), gpu_type(V100, 4, 1)],
        jobs: vec![
            job_types(1, vec![V100, K80], 0),
            job_types(2, vec![V100, K80], 1),
        ],
        servers: Vec::new(),
        vcs: vec![],
        speeds: vec![
            ClassSpeeds {
                class: 0,
                per_type: vec![10, 12],
            },
            ClassSpeeds {
                class: 1,
                per_type: vec![1, 10],
            },
        ],
    };
    (view, types)
}

fn choice_of(choices: &TypeChoices, id: u64) -> Option<GpuTypeId> {
    choices
        .choices
        .iter()
        .find(|c| c.job == JobId(id))
        .map(|c| c.gpu_type)
}

#[test]
fn aware_gives_the_fast_type_to_the_larger_speed_up() {
    let (view, types) = two_jobs_two_types();
    let aware = HetMaxMin::default();
    let (d, choices) = aware.order_typed(&view, &types);
    assert_eq!(choice_of(&choices, 1), Some(K80));
    assert_eq!(choice_of(&choices, 2), Some(V100));
    assert!(d.order.iter().all(|r| r.eligible));
    let plan = aware.plan(&view, &types);
    let blind = HetMaxMin::from_config(b"type_blind = true").unwrap();
    // Blind: job 1 comes first and takes the V100 it prefers.
    let blind_plan = blind.plan(&view, &types);
    assert_eq!(blind_plan.types, vec![V100, K80]);
    let (aware_sum, blind_sum) = (
        aware.throughput(&view, &types, &plan),
        aware.throughput(&view, &types, &blind_plan),
    );
    assert!(
        aware_sum > 2.5 && blind_sum < 1.3,
        "{aware_sum} {blind_sum}"
    );

    let (blind_d, blind_choices) = blind.order_typed(&view, &types);
    assert!(
        blind_choices.choices.is_empty(),
        "the baseline chooses no types"
    );
    assert_eq!(blind_d, d, "the same order in both modes");
    assert_eq!(blind.plan(&view, &types).types, vec![V100, K80]);
}

#[test]
fn the_more_served_job_gets_the_faster_type() {
    let (mut view, mut types) = two_jobs_two_types();
    // Both gain 10x on the V100; job 1 has more service, so job 2 comes
    // first and a blind host gives it the V100 it prefers.
    types.jobs[0].class = 1;
    view.jobs[0].attained_gpu_s = 50_000;
    let aware = HetMaxMin::default();
    let (d, choices) = aware.order_typed(&view, &types);
    assert_eq!(d.order[0].job, JobId(2), "the less served comes first");
    assert_eq!(choice_of(&choices, 1), Some(V100));
    assert_eq!(choice_of(&choices, 2), Some(K80));
    let blind = HetMaxMin::from_config(b"type_blind = true").unwrap();
    assert_eq!(blind.plan(&view, &types).types, vec![V100, K80]);
    // Unless that would run the two slower in sum: job 1 gains only 1.2x.
    types.jobs[0].class = 0;
    let (_, choices) = aware.order_typed(&view, &types);
    assert_eq!(choice_of(&choices, 2), Some(V100));
}

#[test]
fn without_speeds_types_follow_preference() {
    let (view, mut types) = two_jobs_two_types();
    types.speeds.clear();
    let (_, choices) = HetMaxMin::default().order_typed(&view, &types);
    assert_eq!(choice_of(&choices, 1), Some(V100));
    assert_eq!(choice_of(&choices, 2), Some(K80));
}

#[test]
fn jobs_without_room_come_last_and_stay_eligible() {
    let (mut view, mut types) = two_jobs_two_types();
    // Job 0 (first: least service) needs 2 GPUs of one type: no room.
    view.jobs.insert(0, job(0, 2, 0));
    types.jobs.insert(0, job_types(0, vec![V100], 1));
    let (d, choices) = HetMaxMin::default().order_typed(&view, &types);
    let ids: Vec<u64> = d.order.iter().map(|r| r.job.0).collect();
    assert_eq!(ids, vec![1, 2, 0]);
    assert!(d.order.iter().all(|r| r.eligible));
    assert_eq!(choice_of(&choices, 0), None);
}

#[test]
fn untyped_order_is_least_attained_service_in_bands() {
    let p = HetMaxMin::default();
    let view = fairness_view(vec![job(1, 1, 50_000), job(2, 1, 100), job(3, 1, 4_000)]);
    let ids: Vec<u64> = p.order(&view).order.iter().map(|r| r.job.0).collect();
    assert_eq!(ids, vec![2, 3, 1]);
    assert_eq!(
        p.queue_order(),
        QueueOrder::AttainedBands(vec![3_600, 36_000])
    );
    let manifest =
        <HetMaxMin as gangway_plugin_sdk::Policy<gangway_plugin_sdk::Fairness>>::manifest(&p);
    assert!(manifest.gpu_types);
}

#[test]
fn config_errors_are_clear() {
    assert_eq!(HetMaxMin::from_config(b"").unwrap(), HetMaxMin::default());
    let e = HetMaxMin::from_config(b"blind = true").unwrap_err();
    assert!(e.0.contains("unknown field `blind`"), "{e}");
    let e = HetMaxMin::from_config(b"thresholds_gpu_s = [10, 10]").unwrap_err();
    assert!(e.0.contains("strictly increasing"), "{e}");
    let p = HetMaxMin::from_config(b"type_blind = true\nmin_run_s = 0").unwrap();
    assert!(p.config().type_blind && p.config().min_run_s == 0);
}

// --- reclaim ---

fn running(id: u64, server: u32, gpus: u32, attained: u64, started_s: u64) -> RunningJob {
    RunningJob {
        id: JobId(id),
        gpus,
        attained_gpu_s: attained,
        started_s,
        parts: vec![(ServerId(server), gpus)],
        ..RunningJob::default()
    }
}

fn waiting(id: u64, gpus: u32, attained: u64) -> WaitingJob {
    WaitingJob {
        job: job(id, gpus, attained),
        reason: WaitReason::NoCapacity,
        limit: SpreadLimit::level(Level(1)),
    }
}

/// Two 8-GPU servers, 0 a K80 and 1 a V100, both full.
fn reclaim_view(running: Vec<RunningJob>, waiting: Vec<WaitingJob>) -> ReclaimView {
    ReclaimView {
        now_s: 10_000,
        cluster: gangway_plugin_sdk::ClusterSummary {
            server_level: Level(1),
            ..Default::default()
        },
        servers: (0..2)
            .map(|i| ServerState {
                id: ServerId(i),
                domain: 0,
                gpus: 8,
                free: 0,
            })
            .collect(),
        running,
        waiting,
        ..ReclaimView::default()
    }
}

fn reclaim_types(jobs: Vec<JobTypes>) -> TypesView {
    TypesView {
        types: vec![gpu_type(K80, 8, 0), gpu_type(V100, 8, 0)],
        jobs,
        servers: Vec::new(),
        vcs: vec![],
        speeds: vec![ClassSpeeds {
            class: 1,
            per_type: vec![1, 10],
        }],
    }
}

#[test]
fn reclaim_stops_only_on_an_allowed_type_slowest_first() {
    let p = HetPreempt::default();
    let v = reclaim_view(
        vec![running(1, 0, 8, 100_000, 0), running(2, 1, 8, 100_000, 0)],
        vec![waiting(10, 8, 0)],
    );
    let mut jobs = vec![
        JobTypes {
            running: Some(K80),
            ..job_types(1, vec![K80], 0)
        },
        JobTypes {
            running: Some(V100),
            ..job_types(2, vec![V100], 0)
        },
        job_types(10, vec![V100, K80], 1),
    ];
    let types = reclaim_types(jobs.clone());
    // Job 10 has less service than those it stops: it takes the slow type.
    let d = p.reclaim_typed(&v, &types);
    assert_eq!((d.stop, d.start), (vec![JobId(1)], vec![JobId(10)]));
    // Blind: its preference, the V100.
    let blind = HetPreempt::from_config(b"type_blind = true").unwrap();
    let d = blind.reclaim_typed(&v, &types);
    assert_eq!(d.stop, vec![JobId(2)]);
    // Allowed only the V100: never the K80 job.
    jobs[2].allowed = vec![V100];
    let d = p.reclaim_typed(&v, &reclaim_types(jobs));
    assert_eq!(d.stop, vec![JobId(2)]);
}

#[test]
fn reclaim_starts_a_job_on_free_gpus_of_the_type_it_tries_first() {
    // Server 0 (K80) is free, server 1 (V100) runs job 2, server 2 (K80)
    // runs job 1; the host gives the servers' types. Job 10 tries the slow
    // K80 first, and fits on server 0's free GPUs: it starts, nobody stops.
    let p = HetPreempt::default();
    let mut v = reclaim_view(
        vec![running(1, 2, 8, 100_000, 0), running(2, 1, 8, 100_000, 0)],
        vec![waiting(10, 8, 0)],
    );
    v.servers.push(ServerState {
        id: ServerId(2),
        domain: 0,
        gpus: 8,
        free: 0,
    });
    v.servers[0].free = 8;
    let jobs = vec![
        JobTypes {
            running: Some(K80),
            ..job_types(1, vec![K80], 0)
        },
        JobTypes {
            running: Some(V100),
            ..job_types(2, vec![V100], 0)
        },
        job_types(10, vec![V100, K80], 1),
    ];
    let mut types = reclaim_types(jobs);
    types.servers = vec![K80, V100, K80];
    let d = p.reclaim_typed(&v, &types);
    assert_eq!((d.stop, d.start), (vec![], vec![JobId(10)]));
    // Without the servers' types the free GPUs are not known to be K80s:
    // job 1 is stopped for it.
    types.servers.clear();
    assert_eq!(p.reclaim_typed(&v, &types).stop, vec![JobId(1)]);
}

#[test]
fn reclaim_keeps_young_and_equally_served_jobs() {
    let p = HetPreempt::default();
    // Started 100 s ago: under min_run_s.
    let young = reclaim_view(
        vec![running(1, 0, 8, 100_000, 9_900)],
        vec![waiting(10, 8, 0)],
    );
    assert_eq!(p.reclaim(&young), ReclaimDecision::default());
    // Same band as the waiting job.
    let equal = reclaim_view(vec![running(1, 0, 8, 10, 0)], vec![waiting(10, 8, 0)]);
    assert_eq!(p.reclaim(&equal), ReclaimDecision::default());
    // Not waiting for GPUs.
    let mut w = waiting(10, 8, 0);
    w.reason = WaitReason::FairShare;
    let share = reclaim_view(vec![running(1, 0, 8, 100_000, 0)], vec![w]);
    assert_eq!(p.reclaim(&share), ReclaimDecision::default());
    let old = reclaim_view(vec![running(1, 0, 8, 100_000, 0)], vec![waiting(10, 8, 0)]);
    assert_eq!(p.reclaim(&old).stop, vec![JobId(1)]);
}

// --- properties on random small instances ---

/// (total, free) per type, speeds per class (or none), and jobs as
/// (GPUs, attained, allowed types as a rotation and count, class).
type Instance = (
    Vec<(u32, u32)>,
    Option<Vec<Vec<u32>>>,
    Vec<(u32, u64, usize, usize, u32)>,
);

fn instance() -> impl Strategy<Value = Instance> {
    (1usize..=3).prop_flat_map(|n| {
        (
            proptest::collection::vec((1u32..8, 0u32..8), n),
            proptest::option::weighted(
                0.8,
                proptest::collection::vec(proptest::collection::vec(0u32..20, n), 3),
            ),
            proptest::collection::vec((1u32..4, 0u64..50_000, 0..n, 1..=n, 0u32..4), 0..10),
        )
    })
}

fn build(inst: &Instance) -> (FairnessView, TypesView) {
    let (caps, speeds, jobs) = inst;
    let n = caps.len();
    let types = TypesView {
        types: caps
            .iter()
            .enumerate()
            .map(|(i, (t, f))| gpu_type(GpuTypeId(i as u8), *t, (*f).min(*t)))
            .collect(),
        jobs: jobs
            .iter()
            .enumerate()
            .map(|(id, (_, _, rot, count, class))| {
                let allowed = (0..*count)
                    .map(|k| GpuTypeId(((rot + k) % n) as u8))
                    .collect();
                job_types(id as u64, allowed, *class)
            })
            .collect(),
        servers: Vec::new(),
        vcs: vec![],
        speeds: speeds
            .iter()
            .flatten()
            .enumerate()
            .map(|(c, per_type)| ClassSpeeds {
                class: c as u32,
                per_type: per_type.clone(),
            })
            .collect(),
    };
    let view = fairness_view(
        jobs.iter()
            .enumerate()
            .map(|(id, (g, a, ..))| job(id as u64, *g, *a))
            .collect(),
    );
    (view, types)
}

proptest! {
    /// Both modes admit the same jobs in the same order, and the aware
    /// plan never runs them slower in sum than the blind one.
    #[test]
    fn aware_never_runs_the_admitted_jobs_slower_than_blind(inst in instance()) {
        let (view, types) = build(&inst);
        let p = HetMaxMin::default();
        let plan = p.plan(&view, &types);
        let blind = HetMaxMin::from_config(b"type_blind = true").unwrap().plan(&view, &types);
        prop_assert_eq!(&plan.order, &blind.order);
        prop_assert_eq!(plan.admitted, blind.admitted);
        let (aware, blind) = (p.throughput(&view, &types, &plan), p.throughput(&view, &types, &blind));
        prop_assert!(aware >= blind, "{} < {}", aware, blind);
    }

    #[test]
    fn choices_are_allowed_with_room_and_order_is_a_permutation(inst in instance(), blind: bool) {
        let (view, types) = build(&inst);
        let p = HetMaxMin::new(HetConfig { type_blind: blind, ..HetConfig::default() }).unwrap();
        let (d, choices) = p.order_typed(&view, &types);
        let mut ids: Vec<u64> = d.order.iter().map(|r| r.job.0).collect();
        ids.sort_unstable();
        prop_assert_eq!(ids, (0..view.jobs.len() as u64).collect::<Vec<_>>());
        prop_assert!(!blind || choices.choices.is_empty());
        let mut used = vec![0u32; types.types.len()];
        let mut seen = Vec::new();
        for c in &choices.choices {
            prop_assert!(!seen.contains(&c.job), "{} chosen twice", c.job);
            seen.push(c.job);
            let jt = types.job(c.job).unwrap();
            prop_assert!(jt.allowed.contains(&c.gpu_type));
            used[c.gpu_type.index()] += view.jobs[c.job.0 as usize].gpus;
        }
        for (t, u) in types.types.iter().zip(&used) {
            prop_assert!(*u <= t.free_gpus, "{} GPUs chosen on {} with {} free", u, t.id, t.free_gpus);
        }
    }
}

proptest! {
    /// Hostile typed views (type ids anywhere in 0..=255, free above
    /// total, unknown or repeated allowed types, any speeds and sizes,
    /// jobs the types do not list): both typed calls answer without
    /// panicking, with a permutation and choices among allowed types.
    #[test]
    fn typed_calls_never_panic(
        caps in proptest::collection::vec((any::<u8>(), any::<u32>(), any::<u32>()), 0..4),
        jobs in proptest::collection::vec(
            (any::<u32>(), any::<u64>(), proptest::collection::vec(any::<u8>(), 0..4), 0u32..3, any::<bool>()),
            0..8,
        ),
        speeds in proptest::collection::vec(proptest::collection::vec(any::<u32>(), 0..4), 0..3),
        blind: bool,
    ) {
        let types = TypesView {
            types: caps.iter().map(|(id, t, f)| gpu_type(GpuTypeId(*id), *t, *f)).collect(),
            jobs: jobs.iter().enumerate().filter(|(_, j)| j.4).map(|(id, (_, _, a, c, _))| JobTypes {
                running: a.first().map(|t| GpuTypeId(*t)),
                ..job_types(id as u64, a.iter().map(|t| GpuTypeId(*t)).collect(), *c)
            }).collect(),
            servers: Vec::new(),
            vcs: vec![],
            speeds: speeds.iter().enumerate().map(|(c, per_type)| ClassSpeeds { class: c as u32, per_type: per_type.clone() }).collect(),
        };
        let view = fairness_view(jobs.iter().enumerate().map(|(id, (g, a, ..))| job(id as u64, *g, *a)).collect());
        let config = HetConfig { type_blind: blind, min_run_s: 0, ..HetConfig::default() };
        let (d, choices) = HetMaxMin::new(config.clone()).unwrap().order_typed(&view, &types);
        prop_assert_eq!(d.order.len(), view.jobs.len());
        for c in &choices.choices {
            prop_assert!(types.job(c.job).is_none_or(|j| j.allowed.contains(&c.gpu_type)));
        }
        let mut rv = reclaim_view(
            jobs.iter().enumerate().map(|(id, (g, a, ..))| running(id as u64, (id % 2) as u32, (*g).min(8), *a, 0)).collect(),
            jobs.iter().enumerate().map(|(id, (g, a, ..))| waiting(id as u64 + 100, *g, *a / 2)).collect(),
        );
        rv.servers[1].free = 3;
        let toml: &[u8] = if blind { b"type_blind = true\nmin_run_s = 0" } else { b"min_run_s = 0" };
        let preempt = HetPreempt::from_config(toml).unwrap();
        prop_assert_eq!(preempt.policy().config(), &config);
        let d = preempt.reclaim_typed(&rv, &types);
        prop_assert!(d.stop.is_empty() || !d.start.is_empty());
    }
}
