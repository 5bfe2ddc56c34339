//! What a job holds besides GPUs: per-node books of CPUs and memory.
//!
//! Gangway's scheduler places GPUs. A Slurm job also holds CPUs, memory
//! (where Slurm tracks it: `SelectTypeParameters=CR_*_Memory`) and, with
//! `--exclusive`, whole nodes. The core keeps counting GPUs only (a job is
//! queued at its own GPUs); the host keeps, per node, the CPUs and memory
//! left ([`Books`]): Slurm's own count from `sinfo` (every job's, Gangway's
//! and others') less what Gangway's launches not yet running in Slurm
//! hold. Each cycle, every pending job is restricted to the servers where
//! its per-node CPUs and memory fit now ([`Books::fits`], with
//! `Scheduler::restrict`), and each start of a round is checked against
//! the books in turn (two starts of one round on one node that together
//! exceed its CPUs: the second is put back, and placed again on a later
//! cycle). So a 1-GPU job with `-c 16` on an 8-GPU, 64-CPU node holds 16
//! of its CPUs and one GPU: the other 7 GPUs stay usable by jobs whose
//! CPUs fit in the 48 left. An `--exclusive` job fits only on a node with
//! nothing allocated, and holds all of it. A node whose CPUs (or tracked
//! memory) are all held has no usable GPU left: its GPUs nobody counts
//! are held as foreign load ([`node_full`]). A job whose per-node CPUs or
//! memory exceed every node's is refused ([`Books::fits_ever`]).
//!
//! Per node, a job asks its CPUs divided by its nodes (`-N`, rounded up;
//! Slurm spreads a job's tasks over its nodes) and likewise its memory;
//! a multi-node job placed on more nodes than it asked needs no more per
//! node than that.

use std::collections::BTreeMap;

use crate::engine::NodeInfo;
use crate::launch::Part;

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

impl Needs {
    /// A job launched by `gangway-slurm submit`: one task of one CPU per
    /// node, no memory asked.
    pub fn one_cpu_per_node() -> Needs {
        Needs {
            cpus: 1,
            nodes: 1,
            ..Needs::default()
        }
    }

    /// CPUs it holds on each of its nodes (at least 1).
    pub fn cpus_per_node(&self) -> u32 {
        self.cpus.div_ceil(self.nodes.max(1)).max(1)
    }

    /// Memory it holds on each of its nodes (MB).
    pub fn memory_per_node(&self) -> u64 {
        self.memory_mb.div_ceil(u64::from(self.nodes.max(1)))
    }

    /// Whether it asks for more than one CPU per node, memory or whole
    /// nodes (what a report says it waits for).
    pub fn beyond_gpus(&self) -> bool {
        self.cpus_per_node() > 1 || self.memory_mb > 0 || self.exclusive
    }

    /// What it holds per node, in words (`16 CPUs, 2000 MB, whole node`).
    pub fn describe(&self) -> String {
        let mut words = vec![format!("{} CPUs", self.cpus_per_node())];
        if self.memory_mb > 0 {
            words.push(format!("{} MB", self.memory_per_node()));
        }
        if self.exclusive {
            words.push("the whole node".into());
        }
        format!("{} per node", words.join(", "))
    }
}

/// One node's CPUs and memory: what it has and what is left.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct NodeBook {
    cpus: u32,
    free_cpus: u32,
    memory_mb: u64,
    free_memory_mb: u64,
}

/// Per node, the CPUs and memory left for new jobs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Books {
    nodes: BTreeMap<String, NodeBook>,
    /// Whether Slurm tracks memory (else memory is not counted).
    memory_tracked: bool,
}

impl Books {
    /// The books of `nodes` as `sinfo` counts them (every running job's
    /// CPUs and memory, Gangway's and others').
    pub fn of(nodes: &[NodeInfo], memory_tracked: bool) -> Books {
        let nodes = nodes
            .iter()
            .map(|n| {
                let book = NodeBook {
                    cpus: n.cpus,
                    free_cpus: n.cpus.saturating_sub(n.alloc_cpus),
                    memory_mb: n.memory_mb,
                    free_memory_mb: n.memory_mb.saturating_sub(n.alloc_memory_mb),
                };
                (n.name.clone(), book)
            })
            .collect();
        Books {
            nodes,
            memory_tracked,
        }
    }

    /// Whether a job of `needs` fits on `node` now.
    pub fn fits(&self, node: &str, needs: &Needs) -> bool {
        let Some(b) = self.nodes.get(node) else {
            return false;
        };
        let memory_ok = !self.memory_tracked || b.free_memory_mb >= needs.memory_per_node();
        if needs.exclusive {
            return b.free_cpus == b.cpus
                && (!self.memory_tracked || b.free_memory_mb == b.memory_mb);
        }
        // A node whose CPUs sinfo does not give is not counted.
        (b.cpus == 0 || b.free_cpus >= needs.cpus_per_node()) && memory_ok
    }

    /// Whether a job of `needs` fits on some node when it is empty; else
    /// why not.
    pub fn fits_ever(&self, needs: &Needs) -> Result<(), String> {
        let most_cpus = self.nodes.values().map(|b| b.cpus).max().unwrap_or(0);
        if needs.cpus_per_node() > most_cpus {
            return Err(format!(
                "it asks {} CPUs per node but the largest node has {most_cpus}",
                needs.cpus_per_node()
            ));
        }
        let most_memory = self.nodes.values().map(|b| b.memory_mb).max().unwrap_or(0);
        if self.memory_tracked && needs.memory_per_node() > most_memory {
            return Err(format!(
                "it asks {} MB of memory per node but the largest node has {most_memory} MB",
                needs.memory_per_node()
            ));
        }
        Ok(())
    }

    /// `needs` held on `node` from now on (a launch Slurm does not count
    /// yet, or a start of this round).
    pub fn hold(&mut self, node: &str, needs: &Needs) {
        let tracked = self.memory_tracked;
        if let Some(b) = self.nodes.get_mut(node) {
            if needs.exclusive {
                b.free_cpus = 0;
                b.free_memory_mb = 0;
            } else {
                b.free_cpus = b.free_cpus.saturating_sub(needs.cpus_per_node());
                if tracked {
                    b.free_memory_mb = b.free_memory_mb.saturating_sub(needs.memory_per_node());
                }
            }
        }
    }
}

/// Whether `node` has no CPU (or, where Slurm tracks it, no memory) left
/// for a new job: its GPUs nobody holds are then unusable.
pub fn node_full(node: &NodeInfo, memory_tracked: bool) -> bool {
    (node.cpus > 0 && node.alloc_cpus >= node.cpus)
        || (memory_tracked && node.memory_mb > 0 && node.alloc_memory_mb >= node.memory_mb)
}

/// The part of a placement (`parts`) that a job's own `gpus` GPUs take
/// (a launch saved by an older daemon was placed at what its CPUs were
/// worth in GPUs), to pin in Slurm: the nodes with the most chosen GPUs first,
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

    fn node(name: &str, cpus: u32, alloc_cpus: u32, mem: u64, alloc_mem: u64) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            gres_types: crate::engine::GresTypes::Other,
            gpus: 8,
            features: Vec::new(),
            health: Health::Up,
            state: "idle".into(),
            cpus,
            alloc_cpus,
            memory_mb: mem,
            alloc_memory_mb: alloc_mem,
        }
    }

    fn job(cpus: u32, memory_mb: u64, nodes: u32) -> Needs {
        Needs {
            gpus: 1,
            cpus,
            memory_mb,
            nodes,
            exclusive: false,
        }
    }

    #[test]
    fn a_job_holds_its_cpus_not_gpus() {
        let mut books = Books::of(&[node("n1", 64, 16, 1000, 0)], false);
        assert!(books.fits("n1", &job(16, 0, 1)));
        assert!(books.fits("n1", &job(48, 0, 1)));
        assert!(!books.fits("n1", &job(49, 0, 1)));
        assert!(!books.fits("n9", &job(1, 0, 1)), "a node not in the books");
        // Per node: 64 CPUs over 2 nodes is 32 each.
        assert_eq!(job(64, 0, 2).cpus_per_node(), 32);
        assert!(books.fits("n1", &job(64, 0, 2)));
        books.hold("n1", &job(40, 0, 1));
        assert!(!books.fits("n1", &job(16, 0, 1)));
        assert!(books.fits("n1", &job(8, 0, 1)));
        // Memory counts only where Slurm tracks it.
        assert!(books.fits("n1", &job(1, 5000, 1)));
        let tracked = Books::of(&[node("n1", 64, 0, 1000, 600)], true);
        assert!(tracked.fits("n1", &job(1, 400, 1)));
        assert!(!tracked.fits("n1", &job(1, 401, 1)));
    }

    #[test]
    fn exclusive_jobs_take_idle_nodes_whole() {
        let ex = Needs {
            exclusive: true,
            ..job(1, 0, 1)
        };
        let mut books = Books::of(
            &[node("a", 64, 0, 1000, 0), node("b", 64, 1, 1000, 0)],
            true,
        );
        assert!(books.fits("a", &ex));
        assert!(!books.fits("b", &ex));
        books.hold("a", &ex);
        assert!(!books.fits("a", &job(1, 0, 1)));
    }

    #[test]
    fn jobs_larger_than_every_node_are_named() {
        let books = Books::of(&[node("a", 64, 0, 1000, 0)], true);
        assert!(books.fits_ever(&job(64, 1000, 1)).is_ok());
        let e = books.fits_ever(&job(65, 0, 1)).unwrap_err();
        assert_eq!(e, "it asks 65 CPUs per node but the largest node has 64");
        let e = books.fits_ever(&job(1, 1001, 1)).unwrap_err();
        assert!(e.contains("1001 MB"), "{e}");
        assert!(books.fits_ever(&job(128, 0, 2)).is_ok());
    }

    #[test]
    fn full_nodes() {
        assert!(node_full(&node("a", 64, 64, 1000, 0), false));
        assert!(!node_full(&node("a", 64, 63, 1000, 1000), false));
        assert!(node_full(&node("a", 64, 63, 1000, 1000), true));
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
