//! Where a job may be placed: on a cluster of one GPU type, anywhere or
//! within the servers a host restricted it to; on a cluster of several
//! types, on one of its allowed types at a time (a gang never spans two
//! types), each type's servers within the host's restriction, most
//! preferred type first.
//!
//! A search over a job's [`Reach`] looks at every allowed type and takes
//! the most local placement (narrowest level, then fewest servers), the
//! type preferred earlier on a tie ([`ClusterState::find_placement_in`]).

use std::sync::Arc;

use gangway_plugin_sdk::{GpuTypeId, SpreadLimit};

use crate::placement::PlacementChoice;
use crate::server_set::ServerSet;
use crate::state::ClusterState;
use crate::topology::Topology;

/// A job's allowed GPU types, most preferred first, each with the servers
/// a search for it covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reach {
    /// The types and their servers (the type's own set, shared with every
    /// job of the type, unless the host restricted the job).
    pub(crate) sets: Vec<(GpuTypeId, Arc<ServerSet>)>,
}

impl Reach {
    /// The reach of `types` on `topo`, within `allowed` if the host
    /// restricted the job.
    pub(crate) fn of(topo: &Topology, types: &[GpuTypeId], allowed: Option<&ServerSet>) -> Reach {
        let sets = types
            .iter()
            .filter_map(|&t| {
                let servers = topo.type_servers_arc(t)?;
                let set = match allowed {
                    None => Arc::clone(servers),
                    Some(a) => Arc::new(servers.intersection(a)),
                };
                Some((t, set))
            })
            .collect();
        Reach { sets }
    }

    /// This reach on the types `keep` accepts only (their servers shared).
    pub(crate) fn keeping(&self, keep: impl Fn(GpuTypeId) -> bool) -> Reach {
        Reach {
            sets: self
                .sets
                .iter()
                .filter(|(t, _)| keep(*t))
                .cloned()
                .collect(),
        }
    }
}

/// Where one search looks: what the job book's `reach_of` says of
/// a job.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Where<'a> {
    /// Any server (one GPU type, no restriction).
    Anywhere,
    /// The servers of a host's restriction (one GPU type).
    Among(&'a Arc<ServerSet>),
    /// One of several GPU types.
    Types(&'a Reach),
}

impl<'a> Where<'a> {
    /// The sets a search covers, in order: `None` for the whole cluster.
    pub(crate) fn sets(
        &self,
    ) -> impl Iterator<Item = (Option<GpuTypeId>, Option<&'a Arc<ServerSet>>)> {
        let (one, many) = match *self {
            Where::Anywhere => (Some((None, None)), &[][..]),
            Where::Among(set) => (Some((None, Some(set))), &[][..]),
            Where::Types(reach) => (None, reach.sets.as_slice()),
        };
        one.into_iter()
            .chain(many.iter().map(|(t, s)| (Some(*t), Some(s))))
    }

    /// Whether `server` is one the job may run on.
    pub(crate) fn allows(&self, topo: &Topology, server: crate::ServerId) -> bool {
        match *self {
            Where::Anywhere => true,
            Where::Among(set) => set.contains(server),
            Where::Types(reach) => reach.sets.iter().any(|(t, set)| {
                set.contains(server) && topo.server(server).is_some_and(|s| s.gpu_type == *t)
            }),
        }
    }
}

/// What one set's search gave, for the choice between types.
fn better(a: &PlacementChoice, b: &PlacementChoice) -> bool {
    (std::cmp::Reverse(a.locality), a.servers) < (std::cmp::Reverse(b.locality), b.servers)
}

impl ClusterState {
    /// The placement of a gang of `gpus` within `limit` where `at` allows:
    /// over several types, the most local one, the earlier type on a tie.
    /// `skip` says a set is known to hold no placement (it is not
    /// searched); `failed` hears of each set searched without success.
    pub(crate) fn find_placement_in(
        &self,
        gpus: u32,
        limit: SpreadLimit,
        at: Where<'_>,
        mut skip: impl FnMut(Option<&Arc<ServerSet>>) -> bool,
        mut failed: impl FnMut(Option<&Arc<ServerSet>>),
    ) -> Option<PlacementChoice> {
        let server_level = self.topology().server_level();
        let mut best: Option<PlacementChoice> = None;
        for (_, set) in at.sets() {
            if skip(set) {
                continue;
            }
            match self.find_placement_among(gpus, limit, set.map(|s| &**s)) {
                None => failed(set),
                Some(choice) => {
                    let perfect = choice.locality >= server_level && choice.servers <= 1;
                    if best.as_ref().is_none_or(|b| better(&choice, b)) {
                        best = Some(choice);
                    }
                    // Nothing later can be more local than one server.
                    if perfect {
                        break;
                    }
                }
            }
        }
        best
    }

    /// GPUs free for new work where `at` allows, counted as a gang can use
    /// them: on one type, the type with the most.
    pub(crate) fn free_gpus_in(&self, at: Where<'_>) -> u32 {
        at.sets()
            .map(|(_, set)| self.free_gpus_among(set.map(|s| &**s)))
            .max()
            .unwrap_or(0)
    }
}
