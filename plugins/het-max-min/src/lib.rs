//! `het-max-min`: heterogeneity-aware max-min fairness after Gavel
//! (fairness and reclaim slots).
//!
//! Gavel (Narayanan et al., OSDI 2020) showed that a fairness policy that
//! knows how fast each job runs on each GPU type cuts completion times
//! against the same policy blind to types: a job that runs 10x faster on a
//! V100 than on a K80 should get the V100, one that gains 1.2x the K80.
//! Its measure is a job's *normalised effective throughput*: its speed on
//! the type it gets over the speed an equal share of every type would give
//! it. For job `j` with allowed types `A` and speed `s(t)` per GPU of type
//! `t` (its class's row of [`TypesView::speeds`]):
//!
//! ```text
//! equal(j) = Σ_{t in A} s(t) · total(t) / Σ_{t in A} total(t)
//! r(j, t)  = s(t) / equal(j)
//! ```
//!
//! so `r > 1` on a type faster for the job than its average, `< 1` on a
//! slower one. With no speeds from the host (or for a job whose class has
//! no speed on one of its types), or with `type_blind = true`, every type
//! counts as speed 1 and every `r` is 1.
//!
//! # One round of the fairness slot ([`HetMaxMin`])
//!
//! 1. **Order**: least attained service first, in Tiresias's discretized
//!    bands (as [`las`](../gangway_policy_las/index.html) orders, the same
//!    `thresholds_gpu_s`), FIFO (submit time, then id) within a band.
//!    Service is the host's attained GPU-seconds: the views do not say on
//!    which types past attempts ran, so it cannot be weighed by their speed
//!    without guessing, and GPU-seconds charge a large gang for what it
//!    holds, which is what keeps small jobs flowing. Over rounds this gives
//!    every job its turn (the time-sharing half of Gavel's max-min).
//! 2. **Admission**: in that order, each job whose most preferred allowed
//!    type with room still has its GPUs free (the types' free GPUs, less
//!    what earlier admitted jobs take) is admitted there. This is what a
//!    type-blind host would start, so both modes start the same jobs.
//! 3. **Types** (aware mode only): the admitted jobs take the free GPUs
//!    again in a new turn, most served first (highest band), then largest
//!    *advantage* (`r` on its fastest allowed type over `r` on its slowest),
//!    each on the allowed type with room where it runs fastest. This is
//!    kept only if it runs the admitted jobs at least as fast in sum
//!    (summed `r`) as admission's placement, else admission's is kept.
//! 4. **Answer**: the admitted jobs first (priority order), then the
//!    others; every job eligible (one that finds no room waits with the
//!    host's own reason, *no-capacity* or *fragmentation*, which the
//!    reclaim slot acts on; marking it ineligible would report a wait for
//!    GPUs as a fair-share delay and hide it from preemption). In aware
//!    mode each admitted job gets its type as a [`TypeChoice`]; the blind
//!    baseline chooses no types and lets the host place each job on any
//!    allowed type, as any type-blind policy does.
//!
//! Without types (a cluster of one type, or a host before contract 2.2)
//! [`FairnessPolicy::order`] is step 1 alone, every job eligible: `las`.
//!
//! ## Why the fast types go to the most served jobs
//!
//! Max-min fairness raises the job that gets least. Step 1 already gives
//! the least-served jobs the GPUs first, and reclaim stops the most-served
//! ones for them: under load a job in a high band gets the least time.
//! Its effective throughput is its time share times its speed, so the type
//! is the lever left to raise it: the fast types go to the jobs time-sharing
//! serves least, and, among them, to those they speed up most (Gavel's
//! comparative advantage). A job that has already run long is also likely
//! to run long (Tiresias's premise, and Philly's heavy tail), so a fast
//! type saves it the most hours.
//!
//! ## Why a greedy and not Gavel's linear program
//!
//! Gavel solves a linear program over time fractions of every job on every
//! type, then rounds it each round. A pure-Rust LP (a simplex over
//! `jobs x types` variables) would cost the module tens of kilobytes and a
//! round cubic time in the jobs, and its floating-point pivots could run
//! out of the sandbox's fuel on a backlog of thousands. The problem a round
//! actually has is smaller: the running jobs keep their GPUs, so only the
//! jobs admitted this round get types, and a job runs on one type (a gang
//! never spans two). The turn above costs `O(a log a + a·T)` for `a`
//! admitted jobs and `T` types, on top of the `O(n log n)` sort of the `n`
//! pending jobs. Gavel's own round-based mechanism is the same shape:
//! priorities pick the jobs, the allocation picks their types.
//!
//! # The reclaim slot ([`HetPreempt`])
//!
//! Preemption by the same measure: a waiting job (one waiting for GPUs) is
//! taken in the order above, and running jobs in a strictly higher band
//! (more attained service) that have run at least `min_run_s` are stopped,
//! highest band first, then latest started, until it fits. The least-served
//! job gains service at the expense of a more-served one, which raises the
//! minimum over time; a job is never stopped for one of its own band or a
//! higher one, so a stopped job cannot stop its stopper back. With types
//! it tries the waiting job's allowed types, stopping only jobs running on
//! that type: slowest first (aware, when they differ in speed for it: it
//! has less service than those it stops, and the fast types are for the
//! more served), else in its order of preference (always, when blind).
//! Where the first type tried has free GPUs enough for it (the fairness
//! turn gave it another type), it starts there, stopping nothing: the
//! host says each server's type, so reclaim sees those free GPUs.
//!
//! # Options (TOML; the same for both slots)
//!
//! | key | type | default | meaning |
//! |---|---|---|---|
//! | `type_blind` | bool | `false` | every type counts as equally fast, no type choices: the baseline Gavel compares with |
//! | `thresholds_gpu_s` | list of GPU-seconds, strictly increasing | `[3600, 36000]` | attained-service bands (as `las`) |
//! | `min_run_s` | seconds | `360` | reclaim never stops a job that has run less in its current attempt |
//!
//! Defaults: the bands are `las`'s (one GPU-hour separates the bulk of
//! short Philly jobs, ten the heavy tail); `min_run_s` is Gavel's round,
//! six minutes, so a job that starts keeps its GPUs at least as long as
//! Gavel would lease them, and a preempted job's restart cost (its
//! checkpoint reload) is paid at most once per round.
//!
//! ```
//! use gangway_plugin_sdk::*;
//! use gangway_policy_het_max_min::HetMaxMin;
//!
//! let (k80, v100) = (GpuTypeId(0), GpuTypeId(1));
//! let job = |id| PendingJob { id: JobId(id), gpus: 1, submitted_s: id, ..PendingJob::default() };
//! let view = FairnessView { jobs: vec![job(1), job(2)], ..FairnessView::default() };
//! let gpu_type = |id, free| GpuTypeSummary { id, memory_gb: 0, total_gpus: 4, free_gpus: free };
//! let types = TypesView {
//!     types: vec![gpu_type(k80, 1), gpu_type(v100, 1)],
//!     // Job 1 (class 0) gains 1.2x on a V100, job 2 (class 1) 10x; both prefer the V100.
//!     jobs: (1..=2).map(|id| JobTypes { job: JobId(id), allowed: vec![v100, k80], running: None, class: id as u32 - 1 }).collect(),
//!     vcs: vec![],
//!     speeds: vec![
//!         ClassSpeeds { class: 0, per_type: vec![10, 12] },
//!         ClassSpeeds { class: 1, per_type: vec![1, 10] },
//!     ],
//!     ..TypesView::default()
//! };
//! let (_, choices) = HetMaxMin::from_config(b"").unwrap().order_typed(&view, &types);
//! assert_eq!(choices.choices, vec![
//!     TypeChoice { job: JobId(1), gpu_type: k80 },
//!     TypeChoice { job: JobId(2), gpu_type: v100 },
//! ]);
//! ```

mod assign;
mod preempt;
mod speed;

pub use assign::Plan;
pub use preempt::HetPreempt;

use gangway_plugin_sdk::sort;
use gangway_plugin_sdk::{
    ConfigError, ConfigForm, Configure, FairnessDecision, FairnessPolicy, FairnessView, JobId,
    PendingJob, QueueOrder, Ranked, TypeChoice, TypeChoices, TypesView, read_options,
};
use serde::Deserialize;

/// Configuration of [`HetMaxMin`] and [`HetPreempt`], parsed from TOML by
/// [`Configure::from_config`]; see the [crate docs](crate) for the table.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HetConfig {
    /// Every type counts as equally fast and no types are chosen (the
    /// type-blind baseline). Default `false`.
    pub type_blind: bool,
    /// Attained-service bands in GPU-seconds, strictly increasing; `n`
    /// thresholds make `n + 1` bands. Default `[3600, 36000]`.
    pub thresholds_gpu_s: Vec<u64>,
    /// Reclaim never stops a job whose current attempt has run less than
    /// this (seconds). Default 360 (Gavel's round).
    pub min_run_s: u64,
}

impl Default for HetConfig {
    fn default() -> Self {
        HetConfig {
            type_blind: false,
            thresholds_gpu_s: vec![3_600, 36_000],
            min_run_s: 360,
        }
    }
}

/// Heterogeneity-aware max-min fairness (fairness slot). See the
/// [crate docs](crate).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HetMaxMin {
    config: HetConfig,
}

impl HetMaxMin {
    /// Builds the policy from a checked configuration.
    pub fn new(config: HetConfig) -> Result<HetMaxMin, ConfigError> {
        if config.thresholds_gpu_s.windows(2).any(|w| w[0] >= w[1]) {
            return Err(ConfigError(
                "het-max-min: thresholds_gpu_s must be strictly increasing".into(),
            ));
        }
        Ok(HetMaxMin { config })
    }

    /// The configuration in use.
    pub fn config(&self) -> &HetConfig {
        &self.config
    }

    /// The attained-service band of a job that has attained
    /// `attained_gpu_s` GPU-seconds (0 = first).
    pub fn band(&self, attained_gpu_s: u64) -> u64 {
        self.config
            .thresholds_gpu_s
            .iter()
            .take_while(|t| attained_gpu_s >= **t)
            .count() as u64
    }

    /// The priority key of a pending job: band, submit time, id.
    pub fn key(&self, job: &PendingJob) -> [u64; 3] {
        [self.band(job.attained_gpu_s), job.submitted_s, job.id.0]
    }

    /// View positions of `jobs` in priority order.
    fn priority(&self, jobs: &[PendingJob]) -> Vec<usize> {
        let mut order: Vec<usize> = (0..jobs.len()).collect();
        sort::by_key(&mut order, |i| self.key(&jobs[*i]));
        order
    }

    /// The round's plan for `view` with `types`: which jobs start, in what
    /// order, on which type.
    pub fn plan(&self, view: &FairnessView, types: &TypesView) -> Plan {
        let cap = speed::Capacity::of(types);
        let ids: Vec<JobId> = view.jobs.iter().map(|j| j.id).collect();
        let speeds = speed::speeds(&ids, types, &cap, self.config.type_blind);
        let priority = self.priority(&view.jobs);
        let mut plan = assign::admit(&priority, &view.jobs, &speeds, &cap.free);
        if self.config.type_blind {
            return plan;
        }
        let gpus: Vec<u32> = view.jobs.iter().map(|j| j.gpus).collect();
        let ranks = speed::ranks(&speeds, &gpus, &cap);
        let bands: Vec<u64> = view
            .jobs
            .iter()
            .map(|j| self.band(j.attained_gpu_s))
            .collect();
        assign::by_advantage(&mut plan, &view.jobs, &speeds, &ranks, &bands, &cap.free);
        plan
    }

    /// The summed normalised throughput of the jobs `plan` admits, on
    /// their types, speeds always counted: how two plans compare.
    pub fn throughput(&self, view: &FairnessView, types: &TypesView, plan: &Plan) -> f64 {
        let cap = speed::Capacity::of(types);
        let ids: Vec<JobId> = view.jobs.iter().map(|j| j.id).collect();
        let speeds = speed::speeds(&ids, types, &cap, false);
        assign::throughput(plan, &speeds, &plan.types)
    }
}

impl Configure for HetMaxMin {
    // The host hands it its TOML as a tree: no parser in its module.
    const CONFIG_FORM: ConfigForm = ConfigForm::Tree;

    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        HetMaxMin::new(read_options("het-max-min", config)?)
    }
}

impl FairnessPolicy for HetMaxMin {
    /// Its bands, FIFO within each, as `las`: each VC's first jobs in that
    /// order are all it needs to see.
    fn queue_order(&self) -> QueueOrder {
        QueueOrder::AttainedBands(self.config.thresholds_gpu_s.clone())
    }

    const GPU_TYPES: bool = true;

    fn order(&self, view: &FairnessView) -> FairnessDecision {
        ranked(view, &self.priority(&view.jobs))
    }

    fn order_typed(
        &self,
        view: &FairnessView,
        types: &TypesView,
    ) -> (FairnessDecision, TypeChoices) {
        let plan = self.plan(view, types);
        let mut choices = Vec::new();
        if !self.config.type_blind {
            for (i, t) in plan.order.iter().zip(&plan.types) {
                choices.push(TypeChoice {
                    job: view.jobs[*i].id,
                    gpu_type: *t,
                });
            }
        }
        (ranked(view, &plan.order), TypeChoices { choices })
    }
}

/// The decision that ranks `view`'s jobs at positions `order` in that
/// order, every one eligible.
fn ranked(view: &FairnessView, order: &[usize]) -> FairnessDecision {
    FairnessDecision {
        order: order
            .iter()
            .map(|i| Ranked {
                job: view.jobs[*i].id,
                eligible: true,
            })
            .collect(),
    }
}

gangway_plugin_sdk::export!(Fairness, HetMaxMin);
gangway_plugin_sdk::export!(Reclaim, HetPreempt);

#[cfg(test)]
mod tests;
