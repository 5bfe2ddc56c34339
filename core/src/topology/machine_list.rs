//! Loading a Philly `cluster_machine_list` CSV and grouping its machines into racks.
//!
//! Philly's list has no racks (RDMA domains); a [`RackGrouping`] rule supplies them.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Topology, TopologyBuilder, TopologyError};

/// How machines of a list are grouped into racks (RDMA domains).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RackGrouping {
    /// Consecutive machines (ordered by their numeric id, `m12` after `m2`)
    /// fill racks of this many servers.
    Consecutive {
        /// Servers per rack.
        servers_per_rack: u32,
    },
    /// Machines with the same GPU count share racks (one SKU per RDMA domain,
    /// as in most clusters), then fill racks of this many servers in id order.
    SameGpuCount {
        /// Servers per rack.
        servers_per_rack: u32,
    },
}

impl Default for RackGrouping {
    /// Same-SKU racks of 32 servers: 256 GPUs per 8-GPU rack, enough for every
    /// gang in the Philly trace except the 28 jobs of 64 GPUs and 11 of 128.
    fn default() -> Self {
        RackGrouping::SameGpuCount {
            servers_per_rack: 32,
        }
    }
}

impl RackGrouping {
    /// Every grouping's name (`same-sku`, `consecutive`): what command lines
    /// and bindings accept, with a rack size beside it.
    pub const NAMES: [&'static str; 2] = [
        RackGrouping::SameGpuCount {
            servers_per_rack: 0,
        }
        .name(),
        RackGrouping::Consecutive {
            servers_per_rack: 0,
        }
        .name(),
    ];

    /// The grouping's name: `same-sku` or `consecutive`.
    ///
    /// ```
    /// use gangway_core::RackGrouping;
    /// assert_eq!(RackGrouping::default().name(), "same-sku");
    /// ```
    pub const fn name(&self) -> &'static str {
        match self {
            RackGrouping::SameGpuCount { .. } => "same-sku",
            RackGrouping::Consecutive { .. } => "consecutive",
        }
    }

    /// Servers per rack.
    pub const fn servers_per_rack(&self) -> u32 {
        match self {
            RackGrouping::SameGpuCount { servers_per_rack }
            | RackGrouping::Consecutive { servers_per_rack } => *servers_per_rack,
        }
    }

    /// The grouping named `name` (one of [`RackGrouping::NAMES`]) with racks
    /// of `servers_per_rack` servers.
    ///
    /// ```
    /// use gangway_core::RackGrouping;
    /// assert_eq!(
    ///     RackGrouping::named("consecutive", 8),
    ///     Some(RackGrouping::Consecutive { servers_per_rack: 8 })
    /// );
    /// assert_eq!(RackGrouping::named("by-color", 8), None);
    /// ```
    pub fn named(name: &str, servers_per_rack: u32) -> Option<RackGrouping> {
        [
            RackGrouping::SameGpuCount { servers_per_rack },
            RackGrouping::Consecutive { servers_per_rack },
        ]
        .into_iter()
        .find(|g| g.name() == name)
    }
}

impl std::fmt::Display for RackGrouping {
    /// `same-sku, 32 per rack`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}, {} per rack", self.name(), self.servers_per_rack())
    }
}

/// One machine of a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Machine {
    pub(crate) name: String,
    pub(crate) gpus: u32,
    /// Memory of one GPU in GB, where the list has a memory column.
    pub(crate) memory_gb: Option<u32>,
    /// Its line in the list.
    pub(crate) line: usize,
}

impl Topology {
    /// Loads a Philly machine list: the official `cluster_machine_list`
    /// (`machineId, number of GPUs, single GPU mem`, with its leading spaces) or
    /// the revised list (`,machineId,number of GPUs`). Columns are found by
    /// header name; racks come from `grouping`. Where the list has the
    /// memory column (`single GPU mem`, e.g. ` 24GB`), each memory size is
    /// a GPU type named as the list writes it (`12GB`, `24GB`; smallest
    /// first), and the `same-sku` grouping keeps types in separate racks.
    pub fn from_machine_list(
        path: impl AsRef<Path>,
        grouping: RackGrouping,
    ) -> Result<Topology, TopologyError> {
        let path = path.as_ref();
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| TopologyError::Io {
            file: file.clone(),
            source,
        })?;
        let machines = parse_machine_list(&file, &text)?;
        group_machines(&file, machines, grouping)
    }

    /// Like [`Topology::from_machine_list`], from text already in memory;
    /// `file` names it in errors.
    pub fn from_machine_list_str(
        file: &str,
        text: &str,
        grouping: RackGrouping,
    ) -> Result<Topology, TopologyError> {
        group_machines(file, parse_machine_list(file, text)?, grouping)
    }
}

fn parse_err(file: &str, line: usize, message: impl Into<String>) -> TopologyError {
    TopologyError::Parse {
        file: file.to_string(),
        line,
        message: message.into(),
    }
}

pub(crate) fn parse_machine_list(file: &str, text: &str) -> Result<Vec<Machine>, TopologyError> {
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .flexible(true)
        .from_reader(text.as_bytes());
    let headers = reader
        .headers()
        .map_err(|e| parse_err(file, 1, format!("cannot read the header: {e}")))?
        .clone();
    let find = |want: &str| {
        headers
            .iter()
            .position(|h| h.eq_ignore_ascii_case(want))
            .ok_or_else(|| {
                parse_err(
                    file,
                    1,
                    format!(
                        "no {want:?} column in the header (found {:?})",
                        headers.iter().collect::<Vec<_>>()
                    ),
                )
            })
    };
    let id_col = find("machineId")?;
    let gpu_col = find("number of GPUs")?;
    let mem_col = headers
        .iter()
        .position(|h| h.eq_ignore_ascii_case("single GPU mem"));
    let mut machines = Vec::new();
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for record in reader.records() {
        let record = record.map_err(|e| {
            let line = e.position().map_or(0, |p| p.line() as usize);
            parse_err(file, line, e.to_string())
        })?;
        let line = record.position().map_or(0, |p| p.line() as usize);
        if record.iter().all(str::is_empty) {
            continue;
        }
        let name = record
            .get(id_col)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| parse_err(file, line, "missing machineId"))?;
        let gpus_text = record
            .get(gpu_col)
            .ok_or_else(|| parse_err(file, line, format!("machine {name}: missing GPU count")))?;
        let gpus: u32 = gpus_text.parse().map_err(|_| {
            parse_err(
                file,
                line,
                format!("machine {name}: GPU count {gpus_text:?} is not a whole number"),
            )
        })?;
        let memory_gb = mem_col
            .map(|c| memory_cell(file, line, name, record.get(c).unwrap_or("")))
            .transpose()?;
        if let Some(first) = seen.insert(name.to_string(), line) {
            return Err(parse_err(
                file,
                line,
                format!("machine {name} is listed twice (first on line {first})"),
            ));
        }
        machines.push(Machine {
            name: name.to_string(),
            gpus,
            memory_gb,
            line,
        });
    }
    if machines.is_empty() {
        return Err(parse_err(file, 1, "the machine list has no machines"));
    }
    Ok(machines)
}

/// GB of machine `name`'s memory cell `text` (on `line`), or an error
/// naming it.
fn memory_cell(file: &str, line: usize, name: &str, text: &str) -> Result<u32, TopologyError> {
    parse_memory(text).ok_or_else(|| {
        parse_err(
            file,
            line,
            format!("machine {name}: GPU memory {text:?} is not a size like 24GB"),
        )
    })
}

/// GB of a memory size as the machine list writes it (`24GB`, `24 GB`,
/// `24`).
fn parse_memory(text: &str) -> Option<u32> {
    let t = text.trim();
    let digits = t
        .strip_suffix("GB")
        .or_else(|| t.strip_suffix("gb"))
        .unwrap_or(t)
        .trim();
    digits.parse().ok()
}

/// The numeric part of a Philly machine id (`m31` -> 31), for a natural order.
fn numeric_key(name: &str) -> (u64, &str) {
    let digits: String = name.chars().filter(char::is_ascii_digit).collect();
    (digits.parse().unwrap_or(u64::MAX), name)
}

/// Builds racks of `machines`; an error names the machine's line of `file`.
pub(crate) fn group_machines(
    file: &str,
    mut machines: Vec<Machine>,
    grouping: RackGrouping,
) -> Result<Topology, TopologyError> {
    let per_rack = match grouping {
        RackGrouping::Consecutive { servers_per_rack }
        | RackGrouping::SameGpuCount { servers_per_rack } => servers_per_rack.max(1) as usize,
    };
    machines.sort_by(|a, b| numeric_key(&a.name).cmp(&numeric_key(&b.name)));
    if let RackGrouping::SameGpuCount { .. } = grouping {
        // Larger servers first; stable, so id order holds within a size.
        machines.sort_by_key(|m| (std::cmp::Reverse(m.gpus), m.memory_gb));
    }
    let mut b = TopologyBuilder::new();
    let mut sizes: Vec<u32> = machines.iter().filter_map(|m| m.memory_gb).collect();
    sizes.sort_unstable();
    sizes.dedup();
    for gb in &sizes {
        b.add_gpu_type(format!("{gb}GB"), *gb)
            .map_err(|e| parse_err(file, 1, e.to_string()))?;
    }
    let type_of = |m: &Machine| {
        m.memory_gb
            .and_then(|gb| sizes.iter().position(|s| *s == gb))
            .map(|i| gangway_plugin_sdk::GpuTypeId(u8::try_from(i).unwrap_or(u8::MAX)))
    };
    let root = b.root();
    let mut rack = root;
    let mut in_rack = per_rack;
    let mut last_sku = None;
    let mut racks = 0;
    for m in machines {
        let sku = (m.gpus, m.memory_gb);
        let new_sku =
            matches!(grouping, RackGrouping::SameGpuCount { .. }) && last_sku != Some(sku);
        let at_line =
            |e: TopologyError| parse_err(file, m.line, format!("machine {}: {e}", m.name));
        if in_rack == per_rack || new_sku {
            rack = b
                .add_domain(root, format!("rack{racks}"))
                .map_err(at_line)?;
            racks += 1;
            in_rack = 0;
        }
        last_sku = Some(sku);
        match type_of(&m) {
            Some(t) => b.add_server_of_type(rack, m.name.clone(), m.gpus, t),
            None => b.add_server(rack, m.name.clone(), m.gpus),
        }
        .map_err(at_line)?;
        in_rack += 1;
    }
    b.build().map_err(|e| parse_err(file, 1, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const OFFICIAL: &str = "machineId, number of GPUs, single GPU mem\nm0,2, 12GB\nm1,8, 24GB\nm10,8, 24GB\nm2,2, 12GB\n";
    const REVISED: &str = ",machineId,number of GPUs\n0,m0,8\n1,m1,4\n2,m2,0\n";

    #[test]
    fn loads_the_official_format_with_leading_spaces() {
        let topo = Topology::from_machine_list_str(
            "list.csv",
            OFFICIAL,
            RackGrouping::Consecutive {
                servers_per_rack: 2,
            },
        )
        .unwrap();
        assert_eq!(topo.total_gpus(), 20);
        let names: Vec<_> = topo.servers().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["m0", "m1", "m2", "m10"]);
        assert_eq!(topo.domains_at(gangway_plugin_sdk::Level(1)).len(), 2);
    }

    #[test]
    fn the_memory_column_gives_gpu_types() {
        let topo =
            Topology::from_machine_list_str("l.csv", OFFICIAL, RackGrouping::default()).unwrap();
        let names: Vec<_> = topo.gpu_types().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["12GB", "24GB"]);
        let m1 = topo.server_by_name("m1").unwrap();
        let t = topo.servers()[m1.0 as usize].gpu_type;
        assert_eq!(topo.gpu_types()[t.index()].memory_gb, 24);
        assert_eq!(topo.type_gpus(t), 16);
        // The revised list has no memory column: one type.
        let revised =
            Topology::from_machine_list_str("r.csv", REVISED, RackGrouping::default()).unwrap();
        assert!(!revised.is_heterogeneous());
        let bad = "machineId,number of GPUs,single GPU mem\nm0,8,lots\n";
        let err = Topology::from_machine_list_str("b.csv", bad, RackGrouping::default())
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "b.csv:2: machine m0: GPU memory \"lots\" is not a size like 24GB"
        );
    }

    #[test]
    fn same_sku_grouping_separates_server_types() {
        let topo =
            Topology::from_machine_list_str("l.csv", OFFICIAL, RackGrouping::default()).unwrap();
        let racks = topo.domains_at(gangway_plugin_sdk::Level(1));
        assert_eq!(racks.len(), 2);
        assert_eq!(topo.domains()[racks[0].0 as usize].gpus, 16);
        assert_eq!(topo.domains()[racks[1].0 as usize].gpus, 4);
    }

    #[test]
    fn loads_the_revised_format_with_an_index_column() {
        let topo =
            Topology::from_machine_list_str("r.csv", REVISED, RackGrouping::default()).unwrap();
        assert_eq!(topo.total_gpus(), 12);
        assert_eq!(topo.servers().len(), 3);
    }

    #[test]
    fn errors_name_file_and_line() {
        let bad = "machineId, number of GPUs\nm0,8\nm1,eight\n";
        let err = Topology::from_machine_list_str("bad.csv", bad, RackGrouping::default())
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "bad.csv:3: machine m1: GPU count \"eight\" is not a whole number"
        );
        let err =
            Topology::from_machine_list_str("h.csv", "id,gpus\nm0,8\n", RackGrouping::default())
                .unwrap_err()
                .to_string();
        assert!(err.starts_with("h.csv:1: no \"machineId\" column"), "{err}");
        let dup = "machineId,number of GPUs\nm0,8\nm0,8\n";
        let err = Topology::from_machine_list_str("d.csv", dup, RackGrouping::default())
            .unwrap_err()
            .to_string();
        assert_eq!(err, "d.csv:3: machine m0 is listed twice (first on line 2)");
    }

    #[test]
    fn every_grouping_round_trips_through_its_name() {
        for name in RackGrouping::NAMES {
            let g = RackGrouping::named(name, 5).unwrap();
            assert_eq!(g.name(), name);
            assert_eq!(g.servers_per_rack(), 5);
            assert_eq!(g.to_string(), format!("{name}, 5 per rack"));
        }
        for g in [
            RackGrouping::SameGpuCount {
                servers_per_rack: 3,
            },
            RackGrouping::Consecutive {
                servers_per_rack: 3,
            },
        ] {
            assert_eq!(RackGrouping::named(g.name(), 3), Some(g));
        }
    }
}
