//! `las` in the reclaim slot: Tiresias's preemption.

use std::collections::HashSet;

use gangway_plugin_sdk::room::Room;
use gangway_plugin_sdk::sort;
use gangway_plugin_sdk::{
    ConfigError, ConfigForm, Configure, JobId, ReclaimDecision, ReclaimPolicy, ReclaimView,
    RunningJob, SpreadLimit, WaitReason, WaitingJob,
};

use crate::Las;

/// Preemptive discretized LAS (reclaim slot), with the same options as
/// [`Las`]: each round, the waiting jobs that did not fit are taken in LAS
/// order (lower queue first, then arrival), and for each, running jobs in a
/// strictly lower-priority queue (a higher one: more attained service) are
/// stopped, lowest priority first and, within a queue, the most recently
/// started first, until the waiting job fits within its spread limit. A job
/// is never stopped for one of its own queue or a lower one, so a stopped
/// job cannot stop its stopper back: no livelock. At most
/// [`LasPreempt::MAX_STARTS`] jobs start this way per round, of the first
/// [`LasPreempt::MAX_TRIED`] waiting ones, so a round's cost stays bounded
/// however long the queue.
///
/// ```
/// use gangway_plugin_sdk::*;
/// use gangway_policy_las::LasPreempt;
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
///     cluster: ClusterSummary { server_level: Level(1), ..ClusterSummary::default() },
///     servers,
///     running: vec![long],
///     waiting: vec![fresh],
///     ..ReclaimView::default()
/// };
/// let d = LasPreempt::from_config(b"").unwrap().reclaim(&view);
/// assert_eq!(d.stop, vec![JobId(1)]);
/// assert_eq!(d.start, vec![JobId(2)]);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LasPreempt {
    las: Las,
}

impl LasPreempt {
    /// The most waiting jobs one round starts by preemption.
    pub const MAX_STARTS: usize = 16;
    /// The most waiting jobs one round tries to make room for.
    pub const MAX_TRIED: usize = 64;

    /// The LAS queues it preempts by.
    pub fn las(&self) -> &Las {
        &self.las
    }
}

impl Configure for LasPreempt {
    // The host hands it its TOML as a tree: no parser in its module.
    const CONFIG_FORM: ConfigForm = ConfigForm::Tree;

    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        Ok(LasPreempt {
            las: Las::from_config(config)?,
        })
    }
}

impl ReclaimPolicy for LasPreempt {
    fn reclaim(&self, view: &ReclaimView) -> ReclaimDecision {
        let mut waiting: Vec<&WaitingJob> = view
            .waiting
            .iter()
            .filter(|w| {
                matches!(
                    w.reason,
                    WaitReason::NoCapacity | WaitReason::Fragmentation | WaitReason::Reserved
                )
            })
            .collect();
        sort::by_key(&mut waiting, |w| {
            [self.las.queue(&w.job) as u64, w.job.submitted_s, w.job.id.0]
        });
        let mut victims: Vec<(usize, &RunningJob)> = view
            .running
            .iter()
            .map(|j| (self.las.queue_of(j.attained_gpu_s), j))
            .collect();
        // Descending: lowest priority queue, latest start, highest id first.
        sort::by_key(&mut victims, |(q, j)| [!(*q as u64), !j.started_s, !j.id.0]);
        let mut room = Room::new(&view.servers, view.cluster.server_level);
        let mut taken: HashSet<JobId> = HashSet::new();
        let mut d = ReclaimDecision::default();
        // (queue, limit, GPUs) of gangs that found no room: one of the same
        // queue and limit needing as many GPUs or more finds none either,
        // until a stop frees GPUs (the model only loses free GPUs otherwise).
        let mut no_room: Vec<(usize, SpreadLimit, u32)> = Vec::new();
        for w in waiting.into_iter().take(Self::MAX_TRIED) {
            if d.start.len() >= Self::MAX_STARTS {
                break;
            }
            let q = self.las.queue(&w.job);
            if no_room
                .iter()
                .any(|(nq, l, g)| *nq == q && *l == w.limit && *g <= w.job.gpus)
            {
                continue;
            }
            let candidates: Vec<&RunningJob> = victims
                .iter()
                .filter(|(vq, j)| *vq > q && !taken.contains(&j.id))
                .map(|(_, j)| *j)
                .collect();
            match room.make_room(w.job.gpus, w.limit, &candidates) {
                // It fits without stopping anything: whatever kept it from
                // starting, preemption is not the answer.
                Some(stop) if stop.is_empty() => {}
                Some(stop) => {
                    taken.extend(stop.iter().copied());
                    d.stop.extend(stop);
                    d.start.push(w.job.id);
                    no_room.clear();
                }
                None => no_room.push((q, w.limit, w.job.gpus)),
            }
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gangway_plugin_sdk::{
        ClusterSummary, Level, PendingJob, ServerId, ServerState, SpreadLimit,
    };

    fn running(id: u64, server: u32, gpus: u32, attained: u64) -> RunningJob {
        RunningJob {
            id: JobId(id),
            gpus,
            attained_gpu_s: attained,
            started_s: id,
            parts: vec![(ServerId(server), gpus)],
            ..RunningJob::default()
        }
    }

    fn waiting(id: u64, gpus: u32, attained: u64) -> WaitingJob {
        WaitingJob {
            job: PendingJob {
                id: JobId(id),
                gpus,
                submitted_s: id,
                attained_gpu_s: attained,
                min_level: Level(1),
                min_servers: 1,
                ..PendingJob::default()
            },
            reason: WaitReason::NoCapacity,
            limit: SpreadLimit::level(Level(1)),
        }
    }

    fn view(running: Vec<RunningJob>, waiting: Vec<WaitingJob>) -> ReclaimView {
        ReclaimView {
            cluster: ClusterSummary {
                server_level: Level(1),
                ..ClusterSummary::default()
            },
            servers: (0..2)
                .map(|i| ServerState {
                    id: ServerId(i),
                    domain: 0,
                    gpus: 8,
                    free: 0,
                })
                .collect(),
            running,
            waiting,
            ..ReclaimView::default()
        }
    }

    #[test]
    fn stops_only_lower_priority_jobs_lowest_first() {
        let p = LasPreempt::default();
        // Server 0: a heavy job (queue 2); server 1: a medium one (queue 1).
        let v = view(
            vec![running(1, 0, 8, 100_000), running(2, 1, 8, 5_000)],
            vec![waiting(10, 8, 0), waiting(11, 8, 4_000), waiting(12, 8, 0)],
        );
        let d = p.reclaim(&v);
        // Job 10 (queue 0) takes the heavy job's server; job 12 (queue 0)
        // the medium one's; job 11 (queue 1) may not stop a queue-1 job.
        assert_eq!(d.start, vec![JobId(10), JobId(12)]);
        assert_eq!(d.stop, vec![JobId(1), JobId(2)]);
    }

    #[test]
    fn never_stops_for_an_equal_queue_and_fits_first() {
        let p = LasPreempt::default();
        let v = view(vec![running(1, 0, 8, 10)], vec![waiting(10, 4, 0)]);
        assert_eq!(p.reclaim(&v), ReclaimDecision::default());
        let mut free = view(vec![running(1, 0, 8, 100_000)], vec![waiting(10, 4, 0)]);
        free.servers[1].free = 8;
        assert_eq!(
            p.reclaim(&free),
            ReclaimDecision::default(),
            "fits without preemption"
        );
    }

    #[test]
    fn ineligible_jobs_preempt_nothing() {
        let p = LasPreempt::default();
        let mut w = waiting(10, 8, 0);
        w.reason = WaitReason::FairShare;
        let v = view(vec![running(1, 0, 8, 100_000)], vec![w]);
        assert!(p.reclaim(&v).stop.is_empty());
    }
}
