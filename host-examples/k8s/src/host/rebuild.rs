//! Step 1 of a cycle: the topology rebuilt when the GPU nodes' shape
//! changed (after the node guard waited their signals out), and the
//! virtual clusters' quotas (per GPU type ones named by type: applied
//! again when the topology, so its types, is rebuilt).

use std::collections::{BTreeMap, BTreeSet};

use gangway_core::policy::PolicySet;
use gangway_core::{Scheduler, TypeQuotas, VcId};

use super::{FOREIGN_VC, Host, VcQuota, VcTable, gang_key};
use crate::K8sError;
use crate::gangs::GangKey;
use crate::objects::{NodeInfo, PodInfo};
use crate::report::Action;
use crate::{topology, vcs};

impl Host {
    /// Rebuilds the scheduler when the GPU nodes' shape changed. Gangs
    /// with a pod on a node that left the topology are evicted whole first.
    pub(super) fn sync_topology(
        &mut self,
        nodes: &[NodeInfo],
        pods: &[PodInfo],
        out: &mut Vec<Action>,
    ) -> Result<(), K8sError> {
        let shape = topology::shape(nodes);
        let same = self.map.as_ref().is_some_and(|m| {
            let mut kept = shape.clone();
            kept.retain(|s| m.skipped.iter().all(|(n, _)| *n != s.name));
            kept == m.shape
        });
        if same || (self.map.is_none() && shape.is_empty()) {
            return Ok(());
        }
        let names: BTreeSet<&str> = shape.iter().map(|s| s.name.as_str()).collect();
        self.evict_on_gone_nodes(nodes, pods, &names, out);
        let map = topology::build(nodes, &self.levels).map_err(K8sError::Topology)?;
        let policies = match self.sched.as_mut() {
            Some(s) => std::mem::replace(s.policies_mut(), PolicySet::fallbacks()),
            None => self.parked.take().unwrap_or_else(PolicySet::fallbacks),
        };
        let Some(map) = map else {
            self.parked = Some(policies);
            self.sched = None;
            self.map = None;
            return Ok(());
        };
        tracing::info!(
            nodes = map.shape.len(),
            gpus = map.topology.total_gpus(),
            "topology (re)built from the GPU nodes"
        );
        for (node, why) in &map.skipped {
            tracing::warn!(node, "node left out of the topology: {why}");
        }
        let mut sched = Scheduler::with_policies(map.topology.clone(), policies);
        sched.set_placement_strategy(self.strategy);
        sched.set_view_window(self.view_window);
        sched.set_min_run_before_stop(self.min_run_s);
        self.sched = Some(sched);
        self.map = Some(map);
        self.vc_ids.clear();
        self.vcs = VcTable::default();
        self.vc(FOREIGN_VC);
        // Every gang is submitted again; reconcile adopts the bound ones
        // (and the foreign load) where their pods are.
        for e in self.gangs.values_mut() {
            e.job = None;
            e.nominated = None;
        }
        self.by_job.clear();
        self.foreign.clear();
        self.stats.topology_rebuilds += 1;
        Ok(())
    }

    /// Evicts every gang with a live pod on a node not in `names`: deleted,
    /// or without GPUs past the guard's grace.
    fn evict_on_gone_nodes(
        &mut self,
        nodes: &[NodeInfo],
        pods: &[PodInfo],
        names: &BTreeSet<&str>,
        out: &mut Vec<Action>,
    ) {
        let Some(map) = &self.map else { return };
        let gone: Vec<&str> = map
            .shape
            .iter()
            .map(|s| s.name.as_str())
            .filter(|n| !names.contains(n))
            .collect();
        if gone.is_empty() {
            return;
        }
        let mut hit: BTreeMap<GangKey, String> = BTreeMap::new();
        for p in pods
            .iter()
            .filter(|p| p.ours && p.holds() && !p.terminating)
        {
            if let Some(node) = p.node.as_deref().filter(|n| gone.contains(n)) {
                hit.entry(gang_key(p)).or_insert_with(|| node.to_string());
            }
        }
        let drained = self.guard.grace().gpu_drop_ms / 1000;
        for (key, node) in hit {
            let pods: Vec<(String, String)> = pods
                .iter()
                .filter(|p| p.ours && gang_key(p) == key && p.holds() && !p.terminating)
                .map(|p| (p.namespace.clone(), p.name.clone()))
                .collect();
            let why = if nodes.iter().any(|n| n.name == node) {
                format!("node {node} has had no GPUs for {drained} s")
            } else {
                format!("node {node} was deleted")
            };
            self.evict(&key, pods, &why, true, out);
        }
    }

    /// Applies a changed VC table: quotas of known VCs (a VC registered
    /// later, after a rebuild too, gets its quota in [`Host::vc`]). What
    /// is wrong with the table is logged once per change.
    pub(super) fn sync_vcs(&mut self, table: &VcTable) {
        if self.vcs == *table {
            return;
        }
        for problem in &table.problems {
            tracing::warn!("{problem}");
        }
        self.vcs = table.clone();
        let Some(sched) = self.sched.as_mut() else {
            return;
        };
        for (name, id) in &self.vc_ids {
            if name != FOREIGN_VC {
                apply_quota(sched, *id, name, table);
            }
        }
    }
}

/// Gives VC `id` (named `name`) its quota in `table`: GPUs of any type, or
/// per GPU type (the types the topology has; the others are warned of and
/// ignored), or none.
pub(super) fn apply_quota(sched: &mut Scheduler, id: VcId, name: &str, table: &VcTable) {
    match table.quota(name) {
        VcQuota::Typed(by_name) => {
            let (quotas, unknown) = vcs::resolve(by_name, sched.topology());
            if !unknown.is_empty() {
                let has: Vec<&str> = sched
                    .topology()
                    .gpu_types()
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect();
                let none_left = unknown.len() == by_name.len();
                tracing::warn!(
                    "{}: key {name:?}: GPU types the cluster does not have are ignored: {} \
                     (it has {}){}",
                    table.source,
                    unknown.join(", "),
                    has.join(", "),
                    if none_left {
                        "; it names no type the cluster has, so its gangs wait"
                    } else {
                        ""
                    }
                );
            }
            sched.set_type_quotas(id, quotas);
        }
        other => {
            sched.set_type_quotas(id, TypeQuotas::new());
            sched.set_quota(id, other.pooled());
        }
    }
}
