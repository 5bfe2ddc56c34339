//! `policy-check`: load a policy module under the sandbox and put it through
//! many generated views, checking every decision the way a scheduling round
//! would, plus determinism (same view, same answer; a fresh instance agrees).
//!
//! ```
//! use gangway_host_examples::policy_check::{CheckOptions, check_module};
//!
//! let fifo = gangway_plugin_artifacts::module("fifo").unwrap();
//! let report = check_module("fifo.wasm", fifo, b"", &CheckOptions { views: 20, ..CheckOptions::default() }).unwrap();
//! assert_eq!(report.contract_version, "1.0.0");
//! assert_eq!(report.call_path, gangway_core::wasm::CallPath::Direct);
//! assert_eq!(report.calls, 20);
//! ```

use std::time::{Duration, Instant};

use gangway_core::policy::{
    FairnessBackend, GangBackend, LocalityBackend, PolicyError, Slot, validate,
};
use gangway_core::wasm::{Budget, CallPath, PolicyEngine, PolicyModule, SandboxConfig, WasmError};
use gangway_plugin_sdk::{
    ClusterSummary, JobId, Level, LevelSummary, PendingJob, QueueView, RoundView, VcId, VcUsage,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// How hard to check.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// Generated views (each slot is called once per view).
    pub views: usize,
    /// Seed of the view generator.
    pub seed: u64,
    /// The sandbox the module runs in.
    pub sandbox: SandboxConfig,
    /// Give up (and fail) after this long in total.
    pub time_limit: Duration,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            views: 300,
            seed: 1,
            sandbox: SandboxConfig {
                budget: Budget::Fuel(Budget::DEFAULT_FUEL),
                ..SandboxConfig::default()
            },
            time_limit: Duration::from_secs(30),
        }
    }
}

/// What a well-behaved module did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckReport {
    /// The module's name.
    pub module: String,
    /// The slots it implements.
    pub slots: Vec<Slot>,
    /// Its contract version.
    pub contract_version: String,
    /// How the host enters it: directly (a component of the standard shape)
    /// or through the component runtime.
    pub call_path: CallPath,
    /// Views it was given.
    pub views: usize,
    /// Slot calls made (determinism re-calls not counted).
    pub calls: usize,
    /// The slowest call, in microseconds.
    pub slowest_us: u128,
    /// The most jobs in one view.
    pub max_jobs: usize,
}

/// Why a module is not well-behaved (or could not be checked). One line each.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// The sandbox could not be created.
    #[error("{0}")]
    Engine(WasmError),
    /// The module was refused at load time.
    #[error("{0}")]
    Load(WasmError),
    /// A slot could not be created with the given configuration.
    #[error("{0}")]
    Slot(WasmError),
    /// A call failed (trap, budget, memory cap, bad reply, refusal).
    #[error("view #{view} ({jobs} jobs): {error}")]
    Call {
        /// The view's number.
        view: usize,
        /// Its pending jobs.
        jobs: usize,
        /// The failure.
        error: PolicyError,
    },
    /// A decision broke the contract.
    #[error("view #{view} ({jobs} jobs): {error}")]
    Invalid {
        /// The view's number.
        view: usize,
        /// Its pending jobs.
        jobs: usize,
        /// The failure.
        error: PolicyError,
    },
    /// The same view got two different answers.
    #[error(
        "{slot} policy {module:?}: view #{view} got a different answer {when}; decisions must be a pure function of the view"
    )]
    Nondeterministic {
        /// The module.
        module: String,
        /// The slot.
        slot: Slot,
        /// The view's number.
        view: usize,
        /// "when asked again" or "from a fresh instance".
        when: &'static str,
    },
    /// The whole check took too long.
    #[error("module {module} is too slow: {views} views took more than {limit:?}")]
    TooSlow {
        /// The module.
        module: String,
        /// Views done.
        views: usize,
        /// The limit.
        limit: Duration,
    },
}

/// Loads `bytes` as module `name`, configures every slot with `config` and
/// runs the checks.
pub fn check_module(
    name: &str,
    bytes: &[u8],
    config: &[u8],
    options: &CheckOptions,
) -> Result<CheckReport, CheckError> {
    let engine = PolicyEngine::new(options.sandbox.clone()).map_err(CheckError::Engine)?;
    let module = engine.load(name, bytes).map_err(CheckError::Load)?;
    let slots = module.slots();
    let mut set = Backends::instantiate(&module, config, &slots)?;

    let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
    let started = Instant::now();
    let mut report = CheckReport {
        module: name.to_string(),
        slots: slots.clone(),
        contract_version: module.contract_version(),
        call_path: module.call_path(),
        views: 0,
        calls: 0,
        slowest_us: 0,
        max_jobs: 0,
    };
    for view in 0..options.views {
        if started.elapsed() > options.time_limit {
            return Err(CheckError::TooSlow {
                module: name.to_string(),
                views: view,
                limit: options.time_limit,
            });
        }
        let round = generate_view(&mut rng, view);
        report.max_jobs = report.max_jobs.max(round.jobs.len());
        let answers = set.run(&round, view, &mut report)?;
        // Determinism: the same view again, and (for some views) a fresh
        // instance, must give the same answers.
        if set.run(
            &round,
            view,
            &mut CheckReport {
                calls: 0,
                ..report.clone()
            },
        )? != answers
        {
            return Err(nondeterministic(name, &answers, view, "when asked again"));
        }
        if view % 50 == 0 {
            let mut fresh = Backends::instantiate(&module, config, &slots)?;
            if fresh.run(
                &round,
                view,
                &mut CheckReport {
                    calls: 0,
                    ..report.clone()
                },
            )? != answers
            {
                return Err(nondeterministic(
                    name,
                    &answers,
                    view,
                    "from a fresh instance",
                ));
            }
        }
        report.views += 1;
    }
    Ok(report)
}

fn nondeterministic(name: &str, answers: &Answers, view: usize, when: &'static str) -> CheckError {
    CheckError::Nondeterministic {
        module: name.to_string(),
        slot: answers.first_slot(),
        view,
        when,
    }
}

struct Backends {
    fairness: Option<Box<dyn FairnessBackend>>,
    locality: Option<Box<dyn LocalityBackend>>,
    gang: Option<Box<dyn GangBackend>>,
}

#[derive(PartialEq)]
struct Answers {
    fairness: Option<gangway_plugin_sdk::FairnessDecision>,
    locality: Option<gangway_plugin_sdk::LocalityDecision>,
    gang: Option<gangway_plugin_sdk::GangDecision>,
}

impl Answers {
    fn first_slot(&self) -> Slot {
        if self.fairness.is_some() {
            Slot::Fairness
        } else if self.locality.is_some() {
            Slot::Locality
        } else {
            Slot::Gang
        }
    }
}

impl Backends {
    /// A fresh instance of `module` for each slot it implements.
    fn instantiate(
        module: &PolicyModule,
        config: &[u8],
        slots: &[Slot],
    ) -> Result<Backends, CheckError> {
        let fairness = slots
            .contains(&Slot::Fairness)
            .then(|| module.fairness(config))
            .transpose()
            .map_err(CheckError::Slot)?;
        let locality = slots
            .contains(&Slot::Locality)
            .then(|| module.locality(config))
            .transpose()
            .map_err(CheckError::Slot)?;
        let gang = slots
            .contains(&Slot::Gang)
            .then(|| module.gang(config))
            .transpose()
            .map_err(CheckError::Slot)?;
        Ok(Backends {
            fairness,
            locality,
            gang,
        })
    }

    /// Calls every slot on `round` (and the queue derived from it) the way a
    /// round does, validating each decision.
    fn run(
        &mut self,
        round: &RoundView,
        view: usize,
        report: &mut CheckReport,
    ) -> Result<Answers, CheckError> {
        let jobs = round.jobs.len();
        let timed = |report: &mut CheckReport, started: Instant| {
            report.calls += 1;
            report.slowest_us = report.slowest_us.max(started.elapsed().as_micros());
        };
        let invalid = |slot: Slot, name: &str, kind| CheckError::Invalid {
            view,
            jobs,
            error: PolicyError::new(slot, name, kind),
        };
        let call = |error: PolicyError| CheckError::Call { view, jobs, error };

        let mut answers = Answers {
            fairness: None,
            locality: None,
            gang: None,
        };
        // The queue: the fairness answer's eligible jobs if there is one,
        // otherwise every other job, in reverse submit order.
        let mut queue = QueueView {
            now_s: round.now_s,
            cluster: round.cluster.clone(),
            jobs: Vec::new(),
            spread: Vec::new(),
        };
        if let Some(f) = &mut self.fairness {
            let t = Instant::now();
            let d = f.order(round).map_err(call)?;
            timed(report, t);
            validate::fairness(round, &d).map_err(|k| invalid(Slot::Fairness, f.name(), k))?;
            for r in d.order.iter().filter(|r| r.eligible) {
                if let Some(j) = round.jobs.iter().find(|j| j.id == r.job) {
                    queue.jobs.push(j.clone());
                }
            }
            answers.fairness = Some(d);
        } else {
            queue.jobs = round.jobs.iter().rev().step_by(2).cloned().collect();
        }
        if let Some(l) = &mut self.locality {
            let t = Instant::now();
            let d = l.spread(&queue).map_err(call)?;
            timed(report, t);
            validate::locality(&queue, &d).map_err(|k| invalid(Slot::Locality, l.name(), k))?;
            queue.spread = d.spread.clone();
            answers.locality = Some(d);
        } else {
            queue.spread = queue.jobs.iter().map(|j| j.min_level).collect();
        }
        if let Some(g) = &mut self.gang {
            let t = Instant::now();
            let d = g.on_blocked(&queue).map_err(call)?;
            timed(report, t);
            validate::gang(&queue, &d).map_err(|k| invalid(Slot::Gang, g.name(), k))?;
            answers.gang = Some(d);
        }
        Ok(answers)
    }
}

/// A random but consistent view: 1-3 levels below the root, up to 6 virtual
/// clusters (some with quotas), and a job count that is usually small,
/// sometimes empty and every 25th view large (up to 2,000 jobs).
pub fn generate_view(rng: &mut impl Rng, index: usize) -> RoundView {
    let depth: u8 = rng.random_range(1..=3);
    let servers_per_domain: u32 = rng.random_range(2..=16);
    let gpus_per_server: u32 = [1, 2, 4, 8][rng.random_range(0..4)];
    let mut levels = Vec::new();
    let mut domains = 1u32;
    for l in 0..=depth {
        if l > 0 {
            domains *= if l == depth {
                servers_per_domain
            } else {
                rng.random_range(2..=8)
            };
        }
        levels.push(domains);
    }
    let servers = *levels.last().unwrap_or(&1);
    let total = servers * gpus_per_server;
    let free = rng.random_range(0..=total);
    let summaries = levels
        .iter()
        .map(|&d| LevelSummary {
            domains: d,
            max_domain_gpus: total / d,
            max_free_gpus: (free / d).max(free.min(gpus_per_server)),
        })
        .collect();
    let vcs = rng.random_range(1..=6u32);
    let jobs = match index % 25 {
        0 => 0,
        24 => rng.random_range(500..=2_000),
        _ => rng.random_range(1..=120),
    };
    let now = rng.random_range(1_000..1_000_000u64);
    let mut pending = vec![0u32; vcs as usize];
    let mut list: Vec<PendingJob> = (0..jobs)
        .map(|i| {
            let gpus = [1, 1, 2, 4, 8, 16, 32, 64][rng.random_range(0..8)].min(total.max(1));
            let vc = rng.random_range(0..vcs);
            pending[vc as usize] += gpus;
            let submitted = rng.random_range(0..now);
            // The narrowest level with a domain that holds the gang.
            let min_level = levels.iter().rposition(|&d| total / d >= gpus).unwrap_or(0) as u8;
            PendingJob {
                id: JobId(rng.random_range(0..1 << 40) << 12 | i as u64),
                vc: VcId(vc),
                user: rng.random_range(0..50),
                gpus,
                submitted_s: submitted,
                waiting_s: now - rng.random_range(submitted..=now),
                attempts: rng.random_range(0..3),
                attained_gpu_s: rng.random_range(0..10_000_000),
                min_level: Level(min_level),
            }
        })
        .collect();
    list.sort_by_key(|j| (j.submitted_s, j.id));
    RoundView {
        now_s: now,
        cluster: ClusterSummary {
            total_gpus: total,
            free_gpus: free,
            server_level: Level(depth),
            levels: summaries,
        },
        vcs: (0..vcs)
            .map(|v| VcUsage {
                id: VcId(v),
                quota_gpus: rng.random_bool(0.5).then(|| rng.random_range(0..=total)),
                weight: rng.random_range(1..=4),
                held_gpus: rng.random_range(0..=total / vcs),
                pending_gpus: pending[v as usize],
                attained_gpu_s: rng.random_range(0..100_000_000),
            })
            .collect(),
        jobs: list,
    }
}
