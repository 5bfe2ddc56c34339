//! `Scheduler`: gangway-core's scheduler for a Python host, with `Round` and
//! `Start` for what a round decided.

use std::sync::{Mutex, MutexGuard};

use gangway_core::policy::PolicySet;
use gangway_core::wasm::{LoadLimits, WorkBudget};
use gangway_core::{
    AttemptEnd, FailureClass, FinalStatus, GpuRequest, JobSpec, JobState, PlacementStrategy,
    RetryAction, Scheduler, ServerId, WaitReason,
};
use gangway_plugin_sdk::{JobId, VcId};
use gangway_replay::trace::Outcome;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors;
use crate::policy::{self, ConfigArg, PolicyArg, Slots};
use crate::topology::PyTopology;

/// A job started by a round: where its gang runs, down to GPU indices.
#[pyclass(frozen, get_all, name = "Start", module = "gangway")]
#[derive(Clone)]
pub(crate) struct PyStart {
    /// The job's id.
    job: u64,
    /// Its GPUs: `(server name, [GPU indices])` per server, in server id order.
    placement: Vec<(String, Vec<u32>)>,
    /// The narrowest topology level holding the whole gang (`"server"`, `"rack"`, ...).
    locality: String,
    /// Servers spanned.
    servers: u32,
    /// For a retry policy's probe (fewer GPUs than the gang): seconds it
    /// must run without failing; end it then as passed and the full gang
    /// is queued next. `None` for a normal attempt.
    probe_s: Option<u64>,
}

#[pymethods]
impl PyStart {
    fn __repr__(&self) -> String {
        format!(
            "Start(job={}, placement={:?}, locality={:?})",
            self.job, self.placement, self.locality
        )
    }
}

/// What one round decided.
#[pyclass(frozen, get_all, name = "Round", module = "gangway")]
pub(crate) struct PyRound {
    /// The round's time.
    now: u64,
    /// Jobs to launch, in decision order.
    starts: Vec<PyStart>,
    /// Jobs still pending and why (`"fair-share"`, `"fragmentation"`, ...).
    waiting: Vec<(u64, String)>,
    /// Blocked jobs holding GPUs as they free up: `(job, GPUs held)`.
    reservations: Vec<(u64, u32)>,
    /// Running jobs the reclaim slot stopped: stop them; they wait again.
    preempted: Vec<u64>,
    /// Running jobs the defragment slot moved: stop each and start it again
    /// (from its checkpoint) where its `Start` says.
    migrations: Vec<PyStart>,
    /// What the retry slot decided for each failed attempt: `(job, action)`
    /// with action `"retry"`, `"probe"` or `"give-up"`.
    retries: Vec<(u64, String)>,
    /// Policy calls that failed this round (the slot's default decided instead).
    policy_errors: Vec<String>,
}

#[pymethods]
impl PyRound {
    fn __repr__(&self) -> String {
        format!(
            "Round(now={}, {} starts, {} waiting, {} policy errors)",
            self.now,
            self.starts.len(),
            self.waiting.len(),
            self.policy_errors.len()
        )
    }
}

/// A server as Python names it: its name or its id.
#[derive(FromPyObject)]
pub(crate) enum ServerArg {
    /// The server's id.
    Id(u32),
    /// The server's name.
    Name(String),
}

/// A virtual cluster as Python names it: its name or its id.
#[derive(FromPyObject)]
pub(crate) enum VcArg {
    /// The id returned by `virtual_cluster`.
    Id(u32),
    /// Its name (created on first use).
    Name(String),
}

struct Inner {
    sched: Scheduler,
    slots: Slots,
}

/// Gangway's scheduler, embedded: submit jobs, report events, call
/// `round(now)` and launch the starts it returns. Time is the host's (any
/// unit, never decreasing). Policies: a preset of the catalog (natively),
/// with any slot swapped between rounds for a built-in policy or a Wasm
/// module by `use_policy`, rolled back by `rollback`.
#[pyclass(frozen, name = "Scheduler", module = "gangway")]
pub(crate) struct PyScheduler {
    inner: Mutex<Inner>,
}

fn placement_strategy(name: &str) -> PyResult<PlacementStrategy> {
    PlacementStrategy::from_name(name).ok_or_else(|| {
        PyValueError::new_err(format!(
            "placement {name:?}: expected one of {:?}",
            PlacementStrategy::NAMES
        ))
    })
}

fn attempt_end(outcome: &str, failure_class: Option<&str>, last: bool) -> PyResult<AttemptEnd> {
    let class = match failure_class {
        None => FailureClass::Unknown,
        Some(name) => FailureClass::from_name(name).ok_or_else(|| {
            PyValueError::new_err(format!(
                "failure class {name:?}: expected one of the study's Table 7 classes, \
                 e.g. \"unknown\", \"cuda-failure\", \"syntax-error\""
            ))
        })?,
    };
    // Exactly a name of `Outcome::as_str` (not the looser trace spellings).
    match Outcome::ALL.into_iter().find(|o| o.as_str() == outcome) {
        Some(Outcome::Passed) => Ok(AttemptEnd::Passed),
        Some(Outcome::Failed) => Ok(AttemptEnd::Failed { class, last }),
        Some(Outcome::Killed) => Ok(AttemptEnd::Killed),
        None => Err(PyValueError::new_err(format!(
            "outcome {outcome:?}: expected one of {:?}",
            Outcome::ALL.map(Outcome::as_str)
        ))),
    }
}

fn action_name(a: &RetryAction) -> String {
    match a {
        RetryAction::Retry { .. } => "retry",
        RetryAction::Probe { .. } => "probe",
        RetryAction::GiveUp => "give-up",
    }
    .to_string()
}

fn status_name(s: FinalStatus) -> &'static str {
    Outcome::from(s).as_str()
}

fn reason_name(r: WaitReason) -> String {
    r.as_str().to_string()
}

impl PyScheduler {
    fn lock(&self) -> PyResult<MutexGuard<'_, Inner>> {
        self.inner
            .lock()
            .map_err(|_| errors::SchedulerError::new_err("the scheduler was poisoned by a panic"))
    }
}

impl Inner {
    fn server(&self, s: &ServerArg) -> PyResult<ServerId> {
        let topo = self.sched.topology();
        match s {
            ServerArg::Id(i) if (*i as usize) < topo.servers().len() => Ok(ServerId(*i)),
            ServerArg::Id(i) => Err(errors::SchedulerError::new_err(format!(
                "server {i} does not exist (the topology has {})",
                topo.servers().len()
            ))),
            ServerArg::Name(n) => topo
                .server_by_name(n)
                .ok_or_else(|| errors::SchedulerError::new_err(format!("no server named {n:?}"))),
        }
    }

    fn vc(&mut self, vc: &VcArg) -> VcId {
        match vc {
            VcArg::Id(i) => VcId(*i),
            VcArg::Name(n) => self.sched.virtual_cluster(n),
        }
    }

    fn known_vc(&self, vc: &VcArg) -> PyResult<VcId> {
        let vcs = self.sched.virtual_clusters();
        match vc {
            VcArg::Id(i) if (*i as usize) < vcs.len() => Ok(VcId(*i)),
            VcArg::Name(n) => vcs
                .iter()
                .position(|v| &v.name == n)
                .map(|i| VcId(u32::try_from(i).unwrap_or(u32::MAX)))
                .ok_or_else(|| {
                    errors::SchedulerError::new_err(format!("no virtual cluster named {n:?}"))
                }),
            VcArg::Id(i) => Err(errors::SchedulerError::new_err(format!(
                "virtual cluster {i} does not exist"
            ))),
        }
    }

    fn start(&self, s: &gangway_core::Start) -> PyStart {
        let topo = self.sched.topology();
        let placement = s
            .choice
            .placement
            .parts
            .iter()
            .map(|p| {
                let name = topo
                    .server(p.server)
                    .map(|s| s.name.clone())
                    .unwrap_or_default();
                let gpus = (0..64u32).filter(|i| p.gpus & (1u64 << i) != 0).collect();
                (name, gpus)
            })
            .collect();
        let locality = topo
            .level_names()
            .get(usize::from(s.choice.locality.0))
            .cloned()
            .unwrap_or_else(|| format!("level {}", s.choice.locality.0));
        PyStart {
            job: s.job.0,
            placement,
            locality,
            servers: s.choice.servers,
            probe_s: s.probe_s,
        }
    }
}

#[pymethods]
impl PyScheduler {
    /// A scheduler over `topology`. `policies` names a preset of the catalog
    /// (`gangway.presets()`), built natively; `None` is the core's built-in
    /// defaults. `placement` (`"best-fit"` or `"spread"`) overrides the
    /// preset's tie-break. By default a Wasm module may use 20 times what
    /// its slot's built-in policies cost on the same views over its last 32
    /// calls, and 10^12 units (about a minute of guest CPU) over the
    /// scheduler's life; past either its calls fail, the slot's fallback
    /// decides and the module is quarantined. `policy_fuel` is an absolute
    /// bound over the scheduler's life instead (calls and instantiations;
    /// 0: no bound). `large_policies=True` lets modules that
    /// carry an interpreter load (a Python policy built with
    /// `gangway.componentize`: up to 64 MiB, compiled once into the module
    /// cache, with a hundred times the default fuel per call and, unless
    /// `policy_fuel` is given, per slot).
    #[new]
    #[pyo3(signature = (topology, policies = None, placement = None, policy_fuel = None, large_policies = false))]
    fn new(
        topology: &PyTopology,
        policies: Option<&str>,
        placement: Option<&str>,
        policy_fuel: Option<u64>,
        large_policies: bool,
    ) -> PyResult<Self> {
        let (set, strategy) = match policies {
            Some(name) => {
                let (set, choice) = policy::preset(name)?;
                (set, choice.placement)
            }
            None => (PolicySet::fallbacks(), PlacementStrategy::default()),
        };
        let strategy = match placement {
            Some(p) => placement_strategy(p)?,
            None => strategy,
        };
        let limits = if large_policies {
            LoadLimits::for_interpreters()
        } else {
            LoadLimits::default()
        };
        // `policy_fuel` is an absolute bound instead of the work budget.
        let (fuel, work_budget) = match policy_fuel {
            Some(fuel) => (fuel, None),
            None if large_policies => (
                gangway_catalog::resolve::Loader::INTERPRETER_FUEL_PER_BACKEND,
                Some(WorkBudget::for_limits(&limits)),
            ),
            None => (
                gangway_catalog::resolve::Loader::DEFAULT_FUEL_PER_BACKEND,
                Some(WorkBudget::for_limits(&limits)),
            ),
        };
        let slots = Slots::of(&set, (fuel > 0).then_some(fuel), work_budget, limits);
        let mut sched = Scheduler::with_policies(topology.inner.clone(), set);
        sched.set_placement_strategy(strategy);
        Ok(PyScheduler {
            inner: Mutex::new(Inner { sched, slots }),
        })
    }

    /// The scheduler's topology.
    #[getter]
    fn topology(&self) -> PyResult<PyTopology> {
        Ok(PyTopology {
            inner: self.lock()?.sched.topology().clone(),
        })
    }

    /// The id of the virtual cluster `name`, created on first use; sets its
    /// GPU quota and weight when given.
    #[pyo3(signature = (name, quota = None, weight = None))]
    fn virtual_cluster(
        &self,
        name: &str,
        quota: Option<u32>,
        weight: Option<u32>,
    ) -> PyResult<u32> {
        let mut g = self.lock()?;
        let vc = g.sched.virtual_cluster(name);
        if let Some(q) = quota {
            g.sched.set_quota(vc, Some(q));
        }
        if let Some(w) = weight {
            g.sched.set_weight(vc, w);
        }
        Ok(vc.0)
    }

    /// Sets (or with `None` removes) a virtual cluster's GPU quota.
    fn set_quota(&self, vc: VcArg, quota: Option<u32>) -> PyResult<()> {
        let mut g = self.lock()?;
        let id = g.known_vc(&vc)?;
        g.sched.set_quota(id, quota);
        Ok(())
    }

    /// Every virtual cluster: `name`, `quota_gpus`, `weight`, `held_gpus`,
    /// `attained_gpu_s`.
    fn virtual_clusters<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let g = self.lock()?;
        g.sched
            .virtual_clusters()
            .iter()
            .map(|v| {
                let d = PyDict::new(py);
                d.set_item("name", &v.name)?;
                d.set_item("quota_gpus", v.quota_gpus)?;
                d.set_item("weight", v.weight)?;
                d.set_item("held_gpus", v.held_gpus)?;
                d.set_item("attained_gpu_s", v.attained_gpu_s)?;
                Ok(d)
            })
            .collect()
    }

    /// Submits a gang of `gpus` GPUs; it waits for the next round. `vc` is a
    /// virtual cluster name (created on first use) or id. `gpu_types` names
    /// the GPU types it may run on, most preferred first (`None`: any), and
    /// `min_gpu_memory_gb` the least memory of each GPU; the gang runs on
    /// one type. A request no server can satisfy raises `SchedulerError`.
    #[pyo3(signature = (job, gpus, vc = VcArg::Name("default".into()), user = 0, submitted = 0, gpu_types = None, min_gpu_memory_gb = 0))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments
    fn submit(
        &self,
        job: u64,
        gpus: u32,
        vc: VcArg,
        user: u32,
        submitted: u64,
        gpu_types: Option<Vec<String>>,
        min_gpu_memory_gb: u32,
    ) -> PyResult<()> {
        let mut g = self.lock()?;
        let vc = g.vc(&vc);
        let request = GpuRequest {
            types: gpu_types.unwrap_or_default(),
            min_memory_gb: min_gpu_memory_gb,
        };
        let spec = JobSpec {
            id: JobId(job),
            vc,
            user,
            gpus,
            submitted_s: submitted,
        };
        g.sched
            .submit_requesting(spec, &request)
            .map_err(errors::scheduler)
    }

    /// Runs one scheduling round at time `now` (fairness, locality, placement,
    /// gang) and returns what it decided. The started jobs hold their GPUs
    /// from now on: launch them.
    fn round(&self, now: u64) -> PyResult<PyRound> {
        let mut g = self.lock()?;
        let report = g.sched.round(now).map_err(errors::scheduler)?;
        let starts = report.starts.iter().map(|s| g.start(s)).collect();
        Ok(PyRound {
            now: report.now_s,
            starts,
            waiting: report
                .waiting
                .iter()
                .map(|(j, r)| (j.0, reason_name(*r)))
                .collect(),
            reservations: report
                .reservations
                .iter()
                .map(|r| (r.job.0, r.held_gpus))
                .collect(),
            preempted: report.preempted.iter().map(|p| p.job.0).collect(),
            migrations: report
                .migrations
                .iter()
                .map(|m| {
                    g.start(&gangway_core::Start {
                        job: m.job,
                        choice: m.to.clone(),
                        probe_s: None,
                    })
                })
                .collect(),
            retries: report
                .retries
                .iter()
                .map(|(j, a)| (j.0, action_name(a)))
                .collect(),
            policy_errors: report.policy_errors.iter().map(|e| e.to_string()).collect(),
        })
    }

    /// A running job's attempt ended: `outcome` is `"passed"`, `"failed"` or
    /// `"killed"`. A failure (of `failure_class`, one of the study's Table 7
    /// classes such as `"cuda-failure"`; unknown by default) is the retry
    /// slot's to decide at the next round, unless `last` says no attempt may
    /// follow.
    #[pyo3(signature = (job, now, outcome = "passed", failure_class = None, last = false))]
    fn end_attempt(
        &self,
        job: u64,
        now: u64,
        outcome: &str,
        failure_class: Option<&str>,
        last: bool,
    ) -> PyResult<()> {
        let end = attempt_end(outcome, failure_class, last)?;
        self.lock()?
            .sched
            .end_attempt(JobId(job), now, end)
            .map_err(errors::scheduler)
    }

    /// Kills a pending or running job.
    fn kill(&self, job: u64, now: u64) -> PyResult<()> {
        self.lock()?
            .sched
            .kill(JobId(job), now)
            .map_err(errors::scheduler)
    }

    /// A server failed (by name or id): every job with a GPU on it is
    /// interrupted whole and waits again. Returns those jobs' ids.
    fn server_down(&self, server: ServerArg, now: u64) -> PyResult<Vec<u64>> {
        let mut g = self.lock()?;
        let id = g.server(&server)?;
        g.sched
            .server_down(id, now)
            .map(|jobs| jobs.into_iter().map(|j| j.0).collect())
            .map_err(errors::scheduler)
    }

    /// A server is back, or stops draining.
    fn server_up(&self, server: ServerArg) -> PyResult<()> {
        let mut g = self.lock()?;
        let id = g.server(&server)?;
        g.sched.server_up(id).map_err(errors::scheduler)
    }

    /// A server keeps its jobs but takes no new ones.
    fn drain(&self, server: ServerArg) -> PyResult<()> {
        let mut g = self.lock()?;
        let id = g.server(&server)?;
        g.sched.drain(id).map_err(errors::scheduler)
    }

    /// Why a pending job did not start in the last round (`"fair-share"`,
    /// `"fragmentation"`, `"reserved"`, `"held-by-policy"`, `"no-capacity"`),
    /// or `None` if it is not pending or no round has considered it yet.
    fn why_pending(&self, job: u64) -> PyResult<Option<String>> {
        Ok(self.lock()?.sched.why_pending(JobId(job)).map(reason_name))
    }

    /// Everything the scheduler knows about a job, as a dict, or `None`:
    /// `state` (`pending`, `running`, `finished`), `gpus`, `vc`, `user`,
    /// `submitted`, `attempts`, `attained_gpu_s`, `failed_gpu_s`,
    /// `wait_s` (seconds per wait reason), and per state `reason`,
    /// `placement` or `status`.
    fn job<'py>(&self, py: Python<'py>, job: u64) -> PyResult<Option<Bound<'py, PyDict>>> {
        let g = self.lock()?;
        let Some(rec) = g.sched.job(JobId(job)) else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("id", job)?;
        d.set_item("gpus", rec.spec.gpus)?;
        let vc_name = g
            .sched
            .virtual_clusters()
            .get(rec.spec.vc.0 as usize)
            .map(|v| v.name.clone());
        d.set_item("vc", vc_name)?;
        d.set_item("user", rec.spec.user)?;
        d.set_item("submitted", rec.spec.submitted_s)?;
        d.set_item("attempts", rec.attempts)?;
        d.set_item("attained_gpu_s", rec.attained_gpu_s)?;
        d.set_item("failed_gpu_s", rec.failed_gpu_s)?;
        // Up to the last round (a waiting job's time since its reason last
        // changed included).
        let waited = rec.wait_at(g.sched.last_round_s());
        let wait = PyDict::new(py);
        for r in WaitReason::ALL {
            wait.set_item(r.as_str(), waited.get(r))?;
        }
        d.set_item("wait_s", wait)?;
        match &rec.state {
            JobState::Pending { since_s, reason } => {
                d.set_item("state", "pending")?;
                d.set_item("since", since_s)?;
                d.set_item("reason", reason.map(reason_name))?;
            }
            JobState::AwaitingRetry(f) => {
                d.set_item("state", "awaiting-retry")?;
                d.set_item("failure_class", f.class.as_str())?;
            }
            JobState::Delayed { since_s, until_s } => {
                d.set_item("state", "delayed")?;
                d.set_item("since", since_s)?;
                d.set_item("until", until_s)?;
            }
            JobState::Running {
                started_s,
                choice,
                probe_s,
            } => {
                d.set_item("state", "running")?;
                d.set_item("started", started_s)?;
                d.set_item("probe_s", probe_s)?;
                let s = g.start(&gangway_core::Start {
                    job: JobId(job),
                    choice: choice.clone(),
                    probe_s: *probe_s,
                });
                d.set_item("placement", s.placement)?;
                d.set_item("locality", s.locality)?;
            }
            JobState::Finished { status, at_s } => {
                d.set_item("state", "finished")?;
                d.set_item("status", status_name(*status))?;
                d.set_item("finished", at_s)?;
            }
        }
        Ok(Some(d))
    }

    /// Ids of every job the scheduler knows, in id order.
    fn jobs(&self) -> PyResult<Vec<u64>> {
        Ok(self.lock()?.sched.jobs().keys().map(|j| j.0).collect())
    }

    /// Number of pending jobs.
    #[getter]
    fn pending(&self) -> PyResult<usize> {
        Ok(self.lock()?.sched.pending_len())
    }

    /// GPUs free on healthy servers.
    #[getter]
    fn free_gpus(&self) -> PyResult<u32> {
        Ok(self.lock()?.sched.state().free_gpus())
    }

    /// Verifies every index of the scheduler against the ground truth (no GPU
    /// held twice, every running gang holds exactly its GPUs, ...); raises
    /// `InvariantViolation` naming the first difference.
    fn check_invariants(&self) -> PyResult<()> {
        self.lock()?
            .sched
            .check_invariants()
            .map_err(|e| errors::InvariantViolation::new_err(e.to_string()))
    }

    /// Loads a policy for `slot` (`"fairness"`, `"locality"`, `"gang"`): a
    /// built-in policy name (native), a path to a `.wasm` module, or a
    /// module's bytes, with `config` (TOML text or bytes). It becomes active
    /// at the start of the next round; the one before stays for `rollback`.
    /// Returns the staged policy's name.
    #[pyo3(signature = (slot, policy, config = None))]
    fn use_policy(
        &self,
        slot: &str,
        policy: PolicyArg,
        config: Option<ConfigArg>,
    ) -> PyResult<String> {
        let slot = policy::slot(slot)?;
        let config = config.map(ConfigArg::into_bytes).unwrap_or_default();
        self.lock()?.slots.stage(slot, &policy, &config)
    }

    /// Stages all six policies of a preset (active from the next round) and
    /// applies its placement tie-break now.
    fn use_preset(&self, name: &str) -> PyResult<()> {
        let (_, choice) = policy::preset(name)?;
        let mut g = self.lock()?;
        g.slots.stage_choice(&choice)?;
        g.sched.set_placement_strategy(choice.placement);
        Ok(())
    }

    /// Asks `slot` to go back to its previous policy at the next round.
    fn rollback(&self, slot: &str) -> PyResult<()> {
        let slot = policy::slot(slot)?;
        self.lock()?.slots.rollback(slot);
        Ok(())
    }

    /// The state of a slot: `active` policy and its `active_identity` (with
    /// a Wasm module's hash), `previous` ones (the baseline last),
    /// `consecutive_failures`, `recent_failures`, `swaps`, `quarantined`
    /// modules (by identity) and `events`.
    fn slot_status<'py>(&self, py: Python<'py>, slot: &str) -> PyResult<Bound<'py, PyDict>> {
        let slot = policy::slot(slot)?;
        let status = self.lock()?.slots.status(slot);
        policy::status_dict(py, &status)
    }

    fn __repr__(&self) -> PyResult<String> {
        let g = self.lock()?;
        Ok(format!(
            "Scheduler({} servers, {} jobs, {} pending)",
            g.sched.topology().servers().len(),
            g.sched.jobs().len(),
            g.sched.pending_len()
        ))
    }
}
