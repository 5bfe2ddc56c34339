//! Steps 3 and 4 of a cycle: what each gang holds, as the cluster shows it
//! (its pods' bindings and GPU annotations) plus the Bindings the cache
//! does not show yet; every other GPU-holding pod as foreign load; and the
//! scheduler reconciled with that truth.

use std::collections::{BTreeMap, BTreeSet};

use gangway_core::reconcile::{Difference, EngineTruth};
use gangway_core::{Health, JobId, Placement, ServerGpus, ServerId};

use super::{FOREIGN_BIT, FOREIGN_VC, Host, Inputs};
use crate::gangs::{GangKey, GangView};
use crate::objects::{NodeInfo, PodInfo};
use crate::report::Action;
use crate::topology::ClusterMap;

/// Where a submitted gang's GPUs are this cycle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Hold {
    /// Its pods hold these GPUs (bound, or with a Binding sent).
    Held(Placement),
    /// None of its pods holds a GPU.
    Nothing,
    /// It cannot run as planned: a pod of its plan was deleted while it
    /// ran, or a node it runs on was lost (`lost`: past its grace).
    Broken {
        /// Why.
        why: String,
        /// A node of it is lost: its pods are deleted at once.
        lost: bool,
    },
    /// Its pods are on nodes the topology does not have (a node without
    /// GPUs that has not come back): left alone, not counted.
    Unmapped,
}

/// GPUs of each server held by pods and Bindings, as bit masks.
pub(super) type Occupied = BTreeMap<ServerId, u64>;

/// A bit mask of GPU indices below `gpus`.
fn mask_of(indices: &[u32], gpus: u32) -> u64 {
    indices
        .iter()
        .filter(|g| **g < gpus && **g < 64)
        .fold(0u64, |m, g| m | 1 << g)
}

impl Host {
    /// What each submitted gang (not evicting, not waiting for GPUs to be
    /// left) holds now.
    pub(super) fn holds(
        &self,
        views: &BTreeMap<GangKey, GangView<'_>>,
        nodes: &[NodeInfo],
    ) -> BTreeMap<GangKey, Hold> {
        let Some(map) = &self.map else {
            return BTreeMap::new();
        };
        let down: BTreeSet<&str> = nodes
            .iter()
            .filter(|n| n.health == Health::Down)
            .map(|n| n.name.as_str())
            .collect();
        let mut out = BTreeMap::new();
        for (key, e) in &self.gangs {
            if e.job.is_none() || e.evicting || e.nominated.is_some() {
                continue;
            }
            let hold = self.hold_of(map, views.get(key), key, &down);
            out.insert(key.clone(), hold);
        }
        out
    }

    /// One gang's [`Hold`].
    fn hold_of(
        &self,
        map: &ClusterMap,
        view: Option<&GangView<'_>>,
        key: &GangKey,
        down: &BTreeSet<&str>,
    ) -> Hold {
        let mut parts: BTreeMap<ServerId, u64> = BTreeMap::new();
        let claimed = self.claims.iter().any(|(_, c)| c.gang == *key);
        if let Some(view) = view {
            if let Some(plan) = &view.plan {
                let missing: Vec<&str> = plan
                    .places
                    .iter()
                    .filter(|pl| view.pods.iter().all(|p| p.name != pl.pod))
                    .map(|pl| pl.pod.as_str())
                    .collect();
                if !missing.is_empty() {
                    let why = format!(
                        "pod {} of the gang was deleted while it ran",
                        missing.join(", ")
                    );
                    return Hold::Broken { why, lost: false };
                }
            }
            // A gang holds the GPUs of its pods that run: a pod that ended
            // gives its share back at once (the scheduler shrinks the gang),
            // and the gang ends when none holds anything.
            let running = claimed || view.live().any(|p| p.node.is_some());
            for p in view.live().filter(|p| p.node.is_some()) {
                let Some(node) = p.node.as_deref() else {
                    continue;
                };
                if down.contains(node) {
                    let grace = self.guard.grace().not_ready_ms / 1000;
                    let why = format!("node {node} has been NotReady for over {grace} s");
                    return Hold::Broken { why, lost: true };
                }
                let Some(server) = map.server(node) else {
                    return Hold::Unmapped;
                };
                let indices = p.gpu_indices.clone().or_else(|| {
                    let plan = view.plan.as_ref()?;
                    Some(plan.place(&p.name)?.gpus.clone())
                });
                *parts.entry(server).or_default() |=
                    mask_of(&indices.unwrap_or_default(), map.gpus(server));
            }
            // Pods of a gang bound in part hold the GPUs of its plan: they
            // are bound there next (roll-forward).
            if let Some(plan) = view.plan.as_ref().filter(|_| running) {
                for p in view.unbound() {
                    let Some(place) = plan.place(&p.name) else {
                        continue;
                    };
                    let Some(server) = map.server(&place.node) else {
                        return Hold::Unmapped;
                    };
                    *parts.entry(server).or_default() |= mask_of(&place.gpus, map.gpus(server));
                }
            }
        }
        for (_, c) in self.claims.iter().filter(|(_, c)| c.gang == *key) {
            let Some(server) = map.server(&c.node) else {
                return Hold::Unmapped;
            };
            *parts.entry(server).or_default() |= mask_of(&c.gpus, map.gpus(server));
        }
        parts.retain(|_, m| *m != 0);
        if parts.is_empty() {
            return Hold::Nothing;
        }
        Hold::Held(Placement {
            parts: parts
                .into_iter()
                .map(|(server, gpus)| ServerGpus { server, gpus })
                .collect(),
        })
    }

    /// Step 4: the engine's truth, reconciled; gangs it interrupted
    /// evicted.
    pub(super) fn reconcile(
        &mut self,
        views: &BTreeMap<GangKey, GangView<'_>>,
        holds: &BTreeMap<GangKey, Hold>,
        nodes: &[NodeInfo],
        input: &Inputs<'_>,
        now: u64,
        out: &mut Vec<Action>,
    ) {
        let mut truth = EngineTruth::default();
        let mut held: BTreeSet<&GangKey> = BTreeSet::new();
        for (key, hold) in holds {
            let (Hold::Held(placement), Some(job)) =
                (hold, self.gangs.get(key).and_then(|e| e.job))
            else {
                continue;
            };
            truth.running.insert(job, placement.clone());
            held.insert(key);
        }
        // The pods (and Bindings not yet seen) of the gangs held: one pass
        // over each, not one per gang.
        let mut mine: BTreeSet<&str> = self
            .claims
            .iter()
            .filter(|(_, c)| held.contains(&c.gang))
            .map(|(_, c)| c.uid.as_str())
            .collect();
        mine.extend(
            input
                .pods
                .iter()
                .filter(|p| p.ours && !p.terminating && p.holds())
                .filter(|p| held.contains(&super::gang_key(p)))
                .map(|p| p.uid.as_str()),
        );
        let mut nominated: BTreeMap<ServerId, u64> = BTreeMap::new();
        for e in self.gangs.values() {
            if let (Some(n), Some(job)) = (&e.nominated, e.job) {
                truth.running.insert(job, n.placement.clone());
                for part in &n.placement.parts {
                    *nominated.entry(part.server).or_default() |= part.gpus;
                }
            }
        }
        let mine: BTreeSet<String> = mine.into_iter().map(String::from).collect();
        self.foreign_truth(input.pods, &mine, &nominated, &mut truth);
        let Some(map) = &self.map else { return };
        for n in nodes {
            if let Some(s) = map.server(&n.name) {
                truth.health.insert(s, n.health);
            }
        }
        let foreign_vc = self.vc_ids.get(FOREIGN_VC).copied();
        let Some(sched) = self.sched.as_mut() else {
            return;
        };
        let diffs = sched.reconcile(&truth, foreign_vc, now);
        for d in diffs {
            self.on_difference(d, views, out);
        }
    }

    /// GPUs held outside our running gangs, as foreign load: other
    /// schedulers' GPU pods (each keeps the GPUs it was first given, the
    /// highest free indices of its node), and ours on their way out (being
    /// deleted, of a gang evicted, or with a Binding the cache does not
    /// show yet), which hold the GPUs of their annotation until they are
    /// gone. GPUs a start waits for (`nominated`) are that start's.
    fn foreign_truth(
        &mut self,
        pods: &[PodInfo],
        mine: &BTreeSet<String>,
        nominated: &BTreeMap<ServerId, u64>,
        truth: &mut EngineTruth,
    ) {
        let (Some(map), Some(sched)) = (&self.map, &self.sched) else {
            return;
        };
        let mut seen = BTreeSet::new();
        let mut taken: BTreeMap<ServerId, u64> = nominated.clone();
        for (_, node, mask) in self.foreign.values() {
            if let Some(s) = map.server(node) {
                *taken.entry(s).or_default() |= mask;
            }
        }
        let mut holders: Vec<(&str, &str, Option<Vec<u32>>, u32)> = Vec::new();
        for p in pods.iter().filter(|p| p.holds() && !mine.contains(&p.uid)) {
            let Ok(want) = p.gpus.clone() else { continue };
            let Some(node) = p.node.as_deref() else {
                continue;
            };
            let exact = (p.ours && p.gpu_indices.is_some()).then(|| p.gpu_indices.clone());
            holders.push((p.uid.as_str(), node, exact.flatten(), want));
        }
        for (_, c) in self.claims.iter().filter(|(_, c)| !mine.contains(&c.uid)) {
            holders.push((c.uid.as_str(), c.node.as_str(), Some(c.gpus.clone()), 0));
        }
        for (uid, node, exact, want) in holders {
            let Some(server) = map.server(node) else {
                continue;
            };
            if exact.is_none() && want == 0 {
                continue;
            }
            seen.insert(uid.to_string());
            let gpus = map.gpus(server);
            let entry = self.foreign.entry(uid.to_string()).or_insert_with(|| {
                let used = taken.get(&server).copied().unwrap_or(0);
                let mask = match &exact {
                    Some(idx) => mask_of(idx, gpus),
                    None => (0..gpus)
                        .rev()
                        .filter(|g| used >> g & 1 == 0 && sched.state().owner(server, *g).is_none())
                        .take(want as usize)
                        .fold(0u64, |m, g| m | 1 << g),
                };
                *taken.entry(server).or_default() |= mask;
                let id = JobId(FOREIGN_BIT | self.next_foreign);
                self.next_foreign += 1;
                (id, node.to_string(), mask)
            });
            let mask = entry.2 & !nominated.get(&server).copied().unwrap_or(0);
            if mask != 0 {
                let part = ServerGpus { server, gpus: mask };
                truth
                    .running
                    .insert(entry.0, Placement { parts: vec![part] });
            }
        }
        self.foreign.retain(|uid, _| seen.contains(uid));
    }

    /// What a reconcile difference means for our gangs.
    fn on_difference(
        &mut self,
        d: Difference,
        views: &BTreeMap<GangKey, GangView<'_>>,
        out: &mut Vec<Action>,
    ) {
        match d {
            Difference::Health {
                server,
                now,
                interrupted,
                ..
            } => {
                let node = self
                    .map
                    .as_ref()
                    .map_or("?".into(), |m| m.node(server).to_string());
                tracing::warn!(node, health = ?now, "node health changed");
                for job in interrupted {
                    if let Some(key) = self.by_job.get(&job).cloned() {
                        let why = format!("node {node} is {}", health_word(now));
                        let pods = self.evictable(views, &key);
                        self.evict(&key, pods, &why, now == Health::Down, out);
                    }
                }
            }
            Difference::Unresolved { job, why } => {
                if let Some(key) = self.by_job.get(&job).cloned() {
                    let pods = self.evictable(views, &key);
                    self.evict(&key, pods, &why, false, out);
                } else {
                    tracing::warn!("foreign job {}: {why}", job.0 & !FOREIGN_BIT);
                }
            }
            Difference::ForeignEnded { job } => {
                if let Some(s) = self.sched.as_mut() {
                    let _ = s.forget(job);
                }
            }
            Difference::Started { job, .. } => {
                if let Some(key) = self.by_job.get(&job) {
                    tracing::info!(gang = %key, "found bound; adopted");
                }
            }
            Difference::Shrunk { job, was, now } => {
                if let Some(key) = self.by_job.get(&job) {
                    let freed = was.gpu_count() - now.gpu_count();
                    tracing::info!(gang = %key, freed, "a pod of it ended; its GPUs are free");
                }
            }
            Difference::NotRunning { job } => {
                // The books hold every gang that holds GPUs; one the truth
                // lacks holds nothing: it leaves the queue too.
                if let Some(key) = self.by_job.get(&job).cloned() {
                    tracing::info!(gang = %key, "holds no GPUs; withdrawn");
                    self.withdraw(&key, self.last_now);
                }
            }
            other => tracing::debug!("{other}"),
        }
    }

    /// Every GPU held by a pod (bound and not ended, being deleted
    /// included) or a Binding the cache does not show yet, by server.
    pub(super) fn occupied(&self, pods: &[PodInfo]) -> Occupied {
        let mut out = Occupied::new();
        let Some(map) = &self.map else { return out };
        for p in pods.iter().filter(|p| p.holds()) {
            let Some(server) = p.node.as_deref().and_then(|n| map.server(n)) else {
                continue;
            };
            let mask = match (&p.gpu_indices, self.foreign.get(&p.uid)) {
                (Some(idx), _) if p.ours => mask_of(idx, map.gpus(server)),
                (_, Some((_, _, m))) => *m,
                _ => continue,
            };
            *out.entry(server).or_default() |= mask;
        }
        for (_, c) in self.claims.iter() {
            if let Some(server) = map.server(&c.node) {
                *out.entry(server).or_default() |= mask_of(&c.gpus, map.gpus(server));
            }
        }
        out
    }
}

fn health_word(h: Health) -> &'static str {
    match h {
        Health::Up => "Ready again",
        Health::Draining => "cordoned (unschedulable)",
        Health::Down => "NotReady past its grace",
    }
}
