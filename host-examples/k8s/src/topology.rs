//! The cluster as Gangway sees it: a topology built from the GPU nodes,
//! levels from node labels (cluster > each configured label > node).

use std::collections::BTreeMap;

use gangway_core::{DomainId, GpuTypeId, MAX_GPUS_PER_SERVER, ServerId, Topology, TopologyBuilder};

use super::objects::NodeInfo;

/// The topology and each server's node name.
#[derive(Debug)]
pub struct ClusterMap {
    /// Levels and servers (servers named after nodes).
    pub topology: Topology,
    /// What the topology was built from, sorted. Two maps with the same
    /// shape need no rebuild.
    pub shape: Vec<NodeShape>,
    /// Nodes left out, and why (too many GPUs for one server).
    pub skipped: Vec<(String, String)>,
}

impl ClusterMap {
    /// The server of a node.
    pub fn server(&self, node: &str) -> Option<ServerId> {
        self.topology.server_by_name(node)
    }

    /// A server's node name.
    pub fn node(&self, server: ServerId) -> &str {
        self.topology
            .server(server)
            .map_or("?", |s| s.name.as_str())
    }

    /// GPUs of a server.
    pub fn gpus(&self, server: ServerId) -> u32 {
        self.topology.server(server).map_or(0, |s| s.gpus)
    }
}

/// What of a node the topology is built from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeShape {
    /// The node's name.
    pub name: String,
    /// Its GPUs.
    pub gpus: u32,
    /// Its domain at each level.
    pub domains: Vec<String>,
    /// Its GPU type and one GPU's memory in GB (`None`: untyped).
    pub gpu_type: Option<(String, u32)>,
}

/// The shape a set of nodes gives: every node with GPUs, sorted by its
/// domains, then name.
pub fn shape(nodes: &[NodeInfo]) -> Vec<NodeShape> {
    let mut out: Vec<_> = nodes
        .iter()
        .filter(|n| n.gpus > 0)
        .map(|n| NodeShape {
            name: n.name.clone(),
            gpus: n.gpus,
            domains: n.domains.clone(),
            gpu_type: n.gpu_type.clone(),
        })
        .collect();
    out.sort_by(|a, b| (&a.domains, &a.name).cmp(&(&b.domains, &b.name)));
    out
}

/// Declares the GPU types of `shape` in `b`, by name; a type's memory is
/// the least any of its nodes reports (0 when one does not say).
fn declare_types(
    b: &mut TopologyBuilder,
    shape: &[NodeShape],
) -> Result<BTreeMap<String, GpuTypeId>, String> {
    let mut memory: BTreeMap<&str, u32> = BTreeMap::new();
    for (name, gb) in shape.iter().filter_map(|n| n.gpu_type.as_ref()) {
        let m = memory.entry(name.as_str()).or_insert(*gb);
        *m = (*m).min(*gb);
    }
    let mut ids = BTreeMap::new();
    for (name, gb) in memory {
        let id = b
            .add_gpu_type(name, gb)
            .map_err(|e| format!("GPU type {name}: {e}"))?;
        ids.insert(name.to_string(), id);
    }
    Ok(ids)
}

/// Builds the topology of the GPU nodes: a domain per distinct label
/// value at each level (named `level=value`, under its parent's), then the
/// nodes. `None` when no node has GPUs.
pub fn build(nodes: &[NodeInfo], levels: &[String]) -> Result<Option<ClusterMap>, String> {
    let mut shape = shape(nodes);
    let mut skipped = Vec::new();
    shape.retain(|n| {
        if n.gpus > MAX_GPUS_PER_SERVER {
            skipped.push((
                n.name.clone(),
                format!(
                    "{} GPUs; at most {MAX_GPUS_PER_SERVER} per node are supported",
                    n.gpus
                ),
            ));
            false
        } else {
            true
        }
    });
    if shape.is_empty() {
        return Ok(None);
    }
    let mut b = TopologyBuilder::new();
    let mut names = vec!["cluster".to_string()];
    names.extend(levels.iter().cloned());
    names.push("node".into());
    b.level_names(names);
    let types = declare_types(&mut b, &shape)?;
    let root = b.root();
    let mut domains: BTreeMap<Vec<String>, DomainId> = BTreeMap::new();
    for node in &shape {
        let path = &node.domains;
        let mut parent = root;
        for depth in 1..=path.len() {
            let prefix = path[..depth].to_vec();
            parent = match domains.get(&prefix) {
                Some(d) => *d,
                None => {
                    let label = prefix
                        .iter()
                        .zip(levels)
                        .map(|(v, l)| format!("{l}={v}"))
                        .collect::<Vec<_>>()
                        .join(",");
                    let d = b.add_domain(parent, label).map_err(|e| e.to_string())?;
                    domains.insert(prefix, d);
                    d
                }
            };
        }
        let name = &node.name;
        let typed = node.gpu_type.as_ref().and_then(|(t, _)| types.get(t));
        match typed {
            Some(t) => b.add_server_of_type(parent, name.clone(), node.gpus, *t),
            None => b.add_server(parent, name.clone(), node.gpus),
        }
        .map_err(|e| format!("node {name}: {e}"))?;
    }
    let topology = b.build().map_err(|e| e.to_string())?;
    Ok(Some(ClusterMap {
        topology,
        shape,
        skipped,
    }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use gangway_core::Health;

    fn node(name: &str, gpus: u32, rack: &str) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            gpus,
            domains: vec![rack.into()],
            health: Health::Up,
            gpu_type: None,
            facts: Default::default(),
        }
    }

    #[test]
    fn racks_from_labels() {
        let nodes = [
            node("b", 8, "r2"),
            node("a", 8, "r1"),
            node("c", 8, "r1"),
            node("cpu", 0, "r1"),
            node("huge", 128, "r3"),
        ];
        let map = build(&nodes, &["rack".into()]).unwrap().unwrap();
        assert_eq!(map.topology.total_gpus(), 24);
        assert_eq!(map.server("a"), Some(ServerId(0)));
        assert_eq!(map.server("c"), Some(ServerId(1)));
        assert_eq!(map.node(ServerId(2)), "b");
        assert_eq!(map.topology.level_names(), ["cluster", "rack", "node"]);
        assert_eq!(map.skipped.len(), 1);
        assert!(map.server("cpu").is_none());
        // The same nodes in another order: the same shape.
        let again = build(
            &[node("c", 8, "r1"), node("a", 8, "r1"), node("b", 8, "r2")],
            &["rack".into()],
        )
        .unwrap()
        .unwrap();
        assert_eq!(again.shape, map.shape);
        assert!(build(&[node("cpu", 0, "r")], &[]).unwrap().is_none());
    }
}
