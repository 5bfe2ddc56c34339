//! Before a round: where each waiting gang's pods may run. A gang is
//! restricted to the nodes where every kind of pod it has passes
//! kube-scheduler's filters ([`fit`](crate::fit)): its node selector and
//! required affinity, the node's taints, and what is left of the node's
//! allocatable after every pod on it (ours and others', and the Bindings
//! the cache does not show yet). After a round, a start is checked again
//! with all the pods it puts on each node; a node that cannot hold them
//! together is left out for that gang until it is placed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use gangway_core::{ServerId, ServerSet};

use super::Host;
use crate::fit::{self, PodNeeds, Resources};
use crate::gangs::{GangKey, GangView};
use crate::objects::{NodeInfo, PodInfo};
use crate::plan::Plan;

/// What each node has given out this cycle: requests of its pods.
pub(super) type Usage = BTreeMap<String, Resources>;

/// Where a gang's pods fit, and why not elsewhere.
#[derive(Clone, Debug, Default)]
pub(super) struct Fits {
    /// The nodes (servers) every pod of the gang may run on; `None`: all.
    pub(super) allowed: Option<Arc<ServerSet>>,
    /// Nodes left out, counted by reason (kube-scheduler's words).
    pub(super) unfit: BTreeMap<String, u32>,
    /// Nodes considered.
    pub(super) nodes: u32,
}

impl Fits {
    /// `0/9 nodes are available: 3 Insufficient cpu, 6 node(s) had
    /// untolerated taint {gpu=a100:NoSchedule}`, as kube-scheduler says it.
    pub(super) fn message(&self) -> String {
        let fit = self.allowed.as_ref().map_or(self.nodes, |a| a.len());
        let why: Vec<String> = self.unfit.iter().map(|(r, n)| format!("{n} {r}")).collect();
        format!(
            "{fit}/{} nodes are available: {}",
            self.nodes,
            why.join(", ")
        )
    }
}

/// Adds `count` pods needing `needs` to `node`'s usage.
fn charge(usage: &mut Usage, node: &str, needs: &PodNeeds, count: i128) {
    let u = usage.entry(node.to_string()).or_default();
    for (r, v) in &needs.requests {
        *u.entry(r.clone()).or_default() += v.saturating_mul(count);
    }
}

impl Host {
    /// The usage of every node: what the caches show, plus the Bindings
    /// they do not show yet and the starts waiting for evictions.
    pub(super) fn usage(&self, base: &Usage, pods: &[PodInfo]) -> Usage {
        let mut usage = base.clone();
        let by_key: BTreeMap<(&str, &str), &PodInfo> = pods
            .iter()
            .map(|p| ((p.namespace.as_str(), p.name.as_str()), p))
            .collect();
        for ((ns, name), c) in self.claims.iter() {
            if let Some(p) = by_key.get(&(ns.as_str(), name.as_str()))
                && p.node.is_none()
            {
                charge(&mut usage, &c.node, &p.needs, 1);
            }
        }
        for (key, e) in &self.gangs {
            let Some(n) = &e.nominated else { continue };
            for place in &n.plan.places {
                if let Some(p) = by_key.get(&(key.namespace(), place.pod.as_str())) {
                    charge(&mut usage, &place.node, &p.needs, 1);
                }
            }
        }
        usage
    }

    /// Restricts every pending gang to the nodes its pods fit (see the
    /// module docs); returns, per gang restricted, where it fits and why
    /// not elsewhere.
    pub(super) fn restrict_pending(
        &mut self,
        views: &BTreeMap<GangKey, GangView<'_>>,
        nodes: &[NodeInfo],
        usage: &Usage,
    ) -> BTreeMap<GangKey, Fits> {
        let mut out = BTreeMap::new();
        let Some(map) = &self.map else { return out };
        let servers: Vec<(ServerId, &NodeInfo)> = nodes
            .iter()
            .filter_map(|n| map.server(&n.name).map(|s| (s, n)))
            .collect();
        let mut by_shape: BTreeMap<Arc<PodNeeds>, Fits> = BTreeMap::new();
        let pending: Vec<(GangKey, gangway_core::JobId)> = self
            .gangs
            .iter()
            .filter_map(|(k, e)| Some((k.clone(), e.job?)))
            .filter(|(_, j)| {
                self.sched
                    .as_ref()
                    .and_then(|s| s.job(*j))
                    .is_some_and(|j| j.is_pending())
            })
            .collect();
        for (key, job) in pending {
            let Some(view) = views.get(&key) else {
                continue;
            };
            let excluded = self
                .gangs
                .get(&key)
                .map(|e| e.excluded.clone())
                .unwrap_or_default();
            let fits = gang_fits(view, &servers, usage, &excluded, &mut by_shape);
            if let Some(s) = self.sched.as_mut() {
                let _ = s.restrict(job, fits.allowed.clone());
            }
            if fits.allowed.is_some() {
                out.insert(key, fits);
            }
        }
        out
    }

    /// Whether the pods of a start fit each node it puts them on, together
    /// (`usage` already holds this cycle's earlier starts); if not, the
    /// node that cannot hold them, which the gang leaves out from now on.
    pub(super) fn check_start(
        &mut self,
        view: &GangView<'_>,
        plan: &Plan,
        nodes: &BTreeMap<&str, &NodeInfo>,
        usage: &mut Usage,
    ) -> Result<(), String> {
        let mut per_node: BTreeMap<&str, BTreeMap<Arc<PodNeeds>, i128>> = BTreeMap::new();
        for place in &plan.places {
            if let Some(p) = view.pods.iter().find(|p| p.name == place.pod) {
                *per_node
                    .entry(place.node.as_str())
                    .or_default()
                    .entry(Arc::clone(&p.needs))
                    .or_default() += 1;
            }
        }
        for (node, shapes) in &per_node {
            let Some(info) = nodes.get(node) else {
                continue;
            };
            let mut used = usage.get(*node).cloned().unwrap_or_default();
            for (needs, count) in shapes {
                let fit = fit::static_fit(needs, node, &info.facts)
                    .and_then(|()| fit::resources_fit(needs, *count, &info.facts, Some(&used)));
                if let Err(why) = fit {
                    if let (Some(map), Some(e)) = (&self.map, self.gangs.get_mut(&view.key))
                        && let Some(s) = map.server(node)
                    {
                        e.excluded.insert(s);
                    }
                    return Err(format!(
                        "node {node} cannot hold its {count} pods there: {why}"
                    ));
                }
                for (r, v) in &needs.requests {
                    *used.entry(r.clone()).or_default() += v.saturating_mul(*count);
                }
            }
        }
        for (node, shapes) in per_node {
            for (needs, count) in shapes {
                charge(usage, node, &needs, count);
            }
        }
        Ok(())
    }
}

/// Where every pod of a gang fits: the intersection of its kinds of pod's
/// nodes (each kind's computed once a cycle, in `by_shape`), less the
/// nodes `excluded` for it; `allowed` is `None` when that is every node.
fn gang_fits(
    view: &GangView<'_>,
    servers: &[(ServerId, &NodeInfo)],
    usage: &Usage,
    excluded: &BTreeSet<ServerId>,
    by_shape: &mut BTreeMap<Arc<PodNeeds>, Fits>,
) -> Fits {
    let mut fits = Fits {
        nodes: servers.len() as u32,
        ..Fits::default()
    };
    // `None`: every server (no kind of pod restricts it).
    let mut allowed: Option<Arc<ServerSet>> = None;
    let shapes: BTreeSet<Arc<PodNeeds>> = view.live().map(|p| Arc::clone(&p.needs)).collect();
    for shape in shapes {
        let one = by_shape
            .entry(Arc::clone(&shape))
            .or_insert_with(|| fits_of(&shape, servers, usage));
        for (r, n) in &one.unfit {
            *fits.unfit.entry(r.clone()).or_default() += n;
        }
        if let Some(set) = &one.allowed {
            allowed = Some(match allowed {
                None => Arc::clone(set),
                Some(a) => Arc::new(a.iter().filter(|s| set.contains(*s)).collect()),
            });
        }
    }
    if !excluded.is_empty() {
        let every = || servers.iter().map(|(s, _)| *s).collect::<ServerSet>();
        let before = allowed.take().map_or_else(every, |a| (*a).clone());
        let kept: ServerSet = before.iter().filter(|s| !excluded.contains(s)).collect();
        let n = before.len() - kept.len();
        if n > 0 {
            *fits
                .unfit
                .entry("node(s) could not hold all its pods".into())
                .or_default() += n;
        }
        allowed = Some(Arc::new(kept));
    }
    fits.allowed = allowed.filter(|a| a.len() < servers.len() as u32);
    fits
}

/// Where pods needing `needs` fit one at a time, and why not elsewhere.
fn fits_of(needs: &PodNeeds, servers: &[(ServerId, &NodeInfo)], usage: &Usage) -> Fits {
    let mut fits = Fits {
        nodes: servers.len() as u32,
        ..Fits::default()
    };
    let mut set = ServerSet::new();
    for (s, n) in servers {
        let fit = fit::static_fit(needs, &n.name, &n.facts)
            .and_then(|()| fit::resources_fit(needs, 1, &n.facts, usage.get(&n.name)));
        match fit {
            Ok(()) => {
                set.insert(*s);
            }
            Err(why) => *fits.unfit.entry(why.to_string()).or_default() += 1,
        }
    }
    if set.len() < servers.len() as u32 {
        fits.allowed = Some(Arc::new(set));
    }
    fits
}

impl Host {
    /// What nodes that take new work have free, by resource: allocatable
    /// less what their pods request; GPUs as the books count them.
    pub(super) fn free_totals(&self, nodes: &[NodeInfo], usage: &Usage) -> Resources {
        let mut out = Resources::new();
        for n in nodes
            .iter()
            .filter(|n| n.health == gangway_core::Health::Up)
        {
            let used = usage.get(&n.name);
            for (r, v) in &n.facts.allocatable {
                if *r == self.gpu_resource {
                    continue;
                }
                let taken = used.and_then(|u| u.get(r)).copied().unwrap_or(0);
                *out.entry(r.clone()).or_default() += (v - taken).max(0);
            }
        }
        let gpus = self.sched.as_ref().map_or(0, |s| s.state().free_gpus());
        out.insert(self.gpu_resource.clone(), i128::from(gpus) * 1_000);
        out
    }

    /// What of `min` the cluster does not have free now, in words (`None`:
    /// it has all of it).
    pub(super) fn short_of(&self, min: &Resources) -> Option<String> {
        let short: Vec<String> = min
            .iter()
            .filter(|(r, want)| self.free_now.get(*r).copied().unwrap_or(0) < **want)
            .map(|(r, want)| {
                let have = self.free_now.get(r).copied().unwrap_or(0);
                format!("{r} {} wanted, {} free", want / 1_000, have / 1_000)
            })
            .collect();
        (!short.is_empty()).then(|| short.join(", "))
    }
}
