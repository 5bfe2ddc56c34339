//! Reconciliation: bringing the scheduler in line with what the engine it
//! drives (Slurm, Kubernetes, ...) says is true, reporting every difference.
//!
//! A host normally reports events one by one (`end_attempt`, `server_down`,
//! ...). After a restart, a lost message or someone acting on the engine
//! directly, the scheduler and the engine can disagree. [`Scheduler::reconcile`]
//! takes the engine's [`EngineTruth`] (which jobs run where, which servers are
//! down or draining) and makes the scheduler agree with it, returning one
//! [`Difference`] per thing it changed or could not change. It never panics
//! and never loses a job: a job the scheduler had running that the engine
//! does not run is re-queued (its attempt counted as lost, as after a server
//! failure); a job the engine runs that the scheduler does not know is
//! adopted as foreign load in a virtual cluster the host names, so its GPUs
//! count as held; what cannot be adopted (GPUs claimed twice, a server that
//! is down) is reported as [`Difference::Unresolved`] for the host to stop in
//! the engine.
//!
//! Foreign load is the engine's, not the scheduler's: an adopted job runs
//! under [`FOREIGN_USER`], and no policy is shown it as a job it could stop
//! or move (the reclaim and defragment views leave it out, and their rules
//! accept only jobs of the view). The scheduler cannot stop it in the
//! engine, so counting its GPUs as freed would start jobs on GPUs the engine
//! still gives to it.
//!
//! Reconciling twice with the same truth changes nothing the second time
//! (only the unresolved jobs are reported again); a property test checks it.
//!
//! ```
//! use gangway_core::reconcile::{Difference, EngineTruth};
//! use gangway_core::{JobSpec, Placement, Scheduler, ServerGpus, ServerId, Topology};
//! use gangway_plugin_sdk::JobId;
//!
//! let mut sched = Scheduler::new(Topology::uniform(1, 2, 8)?);
//! let vc = sched.virtual_cluster("team");
//! let foreign = sched.virtual_cluster("(foreign)");
//! sched.submit(JobSpec { id: JobId(1), vc, user: 0, gpus: 4, submitted_s: 0 })?;
//! sched.round(0)?;
//!
//! // The engine lost job 1 and runs a job nobody submitted through us.
//! let mut truth = EngineTruth::default();
//! let gpus = Placement { parts: vec![ServerGpus { server: ServerId(1), gpus: 0b11 }] };
//! truth.running.insert(JobId(900), gpus.clone());
//! let diffs = sched.reconcile(&truth, Some(foreign), 10);
//! assert_eq!(diffs, vec![
//!     Difference::NotRunning { job: JobId(1) },
//!     Difference::Foreign { job: JobId(900), placement: gpus },
//! ]);
//! assert!(sched.job(JobId(1)).unwrap().is_pending());
//! assert_eq!(sched.state().free_gpus(), 14);
//! sched.check_invariants()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::BTreeMap;

use gangway_plugin_sdk::{JobId, VcId};

use crate::job::{FinalStatus, JobSpec, JobState};
use crate::placement::PlacementChoice;
use crate::scheduler::Scheduler;
use crate::state::{Health, Placement, StateError};
use crate::topology::ServerId;

pub use crate::job::FOREIGN_USER;

/// What the engine says is true now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineTruth {
    /// Every job the engine runs (the scheduler's own and any other), by the
    /// scheduler's id for it, with the GPUs it holds.
    pub running: BTreeMap<JobId, Placement>,
    /// Servers' health as the engine sees it. Servers not listed keep the
    /// health the scheduler has for them.
    pub health: BTreeMap<ServerId, Health>,
}

/// One way the scheduler differed from the engine, and what was done.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Difference {
    /// A server's health differed; the engine's was applied. Taking it down
    /// interrupted and re-queued `interrupted` (whole gangs).
    Health {
        /// The server.
        server: ServerId,
        /// The scheduler's health for it before.
        was: Health,
        /// The engine's, now applied.
        now: Health,
        /// Jobs interrupted by taking it down, in id order.
        interrupted: Vec<JobId>,
    },
    /// The engine names a server the topology does not have; ignored.
    UnknownServer {
        /// The server.
        server: ServerId,
    },
    /// A job the scheduler had running is not running in the engine: its
    /// attempt is counted as lost and it is pending again.
    NotRunning {
        /// The job.
        job: JobId,
    },
    /// A foreign job (of the foreign virtual cluster) is no longer running
    /// in the engine: it is finished and its GPUs free.
    ForeignEnded {
        /// The job.
        job: JobId,
    },
    /// A running job holds other GPUs in the engine: the engine's placement
    /// was adopted.
    Moved {
        /// The job.
        job: JobId,
        /// The scheduler's placement before.
        was: Placement,
        /// The engine's, now held.
        now: Placement,
    },
    /// A running job holds only a part of its GPUs in the engine (a member
    /// of its gang ended while the rest run): the others were freed, their
    /// GPU time so far counted as attained ([`Scheduler::shrink`]).
    Shrunk {
        /// The job.
        job: JobId,
        /// The scheduler's placement before.
        was: Placement,
        /// The part the engine says it holds, now its placement.
        now: Placement,
    },
    /// A pending job the engine runs: it is now running where the engine
    /// runs it (a new attempt).
    Started {
        /// The job.
        job: JobId,
        /// Where.
        placement: Placement,
    },
    /// A job the scheduler never saw: adopted as running foreign load in the
    /// foreign virtual cluster.
    Foreign {
        /// The engine's job, by the id the host gave it.
        job: JobId,
        /// The GPUs it holds.
        placement: Placement,
    },
    /// The engine runs this job but the scheduler cannot account for it
    /// (its GPUs are claimed by another job, a server of it is down or
    /// unknown, it had finished, or no foreign virtual cluster was given).
    /// Its GPUs are not counted as held; if it is the scheduler's job it is
    /// pending. The host should stop it in the engine.
    Unresolved {
        /// The job.
        job: JobId,
        /// Why it could not be adopted.
        why: String,
    },
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Difference::Health {
                server,
                was,
                now,
                interrupted,
            } => write!(
                f,
                "{server} was {was:?}, engine says {now:?} (interrupted {})",
                interrupted.len()
            ),
            Difference::UnknownServer { server } => {
                write!(f, "engine names unknown {server}")
            }
            Difference::NotRunning { job } => {
                write!(f, "{job} is not running in the engine; re-queued")
            }
            Difference::ForeignEnded { job } => write!(f, "foreign {job} ended"),
            Difference::Moved { job, .. } => {
                write!(f, "{job} runs elsewhere in the engine; adopted")
            }
            Difference::Shrunk { job, was, now } => write!(
                f,
                "{job} holds {} of its {} GPUs in the engine; the rest freed",
                now.gpu_count(),
                was.gpu_count()
            ),
            Difference::Started { job, .. } => {
                write!(f, "{job} was pending but runs in the engine; adopted")
            }
            Difference::Foreign { job, placement } => write!(
                f,
                "foreign {job} holds {} GPUs; counted as held",
                placement.gpu_count()
            ),
            Difference::Unresolved { job, why } => write!(f, "{job}: unresolved: {why}"),
        }
    }
}

/// Checks a placement against the topology and sorts its parts by server.
fn normalise(sched: &Scheduler, placement: &Placement) -> Result<Placement, String> {
    let topo = sched.topology();
    let mut p = placement.clone();
    p.parts.sort_by_key(|part| part.server);
    if p.parts.is_empty() {
        return Err("holds no GPUs".into());
    }
    for (k, part) in p.parts.iter().enumerate() {
        let Some(server) = topo.server(part.server) else {
            return Err(format!("server {} does not exist", part.server.0));
        };
        let full = if server.gpus >= 64 {
            u64::MAX
        } else {
            (1u64 << server.gpus) - 1
        };
        if part.gpus == 0 || part.gpus & !full != 0 {
            let missing = part.gpus & !full;
            return Err(if part.gpus == 0 {
                format!("holds no GPUs on server {}", server.name)
            } else {
                format!(
                    "GPUs {} do not exist on server {} ({} GPUs)",
                    (0..64)
                        .filter(|g| missing & (1u64 << g) != 0)
                        .map(|g: u32| g.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    server.name,
                    server.gpus
                )
            });
        }
        if k > 0 && p.parts[k - 1].server == part.server {
            return Err(format!("names server {} twice", server.name));
        }
    }
    Ok(p)
}

/// Whether `part` (canonical) holds only GPUs `whole` (canonical) holds,
/// and fewer.
fn part_of(part: &Placement, whole: &Placement) -> bool {
    part != whole
        && part.parts.iter().all(|p| {
            whole
                .parts
                .iter()
                .any(|w| w.server == p.server && p.gpus & !w.gpus == 0)
        })
}

/// A reconciliation under way: what the engine runs, what was found so far.
struct Reconciling {
    /// Every difference found so far, in order (the unresolved ones last).
    diffs: Vec<Difference>,
    /// Jobs that cannot be brought in line, and why.
    unresolved: BTreeMap<JobId, String>,
    /// The engine's running jobs, their placements made canonical.
    wanted: BTreeMap<JobId, Placement>,
    /// Running jobs the engine runs elsewhere: their placement here.
    moved: BTreeMap<JobId, Placement>,
    /// The VC to adopt foreign jobs into, if it exists.
    foreign_vc: Option<VcId>,
    /// The time of the reconciliation.
    now: u64,
}

impl Reconciling {
    /// The start of reconciling `sched` with `truth`: the engine's
    /// placements checked (the malformed ones unresolved).
    fn new(sched: &Scheduler, truth: &EngineTruth, foreign_vc: Option<VcId>, now: u64) -> Self {
        let mut unresolved: BTreeMap<JobId, String> = BTreeMap::new();
        let mut wanted: BTreeMap<JobId, Placement> = BTreeMap::new();
        for (id, placement) in &truth.running {
            match normalise(sched, placement) {
                Ok(p) => {
                    wanted.insert(*id, p);
                }
                Err(why) => {
                    unresolved.insert(*id, why);
                }
            }
        }
        Reconciling {
            diffs: Vec::new(),
            unresolved,
            wanted,
            moved: BTreeMap::new(),
            foreign_vc: foreign_vc.filter(|vc| (vc.0 as usize) < sched.book.vcs.len()),
            now,
        }
    }
}

impl Scheduler {
    /// Brings the scheduler in line with `truth` at time `now` and returns
    /// every difference found, in this order: running jobs the engine does
    /// not run (or runs elsewhere), server health, then jobs the engine runs
    /// that the scheduler did not have running, in id order. Jobs the engine
    /// runs but the scheduler never saw are adopted into `foreign_vc` (with
    /// `None`, they are reported as unresolved). See the [module
    /// docs](crate::reconcile).
    pub fn reconcile(
        &mut self,
        truth: &EngineTruth,
        foreign_vc: Option<VcId>,
        now: u64,
    ) -> Vec<Difference> {
        let mut r = Reconciling::new(self, truth, foreign_vc, now);
        self.reconcile_running(&mut r);
        self.reconcile_health(truth, &mut r);
        for (id, placement) in std::mem::take(&mut r.wanted) {
            self.reconcile_engine_job(&mut r, id, placement);
        }
        // A moved job whose new placement was refused above is re-queued
        // there; any left here lost its GPUs to a server failure.
        for id in std::mem::take(&mut r.moved).into_keys() {
            if self.book.get(&id).is_some_and(|j| j.is_running()) {
                self.requeue_lost(id, now);
            }
        }
        r.diffs.extend(
            r.unresolved
                .into_iter()
                .map(|(job, why)| Difference::Unresolved { job, why }),
        );
        r.diffs
    }

    /// Step 1: running jobs the engine does not run where we think. A job
    /// it runs elsewhere is released, to be allocated at the engine's
    /// placement in step 3.
    fn reconcile_running(&mut self, r: &mut Reconciling) {
        let running: Vec<(JobId, Placement, VcId)> = self
            .book
            .records()
            .iter()
            .filter_map(|(id, j)| match &j.state {
                JobState::Running { choice, .. } => {
                    Some((*id, choice.placement.clone(), j.spec.vc))
                }
                _ => None,
            })
            .collect();
        let now = r.now;
        for (id, ours, vc) in running {
            match r.wanted.get(&id) {
                Some(p) if *p == ours => {}
                Some(p) if part_of(p, &ours) => {
                    let now_holds = p.clone();
                    match self.book.shrink(&mut self.state, id, &now_holds, now) {
                        Ok(_) => r.diffs.push(Difference::Shrunk {
                            job: id,
                            was: ours,
                            now: now_holds,
                        }),
                        Err(e) => {
                            self.requeue_lost(id, now);
                            r.unresolved.insert(id, e.to_string());
                        }
                    }
                }
                Some(_) => {
                    let _ = self.state.release(id);
                    r.moved.insert(id, ours);
                }
                None if r.unresolved.contains_key(&id) => self.requeue_lost(id, now),
                None if Some(vc) == r.foreign_vc => {
                    let _ = self.book.stop(&mut self.state, id, now, false);
                    self.book.finish(id, FinalStatus::Passed, now);
                    r.diffs.push(Difference::ForeignEnded { job: id });
                }
                None => {
                    self.requeue_lost(id, now);
                    r.diffs.push(Difference::NotRunning { job: id });
                }
            }
        }
    }

    /// Step 2: server health as the engine says.
    fn reconcile_health(&mut self, truth: &EngineTruth, r: &mut Reconciling) {
        for (&server, &health) in &truth.health {
            let Some(was) = self.state.health(server) else {
                r.diffs.push(Difference::UnknownServer { server });
                continue;
            };
            if was == health {
                continue;
            }
            let interrupted = if health == Health::Down {
                self.server_down(server, r.now).unwrap_or_default()
            } else {
                let _ = self.state.set_health(server, health);
                Vec::new()
            };
            r.diffs.push(Difference::Health {
                server,
                was,
                now: health,
                interrupted,
            });
        }
    }

    /// Step 3, for one job the engine runs on `placement`: unless it holds
    /// those GPUs here already, it is adopted, started or moved there, or
    /// reported as unresolved.
    fn reconcile_engine_job(&mut self, r: &mut Reconciling, id: JobId, placement: Placement) {
        if self.state.allocation(id) == Some(&placement) {
            return;
        }
        match self.book.get(&id).map(|j| &j.state) {
            None => self.adopt_foreign(r, id, placement),
            Some(
                JobState::Pending { .. } | JobState::AwaitingRetry(_) | JobState::Delayed { .. },
            ) => self.start_as_engine(r, id, placement),
            Some(JobState::Running { .. }) => self.move_as_engine(r, id, placement),
            Some(JobState::Finished { .. }) => {
                r.unresolved.insert(id, "it had finished".into());
            }
        }
    }

    /// A job the scheduler never saw runs on `placement`: adopted into the
    /// foreign VC, if there is one.
    fn adopt_foreign(&mut self, r: &mut Reconciling, id: JobId, placement: Placement) {
        let Some(vc) = r.foreign_vc else {
            r.unresolved.insert(id, "unknown to the scheduler".into());
            return;
        };
        let spec = JobSpec {
            id,
            vc,
            user: FOREIGN_USER,
            gpus: placement.gpu_count(),
            submitted_s: r.now,
        };
        if let Err(e) = self.submit(spec) {
            r.unresolved.insert(id, e.to_string());
            return;
        }
        match self.allocate_as_engine(id, &placement) {
            Ok(()) => {
                self.mark_running(id, &placement, r.now, true);
                r.diffs.push(Difference::Foreign { job: id, placement });
            }
            Err(e) => {
                self.book.withdraw(id);
                r.unresolved.insert(id, e.to_string());
            }
        }
    }

    /// A job waiting here runs on `placement` in the engine: started there,
    /// if its gang size matches.
    fn start_as_engine(&mut self, r: &mut Reconciling, id: JobId, placement: Placement) {
        let gpus = self.book.get(&id).map_or(0, |j| j.next_gpus());
        if gpus != placement.gpu_count() {
            r.unresolved.insert(
                id,
                format!(
                    "needs {gpus} GPUs but the engine gives it {}",
                    placement.gpu_count()
                ),
            );
            return;
        }
        match self.allocate_as_engine(id, &placement) {
            Ok(()) => {
                // A failed attempt the engine already retried: pending
                // again first, whatever the retry slot would have said.
                self.book.make_pending(id, r.now);
                self.mark_running(id, &placement, r.now, true);
                r.diffs.push(Difference::Started { job: id, placement });
            }
            Err(e) => {
                r.unresolved.insert(id, e.to_string());
            }
        }
    }

    /// A job running here runs on `placement` in the engine: moved there if
    /// its gang size matches and the GPUs are free, else re-queued.
    fn move_as_engine(&mut self, r: &mut Reconciling, id: JobId, placement: Placement) {
        let was = r.moved.remove(&id).unwrap_or_default();
        let gpus = self.book.get(&id).map_or(0, |j| j.next_gpus());
        let fits = if gpus == placement.gpu_count() {
            self.allocate_as_engine(id, &placement)
                .map_err(|e| e.to_string())
        } else {
            Err(format!(
                "needs {gpus} GPUs but the engine gives it {}",
                placement.gpu_count()
            ))
        };
        match fits {
            Ok(()) => {
                self.mark_running(id, &placement, r.now, false);
                r.diffs.push(Difference::Moved {
                    job: id,
                    was,
                    now: placement,
                });
            }
            Err(why) => {
                self.requeue_lost(id, r.now);
                r.unresolved.insert(id, why);
            }
        }
    }

    /// Stops job `id`'s attempt as lost at `now` and queues it again.
    fn requeue_lost(&mut self, id: JobId, now: u64) {
        let _ = self.book.stop(&mut self.state, id, now, true);
        self.book.enqueue(id, now);
    }

    /// Allocates exactly the engine's placement, also on draining servers
    /// (a running job may be there); refuses down servers and taken GPUs.
    fn allocate_as_engine(&mut self, id: JobId, placement: &Placement) -> Result<(), StateError> {
        let draining: Vec<ServerId> = placement
            .parts
            .iter()
            .map(|p| p.server)
            .filter(|s| self.state.health(*s) == Some(Health::Draining))
            .collect();
        for s in &draining {
            self.state.set_health(*s, Health::Up)?;
        }
        let result = self.state.allocate(id, placement);
        for s in &draining {
            self.state.set_health(*s, Health::Draining)?;
        }
        result
    }

    /// Records a job whose GPUs were just allocated as running there. A new
    /// attempt (`new_attempt`) is booked as the round books a start;
    /// otherwise only the placement changes.
    fn mark_running(&mut self, id: JobId, placement: &Placement, now: u64, new_attempt: bool) {
        let choice = PlacementChoice {
            locality: self.topology().common_level(&placement.servers()),
            servers: placement.server_count(),
            placement: placement.clone(),
        };
        if new_attempt {
            // As the round starts a job (crate::round).
            self.book.start(id, now, &choice);
        } else {
            self.book.relocate(id, choice);
        }
    }
}
