//! The cluster's shape: a petgraph tree of domains (cluster > racks > ... )
//! whose leaves are servers, each holding GPUs.
//!
//! The tree is immutable once built. Dense ids ([`ServerId`], [`DomainId`])
//! index flat vectors on the hot path; the petgraph tree answers structural
//! questions (ancestors, children, levels).

mod builder;
mod file;
mod gpu_type;
mod machine_list;

use std::collections::HashMap;

use gangway_plugin_sdk::{GpuTypeId, GpuTypeSet, Level};
use petgraph::graph::{DiGraph, NodeIndex};
use serde::{Deserialize, Serialize};

pub use builder::TopologyBuilder;
pub use gpu_type::{DEFAULT_GPU_TYPE, GpuRequest, GpuRequestError, GpuType};
pub(crate) use gpu_type::{TypeCapacity, resolve};
pub use machine_list::RackGrouping;

/// Most GPUs one server may have (free GPUs are tracked as a `u64` bitmask).
pub const MAX_GPUS_PER_SERVER: u32 = 64;

pub use gangway_plugin_sdk::ServerId;

/// A domain above the servers (the cluster, a rack, ...): a dense index.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct DomainId(pub u32);

/// A node of the topology graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    /// A domain: the cluster, a rack, or any other grouping level.
    Domain(DomainId),
    /// A server.
    Server(ServerId),
    /// GPU `index` of a server.
    Gpu(ServerId, u8),
}

/// What the topology knows about one domain.
#[derive(Clone, Debug)]
pub struct Domain {
    /// Its name (unique among domains).
    pub name: String,
    /// Its level (`Level(0)` for the cluster).
    pub level: Level,
    /// Its parent domain (`None` for the cluster).
    pub parent: Option<DomainId>,
    /// GPUs of all servers below it.
    pub gpus: u32,
    node: NodeIndex,
}

/// What the topology knows about one server.
#[derive(Clone, Debug)]
pub struct Server {
    /// Its name (unique among servers), e.g. `m31`.
    pub name: String,
    /// Its GPU count.
    pub gpus: u32,
    /// Its enclosing domains, from the cluster (index 0) down to its direct parent.
    pub ancestors: Vec<DomainId>,
    /// The type of its GPUs.
    pub gpu_type: GpuTypeId,
}

/// An immutable cluster topology.
///
/// ```
/// use gangway_core::Topology;
/// // 2 racks x 4 servers x 8 GPUs
/// let topo = Topology::uniform(2, 4, 8).unwrap();
/// assert_eq!(topo.total_gpus(), 64);
/// assert_eq!(topo.server_level().0, 2);
/// ```
#[derive(Clone, Debug)]
pub struct Topology {
    graph: DiGraph<Node, ()>,
    level_names: Vec<String>,
    domains: Vec<Domain>,
    servers: Vec<Server>,
    by_level: Vec<Vec<DomainId>>,
    server_names: HashMap<String, ServerId>,
    /// Largest domain GPU count per level, the server level last.
    max_domain_gpus: Vec<u32>,
    total_gpus: u32,
    max_server_gpus: u32,
    /// Per level, at index `k`: the most GPUs one domain of the level
    /// offers on its `k + 1` largest servers (the server level: one server).
    servers_cap: Vec<Vec<u32>>,
    /// The GPU types, indexed by [`GpuTypeId`].
    gpu_types: Vec<GpuType>,
    /// Per domain, the one GPU type of its servers (`None`: mixed, or none).
    domain_types: Vec<Option<GpuTypeId>>,
    /// What the servers of each type offer, indexed like `gpu_types`.
    type_capacity: Vec<TypeCapacity>,
}

impl Topology {
    /// A cluster of `racks` racks, each of `servers_per_rack` servers with
    /// `gpus_per_server` GPUs; servers are named `r{rack}-s{server}`.
    pub fn uniform(
        racks: u32,
        servers_per_rack: u32,
        gpus_per_server: u32,
    ) -> Result<Topology, TopologyError> {
        let mut b = TopologyBuilder::new();
        let root = b.root();
        for r in 0..racks {
            let rack = b.add_domain(root, format!("r{r}"))?;
            for s in 0..servers_per_rack {
                b.add_server(rack, format!("r{r}-s{s}"), gpus_per_server)?;
            }
        }
        b.build()
    }

    /// Names of the levels from the root down to the servers
    /// (e.g. `["cluster", "rack", "server"]`).
    pub fn level_names(&self) -> &[String] {
        &self.level_names
    }

    /// The level of the servers (the narrowest spread limit).
    pub fn server_level(&self) -> Level {
        Level(u8::try_from(self.level_names.len() - 1).unwrap_or(u8::MAX))
    }

    /// All servers, indexed by [`ServerId`].
    pub fn servers(&self) -> &[Server] {
        &self.servers
    }

    /// One server.
    pub fn server(&self, id: ServerId) -> Option<&Server> {
        self.servers.get(id.0 as usize)
    }

    /// A server by name.
    pub fn server_by_name(&self, name: &str) -> Option<ServerId> {
        self.server_names.get(name).copied()
    }

    /// All domains (cluster, racks, ...), indexed by [`DomainId`].
    pub fn domains(&self) -> &[Domain] {
        &self.domains
    }

    /// The domains at `level` (empty at and below the server level).
    pub fn domains_at(&self, level: Level) -> &[DomainId] {
        self.by_level
            .get(level.0 as usize)
            .map_or(&[][..], Vec::as_slice)
    }

    /// Total GPUs.
    pub fn total_gpus(&self) -> u32 {
        self.total_gpus
    }

    /// GPUs of the largest server.
    pub fn max_server_gpus(&self) -> u32 {
        self.max_server_gpus
    }

    /// GPUs of the largest domain at `level` (the largest server at the server level).
    pub fn max_domain_gpus(&self, level: Level) -> u32 {
        self.max_domain_gpus
            .get(level.0 as usize)
            .copied()
            .unwrap_or(0)
    }

    /// The narrowest level with a domain big enough for a gang of `gpus`, or
    /// `None` if the whole cluster is too small.
    pub fn min_level_for(&self, gpus: u32) -> Option<Level> {
        (0..self.max_domain_gpus.len())
            .rev()
            .find(|&l| self.max_domain_gpus[l] >= gpus)
            .map(|l| Level(u8::try_from(l).unwrap_or(u8::MAX)))
    }

    /// The fewest servers of one domain of `level` that can hold a gang of
    /// `gpus` when empty, or `None` if no domain of the level can.
    pub fn min_servers_at(&self, level: Level, gpus: u32) -> Option<u32> {
        let cap = self.servers_cap.get(level.0 as usize)?;
        let k = cap.partition_point(|&sum| sum < gpus);
        (k < cap.len()).then(|| u32::try_from(k + 1).unwrap_or(u32::MAX))
    }

    /// The fewest servers that can hold a gang of `gpus` within one domain
    /// of its narrowest level ([`Topology::min_level_for`]), or `None` if
    /// the whole cluster is too small: with this level it is the tightest
    /// spread limit that can ever succeed.
    ///
    /// ```
    /// use gangway_core::{Level, Topology};
    /// let topo = Topology::uniform(2, 4, 8).unwrap();
    /// assert_eq!(topo.min_servers_for(8), Some(1));
    /// assert_eq!(topo.min_servers_for(9), Some(2));
    /// assert_eq!(topo.min_servers_for(40), Some(5)); // one rack is too small
    /// assert_eq!(topo.min_servers_for(65), None);
    /// assert_eq!(topo.min_servers_at(Level(1), 24), Some(3));
    /// ```
    pub fn min_servers_for(&self, gpus: u32) -> Option<u32> {
        self.min_servers_at(self.min_level_for(gpus)?, gpus)
    }

    /// The narrowest level whose single domain holds all of `servers`
    /// (the server level for one server; `Level(0)` for an empty slice).
    pub fn common_level(&self, servers: &[ServerId]) -> Level {
        let Some((first, rest)) = servers.split_first() else {
            return Level::ANY;
        };
        if rest.iter().all(|s| s == first) {
            return self.server_level();
        }
        let anc = &self.servers[first.0 as usize].ancestors;
        let mut depth = anc.len();
        for s in rest {
            let other = &self.servers[s.0 as usize].ancestors;
            let same = anc.iter().zip(other).take_while(|(a, b)| a == b).count();
            depth = depth.min(same);
        }
        // `depth` ancestors are shared: the deepest shared one is at level depth-1.
        Level(u8::try_from(depth.saturating_sub(1)).unwrap_or(u8::MAX))
    }

    /// The GPU types, indexed by [`GpuTypeId`] (one, [`DEFAULT_GPU_TYPE`],
    /// for a topology built without types).
    pub fn gpu_types(&self) -> &[GpuType] {
        &self.gpu_types
    }

    /// Whether the servers have more than one GPU type: then a gang is
    /// placed on servers of one type only.
    pub fn is_heterogeneous(&self) -> bool {
        self.gpu_types.len() > 1
    }

    /// The type named `name`.
    pub fn gpu_type_by_name(&self, name: &str) -> Option<GpuTypeId> {
        self.gpu_types
            .iter()
            .position(|t| t.name == name)
            .map(|i| GpuTypeId(u8::try_from(i).unwrap_or(u8::MAX)))
    }

    /// The one GPU type of every server below domain `d`, if they share
    /// one (`None` if they mix types, or `d` has no servers).
    pub fn domain_gpu_type(&self, d: DomainId) -> Option<GpuTypeId> {
        self.domain_types.get(d.0 as usize).copied().flatten()
    }

    /// Every type, as a set.
    pub fn all_gpu_types(&self) -> GpuTypeSet {
        GpuTypeSet::all(self.gpu_types.len())
    }

    /// The servers of type `t` (empty for an unknown type).
    pub fn servers_of_type(&self, t: GpuTypeId) -> &crate::ServerSet {
        static EMPTY: crate::ServerSet = crate::ServerSet::EMPTY;
        self.type_capacity
            .get(t.index())
            .map_or(&EMPTY, |c| &c.servers)
    }

    /// The servers of type `t`, shared (one set per type for the
    /// topology's life: searches among it are remembered by its address).
    pub(crate) fn type_servers_arc(
        &self,
        t: GpuTypeId,
    ) -> Option<&std::sync::Arc<crate::ServerSet>> {
        self.type_capacity.get(t.index()).map(|c| &c.servers)
    }

    /// GPUs of type `t` in all.
    pub fn type_gpus(&self, t: GpuTypeId) -> u32 {
        self.type_capacity.get(t.index()).map_or(0, |c| c.gpus)
    }

    /// Per type, what its servers offer.
    pub(crate) fn type_capacity(&self) -> &[TypeCapacity] {
        &self.type_capacity
    }

    /// For a gang of `gpus` on one of `types`: the narrowest level at which
    /// one domain of one type can hold it when empty and the fewest servers
    /// it takes there, over the types; `None` if no type can.
    ///
    /// ```
    /// use gangway_core::{GpuTypeSet, Level, TopologyBuilder};
    /// let mut b = TopologyBuilder::new();
    /// let (big, small) = (b.add_gpu_type("big", 80).unwrap(), b.add_gpu_type("small", 16).unwrap());
    /// let r = b.add_domain(b.root(), "r0").unwrap();
    /// b.add_server_of_type(r, "b0", 8, big).unwrap();
    /// b.add_server_of_type(r, "s0", 4, small).unwrap();
    /// b.add_server_of_type(r, "s1", 4, small).unwrap();
    /// let topo = b.build().unwrap();
    /// assert_eq!(topo.min_spread_among(GpuTypeSet::of([small]), 8), Some((Level(1), 2)));
    /// assert_eq!(topo.min_spread_among(topo.all_gpu_types(), 8), Some((Level(2), 1)));
    /// assert_eq!(topo.min_spread_among(GpuTypeSet::of([small]), 9), None);
    /// ```
    pub fn min_spread_among(&self, types: GpuTypeSet, gpus: u32) -> Option<(Level, u32)> {
        types
            .iter()
            .filter_map(|t| self.type_capacity.get(t.index())?.min_spread(gpus))
            .min_by_key(|&(level, servers)| (std::cmp::Reverse(level), servers))
    }

    /// The petgraph tree (domains, servers and GPUs as nodes; edges point to
    /// children). Crate-private: petgraph's types stay out of the public API.
    #[cfg(test)]
    pub(crate) fn graph(&self) -> &DiGraph<Node, ()> {
        &self.graph
    }

    /// The children of a domain, as graph nodes, in insertion order.
    pub fn children(&self, domain: DomainId) -> Vec<Node> {
        let Some(d) = self.domains.get(domain.0 as usize) else {
            return Vec::new();
        };
        let mut out: Vec<Node> = self
            .graph
            .neighbors(d.node)
            .map(|n| self.graph[n].clone())
            .collect();
        // petgraph lists neighbours newest first.
        out.reverse();
        out
    }
}

/// Why a topology could not be built or loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TopologyError {
    /// A file could not be read.
    #[error("{file}: cannot read: {source}")]
    Io {
        /// The file.
        file: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A line or entry of an input file is malformed.
    #[error("{file}:{line}: {message}")]
    Parse {
        /// The file.
        file: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// Two servers (or two domains) share a name.
    #[error("duplicate name {name:?}")]
    DuplicateName {
        /// The repeated name.
        name: String,
    },
    /// A server has too many GPUs to track.
    #[error("server {name:?} has {gpus} GPUs; at most {MAX_GPUS_PER_SERVER} are supported")]
    TooManyGpus {
        /// The server.
        name: String,
        /// Its GPU count.
        gpus: u32,
    },
    /// Servers sit at different depths of the tree.
    #[error(
        "servers must all sit at the same depth: {name:?} is at depth {depth}, others at {expected}"
    )]
    UnevenDepth {
        /// A server at the odd depth.
        name: String,
        /// Its depth.
        depth: usize,
        /// The depth of the first server.
        expected: usize,
    },
    /// A domain id passed to the builder does not exist.
    #[error("unknown domain {0:?}")]
    UnknownDomain(DomainId),
    /// The topology has no servers.
    #[error("the topology has no servers")]
    Empty,
    /// Two GPU types share a name.
    #[error("GPU type {name:?} is declared twice")]
    DuplicateGpuType {
        /// The repeated name.
        name: String,
    },
    /// More GPU types than a topology supports.
    #[error("more than {} GPU types", GpuTypeSet::MAX)]
    TooManyGpuTypes,
    /// A server names a GPU type the builder does not know.
    #[error("server {server:?}: unknown GPU type {gpu_type}")]
    UnknownGpuType {
        /// The server.
        server: String,
        /// The type it names (an id, or a name from a file).
        gpu_type: String,
    },
    /// The tree is deeper than a spread level can name.
    #[error("the topology is too deep ({0} levels)")]
    TooDeep(usize),
}
