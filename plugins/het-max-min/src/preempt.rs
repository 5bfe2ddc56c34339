//! `het-max-min` in the reclaim slot: preemption by attained service,
//! type by type.

use gangway_plugin_sdk::room::TypedRooms;
use gangway_plugin_sdk::sort;
use gangway_plugin_sdk::{
    ConfigError, ConfigForm, Configure, GpuTypeId, JobId, ReclaimDecision, ReclaimPolicy,
    ReclaimView, RunningJob, TypesView, WaitingJob,
};

use crate::HetMaxMin;
use crate::speed::{self, Capacity, Ranks};

/// Preemption by the measure [`HetMaxMin`] orders by (reclaim slot), with
/// the same options: each round the waiting jobs that wait for GPUs are
/// taken in priority order (band of attained service, then arrival), and
/// for each, running jobs in a strictly higher band that have run at least
/// `min_run_s` are stopped, highest band first, then latest started, until
/// it fits within its spread limit. With GPU types, only jobs running on
/// one of its allowed types are stopped for it, its types tried fastest
/// for it first (in its order of preference when `type_blind`). At most
/// [`HetPreempt::MAX_STARTS`] jobs start this way per round, of the first
/// [`HetPreempt::MAX_TRIED`] waiting ones.
///
/// ```
/// use gangway_plugin_sdk::*;
/// use gangway_policy_het_max_min::HetPreempt;
///
/// let servers = vec![ServerState { id: ServerId(0), domain: 0, gpus: 8, free: 0 }];
/// let long = RunningJob {
///     id: JobId(1), gpus: 8, attained_gpu_s: 100_000, parts: vec![(ServerId(0), 8)],
///     ..RunningJob::default()
/// };
/// let fresh = WaitingJob {
///     job: PendingJob { id: JobId(2), gpus: 4, min_level: Level(1), min_servers: 1, ..PendingJob::default() },
///     reason: WaitReason::NoCapacity,
///     limit: SpreadLimit::level(Level(1)),
/// };
/// let view = ReclaimView {
///     now_s: 3_600,
///     cluster: ClusterSummary { server_level: Level(1), ..ClusterSummary::default() },
///     servers,
///     running: vec![long],
///     waiting: vec![fresh],
///     ..ReclaimView::default()
/// };
/// let d = HetPreempt::from_config(b"").unwrap().reclaim(&view);
/// assert_eq!((d.stop, d.start), (vec![JobId(1)], vec![JobId(2)]));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HetPreempt {
    policy: HetMaxMin,
}

/// A running job that may be stopped: its band, its type (if known) and it.
type Victim<'a> = (u64, Option<GpuTypeId>, &'a RunningJob);

/// The waiting jobs' speeds (as [`HetPreempt::waiting`] lists them) and
/// the types' ranks.
struct Typed {
    speeds: speed::Speeds,
    ranks: Ranks,
}

impl HetPreempt {
    /// The most waiting jobs one round starts by preemption.
    pub const MAX_STARTS: usize = 16;
    /// The most waiting jobs one round tries to make room for.
    pub const MAX_TRIED: usize = 64;

    /// The fairness policy whose measure it preempts by.
    pub fn policy(&self) -> &HetMaxMin {
        &self.policy
    }

    /// The running jobs that may be stopped, lowest priority first.
    fn victims<'a>(&self, view: &'a ReclaimView, types: Option<&TypesView>) -> Vec<Victim<'a>> {
        let min_run = self.policy.config().min_run_s;
        let mut victims: Vec<Victim<'a>> = view
            .running
            .iter()
            .filter(|j| view.now_s.saturating_sub(j.started_s) >= min_run)
            .map(|j| {
                let t = types.and_then(|t| t.job(j.id)).and_then(|t| t.running);
                (self.policy.band(j.attained_gpu_s), t, j)
            })
            .collect();
        sort::by_key(&mut victims, |(b, _, j)| [!*b, !j.started_s, !j.id.0]);
        victims
    }

    /// The waiting jobs that wait for GPUs, in priority order, at most
    /// [`HetPreempt::MAX_TRIED`].
    fn waiting<'a>(&self, view: &'a ReclaimView) -> Vec<&'a WaitingJob> {
        let mut waiting: Vec<&WaitingJob> = view
            .waiting
            .iter()
            .filter(|w| w.reason.waits_for_gpus())
            .collect();
        sort::by_key(&mut waiting, |w| self.policy.key(&w.job));
        waiting.truncate(Self::MAX_TRIED);
        waiting
    }

    /// The speeds of `waiting` and the types' ranks (over the waiting and
    /// the running jobs).
    fn typed(&self, view: &ReclaimView, types: &TypesView, waiting: &[&WaitingJob]) -> Typed {
        let cap = Capacity::of(types);
        let ids = waiting.iter().map(|w| w.job.id);
        let ids: Vec<JobId> = ids.chain(view.running.iter().map(|j| j.id)).collect();
        let speeds = speed::speeds(&ids, types, &cap, self.policy.config().type_blind);
        let gpus = waiting.iter().map(|w| w.job.gpus);
        let gpus: Vec<u32> = gpus.chain(view.running.iter().map(|j| j.gpus)).collect();
        let ranks = speed::ranks(&speeds, &gpus, &cap);
        Typed { speeds, ranks }
    }

    /// The types to try for waiting job `k` (every type as one when
    /// untyped): slowest first when its types differ in speed for it (it
    /// has less service than those it stops, and the fast types go to the
    /// more-served jobs: see the [crate docs](crate)), else in its order
    /// of preference (always, when blind).
    fn tries(typed: Option<&Typed>, k: usize) -> Vec<Option<GpuTypeId>> {
        let Some(ty) = typed else {
            return vec![None];
        };
        // An insertion sort, stable (few types): by rank if they differ.
        let differs = speed::differs(&ty.speeds, k);
        let mut tries: Vec<Option<GpuTypeId>> = Vec::new();
        for o in ty.speeds.of(k) {
            let rank = ty.ranks.rank_of(o.gpu_type);
            let at = tries
                .iter()
                .position(|t| differs && t.is_some_and(|t| ty.ranks.rank_of(t) > rank))
                .unwrap_or(tries.len());
            tries.insert(at, Some(o.gpu_type));
        }
        tries
    }

    /// The decision for `view`, with its GPU types if the host gave them.
    fn decide(&self, view: &ReclaimView, types: Option<&TypesView>) -> ReclaimDecision {
        let waiting = self.waiting(view);
        let mut d = ReclaimDecision::default();
        if waiting.is_empty() {
            return d;
        }
        let typed = types.map(|t| self.typed(view, t, &waiting));
        let victims = self.victims(view, types);
        let mut rooms = TypedRooms::new(view, types);
        let mut taken: Vec<JobId> = Vec::new();
        for (k, w) in waiting.iter().enumerate() {
            if d.start.len() >= Self::MAX_STARTS {
                break;
            }
            let band = self.policy.band(w.job.attained_gpu_s);
            // Victims are in a strictly higher band, and the waiting jobs
            // come in band order: none after this one has any.
            if victims.first().is_none_or(|(top, _, _)| *top <= band) {
                break;
            }
            for t in Self::tries(typed.as_ref(), k) {
                let candidates: Vec<&RunningJob> = victims
                    .iter()
                    .filter(|(b, vt, j)| {
                        *b > band && (t.is_none() || *vt == t) && !taken.contains(&j.id)
                    })
                    .map(|(_, _, j)| *j)
                    .collect();
                if candidates.is_empty() {
                    continue;
                }
                match rooms.of(t).make_room(w.job.gpus, w.limit, &candidates) {
                    // It fits on free GPUs of the type (the fairness policy
                    // chose it another): it starts there, stopping nothing.
                    Some(stop) if stop.is_empty() => {
                        d.start.push(w.job.id);
                        break;
                    }
                    Some(stop) => {
                        taken.extend(stop.iter().copied());
                        d.stop.extend(stop);
                        d.start.push(w.job.id);
                        break;
                    }
                    None => {}
                }
            }
        }
        d
    }
}

impl Configure for HetPreempt {
    // The host hands it its TOML as a tree: no parser in its module.
    const CONFIG_FORM: ConfigForm = ConfigForm::Tree;

    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        Ok(HetPreempt {
            policy: HetMaxMin::from_config(config)?,
        })
    }
}

impl ReclaimPolicy for HetPreempt {
    const GPU_TYPES: bool = true;

    fn reclaim(&self, view: &ReclaimView) -> ReclaimDecision {
        self.decide(view, None)
    }

    fn reclaim_typed(&self, view: &ReclaimView, types: &TypesView) -> ReclaimDecision {
        self.decide(view, Some(types))
    }
}
