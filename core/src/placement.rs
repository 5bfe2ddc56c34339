//! Placement search: the most local, fewest-server, best-fit placement of a
//! gang within a spread limit.
//!
//! Free capacity is indexed per domain by servers' free-GPU count, so a search
//! looks at a handful of buckets per candidate domain and never scans GPUs.
//!
//! Preference order, all deterministic:
//! 1. the narrowest level first: one server, else one domain of the next level
//!    up (a rack), and so on up to the spread limit;
//! 2. within a level, the domain needing the fewest servers;
//! 3. then the tightest fit (fewest free GPUs left in the domain), so large
//!    holes stay free for large gangs;
//! 4. then the lowest id. Inside a domain the largest holes are used first and
//!    the last part goes to the smallest server that can take it.
//!
//! [`PlacementStrategy::Heartbeat`] replaces steps 3-4 with a seeded draw
//! (YARN's assignment as servers heartbeat); steps 1-2 still hold.

use std::collections::BTreeMap;

use gangway_plugin_sdk::{GpuTypeId, GpuTypeSet, Level, SpreadLimit};
use serde::{Deserialize, Serialize};

use crate::placement_strategy::PlacementStrategy;
use crate::server_set::ServerSet;
use crate::state::{ClusterState, GpuMask, Placement, ServerGpus};
use crate::topology::{DomainId, ServerId};

/// splitmix64: a cheap, well-mixed hash step.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A placement found by [`ClusterState::find_placement`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementChoice {
    /// The GPUs, per server.
    pub placement: Placement,
    /// The achieved locality: the narrowest level whose one domain holds it.
    pub locality: Level,
    /// Servers spanned.
    pub servers: u32,
}

/// Where a reservation holds capacity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Scope {
    /// One server.
    Server(ServerId),
    /// One domain (a rack, the cluster, ...).
    Domain(DomainId),
}

/// The `n` lowest set bits of `mask`.
pub(crate) fn lowest_bits(mask: GpuMask, n: u32) -> GpuMask {
    let mut out = 0;
    let mut m = mask;
    for _ in 0..n {
        if m == 0 {
            break;
        }
        let bit = m & m.wrapping_neg();
        out |= bit;
        m &= m - 1;
    }
    out
}

/// Free capacity per domain and the servers of each free-GPU count: the
/// cluster's own index, or one restricted to a set of servers.
trait FreeIndex {
    /// GPUs available in domain `d`.
    fn avail_in(&self, d: DomainId) -> u32;
    /// One more than the largest free-GPU count indexed.
    fn bucket_count(&self, d: DomainId) -> usize;
    /// The servers of domain `d` with exactly `c` free GPUs, lowest id first.
    fn servers_with(&self, d: DomainId, c: usize) -> impl Iterator<Item = ServerId> + Clone + '_;
    /// How many of them there are.
    fn count_with(&self, d: DomainId, c: usize) -> usize;
}

impl FreeIndex for ClusterState {
    fn avail_in(&self, d: DomainId) -> u32 {
        self.domain_avail[d.0 as usize]
    }
    fn bucket_count(&self, d: DomainId) -> usize {
        self.buckets[d.0 as usize].len()
    }
    fn servers_with(&self, d: DomainId, c: usize) -> impl Iterator<Item = ServerId> + Clone + '_ {
        self.buckets[d.0 as usize][c].iter().copied()
    }
    fn count_with(&self, d: DomainId, c: usize) -> usize {
        self.buckets[d.0 as usize][c].len()
    }
}

/// The index of a cluster restricted to a set of servers, for one search:
/// only the domains holding an allowed server with free GPUs.
struct Restricted {
    domains: BTreeMap<DomainId, (u32, Vec<Vec<ServerId>>)>,
}

impl Restricted {
    fn of(state: &ClusterState, allowed: &ServerSet) -> Restricted {
        let topo = state.topology();
        let max = topo.max_server_gpus() as usize;
        let mut domains: BTreeMap<DomainId, (u32, Vec<Vec<ServerId>>)> = BTreeMap::new();
        for s in allowed.iter() {
            let a = state.avail(s);
            let Some(server) = topo.server(s).filter(|_| a > 0) else {
                continue;
            };
            for &d in &server.ancestors {
                let entry = domains
                    .entry(d)
                    .or_insert_with(|| (0, vec![Vec::new(); max + 1]));
                entry.0 += a;
                if let Some(b) = entry.1.get_mut(a as usize) {
                    b.push(s);
                }
            }
        }
        Restricted { domains }
    }
}

impl FreeIndex for Restricted {
    fn avail_in(&self, d: DomainId) -> u32 {
        self.domains.get(&d).map_or(0, |e| e.0)
    }
    fn bucket_count(&self, d: DomainId) -> usize {
        self.domains.get(&d).map_or(0, |e| e.1.len())
    }
    fn servers_with(&self, d: DomainId, c: usize) -> impl Iterator<Item = ServerId> + Clone + '_ {
        self.domains
            .get(&d)
            .and_then(|e| e.1.get(c))
            .into_iter()
            .flatten()
            .copied()
    }
    fn count_with(&self, d: DomainId, c: usize) -> usize {
        self.domains
            .get(&d)
            .and_then(|e| e.1.get(c))
            .map_or(0, Vec::len)
    }
}

impl ClusterState {
    /// The fewest servers of domain `d` that can hold `gpus`, if any.
    fn min_servers_in(&self, ix: &impl FreeIndex, d: DomainId, gpus: u32) -> Option<u32> {
        if ix.avail_in(d) < gpus {
            return None;
        }
        let mut remaining = gpus;
        let mut k = 0u32;
        for c in (1..ix.bucket_count(d)).rev() {
            let n = ix.count_with(d, c) as u32;
            if n == 0 {
                continue;
            }
            let need = remaining.div_ceil(c as u32);
            if need <= n {
                return Some(k + need);
            }
            k += n;
            remaining -= n * c as u32;
        }
        None
    }

    /// The heartbeat draw for a search of `gpus` GPUs in `d`: a hash of the
    /// seed and the allocation state (never of wall-clock or call counts).
    fn heartbeat(&self, seed: u64, d: DomainId, gpus: u32) -> u64 {
        let state = (u64::from(self.allocated_gpus()) << 32)
            ^ ((self.allocations().len() as u64) << 8)
            ^ (u64::from(self.domain_avail[0]) << 44);
        mix(mix(seed ^ state) ^ ((u64::from(d.0) << 32) | u64::from(gpus)))
    }

    /// The single server of domain `d` that best takes `gpus` under the
    /// strategy: the smallest hole that fits (best fit), the largest
    /// (spread), or the first with room in a random heartbeat order.
    fn fit_server(
        &self,
        ix: &impl FreeIndex,
        d: DomainId,
        gpus: u32,
        skip: &[ServerId],
    ) -> Option<ServerId> {
        let pick = |c: usize| ix.servers_with(d, c).find(|s| !skip.contains(s));
        let sizes = gpus as usize..ix.bucket_count(d);
        match self.strategy {
            PlacementStrategy::BestFit => sizes.into_iter().find_map(pick),
            PlacementStrategy::Spread => sizes.into_iter().rev().find_map(pick),
            PlacementStrategy::Heartbeat { seed } => {
                let fits = || {
                    sizes
                        .clone()
                        .flat_map(|c| ix.servers_with(d, c))
                        .filter(|s| !skip.contains(s))
                };
                let n = fits().count();
                if n == 0 {
                    return None;
                }
                let r = (self.heartbeat(seed, d, gpus) % n as u64) as usize;
                fits().nth(r)
            }
        }
    }

    /// Concrete GPUs for `gpus` inside domain `d` on the fewest servers.
    fn place_in(&self, ix: &impl FreeIndex, d: DomainId, gpus: u32) -> Option<Placement> {
        let mut chosen: Vec<ServerId> = Vec::new();
        let mut parts = Vec::new();
        let mut remaining = gpus;
        while remaining > 0 {
            if let Some(s) = self.fit_server(ix, d, remaining, &chosen) {
                parts.push(ServerGpus {
                    server: s,
                    gpus: lowest_bits(self.avail_mask(s), remaining),
                });
                break;
            }
            let s = (1..ix.bucket_count(d))
                .rev()
                .find_map(|c| ix.servers_with(d, c).find(|s| !chosen.contains(s)))?;
            let mask = self.avail_mask(s);
            remaining -= mask.count_ones();
            parts.push(ServerGpus {
                server: s,
                gpus: mask,
            });
            chosen.push(s);
        }
        parts.sort_by_key(|p| p.server);
        Some(Placement { parts })
    }

    /// Finds a placement for a gang of `gpus` GPUs that spans at most one
    /// domain of `limit.level` and at most `limit.max_servers` servers (see
    /// the module docs for the preference order). `None` when no such
    /// placement exists now.
    pub fn find_placement(&self, gpus: u32, limit: SpreadLimit) -> Option<PlacementChoice> {
        self.search(self, gpus, limit)
    }

    /// [`ClusterState::find_placement`] on the servers of `allowed` only
    /// (`None`: on any server).
    pub fn find_placement_among(
        &self,
        gpus: u32,
        limit: SpreadLimit,
        allowed: Option<&ServerSet>,
    ) -> Option<PlacementChoice> {
        match allowed {
            None => self.find_placement(gpus, limit),
            Some(set) => self.search(&Restricted::of(self, set), gpus, limit),
        }
    }

    /// GPUs available to new work on the servers of `allowed` (`None`: all).
    pub fn free_gpus_among(&self, allowed: Option<&ServerSet>) -> u32 {
        match allowed {
            None => self.free_gpus(),
            Some(set) => set.iter().map(|s| self.avail(s)).sum(),
        }
    }

    /// The search of [`ClusterState::find_placement`] over an index.
    fn search(
        &self,
        ix: &impl FreeIndex,
        gpus: u32,
        limit: SpreadLimit,
    ) -> Option<PlacementChoice> {
        let root = DomainId(0);
        if gpus == 0 || gpus > ix.avail_in(root) {
            return None;
        }
        let topo = &self.topo;
        let server_level = topo.server_level();
        if (gpus as usize) < ix.bucket_count(root)
            && let Some(s) = self.fit_server(ix, root, gpus, &[])
        {
            return Some(PlacementChoice {
                placement: Placement {
                    parts: vec![ServerGpus {
                        server: s,
                        gpus: lowest_bits(self.avail_mask(s), gpus),
                    }],
                },
                locality: server_level,
                servers: 1,
            });
        }
        for level in (limit.level.0..server_level.0).rev() {
            let mut best: Option<(u32, u32, DomainId)> = None;
            for &d in topo.domains_at(Level(level)) {
                let avail = ix.avail_in(d);
                if avail < gpus {
                    continue;
                }
                if let Some(k) = self.min_servers_in(ix, d, gpus) {
                    let fit = match self.strategy {
                        PlacementStrategy::BestFit => avail,
                        PlacementStrategy::Spread => u32::MAX - avail,
                        PlacementStrategy::Heartbeat { seed } => {
                            self.heartbeat(seed, d, gpus) as u32
                        }
                    };
                    let key = (k, fit, d);
                    if best.is_none_or(|b| key < b) {
                        best = Some(key);
                    }
                }
            }
            // A wider level can only need fewer servers: look there when
            // this one needs more than the limit allows.
            if let Some((k, _, d)) = best
                && limit.allows(k)
            {
                let placement = self.place_in(ix, d, gpus)?;
                let servers = placement.servers();
                return Some(PlacementChoice {
                    locality: topo.common_level(&servers),
                    servers: placement.server_count(),
                    placement,
                });
            }
        }
        None
    }

    /// Picks where a blocked gang of `gpus` at spread limit `limit` should
    /// wait: `preferred` if it can still ever hold the gang, else the scope
    /// with the most free GPUs among those big enough (lowest id on ties).
    pub(crate) fn reservation_scope(
        &self,
        gpus: u32,
        limit: Level,
        preferred: Option<Scope>,
        types: Option<GpuTypeSet>,
    ) -> Option<Scope> {
        let topo = &self.topo;
        let typed = |t: Option<GpuTypeId>| match types {
            None => true,
            Some(set) => t.is_some_and(|t| set.contains(t)),
        };
        let big_enough = |scope: Scope| match scope {
            Scope::Server(s) => topo.server(s).is_some_and(|sv| {
                sv.gpus >= gpus
                    && self.health(s) == Some(crate::Health::Up)
                    && typed(Some(sv.gpu_type))
            }),
            Scope::Domain(d) => topo.domains().get(d.0 as usize).is_some_and(|dm| {
                dm.gpus >= gpus && dm.level == limit && typed(topo.domain_gpu_type(d))
            }),
        };
        if let Some(p) = preferred.filter(|p| big_enough(*p)) {
            return Some(p);
        }
        if limit >= topo.server_level() {
            let buckets = &self.buckets[0];
            return (1..buckets.len()).rev().find_map(|c| {
                buckets[c]
                    .iter()
                    .find(|s| big_enough(Scope::Server(**s)))
                    .map(|s| Scope::Server(*s))
            });
        }
        topo.domains_at(limit)
            .iter()
            .filter(|d| big_enough(Scope::Domain(**d)))
            .max_by_key(|d| (self.domain_avail[d.0 as usize], std::cmp::Reverse(d.0)))
            .map(|d| Scope::Domain(*d))
    }

    /// Holds up to `gpus` free GPUs inside `scope`, largest holes first,
    /// on at most `max_servers` servers (0: any number): the GPUs the gang
    /// itself would use. Returns how many were held.
    pub(crate) fn hold_in(&mut self, scope: Scope, gpus: u32, max_servers: u32) -> u32 {
        let mut plan: Vec<(ServerId, GpuMask)> = Vec::new();
        let mut remaining = gpus;
        match scope {
            Scope::Server(s) => {
                let mask = lowest_bits(self.avail_mask(s), remaining);
                remaining -= mask.count_ones();
                plan.push((s, mask));
            }
            Scope::Domain(d) => {
                let buckets = &self.buckets[d.0 as usize];
                'outer: for c in (1..buckets.len()).rev() {
                    for &s in &buckets[c] {
                        if remaining == 0 || (max_servers > 0 && plan.len() >= max_servers as usize)
                        {
                            break 'outer;
                        }
                        let mask = lowest_bits(self.avail_mask(s), remaining);
                        remaining -= mask.count_ones();
                        plan.push((s, mask));
                    }
                }
            }
        }
        for (s, mask) in plan {
            self.hold(s, mask);
        }
        gpus - remaining
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use gangway_plugin_sdk::JobId;

    use super::*;
    use crate::{Topology, TopologyBuilder};

    fn mixed() -> ClusterState {
        // rack a: 8, 8, 4 ; rack b: 4, 4, 2
        let mut b = TopologyBuilder::new();
        let a = b.add_domain(b.root(), "a").unwrap();
        let rb = b.add_domain(b.root(), "b").unwrap();
        for (name, g) in [("a0", 8), ("a1", 8), ("a2", 4)] {
            b.add_server(a, name, g).unwrap();
        }
        for (name, g) in [("b0", 4), ("b1", 4), ("b2", 2)] {
            b.add_server(rb, name, g).unwrap();
        }
        ClusterState::new(Arc::new(b.build().unwrap()))
    }

    #[test]
    fn single_server_best_fit() {
        let st = mixed();
        let c = st.find_placement(2, SpreadLimit::level(Level(2))).unwrap();
        assert_eq!(c.placement.servers(), vec![ServerId(5)]); // the 2-GPU server
        let c = st.find_placement(3, SpreadLimit::level(Level(2))).unwrap();
        assert_eq!(c.placement.servers(), vec![ServerId(2)]); // first 4-GPU server
        assert_eq!(c.locality, Level(2));
        assert!(st.find_placement(9, SpreadLimit::level(Level(2))).is_none());
    }

    #[test]
    fn fewest_servers_then_tightest_domain() {
        let st = mixed();
        // 10 GPUs: rack a needs 2 servers (8+2 -> 8 + best-fit 4), rack b needs 3.
        let c = st.find_placement(10, SpreadLimit::level(Level(1))).unwrap();
        assert_eq!(c.servers, 2);
        assert_eq!(c.locality, Level(1));
        assert_eq!(c.placement.servers(), vec![ServerId(0), ServerId(2)]);
        assert_eq!(c.placement.gpu_count(), 10);
        // 24 GPUs fit in no rack; the cluster level spans both.
        assert!(
            st.find_placement(24, SpreadLimit::level(Level(1)))
                .is_none()
        );
        let c = st
            .find_placement(24, SpreadLimit::level(Level::ANY))
            .unwrap();
        assert_eq!(c.locality, Level::ANY);
        assert_eq!(c.servers, 4);
    }

    #[test]
    fn search_respects_allocations_and_level_preference() {
        let mut st = mixed();
        let c = st
            .find_placement(8, SpreadLimit::level(Level::ANY))
            .unwrap();
        assert_eq!(c.servers, 1, "one server beats any wider placement");
        st.allocate(JobId(1), &c.placement).unwrap();
        let c = st
            .find_placement(8, SpreadLimit::level(Level::ANY))
            .unwrap();
        st.allocate(JobId(2), &c.placement).unwrap();
        // Rack a has 4 left, rack b 10: an 8-GPU gang now needs 2 servers of b.
        let c = st
            .find_placement(8, SpreadLimit::level(Level::ANY))
            .unwrap();
        assert_eq!(c.locality, Level(1));
        assert_eq!(c.placement.servers(), vec![ServerId(3), ServerId(4)]);
        st.check_invariants().unwrap();
    }

    #[test]
    fn spread_strategy_takes_the_emptiest_server() {
        let mut st = mixed();
        st.set_strategy(PlacementStrategy::Spread);
        let c = st.find_placement(2, SpreadLimit::level(Level(2))).unwrap();
        assert_eq!(c.placement.servers(), vec![ServerId(0)], "an 8-GPU server");
        st.allocate(JobId(1), &c.placement).unwrap();
        let c = st.find_placement(1, SpreadLimit::level(Level(2))).unwrap();
        assert_eq!(
            c.placement.servers(),
            vec![ServerId(1)],
            "the other untouched 8-GPU server"
        );
        // Rack a can hold 10 GPUs on 2 servers, rack b only on 3: the fewest
        // servers still come first, whatever the strategy.
        let c = st.find_placement(10, SpreadLimit::level(Level(1))).unwrap();
        assert_eq!(c.servers, 2);
        st.check_invariants().unwrap();
    }

    #[test]
    fn heartbeat_picks_fitting_servers_at_random_but_deterministically() {
        let topo = Arc::new(Topology::uniform(2, 16, 8).unwrap());
        let run = |seed| {
            let mut st = ClusterState::new(Arc::clone(&topo));
            st.set_strategy(PlacementStrategy::Heartbeat { seed });
            let mut used = Vec::new();
            for j in 0..64u64 {
                let c = st.find_placement(2, SpreadLimit::level(Level(2))).unwrap();
                assert_eq!(c.servers, 1);
                used.push(c.placement.servers()[0]);
                st.allocate(JobId(j), &c.placement).unwrap();
            }
            st.check_invariants().unwrap();
            used
        };
        let a = run(7);
        assert_eq!(a, run(7), "same seed, same placements");
        assert_ne!(a, run(8), "another seed, another heartbeat order");
        // Random first fit scatters small jobs over many servers (best fit
        // would pack 64 x 2 GPUs onto 16 servers, spread onto all 32).
        let distinct: std::collections::BTreeSet<_> = a.iter().collect();
        assert!(
            (17..32).contains(&distinct.len()),
            "{} servers",
            distinct.len()
        );
        // A gang still gets the fewest servers: 16 GPUs on two whole servers.
        let mut st = ClusterState::new(Arc::clone(&topo));
        st.set_strategy(PlacementStrategy::Heartbeat { seed: 3 });
        let c = st.find_placement(16, SpreadLimit::level(Level(1))).unwrap();
        assert_eq!(c.servers, 2);
    }

    #[test]
    fn a_server_bound_widens_the_search_or_refuses() {
        // Two racks of 8-GPU servers; rack 0 has 1 GPU free on each of its 4
        // servers, rack 1 is empty.
        let mut st = ClusterState::new(Arc::new(Topology::uniform(2, 4, 8).unwrap()));
        for s in 0..4 {
            let p = Placement {
                parts: vec![ServerGpus {
                    server: ServerId(s),
                    gpus: 0x7f,
                }],
            };
            st.allocate(JobId(100 + u64::from(s)), &p).unwrap();
        }
        // 4 GPUs in rack 0 need 4 servers; rack 1 holds them on one.
        let c = st.find_placement(4, SpreadLimit::new(Level(1), 1)).unwrap();
        assert_eq!(c.servers, 1);
        st.allocate(JobId(1), &c.placement).unwrap();
        // 16 GPUs: rack 1 has 8+8+8+4 free: 2 servers.
        let c = st
            .find_placement(16, SpreadLimit::new(Level(1), 2))
            .unwrap();
        assert_eq!(c.servers, 2);
        // 26 GPUs fit in rack 1 (4 + 8 + 8 + 8 free) only on 4 servers.
        assert!(
            st.find_placement(26, SpreadLimit::new(Level(1), 3))
                .is_none()
        );
        assert_eq!(
            st.find_placement(26, SpreadLimit::new(Level(1), 4))
                .map(|c| c.servers),
            Some(4)
        );
        st.check_invariants().unwrap();
    }

    #[test]
    fn reservation_holds_only_what_is_needed() {
        let mut st = ClusterState::new(Arc::new(Topology::uniform(2, 2, 8).unwrap()));
        let c = st.find_placement(12, SpreadLimit::level(Level(1))).unwrap();
        st.allocate(JobId(1), &c.placement).unwrap();
        let scope = st.reservation_scope(16, Level(1), None, None).unwrap();
        assert_eq!(
            scope,
            Scope::Domain(DomainId(2)),
            "the rack with most free GPUs"
        );
        assert_eq!(st.hold_in(scope, 16, 0), 16);
        assert_eq!(st.free_gpus(), 4);
        st.clear_holds();
        let scope = st.reservation_scope(16, Level(1), Some(Scope::Domain(DomainId(1))), None);
        assert_eq!(scope, Some(Scope::Domain(DomainId(1))), "sticky");
        assert_eq!(st.hold_in(Scope::Domain(DomainId(1)), 16, 0), 4);
        st.check_invariants().unwrap();
    }

    #[test]
    fn a_search_among_servers_stays_among_them() {
        let st = mixed();
        let limit = SpreadLimit::level(Level::ANY);
        // Rack a (servers 0-2) only: 10 GPUs fit there, 21 do not.
        let rack_a: ServerSet = [ServerId(0), ServerId(1), ServerId(2)]
            .into_iter()
            .collect();
        let c = st.find_placement_among(10, limit, Some(&rack_a)).unwrap();
        assert!(c.placement.parts.iter().all(|p| rack_a.contains(p.server)));
        assert!(st.find_placement_among(21, limit, Some(&rack_a)).is_none());
        assert_eq!(st.free_gpus_among(Some(&rack_a)), 20);
        // One small server: the 2-GPU one, though best fit would take it anyway.
        let one: ServerSet = [ServerId(5)].into_iter().collect();
        assert!(st.find_placement_among(3, limit, Some(&one)).is_none());
        let c = st.find_placement_among(2, limit, Some(&one)).unwrap();
        assert_eq!(c.placement.parts[0].server, ServerId(5));
    }

    proptest::proptest! {
        /// Searching among every server is the unrestricted search.
        #[test]
        fn a_search_among_every_server_is_the_search(
            taken in proptest::collection::vec((0u32..6, 0u64..256), 0..6),
            gpus in 1u32..30,
            level in 0u8..3,
            strategy in 0u8..3,
        ) {
            let mut st = mixed();
            st.set_strategy(match strategy {
                0 => PlacementStrategy::BestFit,
                1 => PlacementStrategy::Spread,
                _ => PlacementStrategy::Heartbeat { seed: 7 },
            });
            for (i, (s, mask)) in taken.into_iter().enumerate() {
                let server = ServerId(s);
                let m = mask & st.avail_mask(server);
                if m != 0 {
                    let p = Placement { parts: vec![ServerGpus { server, gpus: m }] };
                    let _ = st.allocate(JobId(i as u64 + 100), &p);
                }
            }
            let every: ServerSet = (0..st.topology().servers().len() as u32).map(ServerId).collect();
            let limit = SpreadLimit::level(Level(level));
            proptest::prop_assert_eq!(
                st.find_placement_among(gpus, limit, Some(&every)),
                st.find_placement(gpus, limit)
            );
        }
    }
}
