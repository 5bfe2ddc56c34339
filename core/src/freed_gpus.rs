//! The GPUs some running jobs would free if they stopped, and whether a gang
//! could then fit: a bound the reclaim step checks before it asks its policy,
//! since a reclaim decision changes nothing unless one of its jobs starts.

use std::cell::OnceCell;

use gangway_plugin_sdk::{Level, RunningJob, ServerId, SpreadLimit};

use crate::state::ClusterState;
use crate::topology::DomainId;

/// The GPUs each server would gain if some running jobs stopped (only up
/// servers count: a down server's GPUs are not available either way).
#[derive(Debug)]
pub(crate) struct FreedGpus {
    /// GPUs freed per server, by server index.
    extra: Vec<u32>,
    /// The servers with any, each once.
    servers: Vec<ServerId>,
    /// GPUs freed per domain (every level), by domain index.
    by_domain: Vec<u64>,
    /// Per level above the servers, made when first asked: each server of
    /// `servers` with its domain at that level, by (domain, server).
    by_level: Vec<OnceCell<Vec<(DomainId, ServerId)>>>,
    /// All of them.
    total: u64,
}

impl FreedGpus {
    /// What stopping every job of `jobs` would free on `state`.
    pub(crate) fn of(state: &ClusterState, jobs: &[RunningJob]) -> FreedGpus {
        let topo = state.topology();
        let mut freed = FreedGpus {
            extra: vec![0; topo.servers().len()],
            servers: Vec::new(),
            by_domain: vec![0; topo.domains().len()],
            by_level: (0..topo.server_level().0)
                .map(|_| OnceCell::new())
                .collect(),
            total: 0,
        };
        for (server, gpus) in jobs.iter().flat_map(|j| &j.parts) {
            if state.health(*server) != Some(crate::Health::Up) {
                continue;
            }
            let Some(sv) = topo.servers().get(server.index()) else {
                continue;
            };
            if let Some(extra) = freed.extra.get_mut(server.index()) {
                if *extra == 0 && *gpus > 0 {
                    freed.servers.push(*server);
                }
                *extra = extra.saturating_add(*gpus);
                freed.total = freed.total.saturating_add(u64::from(*gpus));
            }
            for d in &sv.ancestors {
                if let Some(sum) = freed.by_domain.get_mut(d.0 as usize) {
                    *sum = sum.saturating_add(u64::from(*gpus));
                }
            }
        }
        freed
    }

    fn extra(&self, s: ServerId) -> u32 {
        self.extra.get(s.index()).copied().unwrap_or(0)
    }

    /// The servers that gain GPUs in domain `d` of `level`.
    fn servers_in(
        &self,
        state: &ClusterState,
        level: Level,
        d: DomainId,
    ) -> &[(DomainId, ServerId)] {
        let Some(cell) = self.by_level.get(usize::from(level.0)) else {
            return &[];
        };
        let list = cell.get_or_init(|| {
            let mut list: Vec<(DomainId, ServerId)> = self
                .servers
                .iter()
                .filter_map(|s| Some((ancestor(state, *s, level)?, *s)))
                .collect();
            list.sort_unstable();
            list
        });
        let start = list.partition_point(|(x, _)| *x < d);
        let end = list.partition_point(|(x, _)| *x <= d);
        list.get(start..end).unwrap_or_default()
    }
}

impl ClusterState {
    /// Whether a gang of `gpus` within `limit` could be placed if every job
    /// of `freed` stopped: `false` only when no placement can exist then
    /// (no domain of the limit's level holds enough GPUs, free or freed,
    /// on at most its `max_servers` servers). A bound, never stricter than
    /// [`ClusterState::find_placement`] after any of those stops.
    pub(crate) fn could_fit_with(&self, gpus: u32, limit: SpreadLimit, freed: &FreedGpus) -> bool {
        if gpus == 0 || u64::from(gpus) > u64::from(self.free_gpus()).saturating_add(freed.total) {
            return false;
        }
        let topo = &self.topo;
        let server_level = topo.server_level();
        let value =
            |s: ServerId| u64::from(self.avail(s)).saturating_add(u64::from(freed.extra(s)));
        if limit.level >= server_level {
            // One server: one with free GPUs enough, or one that gains GPUs.
            return self
                .servers_by_free(DomainId(0))
                .next()
                .is_some_and(|s| self.avail(s) >= gpus)
                || freed.servers.iter().any(|s| value(*s) >= u64::from(gpus));
        }
        let level = limit.level;
        topo.domains_at(level).iter().any(|d| {
            let e = freed.by_domain.get(d.0 as usize).copied().unwrap_or(0);
            let cap = u64::from(self.domain_free(*d)).saturating_add(e);
            if cap < u64::from(gpus) {
                return false;
            }
            if limit.max_servers == 0 {
                return true;
            }
            // The largest `max_servers` servers of the domain, free GPUs and
            // freed ones together, are among its largest by free GPUs and
            // those that gain GPUs.
            let k = limit.max_servers as usize;
            let mut values: Vec<(ServerId, u64)> = self
                .servers_by_free(*d)
                .take(k)
                .map(|s| (s, value(s)))
                .collect();
            for (_, s) in freed.servers_in(self, level, *d) {
                if !values.iter().any(|(x, _)| x == s) {
                    values.push((*s, value(*s)));
                }
            }
            values.sort_unstable_by_key(|v| std::cmp::Reverse(v.1));
            let top: u64 = values.iter().take(k).map(|(_, v)| v).sum();
            top >= u64::from(gpus)
        })
    }
}

impl ClusterState {
    /// Domain `d`'s servers with available GPUs, most first.
    fn servers_by_free(&self, d: DomainId) -> impl Iterator<Item = ServerId> + '_ {
        self.buckets
            .get(d.0 as usize)
            .into_iter()
            .flat_map(|b| b.iter().rev())
            .flat_map(|servers| servers.iter().copied())
    }
}

/// Server `s`'s enclosing domain at `level` (above the servers).
fn ancestor(state: &ClusterState, s: ServerId, level: Level) -> Option<DomainId> {
    state
        .topo
        .servers()
        .get(s.index())?
        .ancestors
        .get(usize::from(level.0))
        .copied()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::Topology;
    use gangway_plugin_sdk::JobId;
    use proptest::prelude::*;

    proptest! {
        /// Whatever runs where, a gang that fits after some of the jobs
        /// stop is never ruled out.
        #[test]
        fn never_rules_out_a_gang_that_fits_after_stops(
            jobs in prop::collection::vec((1u32..9, any::<bool>()), 1..14),
            gpus in 1u32..40,
            level in 0u8..3,
            max_servers in 0u32..4,
        ) {
            let topo = Arc::new(Topology::uniform(2, 3, 8).unwrap());
            let mut state = ClusterState::new(topo);
            let mut running = Vec::new();
            for (i, (g, shown)) in jobs.iter().enumerate() {
                let id = JobId(i as u64);
                let Some(c) = state.find_placement(*g, SpreadLimit::level(Level(2))) else { continue };
                state.allocate(id, &c.placement).unwrap();
                if *shown {
                    running.push(RunningJob {
                        id,
                        gpus: *g,
                        parts: c.placement.parts.iter().map(|p| (p.server, p.gpus.count_ones())).collect(),
                        ..RunningJob::default()
                    });
                }
            }
            let limit = SpreadLimit::new(Level(level), max_servers);
            let freed = FreedGpus::of(&state, &running);
            let bound = state.could_fit_with(gpus, limit, &freed);
            // Every subset of the shown jobs, stopped.
            for mask in 0u32..(1 << running.len().min(10)) {
                let mut after = state.clone();
                for (i, j) in running.iter().enumerate().take(10) {
                    if mask >> i & 1 == 1 {
                        after.release(j.id).unwrap();
                    }
                }
                if after.find_placement(gpus, limit).is_some() {
                    prop_assert!(bound, "{gpus} GPUs at {limit} fit after stops {mask:b}, the bound said no");
                }
            }
        }
    }

    #[test]
    fn rules_out_what_no_stop_can_make_fit() {
        // 2 racks x 3 servers x 8 GPUs; a 6-GPU job on each server.
        let topo = Arc::new(Topology::uniform(2, 3, 8).unwrap());
        let mut state = ClusterState::new(topo);
        let mut running = Vec::new();
        for i in 0..6u32 {
            let id = JobId(u64::from(i));
            let c = state
                .find_placement(6, SpreadLimit::level(Level(2)))
                .unwrap();
            state.allocate(id, &c.placement).unwrap();
            if i == 0 {
                running.push(RunningJob {
                    id,
                    gpus: 6,
                    parts: c
                        .placement
                        .parts
                        .iter()
                        .map(|p| (p.server, p.gpus.count_ones()))
                        .collect(),
                    ..RunningJob::default()
                });
            }
        }
        let freed = FreedGpus::of(&state, &running);
        // Stopping the one shown job frees 6 + 2 on its server.
        assert!(state.could_fit_with(8, SpreadLimit::level(Level(2)), &freed));
        assert!(!state.could_fit_with(9, SpreadLimit::level(Level(2)), &freed));
        // In its rack: 8 + 2 + 2; on at most 2 servers: 8 + 2.
        assert!(state.could_fit_with(12, SpreadLimit::level(Level(1)), &freed));
        assert!(!state.could_fit_with(13, SpreadLimit::level(Level(1)), &freed));
        assert!(state.could_fit_with(10, SpreadLimit::new(Level(1), 2), &freed));
        assert!(!state.could_fit_with(11, SpreadLimit::new(Level(1), 2), &freed));
        // Nothing shown: only the free GPUs count.
        let none = FreedGpus::of(&state, &[]);
        assert!(!state.could_fit_with(3, SpreadLimit::level(Level(2)), &none));
        assert!(state.could_fit_with(2, SpreadLimit::level(Level(2)), &none));
    }
}
