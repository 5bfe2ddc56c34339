//! GPU types through the scheduler's public API: requests resolved at
//! submit, placement only on allowed types, one gang on one type, wait
//! reasons counted over the allowed types, and untyped clusters unchanged.

#![allow(clippy::unwrap_used)]

use gangway_core::{
    AttemptEnd, GpuRequest, GpuRequestError, GpuTypeId, JobId, JobSpec, Scheduler, SchedulerError,
    Topology, TopologyBuilder, VcId, WaitReason,
};

/// Two racks: `k80` (two 4-GPU servers, 12 GB) and `v100` (two 4-GPU
/// servers, 32 GB), and one `a100` server of 8 GPUs (80 GB) in a third.
fn mixed() -> (Topology, [GpuTypeId; 3]) {
    let mut b = TopologyBuilder::new();
    let k80 = b.add_gpu_type("k80", 12).unwrap();
    let v100 = b.add_gpu_type("v100", 32).unwrap();
    let a100 = b.add_gpu_type("a100", 80).unwrap();
    let root = b.root();
    let r0 = b.add_domain(root, "r0").unwrap();
    b.add_server_of_type(r0, "k0", 4, k80).unwrap();
    b.add_server_of_type(r0, "k1", 4, k80).unwrap();
    let r1 = b.add_domain(root, "r1").unwrap();
    b.add_server_of_type(r1, "v0", 4, v100).unwrap();
    b.add_server_of_type(r1, "v1", 4, v100).unwrap();
    let r2 = b.add_domain(root, "r2").unwrap();
    b.add_server_of_type(r2, "a0", 8, a100).unwrap();
    (b.build().unwrap(), [k80, v100, a100])
}

fn spec(id: u64, vc: VcId, gpus: u32, at: u64) -> JobSpec {
    JobSpec {
        id: JobId(id),
        vc,
        user: 0,
        gpus,
        submitted_s: at,
    }
}

/// The types of the servers job `id` runs on.
fn types_of(sched: &Scheduler, id: u64) -> Vec<GpuTypeId> {
    let topo = sched.topology();
    let mut types: Vec<GpuTypeId> = sched
        .state()
        .allocation(JobId(id))
        .map(|p| {
            p.parts
                .iter()
                .filter_map(|part| topo.server(part.server).map(|s| s.gpu_type))
                .collect()
        })
        .unwrap_or_default();
    types.sort();
    types.dedup();
    types
}

#[test]
fn requests_resolve_at_submit_and_impossible_ones_are_refused() {
    let (topo, [k80, v100, a100]) = mixed();
    let mut sched = Scheduler::new(topo);
    let vc = sched.virtual_cluster("a");
    // Any type: every type large enough, in the topology's order.
    sched.submit(spec(1, vc, 8, 0)).unwrap();
    assert_eq!(
        sched.allowed_gpu_types(JobId(1)),
        Some(&[k80, v100, a100][..])
    );
    // A gang of 9 fits no single type (the cluster has 24 GPUs): refused.
    let err = sched.submit(spec(2, vc, 9, 0)).unwrap_err();
    assert!(
        matches!(
            err,
            SchedulerError::GpuRequest {
                source: GpuRequestError::TooLarge {
                    gpus: 9,
                    largest: 8
                },
                ..
            }
        ),
        "{err}"
    );
    assert!(sched.job(JobId(2)).is_none(), "a refused job is not kept");
    // Preference order is kept; memory filters.
    let r = GpuRequest::types(["a100", "k80", "v100"]).with_min_memory_gb(16);
    sched.submit_requesting(spec(3, vc, 1, 0), &r).unwrap();
    assert_eq!(sched.allowed_gpu_types(JobId(3)), Some(&[a100, v100][..]));
    // Unknown, repeated, too little memory, too large for the type named.
    fn sched_err(s: &mut Scheduler, j: JobSpec, r: &GpuRequest) -> String {
        s.submit_requesting(j, r).unwrap_err().to_string()
    }
    let mut s2 = Scheduler::new(mixed().0);
    let vc2 = s2.virtual_cluster("a");
    assert_eq!(
        sched_err(&mut s2, spec(4, vc2, 1, 0), &GpuRequest::types(["h100"])),
        format!(
            "{}: no GPU type \"h100\" in the cluster (it has k80, v100, a100)",
            JobId(4)
        )
    );
    assert!(
        sched_err(
            &mut s2,
            spec(5, vc2, 1, 0),
            &GpuRequest::types(["k80", "k80"])
        )
        .contains("named twice")
    );
    assert!(
        sched_err(
            &mut s2,
            spec(6, vc2, 1, 0),
            &GpuRequest::types(["k80"]).with_min_memory_gb(16)
        )
        .contains("16 GB")
    );
    // 8 GPUs of k80 exist, but not 12 of it.
    assert!(
        sched_err(&mut s2, spec(7, vc2, 12, 0), &GpuRequest::types(["k80"])).contains("12 GPUs")
    );
    assert!(s2.jobs().is_empty());
}

#[test]
fn a_job_runs_only_on_its_types_and_waits_for_them() {
    let (topo, [_, v100, a100]) = mixed();
    let mut sched = Scheduler::new(topo);
    let vc = sched.virtual_cluster("a");
    // Fill the v100s.
    let v = GpuRequest::types(["v100"]);
    sched.submit_requesting(spec(1, vc, 8, 0), &v).unwrap();
    let report = sched.round(0).unwrap();
    assert_eq!(report.starts.len(), 1);
    assert_eq!(types_of(&sched, 1), [v100]);
    // Another v100 job waits although k80s and the a100 are free, and
    // its reason counts only v100's free GPUs (none): no capacity.
    sched.submit_requesting(spec(2, vc, 2, 10), &v).unwrap();
    let report = sched.round(10).unwrap();
    assert!(report.starts.is_empty(), "{report:?}");
    assert_eq!(sched.why_pending(JobId(2)), Some(WaitReason::NoCapacity));
    // A job that takes a100 or v100 runs on the a100.
    let either = GpuRequest::types(["v100", "a100"]);
    sched
        .submit_requesting(spec(3, vc, 4, 20), &either)
        .unwrap();
    sched.round(20).unwrap();
    assert_eq!(types_of(&sched, 3), [a100]);
    // The v100s free: job 2 starts there.
    sched.end_attempt(JobId(1), 30, AttemptEnd::Passed).unwrap();
    sched.round(30).unwrap();
    assert_eq!(types_of(&sched, 2), [v100]);
    sched.check_invariants().unwrap();
}

#[test]
fn a_gang_never_spans_two_types() {
    let (topo, [k80, v100, _]) = mixed();
    let mut sched = Scheduler::new(topo);
    let vc = sched.virtual_cluster("a");
    let kv = GpuRequest::types(["k80", "v100"]);
    // 2 GPUs on each of k0, v0 and v1, 3 on k1: 1 k80 GPU and 4 v100
    // GPUs stay free, 5 in all, but no type has 5.
    for (id, gpus, t) in [(1, 2, "k80"), (2, 3, "k80"), (3, 2, "v100"), (4, 2, "v100")] {
        sched
            .submit_requesting(spec(id, vc, gpus, 0), &GpuRequest::types([t]))
            .unwrap();
    }
    sched.round(0).unwrap();
    assert_eq!(sched.running_gpu_type(JobId(1)), Some(k80));
    assert_eq!(sched.running_gpu_type(JobId(3)), Some(v100));
    sched.submit_requesting(spec(5, vc, 5, 10), &kv).unwrap();
    let report = sched.round(10).unwrap();
    assert!(report.starts.is_empty(), "{report:?}");
    // 4 v100 GPUs free of 5: not enough on any one type.
    assert_eq!(sched.why_pending(JobId(5)), Some(WaitReason::NoCapacity));
    // A gang of 4 fits v100 only spread over two servers: it runs there.
    sched.submit_requesting(spec(6, vc, 4, 20), &kv).unwrap();
    sched.round(20).unwrap();
    assert_eq!(types_of(&sched, 6), [v100]);
    sched.check_invariants().unwrap();
}

#[test]
fn the_most_local_type_wins_and_preference_breaks_ties() {
    let (topo, [k80, v100, a100]) = mixed();
    let mut sched = Scheduler::new(topo);
    let vc = sched.virtual_cluster("a");
    // 8 GPUs: one server on the a100, two servers elsewhere.
    let all = GpuRequest::types(["k80", "v100", "a100"]);
    sched.submit_requesting(spec(1, vc, 8, 0), &all).unwrap();
    // 4 GPUs: one server on any type; the preferred one is taken.
    let pref = GpuRequest::types(["v100", "k80"]);
    sched.submit_requesting(spec(2, vc, 4, 0), &pref).unwrap();
    sched.round(0).unwrap();
    assert_eq!(types_of(&sched, 1), [a100]);
    assert_eq!(types_of(&sched, 2), [v100]);
    assert_ne!(types_of(&sched, 2), [k80]);
    sched.check_invariants().unwrap();
}

#[test]
fn an_untyped_cluster_has_one_type_and_no_allowed_types() {
    let topo = Topology::uniform(2, 2, 4).unwrap();
    assert!(!topo.is_heterogeneous());
    assert_eq!(topo.gpu_types().len(), 1);
    assert_eq!(topo.gpu_types()[0].name, gangway_core::DEFAULT_GPU_TYPE);
    let mut sched = Scheduler::new(topo);
    let vc = sched.virtual_cluster("a");
    sched.submit(spec(1, vc, 16, 0)).unwrap();
    assert_eq!(sched.allowed_gpu_types(JobId(1)), None);
    // Any request resolves against the one type; a named one must exist.
    assert!(
        sched
            .submit_requesting(spec(2, vc, 1, 0), &GpuRequest::types(["v100"]))
            .is_err()
    );
    sched
        .submit_requesting(spec(3, vc, 1, 0), &GpuRequest::types(["gpu"]))
        .unwrap();
    assert_eq!(sched.allowed_gpu_types(JobId(3)), None);
    let report = sched.round(0).unwrap();
    assert_eq!(report.starts.len(), 1, "the 16-GPU gang fills the cluster");
}

#[test]
fn a_snapshot_keeps_each_jobs_types_and_an_untyped_one_stays_version_2() {
    use gangway_core::policy::PolicySet;
    use gangway_core::snapshot::Snapshot;
    let (topo, [_, v100, a100]) = mixed();
    let mut sched = Scheduler::new(topo);
    let vc = sched.virtual_cluster("a");
    let v = GpuRequest::types(["v100"]);
    sched.submit_requesting(spec(1, vc, 8, 0), &v).unwrap();
    sched.round(0).unwrap();
    // Waits for the v100s; must not start on the free a100 after restore.
    sched.submit_requesting(spec(2, vc, 4, 1), &v).unwrap();
    sched.submit(spec(3, vc, 8, 1)).unwrap();
    let bytes = sched.snapshot().to_bytes().unwrap();
    assert_eq!(bytes[6], 3, "a snapshot with GPU types is version 3");
    let mut restored = Scheduler::restore(
        mixed().0,
        PolicySet::fallbacks(),
        Snapshot::from_bytes(&bytes).unwrap(),
    )
    .unwrap();
    assert_eq!(restored.allowed_gpu_types(JobId(2)), Some(&[v100][..]));
    assert_eq!(restored.snapshot().to_bytes().unwrap(), bytes);
    restored.round(10).unwrap();
    assert_eq!(restored.running_gpu_type(JobId(2)), None);
    assert_eq!(types_of(&restored, 3), [a100]);
    restored.check_invariants().unwrap();

    // On a cluster of one type nothing is recorded: version 2, as before.
    let mut plain = Scheduler::new(Topology::uniform(1, 2, 8).unwrap());
    let vc = plain.virtual_cluster("a");
    plain.submit(spec(1, vc, 4, 0)).unwrap();
    let bytes = plain.snapshot().to_bytes().unwrap();
    assert_eq!(bytes[6], 2);
    let restored = Scheduler::restore(
        Topology::uniform(1, 2, 8).unwrap(),
        PolicySet::fallbacks(),
        Snapshot::from_bytes(&bytes).unwrap(),
    )
    .unwrap();
    assert_eq!(restored.snapshot().to_bytes().unwrap(), bytes);
}

#[test]
fn an_untyped_snapshot_restored_on_typed_servers_keeps_gangs_on_one_type() {
    use gangway_core::policy::PolicySet;
    use gangway_core::snapshot::Snapshot;
    // The same servers, typed on restore (as after an upgrade that reads
    // the GPU types): pending jobs get every type large enough.
    let untyped = || {
        let mut b = TopologyBuilder::new();
        let root = b.root();
        for (r, names) in [["k0", "k1"], ["v0", "v1"]].iter().enumerate() {
            let rack = b.add_domain(root, format!("r{r}")).unwrap();
            for n in names {
                b.add_server(rack, *n, 4).unwrap();
            }
        }
        b.build().unwrap()
    };
    let typed = || {
        let mut b = TopologyBuilder::new();
        let k80 = b.add_gpu_type("k80", 12).unwrap();
        let v100 = b.add_gpu_type("v100", 32).unwrap();
        let root = b.root();
        for (r, (names, t)) in [(["k0", "k1"], k80), (["v0", "v1"], v100)]
            .into_iter()
            .enumerate()
        {
            let rack = b.add_domain(root, format!("r{r}")).unwrap();
            for n in names {
                b.add_server_of_type(rack, n, 4, t).unwrap();
            }
        }
        b.build().unwrap()
    };
    let mut sched = Scheduler::new(untyped());
    let vc = sched.virtual_cluster("a");
    sched.submit(spec(1, vc, 2, 0)).unwrap();
    sched.submit(spec(2, vc, 6, 0)).unwrap();
    let bytes = sched.snapshot().to_bytes().unwrap();
    let mut restored = Scheduler::restore(
        typed(),
        PolicySet::fallbacks(),
        Snapshot::from_bytes(&bytes).unwrap(),
    )
    .unwrap();
    assert_eq!(
        restored.allowed_gpu_types(JobId(2)).map(<[_]>::len),
        Some(2)
    );
    restored.round(0).unwrap();
    restored.check_invariants().unwrap();
    assert_eq!(types_of(&restored, 2).len(), 1, "6 GPUs on one type");
}

/// Every blocked job reserves.
struct AlwaysReserve;

impl gangway_plugin_sdk::GangPolicy for AlwaysReserve {
    fn on_blocked(&self, view: &gangway_plugin_sdk::QueueView) -> gangway_plugin_sdk::GangDecision {
        gangway_plugin_sdk::GangDecision {
            on_blocked: vec![gangway_plugin_sdk::GangAction::Reserve; view.jobs.len()],
            max_reservations: 4,
        }
    }
}

#[test]
fn a_typed_gang_reserves_on_its_own_type() {
    use gangway_core::policy::{Native, PolicySet};
    use gangway_plugin_sdk::Gang;
    let (topo, [_, v100, _]) = mixed();
    let policies =
        PolicySet::fallbacks().with::<Gang>(Box::new(Native::new("reserve", AlwaysReserve)));
    let mut sched = Scheduler::with_policies(topo, policies);
    let vc = sched.virtual_cluster("a");
    let v = GpuRequest::types(["v100"]);
    // 2 of each v100 server's 4 GPUs taken: 4 v100 GPUs free, 8 k80.
    sched.submit_requesting(spec(1, vc, 2, 0), &v).unwrap();
    sched.submit_requesting(spec(2, vc, 2, 0), &v).unwrap();
    sched.round(0).unwrap();
    assert_eq!(sched.running_gpu_type(JobId(2)), Some(v100));
    // An 8-GPU v100 gang does not fit: its reservation holds the v100
    // rack's 4 free GPUs, none of the free k80s.
    sched.submit_requesting(spec(3, vc, 8, 10), &v).unwrap();
    let report = sched.round(10).unwrap();
    assert!(report.starts.is_empty(), "{report:?}");
    let held: Vec<_> = report
        .reservations
        .iter()
        .map(|r| (r.job, r.held_gpus))
        .collect();
    assert_eq!(held, [(JobId(3), 4)]);
    // A 1-GPU job of any type still starts, on a k80 (the held v100 GPUs
    // are not its to take).
    sched.submit(spec(4, vc, 1, 20)).unwrap();
    let report = sched.round(20).unwrap();
    assert_eq!(report.starts.len(), 1);
    assert_ne!(sched.running_gpu_type(JobId(4)), Some(v100));
    sched.check_invariants().unwrap();
}

/// Found by gangway-slurm's typed soak (seed 53): a job queued before its
/// first round, on racks that each hold an 8-GPU a100 and an 8-GPU v100
/// server. Its 16-GPU gang fits one rack over all types but needs two
/// racks on one type; restore queued it before it knew its types, and its
/// queue entry (narrowest level: a rack) was stale.
#[test]
fn a_job_snapshotted_before_its_first_round_restores_with_its_types() {
    use gangway_core::policy::PolicySet;
    use gangway_core::snapshot::Snapshot;
    let build = || {
        let mut b = TopologyBuilder::new();
        let a100 = b.add_gpu_type("a100", 80).unwrap();
        let v100 = b.add_gpu_type("v100", 32).unwrap();
        let root = b.root();
        for r in 0..2 {
            let rack = b.add_domain(root, format!("r{r}")).unwrap();
            b.add_server_of_type(rack, format!("a{r}"), 8, a100)
                .unwrap();
            b.add_server_of_type(rack, format!("v{r}"), 8, v100)
                .unwrap();
        }
        b.build().unwrap()
    };
    let mut sched = Scheduler::new(build());
    let vc = sched.virtual_cluster("a");
    sched
        .submit_requesting(spec(1, vc, 16, 0), &GpuRequest::default())
        .unwrap();
    sched
        .submit_requesting(spec(2, vc, 16, 0), &GpuRequest::types(["v100"]))
        .unwrap();
    sched.check_invariants().unwrap();
    let bytes = sched.snapshot().to_bytes().unwrap();
    let mut restored = Scheduler::restore(
        build(),
        PolicySet::fallbacks(),
        Snapshot::from_bytes(&bytes).unwrap(),
    )
    .unwrap();
    restored.check_invariants().unwrap();
    assert_eq!(restored.snapshot().to_bytes().unwrap(), bytes);
    // Both start, each on two racks of one type.
    let round = restored.round(1).unwrap();
    assert_eq!(round.starts.len(), 2);
    assert_eq!(types_of(&restored, 1).len(), 1);
    assert_eq!(types_of(&restored, 2).len(), 1);
    assert_ne!(types_of(&restored, 1), types_of(&restored, 2));
    restored.check_invariants().unwrap();
}

/// Quotas per GPU type: a VC starts jobs only on the types it names, up
/// to its nominal quota plus its borrowing limit; a job that fits on no
/// type within the caps waits for its fair share and starts when one of
/// its VC's jobs of that type ends; another VC without such quotas is not
/// bound by them. A snapshot keeps the quotas (version 4).
#[test]
fn per_type_quotas_cap_what_a_vc_starts_and_survive_a_snapshot() {
    use gangway_core::TypeQuota;
    use gangway_core::policy::PolicySet;
    use gangway_core::snapshot::Snapshot;
    let (topo, [k80, v100, a100]) = mixed();
    let mut sched = Scheduler::new(topo);
    let a = sched.virtual_cluster("a");
    let b = sched.virtual_cluster("b");
    // a: 4 v100s and may borrow 4 more; 4 k80s, borrowing none; no a100s.
    sched.set_type_quotas(
        a,
        [
            (v100, TypeQuota::new(4, Some(4))),
            (k80, TypeQuota::new(4, Some(0))),
        ]
        .into(),
    );
    assert_eq!(sched.virtual_clusters()[a.index()].quota_gpus, Some(8));
    // No pooled quota for the fairness policy to hold a to: its caps alone
    // bound it.
    sched.set_quota(a, None);
    let v = GpuRequest::types(["v100"]);
    sched.submit_requesting(spec(1, a, 4, 0), &v).unwrap();
    sched.submit_requesting(spec(2, a, 4, 0), &v).unwrap();
    // Any type: only k80 is left within a's caps, 4 of them.
    sched.submit(spec(3, a, 4, 0)).unwrap();
    sched.submit(spec(4, a, 4, 0)).unwrap();
    // b has no per-type quota: the a100 server is its.
    sched.submit(spec(5, b, 8, 0)).unwrap();
    sched.round(0).unwrap();
    assert_eq!(types_of(&sched, 1), [v100]);
    assert_eq!(types_of(&sched, 2), [v100]);
    assert_eq!(types_of(&sched, 3), [k80]);
    assert_eq!(types_of(&sched, 5), [a100]);
    assert!(sched.job(JobId(4)).unwrap().is_pending());
    assert_eq!(sched.why_pending(JobId(4)), Some(WaitReason::FairShare));
    assert_eq!(
        (sched.held_of_type(a, v100), sched.held_of_type(a, k80)),
        (8, 4)
    );
    sched.check_invariants().unwrap();

    let bytes = sched.snapshot().to_bytes().unwrap();
    assert_eq!(bytes[6], 4, "a snapshot with quotas per type is version 4");
    let mut restored = Scheduler::restore(
        mixed().0,
        PolicySet::fallbacks(),
        Snapshot::from_bytes(&bytes).unwrap(),
    )
    .unwrap();
    assert_eq!(restored.type_quotas(a), sched.type_quotas(a));
    assert_eq!(restored.snapshot().to_bytes().unwrap(), bytes);
    // Job 3's k80s free up: job 4 takes them, within the cap.
    restored
        .end_attempt(JobId(3), 10, AttemptEnd::Passed)
        .unwrap();
    restored.round(10).unwrap();
    assert_eq!(types_of(&restored, 4), [k80]);
    restored.check_invariants().unwrap();
}

/// Every blocked job blocks the queue behind it.
struct AlwaysBlock;

impl gangway_plugin_sdk::GangPolicy for AlwaysBlock {
    fn on_blocked(&self, view: &gangway_plugin_sdk::QueueView) -> gangway_plugin_sdk::GangDecision {
        gangway_plugin_sdk::GangDecision {
            on_blocked: vec![gangway_plugin_sdk::GangAction::Block; view.jobs.len()],
            max_reservations: 0,
        }
    }
}

/// A job its VC's quotas per type hold back waits for its fair share and
/// does not count as a gang that does not fit: under a gang policy that
/// blocks, the other VCs' jobs behind it still start.
#[test]
fn a_job_held_by_its_type_quota_blocks_no_one() {
    use gangway_core::TypeQuota;
    use gangway_core::policy::{Native, PolicySet};
    use gangway_plugin_sdk::Gang;
    let (topo, [k80, _, _]) = mixed();
    let policies = PolicySet::fallbacks().with::<Gang>(Box::new(Native::new("block", AlwaysBlock)));
    let mut sched = Scheduler::with_policies(topo, policies);
    let a = sched.virtual_cluster("a");
    let b = sched.virtual_cluster("b");
    sched.set_type_quotas(a, [(k80, TypeQuota::new(4, Some(0)))].into());
    sched.set_quota(a, None);
    sched.submit(spec(1, a, 4, 0)).unwrap();
    sched.submit(spec(2, a, 4, 1)).unwrap();
    sched.submit(spec(3, b, 4, 2)).unwrap();
    sched.round(10).unwrap();
    assert_eq!(types_of(&sched, 1), [k80]);
    assert_eq!(sched.why_pending(JobId(2)), Some(WaitReason::FairShare));
    assert!(
        sched.job(JobId(3)).unwrap().is_running(),
        "b's job is not held behind a's"
    );
    sched.check_invariants().unwrap();
}
