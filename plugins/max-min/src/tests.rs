use super::*;
use gangway_plugin_sdk::{ClusterSummary, JobId, Level, PendingJob, VcUsage};
use proptest::prelude::*;

fn vc(id: u32, weight: u32, held_gpus: u32) -> VcUsage {
    VcUsage {
        id: VcId(id),
        quota_gpus: None,
        weight,
        held_gpus,
        pending_gpus: 0,
        attained_gpu_s: 0,
        pending_jobs: 0,
    }
}

fn job(id: u64, vc: u32, gpus: u32, submitted_s: u64) -> PendingJob {
    PendingJob {
        id: JobId(id),
        vc: VcId(vc),
        user: 0,
        gpus,
        submitted_s,
        waiting_s: 0,
        attempts: 0,
        attained_gpu_s: 0,
        min_level: Level(2),
        min_servers: 1,
    }
}

fn view(total: u32, free: u32, mut vcs: Vec<VcUsage>, mut jobs: Vec<PendingJob>) -> FairnessView {
    jobs.sort_by_key(|j| (j.submitted_s, j.id));
    for v in &mut vcs {
        v.pending_gpus = jobs.iter().filter(|j| j.vc == v.id).map(|j| j.gpus).sum();
    }
    FairnessView {
        now_s: 0,
        cluster: ClusterSummary {
            total_gpus: total,
            free_gpus: free,
            server_level: Level(2),
            levels: vec![],
        },
        vcs,
        jobs,
    }
}

fn ranked(d: &FairnessDecision) -> Vec<(u64, bool)> {
    d.order.iter().map(|r| (r.job.0, r.eligible)).collect()
}

fn shares(p: &MaxMin, v: &FairnessView) -> Vec<u32> {
    p.fair_shares(v).iter().map(|(_, s)| *s).collect()
}

#[test]
fn equal_weights_split_evenly_and_redistribute_unused_share() {
    let p = MaxMin::default();
    // Demands 40, 40, 4 on 60 GPUs: VC 2 gets 4, the others 28 each.
    let v = view(
        60,
        0,
        vec![vc(0, 1, 0), vc(1, 1, 0), vc(2, 1, 0)],
        vec![job(1, 0, 40, 0), job(2, 1, 40, 0), job(3, 2, 4, 0)],
    );
    assert_eq!(shares(&p, &v), vec![28, 28, 4]);
}

#[test]
fn weights_scale_shares_and_config_overrides_them() {
    let v = view(
        30,
        0,
        vec![vc(0, 1, 0), vc(1, 2, 0)],
        vec![job(1, 0, 64, 0), job(2, 1, 64, 0)],
    );
    assert_eq!(shares(&MaxMin::default(), &v), vec![10, 20]);
    let p = MaxMin::from_config(b"[weight]\n0 = 4\n1 = 1").unwrap();
    assert_eq!(shares(&p, &v), vec![24, 6]);
    let scavenger = MaxMin::from_config(b"[weight]\n0 = 0").unwrap();
    assert_eq!(shares(&scavenger, &v), vec![0, 30]);
}

#[test]
fn over_share_vc_waits_unless_gpus_are_lent() {
    // 16 GPUs, VC 0 holds 12 (share 8), VC 1 holds 0 and asks for 4.
    let vcs = vec![vc(0, 1, 12), vc(1, 1, 0)];
    let v = view(16, 4, vcs, vec![job(1, 0, 2, 0), job(2, 1, 4, 10)]);
    let no_lend = MaxMin::from_config(b"lend = false").unwrap();
    assert_eq!(ranked(&no_lend.order(&v)), vec![(2, true), (1, false)]);
    // Lending: VC 1 claims the 4 free GPUs within its share; nothing is left.
    assert_eq!(
        ranked(&MaxMin::default().order(&v)),
        vec![(2, true), (1, false)]
    );
    let v = view(
        16,
        8,
        vec![vc(0, 1, 8), vc(1, 1, 0)],
        vec![job(1, 0, 2, 0), job(2, 1, 4, 10)],
    );
    // Shares 10 / 4 (VC 0 demand 10): VC 1 at 0 % goes first, VC 0 fits its 10.
    assert_eq!(
        ranked(&MaxMin::default().order(&v)),
        vec![(2, true), (1, true)]
    );
}

#[test]
fn oversized_job_of_an_idle_vc_may_start() {
    // Four VCs share 16 GPUs (4 each); VC 0's 8-GPU job exceeds its share.
    let vcs = (0..4).map(|i| vc(i, 1, 0)).collect();
    let jobs = (0..4).map(|i| job(u64::from(i), i, 8, 0)).collect();
    let v = view(16, 0, vcs, jobs);
    let d = MaxMin::from_config(b"lend = false").unwrap().order(&v);
    assert!(d.order.iter().all(|r| r.eligible));
}

#[test]
fn config_errors_are_clear() {
    assert_eq!(MaxMin::from_config(b"").unwrap(), MaxMin::default());
    let e = MaxMin::from_config(b"weights = {}").unwrap_err();
    assert!(e.0.contains("unknown field `weights`"), "{e}");
    let e = MaxMin::from_config(b"[weight]\nalpha = 1").unwrap_err();
    assert!(e.0.contains("not a VC index"), "{e}");
}

prop_compose! {
    fn arb_view()(
        vcs in proptest::collection::vec((0u32..4, 0u32..48), 1..5),
        jobs in proptest::collection::vec((0u32..6, prop_oneof![Just(1u32), Just(2), Just(4), Just(8), Just(16)], 0u64..500), 0..40),
        total in 16u32..128,
        free_pct in 0u32..=100,
    ) -> FairnessView {
        let vcs: Vec<VcUsage> = vcs.iter().enumerate().map(|(i, (w, h))| vc(i as u32, *w, *h)).collect();
        let jobs = jobs.iter().enumerate().map(|(i, (v, g, s))| job(i as u64, *v, *g, *s)).collect();
        view(total, total * free_pct / 100, vcs, jobs)
    }
}

proptest! {
    #[test]
    fn returns_a_permutation_of_exactly_the_pending_jobs(v in arb_view(), lend in any::<bool>()) {
        let d = MaxMin::new(MaxMinConfig { lend, ..MaxMinConfig::default() }).order(&v);
        let mut got: Vec<JobId> = d.order.iter().map(|r| r.job).collect();
        got.sort_unstable();
        let mut want: Vec<JobId> = v.jobs.iter().map(|j| j.id).collect();
        want.sort_unstable();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn shares_are_max_min_fair(v in arb_view()) {
        let p = MaxMin::default();
        let claims = with_queues(&v, Cover::All, |q| p.claims(&v, q));
        let s = water_fill(&claims, u64::from(v.cluster.total_gpus));
        prop_assert!(s.iter().sum::<u64>() <= u64::from(v.cluster.total_gpus));
        for (i, c) in claims.iter().enumerate() {
            prop_assert!(s[i] <= c.demand);
            if c.weight == 0 {
                prop_assert_eq!(s[i], 0);
            }
        }
        // A VC short of its demand has, per unit of weight, at least what any
        // other VC has (up to rounding down by one GPU).
        for (v_i, cv) in claims.iter().enumerate() {
            if cv.weight == 0 || s[v_i] >= cv.demand {
                continue;
            }
            for (u_i, cu) in claims.iter().enumerate() {
                prop_assert!(
                    u128::from(s[u_i]) * u128::from(cv.weight)
                        <= u128::from(s[v_i] + 1) * u128::from(cu.weight),
                    "{:?} short at {} while {:?} has {}", cv.vc, s[v_i], cu.vc, s[u_i]
                );
            }
        }
    }

    #[test]
    fn under_share_oldest_job_never_waits_behind_an_over_share_vc(v in arb_view(), lend in any::<bool>()) {
        let p = MaxMin::new(MaxMinConfig { lend, ..MaxMinConfig::default() });
        let shares: BTreeMap<VcId, u32> = p.fair_shares(&v).into_iter().collect();
        let held = |vc: VcId| v.vcs.iter().find(|u| u.id == vc).map_or(0, |u| u.held_gpus);
        let share = |vc: VcId| shares.get(&vc).copied().unwrap_or(0);
        let vc_of = |id: JobId| v.jobs.iter().find(|j| j.id == id).map(|j| j.vc);
        let d = p.order(&v);
        for (pos, r) in d.order.iter().enumerate() {
            let Some(my_vc) = vc_of(r.job) else { continue };
            let oldest = v.jobs.iter().filter(|j| j.vc == my_vc).min_by_key(|j| (j.submitted_s, j.id));
            if r.eligible || oldest.is_none_or(|o| o.id != r.job) || held(my_vc) >= share(my_vc) {
                continue;
            }
            for ahead in &d.order[..pos] {
                let Some(their_vc) = vc_of(ahead.job) else { continue };
                prop_assert!(!(ahead.eligible && held(their_vc) >= share(their_vc)));
            }
        }
    }
}
