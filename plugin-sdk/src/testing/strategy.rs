//! The parts of the proptest strategies for realistic views that every slot
//! shares (each slot's own view strategy is in its folder, behind
//! [`crate::testing::SlotViews::views`]): random topologies
//! (one to four levels, 2- to 8-GPU servers), virtual clusters with and
//! without quotas, job sizes of 1 to 128 GPUs weighted as in the Philly
//! trace (most jobs 1 GPU), waits, attempts and attained service, and queues
//! from empty to thousands of jobs.
//!
//! Every view is consistent the way the host makes them: ids unique, jobs in
//! submit order, each job's `min_level` and `min_servers` those of the
//! cluster it describes.

use proptest::prelude::*;

use crate::ids::{JobId, Level, ServerId, VcId};
use crate::view::{
    ClusterSummary, LevelSummary, PendingJob, RunningJob, ServerState, VcUsage, WaitReason,
};

/// The shape of a random cluster a view describes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    /// The server level (1 to 3: cluster > servers up to cluster > rows > racks > servers).
    pub server_level: u8,
    /// GPUs per server.
    pub server_gpus: u32,
    /// Servers per domain just above the servers (a rack).
    pub servers_per_rack: u32,
    /// Racks in the whole cluster.
    pub racks: u32,
}

impl Shape {
    /// GPUs in the cluster.
    pub fn total_gpus(&self) -> u32 {
        self.server_gpus * self.servers_per_rack * self.racks
    }

    /// The narrowest level one of whose domains can hold `gpus`, and the
    /// fewest servers that can.
    pub fn min_level(&self, gpus: u32) -> (Level, u32) {
        let servers = gpus.div_ceil(self.server_gpus).max(1);
        let level = if gpus <= self.server_gpus {
            self.server_level
        } else if gpus <= self.server_gpus * self.servers_per_rack {
            self.server_level - 1
        } else {
            0
        };
        (Level(level), servers)
    }

    /// A summary with `free` GPUs free, spread evenly.
    pub fn summary(&self, free: u32) -> ClusterSummary {
        let total = self.total_gpus();
        let rack = self.server_gpus * self.servers_per_rack;
        let mut levels = Vec::new();
        for l in 0..=self.server_level {
            let (domains, size) = if l == self.server_level {
                (self.servers_per_rack * self.racks, self.server_gpus)
            } else if l + 1 == self.server_level {
                (self.racks, rack)
            } else {
                (1, total)
            };
            levels.push(LevelSummary {
                domains,
                max_domain_gpus: size,
                max_free_gpus: free.min(size),
            });
        }
        ClusterSummary {
            total_gpus: total,
            free_gpus: free,
            server_level: Level(self.server_level),
            levels,
        }
    }
}

/// How large the generated views are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    /// As views come: random clusters of up to 352 servers, queues from
    /// none to thousands of jobs, up to 60 running jobs.
    Realistic,
    /// The largest views a host sends at Philly scale: the Philly cluster
    /// ([`philly_shape`]), 15 virtual clusters, 3,000 jobs waiting and
    /// running jobs filling the cluster (up to 2,000).
    Largest,
}

/// The Philly cluster's shape: 552 servers of 8 GPUs, 23 racks of 24.
pub fn philly_shape() -> Shape {
    Shape {
        server_level: 2,
        server_gpus: 8,
        servers_per_rack: 24,
        racks: 23,
    }
}

/// A cluster shape at `scale`.
pub fn shape_at(scale: Scale) -> BoxedStrategy<Shape> {
    match scale {
        Scale::Realistic => shape().boxed(),
        Scale::Largest => Just(philly_shape()).boxed(),
    }
}

/// How many virtual clusters at `scale`: 1 to 15, or 15.
pub fn vc_count(scale: Scale) -> BoxedStrategy<usize> {
    match scale {
        Scale::Realistic => (1usize..16).boxed(),
        Scale::Largest => Just(15usize).boxed(),
    }
}

/// How many running jobs at `scale` (fewer when the cluster is full).
pub fn running_count(scale: Scale) -> BoxedStrategy<usize> {
    match scale {
        Scale::Realistic => (0usize..60).boxed(),
        Scale::Largest => Just(2_000usize).boxed(),
    }
}

/// A random cluster shape.
pub fn shape() -> impl Strategy<Value = Shape> {
    (
        1u8..4,
        prop_oneof![Just(2u32), Just(4), Just(8), Just(8)],
        1u32..33,
        1u32..12,
    )
        .prop_map(
            |(server_level, server_gpus, servers_per_rack, racks)| Shape {
                server_level: server_level.max(1),
                server_gpus,
                servers_per_rack,
                racks: if server_level == 1 { 1 } else { racks },
            },
        )
}

/// A gang size: 1 GPU most often, as in the trace, up to 128.
pub fn gang_size() -> impl Strategy<Value = u32> + Clone {
    prop_oneof![
        8 => Just(1u32),
        2 => Just(2),
        2 => Just(4),
        2 => Just(8),
        1 => Just(16),
        1 => Just(32),
        1 => prop_oneof![Just(3u32), Just(24), Just(64), Just(128)],
    ]
}

/// Lists of `element`s as long as queues get: often none or a few,
/// sometimes hundreds, now and then thousands. Shrinks towards the empty
/// list, element by element.
pub fn queue_of<T: std::fmt::Debug + 'static>(
    element: impl Strategy<Value = T> + 'static,
) -> impl Strategy<Value = Vec<T>> {
    let element = element.boxed();
    prop_oneof![12 => Just(40usize), 3 => Just(400), 1 => 1_000usize..3_000]
        .prop_flat_map(move |most| prop::collection::vec(element.clone(), 0..=most))
}

/// `n` virtual clusters, some with quotas.
pub fn vcs(n: usize, total_gpus: u32) -> impl Strategy<Value = Vec<VcUsage>> {
    prop::collection::vec(
        (
            prop::option::weighted(0.6, 0..=total_gpus),
            1u32..4,
            0..=total_gpus,
            0u64..10_000_000,
        ),
        n,
    )
    .prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(
                |(i, (quota_gpus, weight, held_gpus, attained_gpu_s))| VcUsage {
                    id: VcId(i as u32),
                    quota_gpus,
                    weight,
                    held_gpus,
                    pending_gpus: 0,
                    attained_gpu_s,
                    pending_jobs: 0,
                },
            )
            .collect()
    })
}

/// A queue of pending jobs of `vcs` virtual clusters on `shape`, in submit
/// order, with unique ids, as of time `now`.
pub fn pending_jobs(shape: Shape, vcs: u32, now: u64) -> impl Strategy<Value = Vec<PendingJob>> {
    pending_jobs_at(Scale::Realistic, shape, vcs, now)
}

/// [`pending_jobs`] at `scale`: as queues get, or 3,000 jobs.
pub fn pending_jobs_at(
    scale: Scale,
    shape: Shape,
    vcs: u32,
    now: u64,
) -> impl Strategy<Value = Vec<PendingJob>> {
    let row = (
        0..vcs.max(1),
        0u32..50,
        gang_size(),
        0u64..3_600,
        prop_oneof![6 => Just(0u32), 1 => 1u32..5],
        0u64..200_000,
    );
    let rows = match scale {
        Scale::Realistic => queue_of(row).boxed(),
        Scale::Largest => prop::collection::vec(row, 3_000).boxed(),
    };
    rows.prop_map(move |rows| {
        let mut submitted = now.saturating_sub(rows.len() as u64 * 30);
        rows.into_iter()
            .enumerate()
            .map(|(i, (vc, user, gpus, gap, attempts, attained))| {
                submitted = (submitted + gap / 60).min(now);
                let gpus = gpus.min(shape.total_gpus()).max(1);
                let (min_level, min_servers) = shape.min_level(gpus);
                PendingJob {
                    id: JobId(1_000 + i as u64),
                    vc: VcId(vc),
                    user,
                    gpus,
                    submitted_s: submitted,
                    waiting_s: now - submitted,
                    attempts,
                    attained_gpu_s: if attempts == 0 { 0 } else { attained },
                    min_level,
                    min_servers,
                }
            })
            .collect()
    })
}

/// A wait reason, any of them.
pub fn wait_reason() -> impl Strategy<Value = WaitReason> {
    prop::sample::select(WaitReason::ALL.to_vec())
}

/// `n` running jobs on `shape`, packed onto servers in id order.
pub fn running_jobs(
    shape: Shape,
    vcs: u32,
    n: usize,
    now: u64,
) -> impl Strategy<Value = Vec<RunningJob>> {
    prop::collection::vec((0..vcs.max(1), gang_size(), 0u64..200_000, 1u32..4), n).prop_map(
        move |rows| {
            let servers = shape.servers_per_rack * shape.racks;
            let mut next = 0u32;
            let mut out = Vec::new();
            for (i, (vc, gpus, ran, attempts)) in rows.into_iter().enumerate() {
                let gpus = gpus.min(shape.server_gpus * 4).max(1);
                let mut parts = Vec::new();
                let mut left = gpus;
                while left > 0 && next < servers {
                    let take = left.min(shape.server_gpus);
                    parts.push((ServerId(next), take));
                    left -= take;
                    next += 1;
                }
                if left > 0 {
                    break;
                }
                let started = now.saturating_sub(ran);
                out.push(RunningJob {
                    id: JobId(i as u64 + 1),
                    vc: VcId(vc),
                    user: 0,
                    gpus,
                    submitted_s: started.saturating_sub(60),
                    started_s: started,
                    attempts,
                    attained_gpu_s: u64::from(gpus) * ran,
                    parts,
                });
            }
            out
        },
    )
}

/// The servers of `shape` with the GPUs `running` leaves free.
pub fn servers_of(shape: &Shape, running: &[RunningJob]) -> Vec<ServerState> {
    let servers = shape.servers_per_rack * shape.racks;
    let mut used = vec![0u32; servers as usize];
    for j in running {
        for (s, g) in &j.parts {
            if let Some(u) = used.get_mut(s.0 as usize) {
                *u += g;
            }
        }
    }
    (0..servers)
        .map(|s| ServerState {
            id: ServerId(s),
            domain: s / shape.servers_per_rack.max(1),
            gpus: shape.server_gpus,
            free: shape.server_gpus.saturating_sub(used[s as usize]),
        })
        .collect()
}

/// The shape a summary made by [`Shape::summary`] describes.
pub fn shape_of(c: &ClusterSummary) -> Shape {
    let levels = &c.levels;
    let server = levels.last().cloned().unwrap_or_default();
    let racks = if levels.len() >= 2 {
        levels[levels.len() - 2].domains.max(1)
    } else {
        1
    };
    Shape {
        server_level: c.server_level.0.max(1),
        server_gpus: server.max_domain_gpus.max(1),
        servers_per_rack: (server.domains / racks).max(1),
        racks,
    }
}
