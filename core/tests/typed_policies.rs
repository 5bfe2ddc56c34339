//! Contract 2.2 natively: a fairness or reclaim policy whose manifest takes
//! the GPU types is shown them beside its view on a cluster of several
//! types (each type's capacity and free GPUs, each job's allowed types and
//! class, each VC's use and quota per type, the speeds the host gave), and
//! the types a fairness policy chooses hold for the round's placement; a
//! choice a job may not take fails the decision. A policy that does not
//! take them, or a cluster of one type, sees no types.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};

use gangway_core::policy::{Native, PolicySet};
use gangway_core::{
    GpuRequest, GpuTypeId, JobId, JobSpec, Scheduler, Topology, TopologyBuilder, TypeQuota, VcId,
};
use gangway_plugin_sdk::{
    ClassSpeeds, Fairness, FairnessDecision, FairnessPolicy, FairnessView, Ranked, TypeChoice,
    TypeChoices, TypesView,
};

/// One rack of two 4-GPU k80 servers and one of two 4-GPU v100 servers.
fn two_types() -> (Topology, [GpuTypeId; 2]) {
    let mut b = TopologyBuilder::new();
    let k80 = b.add_gpu_type("k80", 12).unwrap();
    let v100 = b.add_gpu_type("v100", 32).unwrap();
    let r0 = b.add_domain(b.root(), "r0").unwrap();
    b.add_server_of_type(r0, "k0", 4, k80).unwrap();
    b.add_server_of_type(r0, "k1", 4, k80).unwrap();
    let r1 = b.add_domain(b.root(), "r1").unwrap();
    b.add_server_of_type(r1, "v0", 4, v100).unwrap();
    b.add_server_of_type(r1, "v1", 4, v100).unwrap();
    (b.build().unwrap(), [k80, v100])
}

fn spec(id: u64, vc: VcId, gpus: u32) -> JobSpec {
    JobSpec {
        id: JobId(id),
        vc,
        user: 0,
        gpus,
        submitted_s: id,
    }
}

/// Every job eligible in view order; with the types, each job on the type
/// `pick` names for it (if any), and what it was shown recorded.
struct Chooser<const TYPED: bool> {
    pick: fn(JobId) -> Option<GpuTypeId>,
    seen: Arc<Mutex<Vec<TypesView>>>,
    plain_calls: Arc<Mutex<u32>>,
}

impl<const TYPED: bool> FairnessPolicy for Chooser<TYPED> {
    fn order(&self, view: &FairnessView) -> FairnessDecision {
        *self.plain_calls.lock().unwrap() += 1;
        all_eligible(view)
    }
    const GPU_TYPES: bool = TYPED;
    fn order_typed(
        &self,
        view: &FairnessView,
        types: &TypesView,
    ) -> (FairnessDecision, TypeChoices) {
        self.seen.lock().unwrap().push(types.clone());
        let choices = view
            .jobs
            .iter()
            .filter_map(|j| {
                (self.pick)(j.id).map(|gpu_type| TypeChoice {
                    job: j.id,
                    gpu_type,
                })
            })
            .collect();
        (all_eligible(view), TypeChoices { choices })
    }
}

fn all_eligible(view: &FairnessView) -> FairnessDecision {
    FairnessDecision {
        order: view
            .jobs
            .iter()
            .map(|j| Ranked {
                job: j.id,
                eligible: true,
            })
            .collect(),
    }
}

type Seen = (Arc<Mutex<Vec<TypesView>>>, Arc<Mutex<u32>>);

fn scheduler(
    topo: Topology,
    typed: bool,
    pick: fn(JobId) -> Option<GpuTypeId>,
) -> (Scheduler, Seen) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let plain = Arc::new(Mutex::new(0));
    let (s, p) = (Arc::clone(&seen), Arc::clone(&plain));
    let backend: gangway_core::policy::BoxedBackend<Fairness> = if typed {
        let policy = Chooser::<true> {
            pick,
            seen: s,
            plain_calls: p,
        };
        Box::new(Native::new("chooser", policy))
    } else {
        let policy = Chooser::<false> {
            pick,
            seen: s,
            plain_calls: p,
        };
        Box::new(Native::new("chooser", policy))
    };
    let policies = PolicySet::fallbacks().with::<Fairness>(backend);
    (Scheduler::with_policies(topo, policies), (seen, plain))
}

/// Job 1 would go to k80 (preferred, first); the policy chooses v100 for
/// it, and the view it was shown says what the cluster and the job are.
#[test]
fn a_typed_fairness_policy_sees_the_types_and_its_choice_holds() {
    let (topo, [k80, v100]) = two_types();
    let (mut sched, (seen, plain)) =
        scheduler(topo, true, |id| (id == JobId(1)).then_some(GpuTypeId(1)));
    let a = sched.virtual_cluster("a");
    sched.set_type_quotas(
        a,
        [
            (k80, TypeQuota::new(8, None)),
            (v100, TypeQuota::new(4, Some(4))),
        ]
        .into(),
    );
    sched.set_class_speeds(vec![ClassSpeeds {
        class: 7,
        per_type: vec![100, 1_000],
    }]);
    sched
        .submit_requesting(spec(1, a, 4), &GpuRequest::types(["k80", "v100"]))
        .unwrap();
    sched.set_job_class(JobId(1), 7).unwrap();
    sched.submit(spec(2, a, 2)).unwrap();
    sched.round(10).unwrap();
    assert_eq!(sched.running_gpu_type(JobId(1)), Some(v100));
    assert_eq!(*plain.lock().unwrap(), 0, "asked with the types only");
    let views = seen.lock().unwrap();
    let t = &views[0];
    assert_eq!(t.types.len(), 2);
    assert_eq!(
        (
            t.types[0].total_gpus,
            t.types[0].free_gpus,
            t.types[1].memory_gb
        ),
        (8, 8, 32)
    );
    let j1 = t.job(JobId(1)).unwrap();
    assert_eq!(
        (j1.allowed.as_slice(), j1.class, j1.running),
        (&[k80, v100][..], 7, None)
    );
    assert_eq!(t.job(JobId(2)).unwrap().allowed, [k80, v100]);
    let q = t.vc_type(a, v100).unwrap();
    assert_eq!((q.nominal_gpus, q.borrowing_limit_gpus), (Some(4), Some(4)));
    assert_eq!(t.speeds_of(7).unwrap().on(v100), 1_000);
    sched.check_invariants().unwrap();
}

/// A choice of a type the job may not use fails the decision: the
/// built-in policy decides the round, and the job runs on its own type.
#[test]
fn a_choice_the_job_may_not_take_fails_the_decision() {
    let (topo, [k80, _]) = two_types();
    let (mut sched, _) = scheduler(topo, true, |_| Some(GpuTypeId(1)));
    let a = sched.virtual_cluster("a");
    sched
        .submit_requesting(spec(1, a, 4), &GpuRequest::types(["k80"]))
        .unwrap();
    let report = sched.round(10).unwrap();
    assert_eq!(report.policy_errors.len(), 1, "{report:?}");
    let e = report.policy_errors[0].to_string();
    assert!(e.contains("may not run on it"), "{e}");
    assert_eq!(sched.running_gpu_type(JobId(1)), Some(k80));
}

/// A policy that does not take the types, or any policy on a cluster of
/// one type, is asked the plain way.
#[test]
fn without_the_opt_in_or_several_types_no_types_are_shown() {
    let (topo, _) = two_types();
    let (mut sched, (seen, plain)) = scheduler(topo, false, |_| Some(GpuTypeId(1)));
    let a = sched.virtual_cluster("a");
    sched.submit(spec(1, a, 4)).unwrap();
    sched.round(10).unwrap();
    assert!(seen.lock().unwrap().is_empty());
    assert_eq!(*plain.lock().unwrap(), 1);

    let (mut sched, (seen, plain)) = scheduler(Topology::uniform(1, 2, 8).unwrap(), true, |_| None);
    let a = sched.virtual_cluster("a");
    sched.submit(spec(1, a, 4)).unwrap();
    sched.round(10).unwrap();
    assert!(seen.lock().unwrap().is_empty());
    assert_eq!(*plain.lock().unwrap(), 1);
}
