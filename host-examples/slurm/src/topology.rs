//! The cluster as Gangway sees it: a topology of racks and nodes built from
//! `sinfo` and a rack map, and how each node's GPUs are asked for in Slurm:
//! by the GRES type of every GPU index, so that a placement is pinned
//! exactly, or, on a node whose GPUs all carry one GRES type (the product:
//! `gpu:a100:4`), by count, Slurm choosing the GPUs within the node.

use std::collections::BTreeMap;
use std::path::Path;

use gangway_core::{ServerId, Topology, TopologyBuilder};

use super::SlurmError;
use super::engine::{GresTypes, NodeInfo};
use super::hostlist;

/// The topology and, per server, its Slurm node name and GRES types.
#[derive(Debug)]
pub struct ClusterMap {
    /// Racks and servers (servers named after Slurm nodes).
    pub topology: Topology,
    /// How the GPUs of each server are typed in its GRES, by [`ServerId`]:
    /// one type per index or one type for all.
    pub gres: Vec<GresTypes>,
    /// The rack of each server, by [`ServerId`].
    pub racks: Vec<String>,
}

impl ClusterMap {
    /// The server of a Slurm node.
    pub fn server(&self, node: &str) -> Option<ServerId> {
        self.topology.server_by_name(node)
    }

    /// A server's Slurm node name.
    pub fn node(&self, server: ServerId) -> &str {
        self.topology
            .server(server)
            .map_or("?", |s| s.name.as_str())
    }

    /// The GRES type to ask Slurm for, for each of GPUs `gpus` (indices)
    /// of `server`: each index's own type (exact GPUs), or the node's one
    /// type for each (a count of that type: Slurm chooses the GPUs).
    pub fn gres_types(&self, server: ServerId, gpus: &[u32]) -> Vec<String> {
        self.gres
            .get(server.0 as usize)
            .map_or_else(Vec::new, |g| g.for_gpus(gpus))
    }
}

/// Racks from a Slurm `topology.conf`: every switch with `Nodes=` is a rack
/// (switches of switches are ignored).
pub fn racks_from_topology_conf(path: &Path) -> Result<BTreeMap<String, Vec<String>>, SlurmError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| SlurmError::Config {
        file: file.clone(),
        message: format!("cannot read: {e}"),
    })?;
    let mut racks = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut switch = None;
        let mut nodes = None;
        for word in line.split_whitespace() {
            let (k, v) = word.split_once('=').unwrap_or((word, ""));
            match k.to_ascii_lowercase().as_str() {
                "switchname" => switch = Some(v.to_string()),
                "nodes" => nodes = Some(v.to_string()),
                _ => {}
            }
        }
        let err = |message: String| SlurmError::Config {
            file: format!("{file}:{}", i + 1),
            message,
        };
        let Some(switch) = switch else {
            return Err(err("a line without SwitchName=".into()));
        };
        if let Some(nodes) = nodes {
            racks.insert(switch, hostlist::expand(&nodes).map_err(err)?);
        }
    }
    Ok(racks)
}

/// Racks from the config's `[racks]` table (rack name to host list).
pub fn racks_from_table(
    table: &BTreeMap<String, String>,
    file: &str,
) -> Result<BTreeMap<String, Vec<String>>, SlurmError> {
    table
        .iter()
        .map(|(rack, list)| {
            hostlist::expand(list)
                .map(|nodes| (rack.clone(), nodes))
                .map_err(|message| SlurmError::Config {
                    file: format!("{file} [racks] {rack}"),
                    message,
                })
        })
        .collect()
}

/// The type of `types` (the config's `[gpu_types]`) that one of a node's
/// features names, if one does; an error names a node with two.
fn feature_type<'a>(
    node: &NodeInfo,
    types: &'a BTreeMap<String, u32>,
) -> Result<Option<&'a str>, SlurmError> {
    let mut found = types
        .keys()
        .filter(|t| node.features.iter().any(|f| f == *t));
    let first = found.next().map(String::as_str);
    if let Some(second) = found.next() {
        return Err(SlurmError::Topology(format!(
            "node {}: its features name two GPU types, {} and {second} (a node's GPUs are of \
             one type: give it one of the [gpu_types] as a feature)",
            node.name,
            first.unwrap_or("?")
        )));
    }
    Ok(first)
}

/// The GPU type of a node's GPUs among `types` (the config's
/// `[gpu_types]`): the one its features name, or the GRES type all its
/// GPUs carry (gres.conf `Type=a100`) when that names one; `None` if
/// neither does (its GPUs are of the default type). A GRES type that names
/// no type of `types` (the per-index `g0`, or a product the config does not
/// list) says nothing. An error names a node whose features name two types,
/// or whose feature and GRES type name different ones.
pub fn node_gpu_type<'a>(
    node: &NodeInfo,
    types: &'a BTreeMap<String, u32>,
) -> Result<Option<&'a str>, SlurmError> {
    let feature = feature_type(node, types)?;
    let gres = node
        .gres_types
        .single()
        .and_then(|t| types.get_key_value(t))
        .map(|(t, _)| t.as_str());
    match (feature, gres) {
        (Some(f), Some(g)) if f != g => Err(SlurmError::GpuTypeDisagrees {
            node: node.name.clone(),
            feature: f.to_string(),
            gres: g.to_string(),
        }),
        (f, g) => Ok(f.or(g)),
    }
}

/// Builds the topology from the nodes `sinfo` lists, a rack map (empty:
/// one rack `all`) and the GPU types of the config's `[gpu_types]` (name
/// to memory per GPU in GB): a node whose Slurm feature or whose GPUs' one
/// GRES type names one of them has GPUs of that type ([`node_gpu_type`]),
/// others the default type ([`gangway_core::DEFAULT_GPU_TYPE`]); only
/// types some node has are declared. Nodes without GPUs are left out.
/// Every GPU node must be in exactly one rack and have its GPUs typed in
/// its GRES one per index (gres.conf with one `Type=` per GPU: pinned
/// exactly) or all with one type (`Type=a100 File=/dev/nvidia[0-3]`: asked
/// by count), else the error names the node.
pub fn build(
    nodes: &[NodeInfo],
    racks: &BTreeMap<String, Vec<String>>,
    types: &BTreeMap<String, u32>,
) -> Result<ClusterMap, SlurmError> {
    let by_rack = nodes_by_rack(nodes, racks)?;
    let mut type_of: BTreeMap<&str, &str> = BTreeMap::new();
    for n in by_rack.values().flatten() {
        if let Some(t) = node_gpu_type(n, types)? {
            type_of.insert(n.name.as_str(), t);
        }
    }
    let mut b = TopologyBuilder::new();
    let root = b.root();
    for (name, memory_gb) in types {
        if type_of.values().any(|t| *t == name) {
            b.add_gpu_type(name.clone(), *memory_gb)
                .map_err(|e| SlurmError::Topology(format!("[gpu_types] {name}: {e}")))?;
        }
    }
    let mut gres = Vec::new();
    let mut rack_names = Vec::new();
    for (rack, mut members) in by_rack {
        members.sort_by(|a, c| a.name.cmp(&c.name));
        let domain = b
            .add_domain(root, format!("rack:{rack}"))
            .map_err(|e| SlurmError::Topology(e.to_string()))?;
        for n in members {
            let ty = type_of.get(n.name.as_str()).and_then(|t| b.gpu_type(t));
            let added = match ty {
                Some(t) => b.add_server_of_type(domain, n.name.clone(), n.gpus, t),
                None => b.add_server(domain, n.name.clone(), n.gpus),
            };
            added.map_err(|e| SlurmError::Topology(format!("node {}: {e}", n.name)))?;
            gres.push(n.gres_types.clone());
            rack_names.push(rack.clone());
        }
    }
    let topology = b.build().map_err(|e| SlurmError::Topology(e.to_string()))?;
    Ok(ClusterMap {
        topology,
        gres,
        racks: rack_names,
    })
}

/// The GPU nodes by rack name (one rack `all` without a rack map), each
/// checked: in exactly one rack, its GPUs typed one per index or all with
/// one type.
fn nodes_by_rack<'a>(
    nodes: &'a [NodeInfo],
    racks: &BTreeMap<String, Vec<String>>,
) -> Result<BTreeMap<String, Vec<&'a NodeInfo>>, SlurmError> {
    let mut rack_of: BTreeMap<&str, &str> = BTreeMap::new();
    for (rack, members) in racks {
        for n in members {
            if let Some(other) = rack_of.insert(n.as_str(), rack.as_str()) {
                return Err(SlurmError::Topology(format!(
                    "node {n} is in racks {other} and {rack}"
                )));
            }
        }
    }
    let mut by_rack: BTreeMap<String, Vec<&NodeInfo>> = BTreeMap::new();
    for node in nodes.iter().filter(|n| n.gpus > 0) {
        let rack = if racks.is_empty() {
            "all"
        } else {
            rack_of.get(node.name.as_str()).copied().ok_or_else(|| {
                SlurmError::Topology(format!("node {} is in no rack of the rack map", node.name))
            })?
        };
        if node.gres_types == GresTypes::Other {
            return Err(SlurmError::Topology(format!(
                "node {}: its GPUs are neither typed one per index nor all of one type in its \
                 GRES, so they cannot be asked for: in gres.conf, give each GPU its own Type= \
                 (Type=g0 File=/dev/nvidia0: exact GPUs are pinned) or all of them the model \
                 (Type=a100 File=/dev/nvidia[0-3]: Slurm chooses the GPUs within the node)",
                node.name
            )));
        }
        by_rack.entry(rack.to_string()).or_default().push(node);
    }
    if by_rack.is_empty() {
        return Err(SlurmError::Topology(
            "sinfo lists no node with GPUs (GresTypes=gpu and Gres=gpu:... in slurm.conf)".into(),
        ));
    }
    Ok(by_rack)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gangway_core::Health;

    fn node(name: &str, gpus: u32, typed: bool) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            gpus,
            gres_types: if typed {
                GresTypes::PerIndex((0..gpus).map(|i| format!("g{i}")).collect())
            } else {
                GresTypes::Other
            },
            features: Vec::new(),
            health: Health::Up,
            state: "idle".into(),
            cpus: 16,
            alloc_cpus: 0,
            memory_mb: 1000,
            alloc_memory_mb: 0,
        }
    }

    fn build_untyped(
        nodes: &[NodeInfo],
        racks: &BTreeMap<String, Vec<String>>,
    ) -> Result<ClusterMap, SlurmError> {
        build(nodes, racks, &BTreeMap::new())
    }

    #[test]
    fn racks_and_servers() {
        let nodes = [
            node("n2", 8, true),
            node("n1", 8, true),
            node("login", 0, false),
        ];
        let racks = BTreeMap::from([
            ("r1".to_string(), vec!["n1".to_string()]),
            ("r2".to_string(), vec!["n2".to_string()]),
        ]);
        let map = build(&nodes, &racks, &BTreeMap::new()).unwrap();
        assert_eq!(map.topology.total_gpus(), 16);
        assert_eq!(map.server("n1"), Some(ServerId(0)));
        assert_eq!(map.node(ServerId(1)), "n2");
        assert_eq!(map.racks, ["r1", "r2"]);
        assert_eq!(map.gres_types(ServerId(1), &[5]), ["g5"]);
    }

    #[test]
    fn bad_clusters_name_the_node() {
        let racks = BTreeMap::from([("r1".to_string(), vec!["n1".to_string()])]);
        let e = build_untyped(&[node("n1", 8, true), node("n2", 8, true)], &racks).unwrap_err();
        assert!(e.to_string().contains("node n2 is in no rack"), "{e}");
        let e = build_untyped(&[node("n1", 8, false)], &BTreeMap::new()).unwrap_err();
        assert!(
            e.to_string()
                .contains("node n1: its GPUs are neither typed"),
            "{e}"
        );
        let e = build_untyped(&[node("x", 0, false)], &BTreeMap::new()).unwrap_err();
        assert!(e.to_string().contains("no node with GPUs"), "{e}");
    }

    #[test]
    fn node_features_give_gpu_types() {
        let typed = |name: &str, features: &[&str]| NodeInfo {
            features: features.iter().map(|f| f.to_string()).collect(),
            ..node(name, 8, true)
        };
        let types = BTreeMap::from([
            ("a100".to_string(), 80),
            ("h100".to_string(), 80),
            ("v100".to_string(), 32),
        ]);
        let nodes = [
            typed("n1", &["ib", "a100"]),
            typed("n2", &["v100"]),
            typed("n3", &[]),
        ];
        let map = build(&nodes, &BTreeMap::new(), &types).unwrap();
        let topo = &map.topology;
        // Only the types some node has, then the default one.
        let names: Vec<&str> = topo.gpu_types().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a100", "v100", gangway_core::DEFAULT_GPU_TYPE]);
        assert_eq!(topo.gpu_types()[1].memory_gb, 32);
        let type_of = |n: &str| {
            let s = topo.server(map.server(n).unwrap()).unwrap();
            topo.gpu_types()[s.gpu_type.index()].name.clone()
        };
        assert_eq!(type_of("n1"), "a100");
        assert_eq!(type_of("n2"), "v100");
        assert_eq!(type_of("n3"), gangway_core::DEFAULT_GPU_TYPE);
        // Without [gpu_types], features are only features: one type.
        let map = build(&nodes, &BTreeMap::new(), &BTreeMap::new()).unwrap();
        assert!(!map.topology.is_heterogeneous());
        // A node of two types is named.
        let e = build(&[typed("n9", &["a100", "v100"])], &BTreeMap::new(), &types).unwrap_err();
        assert!(
            e.to_string()
                .contains("node n9: its features name two GPU types, a100 and v100"),
            "{e}"
        );
    }

    #[test]
    fn gres_of_one_type_gives_gpu_types() {
        let types = BTreeMap::from([("a100".to_string(), 80), ("v100".to_string(), 32)]);
        let product = |name: &str, ty: &str, features: &[&str]| NodeInfo {
            gres_types: GresTypes::OneType(ty.into()),
            features: features.iter().map(|f| f.to_string()).collect(),
            ..node(name, 4, false)
        };
        let nodes = [
            product("n1", "a100", &[]),
            product("n2", "v100", &["v100", "ib"]),
            product("n3", "tesla", &[]),
            NodeInfo {
                features: vec!["a100".into()],
                ..node("n4", 8, true)
            },
        ];
        let map = build(&nodes, &BTreeMap::new(), &types).unwrap();
        let topo = &map.topology;
        let type_of = |n: &str| {
            let s = topo.server(map.server(n).unwrap()).unwrap();
            topo.gpu_types()[s.gpu_type.index()].name.clone()
        };
        // By its GRES type alone, by GRES and feature agreeing, by a
        // feature beside per-index types; a product [gpu_types] does not
        // list is the default type.
        assert_eq!(type_of("n1"), "a100");
        assert_eq!(type_of("n2"), "v100");
        assert_eq!(type_of("n3"), gangway_core::DEFAULT_GPU_TYPE);
        assert_eq!(type_of("n4"), "a100");
        // A node of one GRES type is asked for by count of that type; a
        // node typed per index, by the types of its indices.
        let n1 = map.server("n1").unwrap();
        assert_eq!(map.gres_types(n1, &[1, 3]), ["a100", "a100"]);
        assert_eq!(map.gres_types(map.server("n3").unwrap(), &[0]), ["tesla"]);
        assert_eq!(
            map.gres_types(map.server("n4").unwrap(), &[2, 7]),
            ["g2", "g7"]
        );
        // Without [gpu_types], GRES types are not GPU types: one type, and
        // the nodes still asked for by count.
        let map = build(&nodes, &BTreeMap::new(), &BTreeMap::new()).unwrap();
        assert!(!map.topology.is_heterogeneous());
        assert_eq!(map.gres_types(map.server("n1").unwrap(), &[0]), ["a100"]);
        // A one-GPU node: its one type is its type too.
        let single = NodeInfo {
            gres_types: GresTypes::PerIndex(vec!["v100".into()]),
            ..node("n5", 1, false)
        };
        assert_eq!(node_gpu_type(&single, &types).unwrap(), Some("v100"));
    }

    #[test]
    fn a_feature_and_gres_type_that_disagree_name_the_node() {
        let types = BTreeMap::from([("a100".to_string(), 80), ("v100".to_string(), 32)]);
        let bad = NodeInfo {
            gres_types: GresTypes::OneType("a100".into()),
            features: vec!["v100".into()],
            ..node("n7", 4, false)
        };
        let e = build(std::slice::from_ref(&bad), &BTreeMap::new(), &types).unwrap_err();
        assert!(
            matches!(&e, SlurmError::GpuTypeDisagrees { node, feature, gres }
                if node == "n7" && feature == "v100" && gres == "a100"),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains("node n7: its feature names GPU type v100 but its GPUs' GRES type"),
            "{e}"
        );
        // A GRES type that is no type of [gpu_types] never disagrees.
        let other = NodeInfo {
            gres_types: GresTypes::OneType("tesla".into()),
            ..bad
        };
        assert_eq!(node_gpu_type(&other, &types).unwrap(), Some("v100"));
    }

    #[test]
    fn topology_conf_leaf_switches_are_racks() {
        let dir = std::env::temp_dir().join(format!("gw-topo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("topology.conf");
        std::fs::write(
            &p,
            "# racks\nSwitchName=s1 Nodes=n[1-2]\nSwitchName=s2 Nodes=n[3-4]\nSwitchName=top Switches=s[1-2]\n",
        )
        .unwrap();
        let racks = racks_from_topology_conf(&p).unwrap();
        assert_eq!(racks["s2"], ["n3", "n4"]);
        assert_eq!(racks.len(), 2);
        std::fs::write(&p, "SwitchName=s1 Nodes=n[1-\n").unwrap();
        let e = racks_from_topology_conf(&p).unwrap_err();
        assert!(e.to_string().contains("topology.conf:1"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
