//! Building a [`Topology`] in code.

use std::collections::{HashMap, HashSet};

use gangway_plugin_sdk::{GpuTypeId, GpuTypeSet, Level};
use petgraph::graph::DiGraph;

use super::{
    DEFAULT_GPU_TYPE, Domain, DomainId, GpuType, MAX_GPUS_PER_SERVER, Node, Server, ServerId,
    Topology, TopologyError, TypeCapacity,
};

/// Builds a [`Topology`] domain by domain and server by server.
///
/// ```
/// use gangway_core::TopologyBuilder;
/// let mut b = TopologyBuilder::new();
/// let rack = b.add_domain(b.root(), "rack-a").unwrap();
/// b.add_server(rack, "m0", 8).unwrap();
/// b.add_server(rack, "m1", 4).unwrap();
/// let topo = b.build().unwrap();
/// assert_eq!(topo.total_gpus(), 12);
/// ```
#[derive(Debug)]
pub struct TopologyBuilder {
    level_names: Vec<String>,
    domains: Vec<(String, Option<DomainId>, usize)>,
    /// Each server's name, parent, GPUs and type (`None`: the default type).
    servers: Vec<(String, DomainId, u32, Option<GpuTypeId>)>,
    names: HashSet<String>,
    gpu_types: Vec<GpuType>,
}

impl Default for TopologyBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl TopologyBuilder {
    /// A builder with one root domain named `cluster` and level names
    /// cluster > rack > server (extra levels get generic names).
    pub fn new() -> Self {
        TopologyBuilder {
            level_names: vec!["cluster".into(), "rack".into(), "server".into()],
            domains: vec![("cluster".into(), None, 0)],
            servers: Vec::new(),
            names: HashSet::from(["cluster".to_string()]),
            gpu_types: Vec::new(),
        }
    }

    /// Declares a GPU type: its name (unique) and the memory of one GPU in
    /// GB (0 if not known). Types keep the order they are declared in.
    pub fn add_gpu_type(
        &mut self,
        name: impl Into<String>,
        memory_gb: u32,
    ) -> Result<GpuTypeId, TopologyError> {
        let name = name.into();
        if self.gpu_types.iter().any(|t| t.name == name) {
            return Err(TopologyError::DuplicateGpuType { name });
        }
        // One id stays free for the default type of untyped servers.
        if self.gpu_types.len() + 1 >= GpuTypeSet::MAX {
            return Err(TopologyError::TooManyGpuTypes);
        }
        let id = GpuTypeId(u8::try_from(self.gpu_types.len()).unwrap_or(u8::MAX));
        self.gpu_types.push(GpuType { name, memory_gb });
        Ok(id)
    }

    /// The type declared as `name`, if any.
    pub fn gpu_type(&self, name: &str) -> Option<GpuTypeId> {
        self.gpu_types
            .iter()
            .position(|t| t.name == name)
            .map(|i| GpuTypeId(u8::try_from(i).unwrap_or(u8::MAX)))
    }

    /// Adds a server with `gpus` GPUs of type `gpu_type` (declared with
    /// [`TopologyBuilder::add_gpu_type`]) under `parent`.
    pub fn add_server_of_type(
        &mut self,
        parent: DomainId,
        name: impl Into<String>,
        gpus: u32,
        gpu_type: GpuTypeId,
    ) -> Result<ServerId, TopologyError> {
        let name = name.into();
        if gpu_type.index() >= self.gpu_types.len() {
            return Err(TopologyError::UnknownGpuType {
                server: name,
                gpu_type: gpu_type.to_string(),
            });
        }
        let id = self.add_server(parent, name, gpus)?;
        if let Some(s) = self.servers.last_mut() {
            s.3 = Some(gpu_type);
        }
        Ok(id)
    }

    /// Names the levels from the root down to the servers.
    pub fn level_names(&mut self, names: Vec<String>) -> &mut Self {
        self.level_names = names;
        self
    }

    /// The root domain (the cluster).
    pub fn root(&self) -> DomainId {
        DomainId(0)
    }

    /// Adds a domain under `parent`.
    pub fn add_domain(
        &mut self,
        parent: DomainId,
        name: impl Into<String>,
    ) -> Result<DomainId, TopologyError> {
        let name = name.into();
        let depth = self
            .domains
            .get(parent.0 as usize)
            .ok_or(TopologyError::UnknownDomain(parent))?
            .2
            + 1;
        if !self.names.insert(name.clone()) {
            return Err(TopologyError::DuplicateName { name });
        }
        let id = DomainId(u32::try_from(self.domains.len()).unwrap_or(u32::MAX));
        self.domains.push((name, Some(parent), depth));
        Ok(id)
    }

    /// Adds a server with `gpus` GPUs under `parent`, of the default GPU
    /// type ([`DEFAULT_GPU_TYPE`], memory not known).
    pub fn add_server(
        &mut self,
        parent: DomainId,
        name: impl Into<String>,
        gpus: u32,
    ) -> Result<ServerId, TopologyError> {
        let name = name.into();
        if self.domains.get(parent.0 as usize).is_none() {
            return Err(TopologyError::UnknownDomain(parent));
        }
        if gpus > MAX_GPUS_PER_SERVER {
            return Err(TopologyError::TooManyGpus { name, gpus });
        }
        if !self.names.insert(name.clone()) {
            return Err(TopologyError::DuplicateName { name });
        }
        let id = ServerId(u32::try_from(self.servers.len()).unwrap_or(u32::MAX));
        self.servers.push((name, parent, gpus, None));
        Ok(id)
    }

    /// Checks the shape and builds the immutable topology. Domains without
    /// servers below them are kept (they simply never hold a job).
    pub fn build(mut self) -> Result<Topology, TopologyError> {
        let server_depth = self.server_depth()?;
        let gpu_types = self.settle_types()?;
        let level_names = if self.level_names.len() == server_depth + 1 {
            self.level_names
        } else {
            default_level_names(server_depth)
        };
        let mut graph = DiGraph::new();
        let (mut domains, by_level) = add_domains(&mut graph, self.domains, server_depth);
        let (servers, server_names) =
            add_servers(&mut graph, &mut domains, self.servers, server_depth);
        let total_gpus = servers.iter().map(|s| s.gpus).sum();
        let max_server_gpus = servers.iter().map(|s| s.gpus).max().unwrap_or(0);
        let mut max_domain_gpus: Vec<u32> = by_level
            .iter()
            .map(|ids| {
                ids.iter()
                    .map(|d| domains[d.0 as usize].gpus)
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        max_domain_gpus.push(max_server_gpus);
        let servers_cap = servers_cap(&servers, &domains, by_level.len() + 1, max_server_gpus);
        let type_capacity = (0..gpu_types.len())
            .map(|t| {
                TypeCapacity::of(&servers, &domains, by_level.len() + 1, |s| {
                    s.gpu_type.index() == t
                })
            })
            .collect();
        let domain_types = domain_types(&servers, domains.len());
        Ok(Topology {
            graph,
            level_names,
            domain_types,
            domains,
            servers,
            by_level,
            server_names,
            max_domain_gpus,
            total_gpus,
            max_server_gpus,
            servers_cap,
            gpu_types,
            type_capacity,
        })
    }

    /// Gives untyped servers the default type (declared after the others,
    /// only if some server has no type) and returns the types.
    fn settle_types(&mut self) -> Result<Vec<GpuType>, TopologyError> {
        let mut types = std::mem::take(&mut self.gpu_types);
        if self.servers.iter().any(|s| s.3.is_none()) {
            if types.iter().any(|t| t.name == DEFAULT_GPU_TYPE) {
                return Err(TopologyError::DuplicateGpuType {
                    name: DEFAULT_GPU_TYPE.to_string(),
                });
            }
            let id = GpuTypeId(u8::try_from(types.len()).unwrap_or(u8::MAX));
            types.push(GpuType {
                name: DEFAULT_GPU_TYPE.to_string(),
                memory_gb: 0,
            });
            for s in &mut self.servers {
                s.3.get_or_insert(id);
            }
        }
        Ok(types)
    }

    /// The depth of the servers below the cluster, the same for every
    /// server; refuses an empty topology and one too deep.
    fn server_depth(&self) -> Result<usize, TopologyError> {
        let Some(first) = self.servers.first() else {
            return Err(TopologyError::Empty);
        };
        let server_depth = self.domains[first.1.0 as usize].2 + 1;
        if server_depth > usize::from(u8::MAX) {
            return Err(TopologyError::TooDeep(server_depth));
        }
        for (name, parent, _, _) in &self.servers {
            let depth = self.domains[parent.0 as usize].2 + 1;
            if depth != server_depth {
                return Err(TopologyError::UnevenDepth {
                    name: name.clone(),
                    depth,
                    expected: server_depth,
                });
            }
        }
        Ok(server_depth)
    }
}

/// The levels' names when none were given (or not one per level):
/// `cluster`, `level1`..., `rack`, `server`.
fn default_level_names(server_depth: usize) -> Vec<String> {
    (0..=server_depth)
        .map(|l| match l {
            0 => "cluster".to_string(),
            l if l == server_depth => "server".to_string(),
            l if l + 1 == server_depth => "rack".to_string(),
            l => format!("level{l}"),
        })
        .collect()
}

/// Adds the builder's `raw` domains to `graph`, each under its parent:
/// the domains (no GPUs counted yet) and their ids by level.
fn add_domains(
    graph: &mut DiGraph<Node, ()>,
    raw: Vec<(String, Option<DomainId>, usize)>,
    server_depth: usize,
) -> (Vec<Domain>, Vec<Vec<DomainId>>) {
    let mut domains: Vec<Domain> = Vec::with_capacity(raw.len());
    let mut by_level: Vec<Vec<DomainId>> = vec![Vec::new(); server_depth];
    for (i, (name, parent, depth)) in raw.into_iter().enumerate() {
        let id = DomainId(u32::try_from(i).unwrap_or(u32::MAX));
        let node = graph.add_node(Node::Domain(id));
        if let Some(p) = parent {
            graph.add_edge(domains[p.0 as usize].node, node, ());
        }
        if let Some(level) = by_level.get_mut(depth) {
            level.push(id);
        }
        domains.push(Domain {
            name,
            level: Level(u8::try_from(depth).unwrap_or(u8::MAX)),
            parent,
            gpus: 0,
            node,
        });
    }
    (domains, by_level)
}

/// Per domain, the one GPU type of every server below it (`None` if they
/// mix types or there are none).
fn domain_types(servers: &[Server], domains: usize) -> Vec<Option<GpuTypeId>> {
    // Per domain: not seen yet, one type, or mixed.
    let mut seen: Vec<Option<Option<GpuTypeId>>> = vec![None; domains];
    for s in servers {
        for d in &s.ancestors {
            if let Some(slot) = seen.get_mut(d.0 as usize) {
                *slot = match *slot {
                    None => Some(Some(s.gpu_type)),
                    Some(Some(t)) if t == s.gpu_type => Some(Some(t)),
                    Some(_) => Some(None),
                };
            }
        }
    }
    seen.into_iter().map(Option::flatten).collect()
}

/// Adds the builder's `raw` servers and their GPUs to `graph`, counting
/// their GPUs in every domain above them: the servers and their ids by
/// name.
fn add_servers(
    graph: &mut DiGraph<Node, ()>,
    domains: &mut [Domain],
    raw: Vec<(String, DomainId, u32, Option<GpuTypeId>)>,
    server_depth: usize,
) -> (Vec<Server>, HashMap<String, ServerId>) {
    let mut servers = Vec::with_capacity(raw.len());
    let mut server_names = HashMap::with_capacity(raw.len());
    for (i, (name, parent, gpus, gpu_type)) in raw.into_iter().enumerate() {
        let id = ServerId(u32::try_from(i).unwrap_or(u32::MAX));
        let node = graph.add_node(Node::Server(id));
        graph.add_edge(domains[parent.0 as usize].node, node, ());
        for g in 0..gpus {
            let gpu = graph.add_node(Node::Gpu(id, u8::try_from(g).unwrap_or(u8::MAX)));
            graph.add_edge(node, gpu, ());
        }
        let mut ancestors = Vec::with_capacity(server_depth);
        let mut cur = Some(parent);
        while let Some(d) = cur {
            ancestors.push(d);
            domains[d.0 as usize].gpus += gpus;
            cur = domains[d.0 as usize].parent;
        }
        ancestors.reverse();
        server_names.insert(name.clone(), id);
        servers.push(Server {
            name,
            gpus,
            ancestors,
            gpu_type: gpu_type.unwrap_or_default(),
        });
    }
    (servers, server_names)
}

/// Per level (of `levels`, servers last): the most GPUs any one domain of
/// the level offers on its k largest servers, for every k.
fn servers_cap(
    servers: &[Server],
    domains: &[Domain],
    levels: usize,
    max_server_gpus: u32,
) -> Vec<Vec<u32>> {
    let mut servers_cap = domain_caps(servers, domains, levels);
    servers_cap[levels - 1] = vec![max_server_gpus];
    servers_cap
}

/// Per level (of `levels`), over `servers`: the most GPUs any one domain
/// of the level offers on its `k + 1` largest of them, at index `k` (the
/// server level, which no domain is at, is left empty for the caller).
pub(super) fn domain_caps<'a>(
    servers: impl IntoIterator<Item = &'a Server>,
    domains: &[Domain],
    levels: usize,
) -> Vec<Vec<u32>> {
    let mut per_domain: HashMap<DomainId, Vec<u32>> = HashMap::new();
    for s in servers {
        for d in &s.ancestors {
            per_domain.entry(*d).or_default().push(s.gpus);
        }
    }
    let mut caps: Vec<Vec<u32>> = vec![Vec::new(); levels];
    for (d, mut sizes) in per_domain {
        sizes.sort_unstable_by(|a, b| b.cmp(a));
        let Some(cap) = caps.get_mut(domains[d.0 as usize].level.0 as usize) else {
            continue;
        };
        let mut sum = 0u32;
        for (k, g) in sizes.into_iter().enumerate() {
            sum = sum.saturating_add(g);
            if cap.len() <= k {
                cap.push(sum);
            } else {
                cap[k] = cap[k].max(sum);
            }
        }
    }
    caps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_and_ancestors() {
        let topo = Topology::uniform(3, 2, 4).unwrap();
        assert_eq!(topo.level_names(), ["cluster", "rack", "server"]);
        assert_eq!(topo.domains_at(Level(1)).len(), 3);
        assert_eq!(topo.servers()[5].ancestors, vec![DomainId(0), DomainId(3)]);
        assert_eq!(topo.max_domain_gpus(Level(1)), 8);
        assert_eq!(topo.min_level_for(4), Some(Level(2)));
        assert_eq!(topo.min_level_for(5), Some(Level(1)));
        assert_eq!(topo.min_level_for(9), Some(Level(0)));
        assert_eq!(topo.min_level_for(25), None);
        // 1 cluster + 3 racks + 6 servers + 24 GPUs
        assert_eq!(topo.graph().node_count(), 34);
    }

    #[test]
    fn common_level_of_servers() {
        let topo = Topology::uniform(2, 2, 8).unwrap();
        assert_eq!(topo.common_level(&[ServerId(0)]), Level(2));
        assert_eq!(topo.common_level(&[ServerId(0), ServerId(1)]), Level(1));
        assert_eq!(topo.common_level(&[ServerId(0), ServerId(2)]), Level(0));
    }

    #[test]
    fn deeper_trees_are_allowed_but_must_be_even() {
        let mut b = TopologyBuilder::new();
        let pod = b.add_domain(b.root(), "pod").unwrap();
        let rack = b.add_domain(pod, "rack").unwrap();
        b.add_server(rack, "s0", 8).unwrap();
        let topo = b.build().unwrap();
        assert_eq!(topo.server_level(), Level(3));
        assert_eq!(topo.children(DomainId(0)), vec![Node::Domain(pod)]);

        let mut b = TopologyBuilder::new();
        let rack = b.add_domain(b.root(), "rack").unwrap();
        b.add_server(rack, "s0", 8).unwrap();
        b.add_server(b.root(), "s1", 8).unwrap();
        assert!(matches!(b.build(), Err(TopologyError::UnevenDepth { .. })));
    }

    #[test]
    fn bad_input_is_refused() {
        let mut b = TopologyBuilder::new();
        b.add_server(b.root(), "s0", 8).unwrap();
        assert!(matches!(
            b.add_server(b.root(), "s0", 8),
            Err(TopologyError::DuplicateName { .. })
        ));
        assert!(matches!(
            b.add_server(b.root(), "big", 65),
            Err(TopologyError::TooManyGpus { .. })
        ));
        assert!(matches!(
            b.add_server(DomainId(9), "x", 1),
            Err(TopologyError::UnknownDomain(_))
        ));
        assert!(matches!(
            TopologyBuilder::new().build(),
            Err(TopologyError::Empty)
        ));
    }
}
