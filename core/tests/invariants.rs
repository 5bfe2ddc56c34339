//! Property tests: random topologies, random event sequences and (sometimes
//! hostile) policies; after every step the cluster's invariants must hold and
//! no job may be lost. The same inputs must give the same decisions.
#![allow(clippy::unwrap_used)]

use gangway_core::policy::{Backend, PolicyError, PolicySet};
use gangway_core::{
    AttemptEnd, FailureClass, GpuRequest, JobSpec, JobState, Placement, RoundReport, Scheduler,
    SchedulerError, ServerGpus, ServerId, TopologyBuilder,
};
use gangway_plugin_sdk::{Defragment, Fairness, Gang, Locality, Reclaim, Retry};
use gangway_plugin_sdk::{
    DefragmentDecision, DefragmentView, FairnessDecision, FairnessView, GangAction, GangDecision,
    JobId, Level, LocalityDecision, Move, QueueView, Ranked, ReclaimDecision, ReclaimView,
    RetryAction, RetryDecision, RetryView, SpreadLimit, VcId, WaitReason,
};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Submit { gpus: u32, vc: u8, ask: u8 },
    Round { advance: u64 },
    End { pick: usize, outcome: u8, class: u8 },
    Down { server: usize },
    Up { server: usize },
    Drain { server: usize },
    Kill { pick: usize },
    Shrink { pick: usize, drop: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (prop_oneof![Just(1u32), Just(2), Just(3), Just(4), Just(8), Just(12), Just(16), Just(40)], 0u8..3, any::<u8>())
            .prop_map(|(gpus, vc, ask)| Op::Submit { gpus, vc, ask }),
        4 => (0u64..400).prop_map(|advance| Op::Round { advance }),
        3 => (any::<usize>(), 0u8..4, 0u8..23).prop_map(|(pick, outcome, class)| Op::End { pick, outcome, class }),
        1 => any::<usize>().prop_map(|server| Op::Down { server }),
        1 => any::<usize>().prop_map(|server| Op::Up { server }),
        1 => any::<usize>().prop_map(|server| Op::Drain { server }),
        1 => any::<usize>().prop_map(|pick| Op::Kill { pick }),
        1 => (any::<usize>(), any::<u64>()).prop_map(|(pick, drop)| Op::Shrink { pick, drop }),
    ]
}

/// Topology: racks of servers with mixed GPU counts, sometimes an extra level.
fn topology() -> impl Strategy<Value = (bool, Vec<Vec<u32>>)> {
    (
        any::<bool>(),
        prop::collection::vec(
            prop::collection::vec(prop_oneof![Just(1u32), Just(2), Just(4), Just(8)], 1..5),
            1..4,
        ),
    )
}

/// GPU types of a topology: how many (1 to 3), and whether a rack mixes
/// them (server by server) or holds one (rack by rack).
#[derive(Clone, Copy, Debug)]
struct Typing {
    types: u8,
    mixed_racks: bool,
}

impl Typing {
    const ONE: Typing = Typing {
        types: 1,
        mixed_racks: false,
    };

    /// The type of server `s` of rack `r`.
    fn of(self, r: usize, s: usize) -> usize {
        let n = usize::from(self.types.max(1));
        if self.mixed_racks { (r + s) % n } else { r % n }
    }

    /// Memory of type `t`'s GPUs.
    fn memory(t: usize) -> u32 {
        16 * (t as u32 + 1)
    }

    /// What a job asks, from its random byte: some types in some order
    /// (bit 0 clear: any type), sometimes a memory minimum; sometimes an
    /// unknown type.
    fn request(self, ask: u8) -> GpuRequest {
        let n = usize::from(self.types);
        let mut types: Vec<String> = if ask & 1 == 0 {
            Vec::new()
        } else {
            (0..n)
                .filter(|t| ask >> (1 + t) & 1 == 1)
                .map(|t| format!("t{t}"))
                .collect()
        };
        if ask & 0x10 != 0 {
            types.reverse();
        }
        if ask & 0xe0 == 0xe0 {
            types.push("nope".into());
        }
        let min_memory_gb = match ask >> 5 & 3 {
            1 => 32,
            2 => 48,
            _ => 0,
        };
        GpuRequest {
            types,
            min_memory_gb,
        }
    }
}

fn typing() -> impl Strategy<Value = Typing> {
    (1u8..4, any::<bool>()).prop_map(|(types, mixed_racks)| Typing { types, mixed_racks })
}

fn build_typed(pods: bool, racks: &[Vec<u32>], typing: Typing) -> gangway_core::Topology {
    let mut b = TopologyBuilder::new();
    let types: Vec<_> = (0..usize::from(typing.types))
        .filter(|_| typing.types > 1)
        .map(|t| b.add_gpu_type(format!("t{t}"), Typing::memory(t)).unwrap())
        .collect();
    let root = b.root();
    for (r, servers) in racks.iter().enumerate() {
        let parent = if pods {
            b.add_domain(root, format!("pod{r}")).unwrap()
        } else {
            root
        };
        let rack = b.add_domain(parent, format!("rack{r}")).unwrap();
        for (s, g) in servers.iter().enumerate() {
            match types.get(typing.of(r, s)) {
                Some(t) => b.add_server_of_type(rack, format!("r{r}s{s}"), *g, *t),
                None => b.add_server(rack, format!("r{r}s{s}"), *g),
            }
            .unwrap();
        }
    }
    b.build().unwrap()
}

/// A policy that answers garbage in a seeded, deterministic pattern.
struct Chaos {
    seed: u64,
    calls: u64,
}

impl Chaos {
    fn roll(&mut self) -> u64 {
        self.calls += 1;
        let mut x = self.seed ^ self.calls.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        x ^= x >> 31;
        x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^ (x >> 29)
    }
}

impl Backend<Fairness> for Chaos {
    fn name(&self) -> &str {
        "chaos"
    }
    fn decide(&mut self, view: &FairnessView) -> Result<FairnessDecision, PolicyError> {
        let r = self.roll();
        let mut order: Vec<Ranked> = view
            .jobs
            .iter()
            .rev()
            .map(|j| Ranked {
                job: j.id,
                eligible: r & 1 == 0 || j.gpus < 8,
            })
            .collect();
        match r % 5 {
            0 => order.push(Ranked {
                job: JobId(u64::MAX),
                eligible: true,
            }),
            1 => {
                if let Some(first) = order.first().copied() {
                    order.push(first);
                }
            }
            2 => {
                order.pop();
            }
            _ => {}
        }
        Ok(FairnessDecision { order })
    }
}

impl Backend<Locality> for Chaos {
    fn name(&self) -> &str {
        "chaos"
    }
    fn decide(&mut self, view: &QueueView) -> Result<LocalityDecision, PolicyError> {
        let r = self.roll();
        let mut limits: Vec<SpreadLimit> = view
            .jobs
            .iter()
            .map(|_| SpreadLimit::new(Level((r % 5) as u8), ((r >> 8) % 4) as u32))
            .collect();
        if r.is_multiple_of(7) {
            limits.push(SpreadLimit::level(Level::ANY));
        }
        Ok(LocalityDecision { limits })
    }
}

impl Backend<Gang> for Chaos {
    fn name(&self) -> &str {
        "chaos"
    }
    fn decide(&mut self, view: &QueueView) -> Result<GangDecision, PolicyError> {
        let r = self.roll();
        let actions = [GangAction::Backfill, GangAction::Block, GangAction::Reserve];
        let mut on_blocked: Vec<GangAction> = view
            .jobs
            .iter()
            .enumerate()
            .map(|(i, _)| actions[((r >> (i % 60)) % 3) as usize])
            .collect();
        if r.is_multiple_of(6) {
            on_blocked.clear();
        }
        Ok(GangDecision {
            on_blocked,
            max_reservations: (r % 3) as u32,
        })
    }
}

impl Backend<Retry> for Chaos {
    fn name(&self) -> &str {
        "chaos"
    }
    fn decide(&mut self, view: &RetryView) -> Result<RetryDecision, PolicyError> {
        let r = self.roll();
        let mut actions: Vec<RetryAction> = view
            .failures
            .iter()
            .enumerate()
            .map(|(i, f)| match (r >> (i % 60)) % 5 {
                0 => RetryAction::GiveUp,
                1 => RetryAction::Retry { after_s: r % 300 },
                2 => RetryAction::Probe {
                    gpus: (f.gpus / 2).max(1),
                    run_s: 1 + r % 100,
                    after_s: r % 50,
                },
                // Sometimes an invalid probe (as large as the gang).
                3 => RetryAction::Probe {
                    gpus: f.gpus,
                    run_s: 10,
                    after_s: 0,
                },
                _ => RetryAction::Retry { after_s: 0 },
            })
            .collect();
        if r.is_multiple_of(9) {
            actions.pop();
        }
        Ok(RetryDecision { actions })
    }
}

impl Backend<Reclaim> for Chaos {
    fn name(&self) -> &str {
        "chaos"
    }
    fn decide(&mut self, view: &ReclaimView) -> Result<ReclaimDecision, PolicyError> {
        let r = self.roll();
        let pick = |n: usize, k: u64| -> Vec<usize> {
            (0..n)
                .filter(|i| (r >> ((*i as u64 + k) % 60)) & 1 == 1)
                .collect()
        };
        let mut stop: Vec<JobId> = pick(view.running.len(), 0)
            .into_iter()
            .map(|i| view.running[i].id)
            .collect();
        let mut start: Vec<JobId> = pick(view.waiting.len(), 7)
            .into_iter()
            .map(|i| view.waiting[i].job.id)
            .collect();
        match r % 6 {
            0 => stop.push(JobId(u64::MAX)),
            1 => start.clear(),
            2 => {
                if let Some(w) = view.waiting.first() {
                    start.push(w.job.id);
                    start.push(w.job.id);
                }
            }
            _ => {}
        }
        Ok(ReclaimDecision { stop, start })
    }
}

impl Backend<Defragment> for Chaos {
    fn name(&self) -> &str {
        "chaos"
    }
    fn decide(&mut self, view: &DefragmentView) -> Result<DefragmentDecision, PolicyError> {
        let r = self.roll();
        let servers = view.servers.len().max(1);
        let moves = view
            .running
            .iter()
            .enumerate()
            .filter(|(i, _)| (r >> (i % 60)) & 1 == 1)
            .map(|(i, j)| Move {
                job: j.id,
                to: vec![(
                    view.servers[(r as usize + i) % servers].id,
                    if r.is_multiple_of(5) {
                        j.gpus + 1
                    } else {
                        j.gpus
                    },
                )],
            })
            .collect();
        Ok(DefragmentDecision {
            moves,
            start: view.waiting.first().map(|w| w.job.id),
        })
    }
}

/// Plausible reclaim and defragment decisions: for the first waiting job,
/// stop (or move away) running jobs in id order until enough GPUs are free.
/// Often sound, sometimes not (the placement may not use every GPU freed),
/// so both the applied and the refused paths run.
struct Eager;

impl Backend<Reclaim> for Eager {
    fn name(&self) -> &str {
        "eager"
    }
    fn decide(&mut self, view: &ReclaimView) -> Result<ReclaimDecision, PolicyError> {
        let Some(w) = view.waiting.first() else {
            return Ok(ReclaimDecision::default());
        };
        let mut free = view.cluster.free_gpus;
        let mut stop = Vec::new();
        for j in &view.running {
            if free >= w.job.gpus {
                break;
            }
            free += j.gpus;
            stop.push(j.id);
        }
        if free < w.job.gpus || stop.is_empty() {
            return Ok(ReclaimDecision::default());
        }
        Ok(ReclaimDecision {
            stop,
            start: vec![w.job.id],
        })
    }
}

impl Backend<Defragment> for Eager {
    fn name(&self) -> &str {
        "eager"
    }
    fn decide(&mut self, view: &DefragmentView) -> Result<DefragmentDecision, PolicyError> {
        let Some(w) = view.waiting.first() else {
            return Ok(DefragmentDecision::default());
        };
        // Free one server for it: move jobs that sit wholly on that server
        // to other servers with room, smallest first, until it fits.
        let mut free: std::collections::HashMap<_, u32> =
            view.servers.iter().map(|s| (s.id, s.free)).collect();
        for target in &view.servers {
            if target.gpus < w.job.gpus {
                continue;
            }
            let mut have = target.free;
            let mut moves = Vec::new();
            let mut on: Vec<_> = view
                .running
                .iter()
                .filter(|j| j.parts.len() == 1 && j.parts[0].0 == target.id)
                .collect();
            on.sort_by_key(|j| (j.gpus, j.id));
            for j in on {
                if have >= w.job.gpus {
                    break;
                }
                let dest = view
                    .servers
                    .iter()
                    .filter(|s| s.id != target.id && free[&s.id] >= j.gpus)
                    .min_by_key(|s| (free[&s.id], s.id));
                if let Some(d) = dest {
                    *free.get_mut(&d.id).unwrap() -= j.gpus;
                    have += j.gpus;
                    moves.push(Move {
                        job: j.id,
                        to: vec![(d.id, j.gpus)],
                    });
                }
            }
            if have >= w.job.gpus && !moves.is_empty() {
                return Ok(DefragmentDecision {
                    moves,
                    start: Some(w.job.id),
                });
            }
        }
        Ok(DefragmentDecision::default())
    }
}

/// Built-in fairness, locality and gang; chaotic retries; eager
/// defragmentation, and eager reclaim for half the seeds.
fn eager(seed: u64) -> PolicySet {
    let set = if seed % 4 == 1 {
        PolicySet::fallbacks().with::<Reclaim>(Box::new(Eager))
    } else {
        PolicySet::fallbacks()
    };
    set.with::<Locality>(Box::new(gangway_core::policy::Native::new(
        "greedy-ish",
        AnyLevel,
    )))
    .with::<Retry>(Box::new(Chaos {
        seed: seed + 3,
        calls: 0,
    }))
    .with::<Defragment>(Box::new(Eager))
}

/// Any level, no server bound.
struct AnyLevel;

impl gangway_plugin_sdk::LocalityPolicy for AnyLevel {
    fn spread(&self, view: &QueueView) -> LocalityDecision {
        LocalityDecision {
            limits: view
                .jobs
                .iter()
                .map(|j| {
                    SpreadLimit::level(if j.id.0 % 2 == 0 {
                        Level::ANY
                    } else {
                        j.min_level
                    })
                })
                .collect(),
        }
    }
}

fn policies(chaos: Option<u64>) -> PolicySet {
    match chaos {
        None => PolicySet::fallbacks(),
        Some(seed) if seed % 2 == 1 => eager(seed),
        Some(seed) => {
            let c = |k| Chaos {
                seed: seed + k,
                calls: 0,
            };
            PolicySet::fallbacks()
                .with::<Fairness>(Box::new(c(0)))
                .with::<Locality>(Box::new(c(1)))
                .with::<Gang>(Box::new(c(2)))
                .with::<Retry>(Box::new(c(3)))
                .with::<Reclaim>(Box::new(c(4)))
                .with::<Defragment>(Box::new(c(5)))
        }
    }
}

/// Runs the ops, checking invariants after each; returns every round's report.
fn run(
    topo: &(bool, Vec<Vec<u32>>),
    ops: &[Op],
    chaos: Option<u64>,
    quota: Option<u32>,
) -> Result<Vec<RoundReport>, TestCaseError> {
    run_typed(topo, Typing::ONE, ops, chaos, quota, 0)
}

/// Quotas per GPU type for the first two VCs from the bits of `caps` (0:
/// none): for each type, 3 bits say whether the VC names it and its nominal
/// quota, 2 more its borrowing limit.
fn type_quotas(typing: Typing, caps: u64) -> Vec<gangway_core::TypeQuotas> {
    if caps == 0 {
        return Vec::new();
    }
    (0..2)
        .map(|vc| {
            (0..usize::from(typing.types))
                .filter_map(|t| {
                    let bits = caps >> ((vc * 3 + t) * 5) & 0x1f;
                    let nominal = [0, 1, 4, 8, 16, 2, 3][(bits & 7) as usize % 7];
                    let limit = [None, Some(0), Some(4), Some(1)][(bits >> 3) as usize];
                    (bits & 7 != 7).then(|| {
                        (
                            gangway_core::GpuTypeId(t as u8),
                            gangway_core::TypeQuota::new(nominal, limit),
                        )
                    })
                })
                .collect()
        })
        .collect()
}

/// Whether `vc` holds no GPU of a type it does not name and at most its
/// cap of each type it names.
fn caps_hold(
    sched: &Scheduler,
    vc: VcId,
    quotas: &gangway_core::TypeQuotas,
    typing: Typing,
) -> Result<(), TestCaseError> {
    if quotas.is_empty() {
        return Ok(());
    }
    for t in 0..typing.types {
        let t = gangway_core::GpuTypeId(t);
        let held = sched.held_of_type(vc, t);
        match quotas.get(&t) {
            None => prop_assert_eq!(
                held,
                0,
                "{:?} holds GPUs of {:?}, which it does not name",
                vc,
                t
            ),
            Some(q) => {
                if let Some(cap) = q.cap() {
                    prop_assert!(
                        held <= cap,
                        "{:?} holds {} GPUs of {:?}, over its cap of {}",
                        vc,
                        held,
                        t,
                        cap
                    );
                }
            }
        }
    }
    Ok(())
}

/// Whether a gang of `gpus` asking `request` can ever run on `topo`: on
/// one type it names (any, if none), with the memory, large enough.
fn satisfiable(topo: &gangway_core::Topology, gpus: u32, request: &GpuRequest) -> bool {
    let named_known = request
        .types
        .iter()
        .all(|n| topo.gpu_type_by_name(n).is_some());
    named_known
        && topo.gpu_types().iter().enumerate().any(|(i, t)| {
            let id = gangway_core::GpuTypeId(i as u8);
            (request.types.is_empty() || request.types.contains(&t.name))
                && t.memory_gb >= request.min_memory_gb
                && topo.type_gpus(id) >= gpus
        })
}

/// [`run`] on a topology with GPU types: jobs ask for types by their ops'
/// `ask`, a refused request must be one no type satisfies, and every
/// running gang is on one type it may use.
fn run_typed(
    topo: &(bool, Vec<Vec<u32>>),
    typing: Typing,
    ops: &[Op],
    chaos: Option<u64>,
    quota: Option<u32>,
    caps: u64,
) -> Result<Vec<RoundReport>, TestCaseError> {
    let mut sched = Scheduler::with_policies(build_typed(topo.0, &topo.1, typing), policies(chaos));
    let vcs: Vec<_> = (0..3)
        .map(|i| sched.virtual_cluster(&format!("vc{i}")))
        .collect();
    sched.set_quota(vcs[0], quota);
    let type_quotas = type_quotas(typing, caps);
    for (vc, quotas) in vcs.iter().zip(&type_quotas) {
        sched.set_type_quotas(*vc, quotas.clone());
    }
    let servers = sched.topology().servers().len();
    let mut now = 0u64;
    let mut next_id = 0u64;
    let mut submitted = 0usize;
    let mut reports = Vec::new();
    for op in ops {
        match *op {
            Op::Submit { gpus, vc, ask } => {
                let spec = JobSpec {
                    id: JobId(next_id),
                    vc: vcs[vc as usize],
                    user: 0,
                    gpus,
                    submitted_s: now,
                };
                next_id += 1;
                if typing.types == 1 {
                    if sched.submit(spec).is_ok() {
                        submitted += 1;
                    } else {
                        prop_assert!(gpus > sched.topology().total_gpus());
                    }
                } else {
                    let request = typing.request(ask);
                    match sched.submit_requesting(spec, &request) {
                        Ok(()) => {
                            prop_assert!(satisfiable(sched.topology(), gpus, &request));
                            submitted += 1;
                        }
                        Err(SchedulerError::GpuRequest { .. }) => {
                            prop_assert!(!satisfiable(sched.topology(), gpus, &request));
                        }
                        Err(e) => {
                            prop_assert!(gpus > sched.topology().total_gpus(), "{e}");
                        }
                    }
                }
            }
            Op::Round { advance } => {
                now += advance;
                let report = sched.round(now).unwrap();
                for s in &report.starts {
                    let job = sched.job(s.job).unwrap();
                    let want = match s.probe_s {
                        Some(_) => job.next_gpus(),
                        None => job.spec.gpus,
                    };
                    prop_assert_eq!(s.choice.placement.gpu_count(), want);
                    prop_assert!(job.is_running(), "a started job runs");
                }
                for p in &report.preempted {
                    let job = sched.job(p.job).unwrap();
                    prop_assert!(job.is_pending(), "a preempted job is pending again");
                    prop_assert!(job.preemptions >= 1 && job.attempts >= job.preemptions);
                }
                // When each reason of fairness may be given: fair share only
                // to a job whose VC is at its quota with it (or has none),
                // queued (held behind its own VC) only to one whose VC would
                // stay within its quota.
                for &(id, reason) in &report.waiting {
                    let job = sched.job(id).unwrap();
                    prop_assert!(job.is_pending(), "{id} waits but is not pending");
                    let v = &sched.virtual_clusters()[job.spec.vc.0 as usize];
                    let within = v.quota_gpus.is_some_and(|q| {
                        u64::from(v.held_gpus) + u64::from(job.next_gpus()) <= u64::from(q)
                    });
                    // A VC with quotas per GPU type also waits for its fair
                    // share when its caps leave a job no type (as they
                    // stood when the job's turn came in the round).
                    if sched.type_quotas(job.spec.vc).is_some() {
                        continue;
                    }
                    match reason {
                        WaitReason::FairShare => prop_assert!(
                            !within,
                            "{id} waits for fair share but its VC {} is within quota {:?} ({} held, {} asked)",
                            v.name,
                            v.quota_gpus,
                            v.held_gpus,
                            job.next_gpus()
                        ),
                        WaitReason::Queued => prop_assert!(
                            within,
                            "{id} is queued behind its VC but its VC {} is not within quota {:?}",
                            v.name,
                            v.quota_gpus
                        ),
                        _ => {}
                    }
                }
                for m in &report.migrations {
                    let job = sched.job(m.job).unwrap();
                    prop_assert!(job.is_running() && job.migrations >= 1);
                    prop_assert_eq!(m.from.gpu_count(), m.to.placement.gpu_count());
                    prop_assert_ne!(&m.from, &m.to.placement, "a migration that did not move");
                }
                reports.push(report);
            }
            Op::End {
                pick,
                outcome,
                class,
            } => {
                let running: Vec<JobId> = sched
                    .jobs()
                    .values()
                    .filter(|j| j.is_running())
                    .map(|j| j.spec.id)
                    .collect();
                if !running.is_empty() {
                    let class = FailureClass::ALL[class as usize % FailureClass::ALL.len()];
                    let end = match outcome {
                        0 => AttemptEnd::Passed,
                        1 => AttemptEnd::Failed { class, last: false },
                        2 => AttemptEnd::Failed { class, last: true },
                        _ => AttemptEnd::Killed,
                    };
                    sched
                        .end_attempt(running[pick % running.len()], now, end)
                        .unwrap();
                }
            }
            Op::Down { server } => {
                let hit = sched
                    .server_down(ServerId((server % servers) as u32), now)
                    .unwrap();
                for id in hit {
                    prop_assert!(
                        sched.job(id).unwrap().is_pending(),
                        "interrupted job re-queued"
                    );
                }
            }
            Op::Up { server } => sched
                .server_up(ServerId((server % servers) as u32))
                .unwrap(),
            Op::Drain { server } => sched.drain(ServerId((server % servers) as u32)).unwrap(),
            Op::Kill { pick } => {
                let live: Vec<JobId> = sched
                    .jobs()
                    .values()
                    .filter(|j| j.final_status().is_none())
                    .map(|j| j.spec.id)
                    .collect();
                if !live.is_empty() {
                    sched.kill(live[pick % live.len()], now).unwrap();
                }
            }
            Op::Shrink { pick, drop } => shrink_one(&mut sched, pick, drop, now)?,
        }
        if let Err(e) = sched.check_invariants() {
            return Err(TestCaseError::fail(format!("after {op:?}: {e}")));
        }
        for (vc, quotas) in vcs.iter().zip(&type_quotas) {
            caps_hold(&sched, *vc, quotas, typing)?;
        }
        prop_assert_eq!(sched.jobs().len(), submitted, "no job lost");
        for job in sched.jobs().values() {
            // Attempts add up: every preemption and every failure ended one.
            prop_assert!(job.attempts >= job.preemptions, "{:?}", job);
            if let JobState::Finished { .. } = job.state {
                prop_assert!(job.probe.is_none());
            }
        }
    }
    Ok(reports)
}

/// A member of a running gang ends (the job picked by `pick`): it keeps
/// its GPUs but those `drop`'s bits name, if that leaves some and frees
/// some. The freed GPUs are free at once, and the job's attained GPU time
/// does not move.
fn shrink_one(
    sched: &mut Scheduler,
    pick: usize,
    drop: u64,
    now: u64,
) -> Result<(), TestCaseError> {
    let running: Vec<JobId> = sched
        .jobs()
        .values()
        .filter(|j| j.is_running())
        .map(|j| j.spec.id)
        .collect();
    let Some(&id) = running.get(pick % running.len().max(1)) else {
        return Ok(());
    };
    let Some(held) = sched.state().allocation(id).cloned() else {
        return Ok(());
    };
    let keep = Placement {
        parts: held
            .parts
            .iter()
            .map(|p| ServerGpus {
                server: p.server,
                gpus: p.gpus & !drop,
            })
            .filter(|p| p.gpus != 0)
            .collect(),
    };
    if keep.parts.is_empty() || keep == held {
        prop_assert!(sched.shrink(id, &keep, now).is_err() || keep == held);
        return Ok(());
    }
    let before = sched.running_jobs(now).into_iter().find(|r| r.id == id);
    let free = sched.state().free_gpus();
    sched.shrink(id, &keep, now).unwrap();
    let freed = held.gpu_count() - keep.gpu_count();
    let up: u32 = held
        .parts
        .iter()
        .filter(|p| sched.state().health(p.server) == Some(gangway_core::Health::Up))
        .map(|p| (p.gpus & drop).count_ones())
        .sum();
    prop_assert!(up <= freed);
    prop_assert_eq!(
        sched.state().free_gpus(),
        free + up,
        "the freed GPUs of servers that are up are free"
    );
    let after = sched.running_jobs(now).into_iter().find(|r| r.id == id);
    let attained = |r: Option<gangway_plugin_sdk::RunningJob>| r.map(|r| r.attained_gpu_s);
    prop_assert_eq!(attained(before), attained(after), "attained GPU time moved");
    prop_assert_eq!(sched.state().allocation(id), Some(&keep));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn default_policies_keep_invariants(
        topo in topology(),
        ops in prop::collection::vec(op(), 1..120),
        quota in prop::option::of(0u32..24),
    ) {
        let a = run(&topo, &ops, None, quota)?;
        let b = run(&topo, &ops, None, quota)?;
        prop_assert_eq!(a, b, "same inputs, same decisions");
    }

    #[test]
    fn hostile_policies_cannot_break_invariants(
        topo in topology(),
        ops in prop::collection::vec(op(), 1..120),
        seed in any::<u64>(),
    ) {
        let seed = seed & !1;
        let a = run(&topo, &ops, Some(seed), Some(8))?;
        let b = run(&topo, &ops, Some(seed), Some(8))?;
        prop_assert_eq!(a, b, "same inputs, same decisions");
    }

    /// On clusters of several GPU types, with jobs asking for types and
    /// memory: every gang on one type it may use, whatever the policies.
    #[test]
    fn a_gang_never_spans_two_gpu_types(
        topo in topology(),
        typing in typing(),
        ops in prop::collection::vec(op(), 1..160),
        seed in prop::option::of(any::<u64>()),
    ) {
        let a = run_typed(&topo, typing, &ops, seed, Some(8), 0)?;
        let b = run_typed(&topo, typing, &ops, seed, Some(8), 0)?;
        prop_assert_eq!(a, b, "same inputs, same decisions");
    }

    /// Quotas per GPU type (nominal and borrowing limit) on two VCs of
    /// three: after every step no VC holds more of a type than its nominal
    /// quota plus its borrowing limit, nor any GPU of a type it does not
    /// name, whatever the policies (reclaiming, migrating or hostile) decide.
    #[test]
    fn per_type_quotas_and_borrowing_limits_hold(
        topo in topology(),
        typing in typing(),
        ops in prop::collection::vec(op(), 1..160),
        seed in prop::option::of(any::<u64>()),
        caps in any::<u64>(),
    ) {
        let a = run_typed(&topo, typing, &ops, seed, None, caps)?;
        let b = run_typed(&topo, typing, &ops, seed, None, caps)?;
        prop_assert_eq!(a, b, "same inputs, same decisions");
    }

    /// Reclaim and migration decisions that are often sound, so the core
    /// applies them (and rolls the unsound ones back) under random events.
    #[test]
    fn applied_reclaims_migrations_and_retries_keep_invariants(
        topo in topology(),
        ops in prop::collection::vec(op(), 1..160),
        seed in any::<u64>(),
    ) {
        let seed = seed | 1;
        let a = run(&topo, &ops, Some(seed), None)?;
        let b = run(&topo, &ops, Some(seed), None)?;
        prop_assert_eq!(a, b, "same inputs, same decisions");
    }
}

/// The hostile policies really do answer garbage, so the property above
/// exercises the fallback path, not just well-behaved answers.
#[test]
fn chaos_policies_trigger_fallbacks() {
    let topo = (false, vec![vec![8, 4], vec![2, 8]]);
    let mut ops = Vec::new();
    for i in 0..40 {
        ops.push(Op::Submit {
            gpus: [1, 2, 4, 8, 16][i % 5],
            vc: (i % 3) as u8,
            ask: 0,
        });
        ops.push(Op::Round { advance: 30 });
        if i % 4 == 0 {
            ops.push(Op::End {
                pick: i,
                outcome: (i % 4) as u8,
                class: (i % 23) as u8,
            });
        }
    }
    let reports = run(&topo, &ops, Some(42), Some(8)).unwrap();
    let errors: usize = reports.iter().map(|r| r.policy_errors.len()).sum();
    assert!(errors > 5, "only {errors} policy errors");
    assert!(reports.iter().any(|r| !r.starts.is_empty()));
    let slots: std::collections::BTreeSet<_> = reports
        .iter()
        .flat_map(|r| r.policy_errors.iter().map(|e| e.slot))
        .collect();
    assert!(slots.len() >= 4, "errors in only {slots:?}");
}

/// The eager policies' decisions are applied, not only refused: on a busy
/// cluster with failures, jobs are preempted, migrated and retried.
#[test]
fn eager_decisions_are_applied() {
    let topo = (false, vec![vec![8, 8, 4], vec![4, 8, 2]]);
    let mut ops = Vec::new();
    for i in 0..200usize {
        ops.push(Op::Submit {
            gpus: [1, 2, 1, 8, 16, 3][i % 6],
            vc: (i % 3) as u8,
            ask: 0,
        });
        ops.push(Op::Round { advance: 20 });
        ops.push(Op::End {
            pick: i * 7,
            outcome: (i % 4) as u8,
            class: (i % 23) as u8,
        });
    }
    let count = |seed| {
        let reports = run(&topo, &ops, Some(seed), None).unwrap();
        let n = |f: fn(&RoundReport) -> usize| reports.iter().map(f).sum::<usize>();
        (
            n(|r| r.preempted.len()),
            n(|r| r.migrations.len()),
            n(|r| r.retries.len()),
        )
    };
    let (preempted, _, retried) = count(5);
    let (_, migrated, _) = count(7);
    assert!(
        preempted > 0 && migrated > 0 && retried > 0,
        "preempted {preempted}, migrated {migrated}, retried {retried}"
    );
}
