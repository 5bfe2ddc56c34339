//! What a job holds besides GPUs, counted in GPUs.
//!
//! Gangway's scheduler places GPUs. A Slurm job also holds CPUs, memory
//! (where Slurm tracks it: `SelectTypeParameters=CR_*_Memory`) and, with
//! `--exclusive`, whole nodes; a job holding all of a node's CPUs leaves
//! its other GPUs unusable whatever Gangway's books say. So every job is
//! counted as the larger of its GPUs and what its CPUs and memory are
//! worth in GPUs: a node's CPUs are worth its GPUs (with 8 GPUs and 64
//! CPUs, 8 CPUs are worth a GPU), as Slurm's own `PriorityFlags=MAX_TRES`
//! bills a job by its dominant resource. A job with `-c 16` and one GPU on
//! such nodes holds 2 GPUs' worth, not the node: the other 6 GPUs stay
//! usable; with `-c 64` it holds the node. An `--exclusive` job holds its
//! nodes' GPUs whole.
//!
//! Where: a native job waiting in Gangway is queued at its worth
//! ([`worth`]), so it is placed only where its CPUs and memory fit; its
//! pin asks Slurm for its own GPUs only ([`own_parts`]) and the rest of
//! what Gangway chose stays held for it, idle (its CPUs use them up).
//! CPUs and memory of any other job (started in Slurm directly, or
//! launched with more CPUs than its GPUs are worth) are counted per node
//! from `sinfo` ([`node_worth`]): what they are worth beyond the GPUs
//! Gangway counts there is held as foreign load.
//!
//! The worth of a job is taken at the cluster's dearest rate (the node
//! whose CPUs, or memory, are worth the most GPUs each), so on nodes of
//! different shapes it may hold more than it needs, never less.

use crate::engine::NodeInfo;
use crate::launch::Part;

/// What CPUs and memory are worth in GPUs: the node with the most GPUs per
/// CPU, and per MB.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rates {
    /// `gpus_per_cpu.0` GPUs for `gpus_per_cpu.1` CPUs.
    gpus_per_cpu: (u32, u32),
    /// `gpus_per_mb.0` GPUs for `gpus_per_mb.1` MB (`(0, 0)`: memory is
    /// not counted).
    gpus_per_mb: (u32, u64),
    /// The most GPUs a node has (what `--exclusive` takes of each node).
    node_gpus: u32,
}

/// `a / b > c / d`, for positive denominators.
fn dearer(a: u64, b: u64, c: u64, d: u64) -> bool {
    u128::from(a) * u128::from(d) > u128::from(c) * u128::from(b)
}

impl Rates {
    /// The rates of `nodes` (those with GPUs); memory counted only if
    /// Slurm tracks it.
    pub fn of(nodes: &[NodeInfo], memory_tracked: bool) -> Rates {
        let mut r = Rates::default();
        for n in nodes.iter().filter(|n| n.gpus > 0) {
            r.node_gpus = r.node_gpus.max(n.gpus);
            let (g, c) = r.gpus_per_cpu;
            if n.cpus > 0 && (c == 0 || dearer(n.gpus.into(), n.cpus.into(), g.into(), c.into())) {
                r.gpus_per_cpu = (n.gpus, n.cpus);
            }
            let (g, m) = r.gpus_per_mb;
            if memory_tracked
                && n.memory_mb > 0
                && (m == 0 || dearer(n.gpus.into(), n.memory_mb, g.into(), m))
            {
                r.gpus_per_mb = (n.gpus, n.memory_mb);
            }
        }
        r
    }

    /// What `cpus` CPUs and `memory_mb` MB are worth in GPUs at these
    /// rates (rounded up).
    pub fn cpus_and_memory(&self, cpus: u32, memory_mb: u64) -> u32 {
        let (g, c) = self.gpus_per_cpu;
        let by_cpu = if c == 0 {
            0
        } else {
            (u64::from(cpus) * u64::from(g)).div_ceil(u64::from(c))
        };
        let (g, m) = self.gpus_per_mb;
        let by_mem = if m == 0 {
            0
        } else {
            (u128::from(memory_mb) * u128::from(g)).div_ceil(u128::from(m))
        };
        u32::try_from(u128::from(by_cpu).max(by_mem)).unwrap_or(u32::MAX)
    }
}

/// What a job asks for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// GPUs.
    pub gpus: u32,
    /// CPUs in all.
    pub cpus: u32,
    /// Memory in all (MB; 0 when it does not ask).
    pub memory_mb: u64,
    /// Whether it asks for whole nodes.
    pub exclusive: bool,
    /// Nodes it asks for (at least).
    pub nodes: u32,
}

/// What a job is worth in GPUs: the larger of its GPUs and what its CPUs
/// and memory are worth; whole nodes for `--exclusive`.
pub fn worth(needs: &Needs, rates: &Rates) -> u32 {
    let w = needs
        .gpus
        .max(rates.cpus_and_memory(needs.cpus, needs.memory_mb));
    if needs.exclusive && rates.node_gpus > 0 {
        let nodes = w.div_ceil(rates.node_gpus).max(needs.nodes.max(1));
        nodes.saturating_mul(rates.node_gpus)
    } else {
        w
    }
}

/// What the CPUs and memory jobs hold on `node` are worth in its own GPUs
/// (rounded up, at most its GPUs).
pub fn node_worth(node: &NodeInfo) -> u32 {
    let rates = Rates {
        gpus_per_cpu: (node.gpus, node.cpus),
        gpus_per_mb: if node.alloc_memory_mb > 0 {
            (node.gpus, node.memory_mb)
        } else {
            (0, 0)
        },
        node_gpus: node.gpus,
    };
    rates
        .cpus_and_memory(node.alloc_cpus, node.alloc_memory_mb)
        .min(node.gpus)
}

/// The part of a placement of a job's worth (`parts`) that its own `gpus`
/// GPUs take, to pin in Slurm: the nodes with the most chosen GPUs first,
/// each GPU's lowest indices; nodes left without GPUs are dropped.
pub fn own_parts(parts: &[Part], gpus: u32) -> Vec<Part> {
    let total: usize = parts.iter().map(|p| p.gpus.len()).sum();
    if total <= gpus as usize {
        return parts.to_vec();
    }
    let mut order: Vec<&Part> = parts.iter().collect();
    order.sort_by_key(|p| std::cmp::Reverse(p.gpus.len()));
    let mut left = gpus as usize;
    let mut own = Vec::new();
    for p in order {
        if left == 0 {
            break;
        }
        let k = left.min(p.gpus.len());
        left -= k;
        own.push(Part {
            node: p.node.clone(),
            gpus: p.gpus[..k].to_vec(),
            types: p.types[..k.min(p.types.len())].to_vec(),
        });
    }
    own.sort_by(|a, b| a.node.cmp(&b.node));
    own
}

#[cfg(test)]
mod tests {
    use super::*;
    use gangway_core::Health;

    fn node(gpus: u32, cpus: u32, mem: u64) -> NodeInfo {
        NodeInfo {
            name: "n".into(),
            gpu_types: None,
            gpus,
            features: Vec::new(),
            health: Health::Up,
            state: "idle".into(),
            cpus,
            alloc_cpus: 0,
            memory_mb: mem,
            alloc_memory_mb: 0,
        }
    }

    #[test]
    fn a_job_is_worth_its_dominant_resource() {
        let rates = Rates::of(&[node(8, 64, 1000), node(0, 4, 10)], false);
        let job = |gpus, cpus| Needs {
            gpus,
            cpus,
            nodes: 1,
            ..Needs::default()
        };
        // -c 16 with one GPU on 8-GPU, 64-CPU nodes: 2 GPUs' worth.
        assert_eq!(worth(&job(1, 16), &rates), 2);
        assert_eq!(worth(&job(1, 64), &rates), 8);
        assert_eq!(worth(&job(4, 1), &rates), 4);
        assert_eq!(worth(&job(1, 9), &rates), 2, "rounded up");
        let exclusive = Needs {
            exclusive: true,
            ..job(1, 1)
        };
        assert_eq!(worth(&exclusive, &rates), 8);
        let two = Needs {
            nodes: 2,
            ..exclusive
        };
        assert_eq!(worth(&two, &rates), 16);
        // Memory counts only where Slurm tracks it.
        let mem = Needs {
            memory_mb: 500,
            ..job(1, 1)
        };
        assert_eq!(worth(&mem, &rates), 1);
        let tracked = Rates::of(&[node(8, 64, 1000)], true);
        assert_eq!(worth(&mem, &tracked), 4);
        // The dearest node sets the rate.
        let mixed = Rates::of(&[node(8, 64, 1000), node(8, 16, 1000)], false);
        assert_eq!(worth(&job(1, 16), &mixed), 8);
    }

    #[test]
    fn nodes_count_what_their_jobs_hold() {
        let mut n = node(8, 16, 1000);
        n.alloc_cpus = 16;
        assert_eq!(node_worth(&n), 8);
        n.alloc_cpus = 3;
        assert_eq!(node_worth(&n), 2);
        n.alloc_memory_mb = 1000;
        assert_eq!(node_worth(&n), 8);
    }

    #[test]
    fn a_job_pins_its_own_gpus_of_its_worth() {
        let part = |node: &str, gpus: &[u32]| Part {
            node: node.into(),
            gpus: gpus.to_vec(),
            types: gpus.iter().map(|g| format!("g{g}")).collect(),
        };
        let worth = [part("n1", &[4, 5]), part("n2", &[0, 1, 2, 3])];
        let own = own_parts(&worth, 1);
        assert_eq!(own, vec![part("n2", &[0])]);
        assert_eq!(own_parts(&worth, 6), worth.to_vec());
        assert_eq!(
            own_parts(&worth, 5),
            vec![part("n1", &[4]), part("n2", &[0, 1, 2, 3])]
        );
    }
}
