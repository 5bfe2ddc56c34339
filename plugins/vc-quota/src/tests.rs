use super::*;
use gangway_plugin_sdk::{ClusterSummary, JobId, Level, PendingJob, VcUsage};
use proptest::prelude::*;

fn vc(id: u32, quota: Option<u32>, held_gpus: u32) -> VcUsage {
    VcUsage {
        id: VcId(id),
        quota_gpus: quota,
        weight: 1,
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

fn view(total: u32, free: u32, vcs: Vec<VcUsage>, mut jobs: Vec<PendingJob>) -> FairnessView {
    jobs.sort_by_key(|j| (j.submitted_s, j.id));
    let mut vcs = vcs;
    for v in &mut vcs {
        v.pending_gpus = jobs.iter().filter(|j| j.vc == v.id).map(|j| j.gpus).sum();
    }
    FairnessView {
        now_s: 10_000,
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

fn no_lend() -> VcQuota {
    VcQuota::new(VcQuotaConfig {
        lend: false,
        ..VcQuotaConfig::default()
    })
}

#[test]
fn under_quota_vc_goes_before_an_older_over_quota_job() {
    let v = view(
        64,
        16,
        vec![vc(0, Some(16), 16), vc(1, Some(16), 0)],
        vec![job(1, 0, 4, 0), job(2, 1, 4, 50)],
    );
    assert_eq!(ranked(&no_lend().order(&v)), vec![(2, true), (1, false)]);
    // With lending, the over-quota job may run on the idle GPUs left over.
    assert_eq!(
        ranked(&VcQuota::default().order(&v)),
        vec![(2, true), (1, true)]
    );
}

#[test]
fn most_under_served_first_and_interleaved() {
    // VC 0 uses 6 of 8, VC 1 uses 2 of 8: VC 1 is served first, then the
    // loads even out and the older head goes first on ties.
    let v = view(
        64,
        64,
        vec![vc(0, Some(8), 6), vc(1, Some(8), 2)],
        vec![
            job(1, 0, 1, 0),
            job(2, 0, 1, 1),
            job(3, 1, 2, 2),
            job(4, 1, 2, 3),
            job(5, 1, 2, 4),
        ],
    );
    // VC 1 at 2/8 -> job 3 (4/8) -> job 4 (6/8), a tie with VC 0 at 6/8 that
    // VC 0's older head wins -> job 1 (VC 0 at 7/8) -> VC 1 is now less loaded
    // -> job 5 (8/8) -> job 2 (VC 0 at 8/8).
    assert_eq!(
        ranked(&no_lend().order(&v)),
        vec![(3, true), (4, true), (1, true), (5, true), (2, true)]
    );
}

#[test]
fn fifo_within_a_vc_blocks_later_small_jobs_from_quota() {
    // VC 0 has 4 of 8 left; its oldest job needs 8, so the later 1-GPU job
    // may not overtake it within quota.
    let v = view(
        64,
        64,
        vec![vc(0, Some(8), 4)],
        vec![job(1, 0, 8, 0), job(2, 0, 1, 5)],
    );
    assert_eq!(ranked(&no_lend().order(&v)), vec![(1, false), (2, false)]);
    // Lending lets both run on idle GPUs, still in FIFO order.
    assert_eq!(
        ranked(&VcQuota::default().order(&v)),
        vec![(1, true), (2, true)]
    );
}

#[test]
fn oversized_job_of_an_idle_vc_may_start() {
    let v = view(
        64,
        64,
        vec![vc(0, Some(4), 0)],
        vec![job(1, 0, 16, 0), job(2, 0, 1, 1)],
    );
    assert_eq!(ranked(&no_lend().order(&v)), vec![(1, true), (2, false)]);
    // Not once it holds something.
    let v = view(64, 64, vec![vc(0, Some(4), 1)], vec![job(1, 0, 16, 0)]);
    assert_eq!(ranked(&no_lend().order(&v)), vec![(1, false)]);
}

#[test]
fn lending_is_bounded_by_idle_gpus_not_claimed_within_quota() {
    // 10 free: VC 1 claims 4 within quota, leaving 6 to lend; VC 0's 8-GPU
    // job does not fit them, its 4-GPU job does.
    let v = view(
        64,
        10,
        vec![vc(0, Some(8), 8), vc(1, Some(8), 0)],
        vec![job(1, 0, 8, 0), job(2, 0, 4, 1), job(3, 1, 4, 2)],
    );
    assert_eq!(
        ranked(&VcQuota::default().order(&v)),
        vec![(3, true), (1, false), (2, true)]
    );
}

#[test]
fn zero_quota_only_runs_on_lent_gpus() {
    let v = view(8, 8, vec![vc(0, Some(0), 0)], vec![job(1, 0, 1, 0)]);
    assert_eq!(ranked(&no_lend().order(&v)), vec![(1, false)]);
    assert_eq!(ranked(&VcQuota::default().order(&v)), vec![(1, true)]);
}

#[test]
fn quota_sources_and_demand_share() {
    // 100 GPUs; VC 0 host quota 20 but config says 40; VCs 1 and 2 unquoted
    // with demands 30 (10 held + 20 pending) and 90: they split the other 60
    // as 15 and 45.
    let p = VcQuota::from_config(b"[quota]\n0 = 40").unwrap();
    let v = view(
        100,
        0,
        vec![vc(0, Some(20), 0), vc(1, None, 10), vc(2, None, 0)],
        vec![job(1, 1, 20, 0), job(2, 2, 90, 0)],
    );
    let q = p.effective_quotas(&v);
    let got: Vec<(u32, Option<u32>, QuotaSource)> =
        q.iter().map(|e| (e.vc.0, e.quota_gpus, e.source)).collect();
    assert_eq!(
        got,
        vec![
            (0, Some(40), QuotaSource::Config),
            (1, Some(15), QuotaSource::DemandShare),
            (2, Some(45), QuotaSource::DemandShare),
        ]
    );
    let unlimited = VcQuota::from_config(b"unquoted = \"unlimited\"").unwrap();
    let q = unlimited.effective_quotas(&v);
    assert_eq!(q[0].quota_gpus, Some(20));
    assert_eq!(q[0].source, QuotaSource::Host);
    assert_eq!(q[1].quota_gpus, None);
    assert_eq!(q[1].source, QuotaSource::Unlimited);
}

#[test]
fn job_of_an_unlisted_vc_is_still_ordered() {
    let v = view(
        8,
        8,
        vec![vc(0, Some(8), 0)],
        vec![job(1, 7, 2, 0), job(2, 0, 2, 1)],
    );
    let d = VcQuota::default().order(&v);
    let mut ids: Vec<u64> = d.order.iter().map(|r| r.job.0).collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![1, 2]);
    // VC 7 has no quota: by demand share it gets what VC 0 leaves (0 here).
    let q = VcQuota::default().effective_quotas(&v);
    assert_eq!(q[1].vc, VcId(7));
    assert_eq!(q[1].quota_gpus, Some(0));
}

#[test]
fn config_errors_are_clear() {
    assert_eq!(VcQuota::from_config(b"").unwrap(), VcQuota::default());
    assert!(VcQuota::default().config().lend);
    let e = VcQuota::from_config(b"lending = true").unwrap_err();
    assert!(e.0.contains("unknown field `lending`"), "{e}");
    let e = VcQuota::from_config(b"[quota]\nresearch = 8").unwrap_err();
    assert!(e.0.contains("not a VC index"), "{e}");
    let e = VcQuota::from_config(b"unquoted = \"equal\"").unwrap_err();
    assert!(e.0.contains("unknown variant `equal`"), "{e}");
    let e = VcQuota::from_config(b"[quota]\n0 = -1").unwrap_err();
    assert!(e.0.starts_with("vc-quota:"), "{e}");
}

prop_compose! {
    fn arb_view()(
        vcs in proptest::collection::vec((proptest::option::of(0u32..48), 0u32..48), 1..5),
        jobs in proptest::collection::vec((0u32..6, prop_oneof![Just(1u32), Just(2), Just(4), Just(8), Just(16)], 0u64..500), 0..40),
        total in 16u32..128,
        free_pct in 0u32..=100,
    ) -> FairnessView {
        let vcs: Vec<VcUsage> = vcs.iter().enumerate().map(|(i, (q, h))| vc(i as u32, *q, *h)).collect();
        let jobs = jobs.iter().enumerate().map(|(i, (v, g, s))| job(i as u64, *v, *g, *s)).collect();
        view(total, total * free_pct / 100, vcs, jobs)
    }
}

prop_compose! {
    fn arb_config()(
        lend in any::<bool>(),
        unlimited in any::<bool>(),
        overrides in proptest::collection::btree_map(0u32..6, 0u32..48, 0..3),
    ) -> VcQuotaConfig {
        VcQuotaConfig {
            lend,
            quota: overrides,
            unquoted: if unlimited { Unquoted::Unlimited } else { Unquoted::DemandShare },
            when_can_borrow: WhenCanBorrow::Borrow,
        }
    }
}

proptest! {
    #[test]
    fn returns_a_permutation_of_exactly_the_pending_jobs(v in arb_view(), c in arb_config()) {
        let d = VcQuota::new(c).order(&v);
        let mut got: Vec<JobId> = d.order.iter().map(|r| r.job).collect();
        got.sort_unstable();
        let mut want: Vec<JobId> = v.jobs.iter().map(|j| j.id).collect();
        want.sort_unstable();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn under_quota_oldest_job_never_waits_behind_an_over_quota_vc(v in arb_view(), c in arb_config()) {
        let p = VcQuota::new(c);
        let quotas: BTreeMap<VcId, Option<u32>> =
            p.effective_quotas(&v).iter().map(|e| (e.vc, e.quota_gpus)).collect();
        let held = |vc: VcId| v.vcs.iter().find(|u| u.id == vc).map_or(0, |u| u.held_gpus);
        let under = |vc: VcId| quotas.get(&vc).copied().flatten().is_none_or(|q| held(vc) < q);
        let over = |vc: VcId| quotas.get(&vc).copied().flatten().is_some_and(|q| held(vc) >= q);
        let vc_of = |id: JobId| v.jobs.iter().find(|j| j.id == id).map(|j| j.vc);
        let d = p.order(&v);
        for (pos, r) in d.order.iter().enumerate() {
            let Some(my_vc) = vc_of(r.job) else { continue };
            let oldest = v.jobs.iter().filter(|j| j.vc == my_vc).min_by_key(|j| (j.submitted_s, j.id));
            let is_oldest = oldest.is_some_and(|o| o.id == r.job);
            if !is_oldest || r.eligible || !under(my_vc) {
                continue;
            }
            for ahead in &d.order[..pos] {
                let Some(their_vc) = vc_of(ahead.job) else { continue };
                prop_assert!(
                    !(ahead.eligible && over(their_vc)),
                    "{} of under-quota {:?} is ineligible while {} of over-quota {:?} is served ahead",
                    r.job, my_vc, ahead.job, their_vc
                );
            }
        }
    }

    #[test]
    fn fifo_within_each_vc(v in arb_view(), c in arb_config()) {
        let d = VcQuota::new(c).order(&v);
        let key = |id: JobId| v.jobs.iter().find(|j| j.id == id).map(|j| (j.vc, j.submitted_s, j.id));
        let mut last: BTreeMap<VcId, (u64, JobId)> = BTreeMap::new();
        for r in &d.order {
            let Some((vc, s, id)) = key(r.job) else { continue };
            if let Some(prev) = last.insert(vc, (s, id)) {
                prop_assert!(prev < (s, id));
            }
        }
    }

    #[test]
    fn without_lending_eligible_jobs_fit_the_quota(v in arb_view(), c in arb_config()) {
        let p = VcQuota::new(VcQuotaConfig { lend: false, ..c });
        let d = p.order(&v);
        for e in p.effective_quotas(&v) {
            let Some(q) = e.quota_gpus else { continue };
            let held = v.vcs.iter().find(|u| u.id == e.vc).map_or(0, |u| u.held_gpus);
            let granted: Vec<u32> = d.order.iter().filter(|r| r.eligible)
                .filter_map(|r| v.jobs.iter().find(|j| j.id == r.job && j.vc == e.vc))
                .map(|j| j.gpus)
                .collect();
            let total = held + granted.iter().sum::<u32>();
            // Either within quota, or the single oversized job of an idle VC.
            prop_assert!(granted.is_empty() || total <= q || (held == 0 && granted.len() == 1 && q > 0),
                "{:?}: held {} + granted {:?} > quota {}", e.vc, held, granted, q);
        }
    }

    #[test]
    fn lending_never_exceeds_the_idle_gpus(v in arb_view(), c in arb_config()) {
        let lending = VcQuota::new(VcQuotaConfig { lend: true, ..c.clone() }).order(&v);
        let strict = VcQuota::new(VcQuotaConfig { lend: false, ..c }).order(&v);
        let gpus = |id: JobId| v.jobs.iter().find(|j| j.id == id).map_or(0, |j| u64::from(j.gpus));
        let within: u64 = strict.order.iter().filter(|r| r.eligible).map(|r| gpus(r.job)).sum();
        let all: u64 = lending.order.iter().filter(|r| r.eligible).map(|r| gpus(r.job)).sum();
        let lent = all - within;
        prop_assert!(lent <= u64::from(v.cluster.free_gpus).saturating_sub(within));
        // Lending only adds eligibility; it never takes any away.
        for r in strict.order.iter().filter(|r| r.eligible) {
            prop_assert!(lending.order.iter().any(|l| l.job == r.job && l.eligible));
        }
    }
}

proptest! {
    /// Ordering over only the VCs with pending jobs (the fast path, taken
    /// when no VC gets a demand share) answers exactly as ordering over
    /// every VC, for dense and for sparse VC ids.
    #[test]
    fn covering_only_vcs_with_jobs_changes_nothing(
        v in arb_view(),
        c in arb_config(),
        spread_ids in any::<bool>(),
    ) {
        let mut v = v;
        if spread_ids {
            for u in &mut v.vcs {
                u.id = VcId(u.id.0 * 3 + 1);
            }
            for j in &mut v.jobs {
                j.vc = VcId(j.vc.0 * 3 + 1);
            }
        }
        let p = VcQuota::new(c);
        let all = p.order_covering(&v, two_pass::Cover::All);
        if !p.may_share(&v) {
            prop_assert_eq!(p.order_covering(&v, two_pass::Cover::WithJobs), all.clone());
        }
        prop_assert_eq!(p.order(&v), all);
    }

    /// The second pass's shortcut (taken when nothing can be lent) orders
    /// exactly as the general loop, with and without lending.
    #[test]
    fn the_settled_second_pass_orders_as_the_general_loop(
        v in arb_view(),
        c in arb_config(),
        no_free in any::<bool>(),
    ) {
        let mut v = v;
        if no_free {
            v.cluster.free_gpus = 0;
        }
        let p = VcQuota::new(c);
        for cover in [two_pass::Cover::All, two_pass::Cover::WithJobs] {
            prop_assert_eq!(
                p.order_covering_with(&v, cover, true),
                p.order_covering_with(&v, cover, false)
            );
        }
    }

    /// A view whose jobs are not in (submit time, id) order, as the contract
    /// promises they are, gets the same answer as the ordered view.
    #[test]
    fn job_order_in_the_view_does_not_matter(v in arb_view(), c in arb_config(), rotate in 0usize..40) {
        let p = VcQuota::new(c);
        let want = p.order(&v);
        let mut shuffled = v.clone();
        shuffled.jobs.reverse();
        let n = shuffled.jobs.len().max(1);
        shuffled.jobs.rotate_left(rotate % n);
        prop_assert_eq!(p.order(&shuffled), want);
    }
}

// --- contract 2.2: quotas per GPU type ---

mod typed_quotas {
    use super::*;
    use gangway_plugin_sdk::{GpuTypeId, GpuTypeSummary, JobTypes, VcTypeUsage};

    const A100: GpuTypeId = GpuTypeId(0);
    const V100: GpuTypeId = GpuTypeId(1);

    /// VC 0 holds all 8 of its nominal A100s and none of its 8 V100s; VC 1
    /// has a pooled quota only. Both types have 8 free GPUs; every job
    /// prefers the A100.
    fn typed(jobs: &[(u64, u32)]) -> (FairnessView, TypesView) {
        let v = view(
            32,
            16,
            vec![vc(0, Some(16), 8), vc(1, Some(16), 0)],
            jobs.iter().map(|(id, vc)| job(*id, *vc, 4, *id)).collect(),
        );
        let usage = |vc: u32, t, held, nominal| VcTypeUsage {
            vc: VcId(vc),
            gpu_type: t,
            held_gpus: held,
            nominal_gpus: nominal,
            borrowing_limit_gpus: None,
        };
        let types = TypesView {
            types: [A100, V100]
                .map(|id| GpuTypeSummary {
                    id,
                    memory_gb: 80,
                    total_gpus: 16,
                    free_gpus: 8,
                })
                .to_vec(),
            jobs: jobs
                .iter()
                .map(|(id, _)| JobTypes {
                    job: JobId(*id),
                    allowed: vec![A100, V100],
                    running: None,
                    class: 0,
                })
                .collect(),
            servers: Vec::new(),
            vcs: vec![
                usage(0, A100, 8, Some(8)),
                usage(0, V100, 0, Some(8)),
                usage(1, A100, 0, None),
                usage(1, V100, 0, None),
            ],
            speeds: vec![],
        };
        (v, types)
    }

    fn choices(p: &VcQuota, view: &FairnessView, types: &TypesView) -> Vec<(u64, GpuTypeId)> {
        let (d, c) = p.order_typed(view, types);
        assert_eq!(d, p.order(view), "the same order as without types");
        c.choices.iter().map(|c| (c.job.0, c.gpu_type)).collect()
    }

    #[test]
    fn by_default_a_job_borrows_on_its_preferred_type() {
        let (v, t) = typed(&[(1, 0)]);
        assert!(choices(&VcQuota::default(), &v, &t).is_empty());
    }

    #[test]
    fn try_next_type_stays_within_the_nominal_quotas_then_borrows() {
        let p = VcQuota::from_config(b"when_can_borrow = \"try-next-type\"").unwrap();
        // VC 0's A100s are all in use: its jobs take V100s while its 8
        // nominal V100s last (two 4-GPU jobs), then the third borrows (no
        // choice). VC 1 has no quotas per type: no choice.
        let (v, t) = typed(&[(1, 0), (2, 0), (3, 0), (4, 1)]);
        assert_eq!(choices(&p, &v, &t), vec![(1, V100), (2, V100)]);
        // With its A100s free, the preferred type is within quota.
        let (v, mut t) = typed(&[(1, 0)]);
        t.vcs[0].held_gpus = 0;
        assert_eq!(choices(&p, &v, &t), vec![(1, A100)]);
    }

    #[test]
    fn the_option_is_checked() {
        let e = VcQuota::from_config(b"when_can_borrow = \"sometimes\"").unwrap_err();
        assert!(e.to_string().contains("sometimes"), "{e}");
    }
}
