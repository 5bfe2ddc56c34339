//! `gandiva`: migrate small jobs to give a waiting gang whole servers
//! (defragment slot), after Gandiva (Xiao et al., OSDI 2018) and the Philly
//! study's guideline 2, "use migration to defragment so large jobs can meet
//! their locality".
//!
//! For the first waiting gangs with fragmentation delay (enough GPUs are
//! free in the cluster, not within their spread limit), in the round's
//! order:
//!
//! * the gang needs `k` servers: 1 if it fits on one server, else its
//!   spread limit's server bound (or its `min_servers`);
//! * for each domain the limit allows (a server, a rack, the cluster), the
//!   `k` servers with the most GPUs that are free or held by *small* jobs
//!   (at most `max_move_gpus` GPUs, wholly on that server) are the target;
//! * the small jobs on the target are moved, largest first, each onto one
//!   server outside the target with room, the fullest such server first
//!   (best fit, so moves do not open new holes), until the target has room;
//! * of the targets that work, the one moving the fewest GPUs wins. One
//!   gang is served per round (of the first 16 waiting): each migration
//!   costs its jobs a restart.
//!
//! # Options (TOML)
//!
//! | key | type | default | meaning |
//! |---|---|---|---|
//! | `max_move_gpus` | GPUs | `4` | the largest job that may be moved |
//! | `max_moves` | count | `8` | the most jobs moved for one gang |
//!
//! ```
//! use gangway_plugin_sdk::*;
//! use gangway_policy_gandiva::Gandiva;
//!
//! // Two 8-GPU servers, each half taken by a 4-GPU job: 8 GPUs free, no
//! // whole server for an 8-GPU gang.
//! let servers: Vec<ServerState> = (0..2)
//!     .map(|i| ServerState { id: ServerId(i), domain: 0, gpus: 8, free: 4 })
//!     .collect();
//! let small = |id, s| RunningJob { id: JobId(id), gpus: 4, parts: vec![(ServerId(s), 4)], ..RunningJob::default() };
//! let view = DefragmentView {
//!     cluster: ClusterSummary { server_level: Level(1), ..ClusterSummary::default() },
//!     servers,
//!     running: vec![small(1, 0), small(2, 1)],
//!     waiting: vec![WaitingJob {
//!         job: PendingJob { id: JobId(9), gpus: 8, min_level: Level(1), min_servers: 1, ..PendingJob::default() },
//!         reason: WaitReason::Fragmentation,
//!         limit: SpreadLimit::new(Level(1), 1),
//!     }],
//!     ..DefragmentView::default()
//! };
//! let d = Gandiva::from_config(b"").unwrap().plan(&view);
//! assert_eq!(d.moves, vec![Move { job: JobId(1), to: vec![(ServerId(1), 4)] }]);
//! assert_eq!(d.start, Some(JobId(9)));
//! ```

use std::collections::{BTreeMap, HashMap};

use gangway_plugin_sdk::sort;
use gangway_plugin_sdk::{
    ConfigError, ConfigForm, Configure, DefragmentDecision, DefragmentPolicy, DefragmentView, Move,
    RunningJob, ServerId, WaitingJob, read_options,
};
use serde::Deserialize;

/// Configuration of [`Gandiva`], parsed from TOML.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GandivaConfig {
    /// The largest job that may be moved.
    pub max_move_gpus: u32,
    /// The most jobs moved for one gang.
    pub max_moves: u32,
}

impl Default for GandivaConfig {
    fn default() -> Self {
        GandivaConfig {
            max_move_gpus: 4,
            max_moves: 8,
        }
    }
}

/// Gandiva-style defragmentation. See the [crate docs](crate).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gandiva {
    config: GandivaConfig,
}

/// A planned target: the moves, and the GPUs they move.
struct Plan {
    moved_gpus: u32,
    moves: Vec<Move>,
}

impl Gandiva {
    /// The configuration in use.
    pub fn config(&self) -> &GandivaConfig {
        &self.config
    }

    /// The cheapest plan that gives `w` its servers, if any.
    fn plan_for(&self, view: &DefragmentView, w: &WaitingJob) -> Option<Plan> {
        let server_level = view.cluster.server_level;
        let largest = view.servers.iter().map(|s| s.gpus).max().unwrap_or(0);
        let k = if w.job.gpus <= largest {
            1
        } else if w.limit.max_servers > 0 {
            w.limit.max_servers
        } else {
            w.job.min_servers.max(1)
        } as usize;
        // Small jobs wholly on one server, by server.
        let mut small: HashMap<ServerId, Vec<&RunningJob>> = HashMap::new();
        for j in &view.running {
            if j.gpus <= self.config.max_move_gpus && j.parts.len() == 1 {
                small.entry(j.parts[0].0).or_default().push(j);
            }
        }
        // Domains the limit allows: per server, per rack, or the cluster.
        let mut domains: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        for (i, s) in view.servers.iter().enumerate() {
            let key = if w.limit.level >= server_level || k == 1 {
                i as u64
            } else if w.limit.level.0 + 1 == server_level.0 {
                u64::from(s.domain) << 32
            } else {
                u64::MAX
            };
            domains.entry(key).or_default().push(i);
        }
        let potential = |i: usize| -> u32 {
            let s = &view.servers[i];
            s.free
                + small
                    .get(&s.id)
                    .map_or(0, |v| v.iter().map(|j| j.gpus).sum())
        };
        let mut best: Option<Plan> = None;
        for members in domains.values() {
            let mut target: Vec<usize> = members.clone();
            sort::by_key(&mut target, |i| [!u64::from(potential(*i)), *i as u64, 0]);
            target.truncate(k);
            if target.len() < k || target.iter().map(|i| potential(*i)).sum::<u32>() < w.job.gpus {
                continue;
            }
            if let Some(plan) = self.moves_for(view, &target, &small, w.job.gpus)
                && best.as_ref().is_none_or(|b| plan.moved_gpus < b.moved_gpus)
            {
                best = Some(plan);
            }
        }
        best
    }

    /// Moves small jobs off `target` (server indices) until it has `gpus`
    /// free, each to one server outside it, fullest first.
    fn moves_for(
        &self,
        view: &DefragmentView,
        target: &[usize],
        small: &HashMap<ServerId, Vec<&RunningJob>>,
        gpus: u32,
    ) -> Option<Plan> {
        let mut free: Vec<u32> = view.servers.iter().map(|s| s.free).collect();
        let mut have: u32 = target.iter().map(|i| free[*i]).sum();
        let mut plan = Plan {
            moved_gpus: 0,
            moves: Vec::new(),
        };
        let mut movable: Vec<&RunningJob> = target
            .iter()
            .flat_map(|i| small.get(&view.servers[*i].id).into_iter().flatten())
            .copied()
            .collect();
        sort::by_key(&mut movable, |j| [!u64::from(j.gpus), j.id.0, 0]);
        for j in movable {
            if have >= gpus || plan.moves.len() >= self.config.max_moves as usize {
                break;
            }
            let dest = (0..view.servers.len())
                .filter(|i| !target.contains(i) && free[*i] >= j.gpus)
                .min_by_key(|i| (free[*i], *i))?;
            free[dest] -= j.gpus;
            have += j.gpus;
            plan.moved_gpus += j.gpus;
            plan.moves.push(Move {
                job: j.id,
                to: vec![(view.servers[dest].id, j.gpus)],
            });
        }
        (have >= gpus && !plan.moves.is_empty()).then_some(plan)
    }
}

impl Configure for Gandiva {
    // The host hands it its TOML as a tree: no parser in its module.
    const CONFIG_FORM: ConfigForm = ConfigForm::Tree;

    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        let config: GandivaConfig = read_options("gandiva", config)?;
        Ok(Gandiva { config })
    }
}

impl DefragmentPolicy for Gandiva {
    fn plan(&self, view: &DefragmentView) -> DefragmentDecision {
        for w in view.waiting.iter().take(16) {
            if let Some(plan) = self.plan_for(view, w) {
                return DefragmentDecision {
                    moves: plan.moves,
                    start: Some(w.job.id),
                };
            }
        }
        DefragmentDecision::default()
    }
}

gangway_plugin_sdk::export!(Defragment, Gandiva);

#[cfg(test)]
mod tests {
    use super::*;
    use gangway_plugin_sdk::Defragment;
    use gangway_plugin_sdk::testing::SlotViews;
    use gangway_plugin_sdk::{
        ClusterSummary, JobId, Level, PendingJob, ServerState, SpreadLimit, WaitReason,
    };
    use proptest::prelude::*;
    use std::collections::HashSet;

    fn view(
        free: &[u32],
        running: Vec<RunningJob>,
        gang: u32,
        limit: SpreadLimit,
    ) -> DefragmentView {
        DefragmentView {
            cluster: ClusterSummary {
                server_level: Level(2),
                ..ClusterSummary::default()
            },
            servers: free
                .iter()
                .enumerate()
                .map(|(i, f)| ServerState {
                    id: ServerId(i as u32),
                    domain: (i / 2) as u32,
                    gpus: 8,
                    free: *f,
                })
                .collect(),
            running,
            waiting: vec![WaitingJob {
                job: PendingJob {
                    id: JobId(99),
                    gpus: gang,
                    min_level: Level(1),
                    min_servers: gang.div_ceil(8),
                    ..PendingJob::default()
                },
                reason: WaitReason::Fragmentation,
                limit,
            }],
            ..DefragmentView::default()
        }
    }

    fn job(id: u64, server: u32, gpus: u32) -> RunningJob {
        RunningJob {
            id: JobId(id),
            gpus,
            parts: vec![(ServerId(server), gpus)],
            ..RunningJob::default()
        }
    }

    #[test]
    fn frees_two_servers_of_one_rack_for_a_16_gpu_gang() {
        // Rack 0: servers 0, 1; rack 1: servers 2, 3. Rack 0 holds small jobs.
        let v = view(
            &[6, 4, 0, 0],
            vec![job(1, 0, 2), job(2, 1, 4), job(3, 2, 8), job(4, 3, 8)],
            16,
            SpreadLimit::new(Level(1), 2),
        );
        // Nothing outside rack 0 has room: no plan.
        assert_eq!(Gandiva::default().plan(&v), DefragmentDecision::default());
        let mut v = v;
        v.servers[3].free = 8;
        v.running.pop();
        let d = Gandiva::default().plan(&v);
        assert_eq!(d.start, Some(JobId(99)));
        let moved: Vec<u64> = d.moves.iter().map(|m| m.job.0).collect();
        assert_eq!(moved, [2, 1], "largest first");
        assert!(d.moves.iter().all(|m| m.to[0].0 == ServerId(3)));
    }

    #[test]
    fn large_jobs_stay_put() {
        let v = view(
            &[4, 4],
            vec![job(1, 0, 4), job(2, 1, 4)],
            8,
            SpreadLimit::new(Level(2), 1),
        );
        let p = Gandiva::from_config(b"max_move_gpus = 2").unwrap();
        assert_eq!(p.plan(&v), DefragmentDecision::default());
        assert!(Gandiva::from_config(b"max = 2").is_err());
    }

    proptest! {
        /// Moves only running jobs, each once, onto other servers with room
        /// for them, with exactly their GPUs; a start whenever it moves.
        #[test]
        fn plans_are_well_formed(view in Defragment::views()) {
            let d = Gandiva::default().plan(&view);
            prop_assert_eq!(d.moves.is_empty(), d.start.is_none());
            let mut free: HashMap<ServerId, u32> = view.servers.iter().map(|s| (s.id, s.free)).collect();
            let mut seen = HashSet::new();
            for m in &d.moves {
                let j = view.running.iter().find(|j| j.id == m.job).unwrap();
                prop_assert!(seen.insert(m.job));
                let total: u32 = m.to.iter().map(|(_, g)| *g).sum();
                prop_assert_eq!(total, j.gpus);
                for (s, g) in &m.to {
                    let f = free.get_mut(s).unwrap();
                    prop_assert!(*f >= *g);
                    *f -= g;
                }
            }
        }
    }
}
