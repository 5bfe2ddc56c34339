//! CPUs and memory in the cycle ([`crate::resources`]): before each round
//! every pending job is restricted to the servers where its per-node CPUs
//! and memory fit now, and after it each start is checked against the
//! books in turn, so that starts of one round do not together exceed a
//! node's CPUs.

use std::collections::BTreeMap;
use std::sync::Arc;

use gangway_core::{JobId, Placement, ServerId, ServerSet};

use super::{Daemon, push_event};
use crate::engine::NodeGpus;
use crate::resources::{Books, Needs};

impl Daemon {
    /// What job `id` holds per node besides GPUs: a native job's from its
    /// Slurm job, a submitted job's one CPU per node.
    pub(super) fn needs_of(&self, id: u64) -> Needs {
        self.needs
            .get(&id)
            .copied()
            .unwrap_or_else(Needs::one_cpu_per_node)
    }

    /// The books of this cycle: Slurm's count (`books`, from `sinfo`) less
    /// what Gangway's launches Slurm does not run yet hold.
    pub(super) fn book_launches(&mut self, mut books: Books) {
        for e in self.jobs.values() {
            let Some(l) = e.launch.as_ref().filter(|l| !l.running) else {
                continue;
            };
            let needs = self.needs_of(e.id);
            for (node, _) in &l.placement {
                books.hold(node, &needs);
            }
        }
        self.books = books;
    }

    /// Restricts every pending job to the servers where its CPUs and
    /// memory fit now (no restriction where they fit everywhere); a job
    /// that waits for them says so once in its events.
    pub(super) fn restrict_by_fit(&mut self) {
        let live = &self.jobs;
        self.needs.retain(|id, _| live.contains_key(id));
        self.fit_waits.retain(|id, _| live.contains_key(id));
        let servers = self.map.topology.servers().len();
        let mut sets: BTreeMap<(u32, u64, bool), Option<Arc<ServerSet>>> = BTreeMap::new();
        let pending: Vec<u64> = self
            .jobs
            .values()
            .filter(|e| e.launch.is_none())
            .map(|e| e.id)
            .filter(|id| self.sched.job(JobId(*id)).is_some_and(|r| r.is_pending()))
            .collect();
        for id in pending {
            let needs = self.needs_of(id);
            let key = (
                needs.cpus_per_node(),
                needs.memory_per_node(),
                needs.exclusive,
            );
            let set = sets
                .entry(key)
                .or_insert_with(|| {
                    let fit: ServerSet = (0..servers)
                        .filter_map(|i| u32::try_from(i).ok().map(ServerId))
                        .filter(|s| self.books.fits(self.map.node(*s), &needs))
                        .collect();
                    (usize::try_from(fit.len()).unwrap_or(usize::MAX) < servers)
                        .then(|| Arc::new(fit))
                })
                .clone();
            let wait = set.as_ref().filter(|_| needs.beyond_gpus()).map(|fit| {
                let names: Vec<&str> = fit.iter().map(|s| self.map.node(s)).collect();
                format!(
                    "restricted by CPUs or memory: its {} fit now on {} of {servers} nodes ({})",
                    needs.describe(),
                    fit.len(),
                    names.join(",")
                )
            });
            if let Err(e) = self.sched.restrict(JobId(id), set) {
                tracing::warn!(job = id, "restrict refused: {e}");
            }
            self.note_fit_wait(id, wait);
        }
    }

    /// Job `id` is restricted by its CPUs or memory (`wait`, said in its
    /// events the first time), or no longer is.
    fn note_fit_wait(&mut self, id: u64, wait: Option<String>) {
        match wait {
            Some(text) => {
                if !self.fit_waits.contains_key(&id)
                    && let Some(e) = self.jobs.get_mut(&id)
                {
                    push_event(e, text.clone());
                }
                self.fit_waits.insert(id, text);
            }
            None => {
                self.fit_waits.remove(&id);
            }
        }
    }

    /// The GPUs of `actual` (what Slurm gives job `id`) that are its own:
    /// all of them, unless Slurm gives it more than it asked (an
    /// `--exclusive` job gets its nodes' every GPU), when the ones Gangway
    /// chose (`chosen`) come first. The rest of such a node is full, and
    /// held as foreign load (`count_full_nodes`).
    pub(super) fn own_gpus(&self, id: u64, actual: NodeGpus, chosen: &NodeGpus) -> NodeGpus {
        let Some(gpus) = self.jobs.get(&id).map(|e| e.gpus as usize) else {
            return actual;
        };
        let count: usize = actual.iter().map(|(_, i)| i.len()).sum();
        if count <= gpus {
            return actual;
        }
        let has = |node: &str, g: u32| actual.iter().any(|(n, i)| n == node && i.contains(&g));
        let picks = chosen
            .iter()
            .flat_map(|(n, i)| i.iter().map(move |g| (n, *g)))
            .filter(|(n, g)| has(n, *g))
            .chain(
                actual
                    .iter()
                    .flat_map(|(n, i)| i.iter().map(move |g| (n, *g))),
            );
        let mut own: NodeGpus = Vec::new();
        let mut left = gpus;
        for (node, g) in picks {
            if left == 0 {
                break;
            }
            let k = match own.iter().position(|(n, _)| n == node) {
                Some(k) => k,
                None => {
                    own.push((node.clone(), Vec::new()));
                    own.len() - 1
                }
            };
            let slot = &mut own[k].1;
            if !slot.contains(&g) {
                slot.push(g);
                left -= 1;
            }
        }
        for (_, i) in &mut own {
            i.sort_unstable();
        }
        own
    }

    /// The starts of a round whose CPUs and memory fit, each held in the
    /// books in turn; one that no longer fits after the others (two starts
    /// on one node together exceeding its CPUs) is put back in the queue
    /// (not counted) and placed again on a later cycle.
    pub(super) fn fitting_starts(
        &mut self,
        starts: Vec<(u64, Placement)>,
        now: u64,
    ) -> Vec<(u64, Placement)> {
        let mut kept = Vec::with_capacity(starts.len());
        for (id, placement) in starts {
            let needs = self.needs_of(id);
            let nodes: Vec<String> = placement
                .parts
                .iter()
                .map(|p| self.map.node(p.server).to_string())
                .collect();
            match nodes.iter().find(|n| !self.books.fits(n, &needs)) {
                None => {
                    for n in &nodes {
                        self.books.hold(n, &needs);
                    }
                    kept.push((id, placement));
                }
                Some(node) => {
                    let why = format!(
                        "not launched: its {} no longer fit on {node} after this round's other \
                         starts; pending again (not counted)",
                        needs.describe()
                    );
                    self.requeue_uncounted(id, now, why);
                }
            }
        }
        kept
    }
}
