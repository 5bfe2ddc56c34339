//! Node signals are evidence, not verdicts. A node that stops reporting
//! Ready, or whose GPU count drops (a device-plugin or kubelet restart
//! reads 0 for a few seconds), keeps its gangs while the signal is waited
//! out; only a signal that lasts past its grace changes the topology or
//! evicts anything. Meanwhile the node is draining: it keeps what runs on
//! it and takes no new gangs. A node object that is deleted is gone at once.
//!
//! The defaults are Kubernetes' own: the node lifecycle controller taints a
//! NotReady node and evicts its pods after their 300 s toleration
//! (`node.kubernetes.io/not-ready`, `tolerationSeconds: 300`).

use std::collections::{BTreeMap, BTreeSet};

use gangway_core::Health;

use crate::objects::NodeInfo;

/// How long node signals are waited out, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grace {
    /// A node NotReady this long is lost: its gangs are evicted. Until
    /// then it is draining.
    pub not_ready_ms: u64,
    /// A node whose GPU count drops keeps its former count (draining) this
    /// long before the drop is believed.
    pub gpu_drop_ms: u64,
}

impl Default for Grace {
    fn default() -> Self {
        Grace {
            not_ready_ms: 300_000,
            gpu_drop_ms: 60_000,
        }
    }
}

/// Waits node signals out (see the module docs).
#[derive(Debug, Default)]
pub struct NodeGuard {
    grace: Grace,
    /// When each node was first seen not Ready (since it last was).
    not_ready_since: BTreeMap<String, u64>,
    /// Each node's GPU count as last believed.
    believed: BTreeMap<String, u32>,
    /// When each node's GPU count first read below the believed one.
    dropped_since: BTreeMap<String, u64>,
}

/// One node's signal being waited out, for logs and status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// Not Ready since `since_ms`.
    NotReady {
        /// The node.
        node: String,
        /// Unix ms it was first seen not Ready.
        since_ms: u64,
    },
    /// Reads fewer GPUs than believed since `since_ms`.
    GpuDrop {
        /// The node.
        node: String,
        /// The count still believed.
        believed: u32,
        /// Unix ms the drop was first seen.
        since_ms: u64,
    },
}

impl NodeGuard {
    /// A guard with these grace periods.
    pub fn new(grace: Grace) -> NodeGuard {
        NodeGuard {
            grace,
            ..NodeGuard::default()
        }
    }

    /// The grace periods.
    pub fn grace(&self) -> Grace {
        self.grace
    }

    /// The nodes as the scheduler should take them at `now_ms`: a NotReady
    /// node is draining until its grace passes (then down); a node reading
    /// fewer GPUs keeps its believed count and drains until the drop has
    /// lasted its grace (then the new count is believed).
    pub fn apply(&mut self, raw: &[NodeInfo], now_ms: u64) -> Vec<NodeInfo> {
        let mut out = Vec::with_capacity(raw.len());
        for node in raw {
            let mut n = node.clone();
            self.wait_not_ready(&mut n, now_ms);
            self.wait_gpu_drop(&mut n, now_ms);
            out.push(n);
        }
        let names: BTreeSet<&str> = raw.iter().map(|n| n.name.as_str()).collect();
        self.not_ready_since
            .retain(|n, _| names.contains(n.as_str()));
        self.believed.retain(|n, _| names.contains(n.as_str()));
        self.dropped_since.retain(|n, _| names.contains(n.as_str()));
        out
    }

    fn wait_not_ready(&mut self, n: &mut NodeInfo, now_ms: u64) {
        if n.health != Health::Down {
            self.not_ready_since.remove(&n.name);
            return;
        }
        let since = *self.not_ready_since.entry(n.name.clone()).or_insert(now_ms);
        if now_ms.saturating_sub(since) < self.grace.not_ready_ms {
            n.health = Health::Draining;
        }
    }

    fn wait_gpu_drop(&mut self, n: &mut NodeInfo, now_ms: u64) {
        let believed = *self.believed.entry(n.name.clone()).or_insert(n.gpus);
        if n.gpus >= believed {
            self.believed.insert(n.name.clone(), n.gpus);
            self.dropped_since.remove(&n.name);
            return;
        }
        let since = *self.dropped_since.entry(n.name.clone()).or_insert(now_ms);
        if now_ms.saturating_sub(since) < self.grace.gpu_drop_ms {
            n.gpus = believed;
            if n.health == Health::Up {
                n.health = Health::Draining;
            }
        } else {
            self.believed.insert(n.name.clone(), n.gpus);
            self.dropped_since.remove(&n.name);
        }
    }

    /// The signals being waited out now, by node.
    pub fn waiting(&self) -> Vec<Waiting> {
        let mut out: Vec<Waiting> = self
            .not_ready_since
            .iter()
            .map(|(node, since)| Waiting::NotReady {
                node: node.clone(),
                since_ms: *since,
            })
            .collect();
        out.extend(
            self.dropped_since
                .iter()
                .map(|(node, since)| Waiting::GpuDrop {
                    node: node.clone(),
                    believed: self.believed.get(node).copied().unwrap_or(0),
                    since_ms: *since,
                }),
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, gpus: u32, health: Health) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            gpus,
            domains: Vec::new(),
            health,
            gpu_type: None,
            facts: Default::default(),
        }
    }

    const GRACE: Grace = Grace {
        not_ready_ms: 10_000,
        gpu_drop_ms: 5_000,
    };

    #[test]
    fn not_ready_drains_until_its_grace_passes() {
        let mut g = NodeGuard::new(GRACE);
        let up = g.apply(&[node("a", 8, Health::Up)], 0);
        assert_eq!(up[0].health, Health::Up);
        for t in [1_000, 5_000, 10_999] {
            let n = g.apply(&[node("a", 8, Health::Down)], t);
            assert_eq!(n[0].health, Health::Draining, "at {t}");
        }
        let n = g.apply(&[node("a", 8, Health::Down)], 11_000);
        assert_eq!(n[0].health, Health::Down);
        // Ready again: the clock starts over at the next NotReady.
        assert_eq!(
            g.apply(&[node("a", 8, Health::Up)], 12_000)[0].health,
            Health::Up
        );
        assert_eq!(
            g.apply(&[node("a", 8, Health::Down)], 13_000)[0].health,
            Health::Draining
        );
    }

    #[test]
    fn a_gpu_blip_keeps_the_count_until_it_lasts() {
        let mut g = NodeGuard::new(GRACE);
        g.apply(&[node("a", 8, Health::Up)], 0);
        let n = g.apply(&[node("a", 0, Health::Up)], 1_000);
        assert_eq!((n[0].gpus, n[0].health), (8, Health::Draining));
        assert!(matches!(g.waiting()[..], [Waiting::GpuDrop { .. }]));
        let n = g.apply(&[node("a", 8, Health::Up)], 4_000);
        assert_eq!((n[0].gpus, n[0].health), (8, Health::Up));
        assert!(g.waiting().is_empty());
        // A drop that lasts is believed.
        g.apply(&[node("a", 4, Health::Up)], 10_000);
        let n = g.apply(&[node("a", 4, Health::Up)], 15_000);
        assert_eq!((n[0].gpus, n[0].health), (4, Health::Up));
        // More GPUs are believed at once.
        assert_eq!(g.apply(&[node("a", 8, Health::Up)], 15_001)[0].gpus, 8);
    }

    #[test]
    fn deleted_nodes_are_forgotten() {
        let mut g = NodeGuard::new(GRACE);
        g.apply(&[node("a", 8, Health::Down)], 0);
        g.apply(&[], 1_000);
        // Back as a new node: its grace starts now.
        let n = g.apply(&[node("a", 8, Health::Down)], 20_000);
        assert_eq!(n[0].health, Health::Draining);
    }
}
