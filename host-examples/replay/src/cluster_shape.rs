//! `--cluster`: a uniform cluster said in one word, `SERVERSxGPUS` (one rack)
//! or `RACKSxSERVERSxGPUS`, instead of a machine list of as many lines; or
//! several such parts, each of one GPU type
//! (`300x1:k80,300x1:p100,300x1:v100`, [`ClusterSpec`]).

use std::fmt;
use std::str::FromStr;

use gangway_core::{MAX_GPUS_PER_SERVER, Topology, TopologyBuilder, TopologyError};

/// The most GPUs a `--cluster` may have in all (the topology keeps a node
/// per GPU; 16 times Philly's largest cluster is far beyond any trace).
pub const MAX_CLUSTER_GPUS: u64 = 1 << 20;

/// A uniform cluster: `racks` racks of `servers_per_rack` servers of
/// `gpus_per_server` GPUs.
///
/// ```
/// use gangway_replay::cluster_shape::ClusterShape;
/// let one_rack: ClusterShape = "311x8".parse().unwrap();
/// assert_eq!((one_rack.racks, one_rack.servers_per_rack, one_rack.gpus_per_server), (1, 311, 8));
/// let topo = "4x8x8".parse::<ClusterShape>().unwrap().topology().unwrap();
/// assert_eq!((topo.servers().len(), topo.total_gpus()), (32, 256));
/// assert!("4x0x8".parse::<ClusterShape>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterShape {
    /// Racks.
    pub racks: u32,
    /// Servers in each rack.
    pub servers_per_rack: u32,
    /// GPUs in each server.
    pub gpus_per_server: u32,
}

/// Why a `--cluster` value is not a cluster.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClusterShapeError {
    /// Not two or three `x`-separated parts.
    #[error(
        "{spec:?} has {parts} part(s); expected SERVERSxGPUS (one rack) or RACKSxSERVERSxGPUS, e.g. 311x8 or 4x8x8"
    )]
    Parts {
        /// The value given.
        spec: String,
        /// How many parts it has.
        parts: usize,
    },
    /// A part is not a whole number.
    #[error("{part:?} in {spec:?} is not a whole number")]
    NotANumber {
        /// The value given.
        spec: String,
        /// The part.
        part: String,
    },
    /// A count is zero.
    #[error("{spec:?}: the number of {what} must be at least 1")]
    Zero {
        /// The value given.
        spec: String,
        /// `racks`, `servers per rack` or `GPUs per server`.
        what: &'static str,
    },
    /// A server has more GPUs than a topology tracks.
    #[error("{spec:?}: {gpus} GPUs per server; at most {MAX_GPUS_PER_SERVER} are supported")]
    ServerTooLarge {
        /// The value given.
        spec: String,
        /// GPUs per server asked for.
        gpus: u32,
    },
    /// Of several parts, one has no GPU type.
    #[error("{spec:?}: each of several parts names its GPU type, e.g. 300x1:k80,300x1:v100")]
    UntypedPart {
        /// The value given.
        spec: String,
    },
    /// A part's type is not `TYPE` or `TYPE@GB`.
    #[error(
        "{part:?} in {spec:?} is not a GPU type: expected TYPE or TYPE@GB, e.g. v100 or a100@80"
    )]
    BadType {
        /// The value given.
        spec: String,
        /// The part after the colon.
        part: String,
    },
    /// The cluster as a whole is too large.
    #[error("{spec:?} is {gpus} GPUs in all; at most {MAX_CLUSTER_GPUS} are supported")]
    TooLarge {
        /// The value given.
        spec: String,
        /// GPUs in all.
        gpus: u128,
    },
}

impl FromStr for ClusterShape {
    type Err = ClusterShapeError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = spec.trim().split(['x', 'X']).map(str::trim).collect();
        let number = |part: &str| {
            part.parse::<u32>()
                .map_err(|_| ClusterShapeError::NotANumber {
                    spec: spec.to_string(),
                    part: part.to_string(),
                })
        };
        let numbers = parts
            .iter()
            .map(|p| number(p))
            .collect::<Result<Vec<u32>, _>>();
        let (racks, servers_per_rack, gpus_per_server) = match (parts.len(), numbers) {
            (2 | 3, Err(e)) => return Err(e),
            (2, Ok(n)) => (1, n[0], n[1]),
            (3, Ok(n)) => (n[0], n[1], n[2]),
            (parts, _) => {
                return Err(ClusterShapeError::Parts {
                    spec: spec.to_string(),
                    parts,
                });
            }
        };
        for (n, what) in [
            (racks, "racks"),
            (servers_per_rack, "servers per rack"),
            (gpus_per_server, "GPUs per server"),
        ] {
            if n == 0 {
                return Err(ClusterShapeError::Zero {
                    spec: spec.to_string(),
                    what,
                });
            }
        }
        if gpus_per_server > MAX_GPUS_PER_SERVER {
            return Err(ClusterShapeError::ServerTooLarge {
                spec: spec.to_string(),
                gpus: gpus_per_server,
            });
        }
        // u32 cubed fits a u128: no overflow to guard.
        let gpus = u128::from(racks) * u128::from(servers_per_rack) * u128::from(gpus_per_server);
        if gpus > u128::from(MAX_CLUSTER_GPUS) {
            return Err(ClusterShapeError::TooLarge {
                spec: spec.to_string(),
                gpus,
            });
        }
        Ok(ClusterShape {
            racks,
            servers_per_rack,
            gpus_per_server,
        })
    }
}

impl fmt::Display for ClusterShape {
    /// The canonical form: `RACKSxSERVERSxGPUS`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}x{}x{}",
            self.racks, self.servers_per_rack, self.gpus_per_server
        )
    }
}

impl ClusterShape {
    /// The topology: racks `r0`, `r1`, ... of servers `r{rack}-s{server}`
    /// ([`Topology::uniform`]).
    pub fn topology(&self) -> Result<Topology, TopologyError> {
        Topology::uniform(self.racks, self.servers_per_rack, self.gpus_per_server)
    }
}

/// Memory per GPU in GB of GPU types `--cluster` knows by name, for a
/// part that names its type without `@GB`: the common (or, where a type
/// came in two sizes, the first) size of each.
pub const KNOWN_GPU_MEMORY_GB: [(&str, u32); 10] = [
    ("k80", 12),
    ("p100", 16),
    ("v100", 16),
    ("t4", 16),
    ("a10", 24),
    ("l4", 24),
    ("a100", 40),
    ("l40s", 48),
    ("h100", 80),
    ("h200", 141),
];

/// One part of a `--cluster` value: a uniform shape and, optionally, the
/// GPU type of its servers (`TYPE` or `TYPE@GB`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterPart {
    /// The part's racks, servers and GPUs.
    pub shape: ClusterShape,
    /// Its GPU type's name and memory per GPU in GB (0: not known).
    pub gpu_type: Option<(String, u32)>,
}

/// A `--cluster` value: one uniform shape (`311x8`, `4x8x8`), or parts
/// separated by commas, each a shape with its GPU type after a colon
/// (`12x1:v100,12x1:p100@16,12x1:k80`): racks of each part in turn, every
/// server of a part of its type. A type's memory is what `@GB` says, else
/// [`KNOWN_GPU_MEMORY_GB`]'s, else not known.
///
/// ```
/// use gangway_replay::cluster_shape::ClusterSpec;
/// let spec: ClusterSpec = "2x1:v100@32,4x1:k80".parse().unwrap();
/// let topo = spec.topology().unwrap();
/// assert_eq!(topo.total_gpus(), 6);
/// let names: Vec<_> = topo.gpu_types().iter().map(|t| (t.name.as_str(), t.memory_gb)).collect();
/// assert_eq!(names, [("v100", 32), ("k80", 12)]);
/// assert_eq!(spec.to_string(), "1x2x1:v100@32,1x4x1:k80@12");
/// assert_eq!("311x8".parse::<ClusterSpec>().unwrap().to_string(), "1x311x8");
/// assert!("4x8,2x8".parse::<ClusterSpec>().is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSpec {
    /// Its parts, in order.
    pub parts: Vec<ClusterPart>,
}

impl FromStr for ClusterSpec {
    type Err = ClusterShapeError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let pieces: Vec<&str> = spec.split(',').map(str::trim).collect();
        let mut parts = Vec::with_capacity(pieces.len());
        for piece in &pieces {
            let (shape, gpu_type) = match piece.split_once(':') {
                None => (piece.parse::<ClusterShape>()?, None),
                Some((shape, t)) => (shape.parse::<ClusterShape>()?, Some(gpu_type(spec, t)?)),
            };
            parts.push(ClusterPart { shape, gpu_type });
        }
        if parts.len() > 1 && parts.iter().any(|p| p.gpu_type.is_none()) {
            return Err(ClusterShapeError::UntypedPart {
                spec: spec.to_string(),
            });
        }
        let gpus: u128 = parts
            .iter()
            .map(|p| {
                let s = p.shape;
                u128::from(s.racks) * u128::from(s.servers_per_rack) * u128::from(s.gpus_per_server)
            })
            .sum();
        if gpus > u128::from(MAX_CLUSTER_GPUS) {
            return Err(ClusterShapeError::TooLarge {
                spec: spec.to_string(),
                gpus,
            });
        }
        Ok(ClusterSpec { parts })
    }
}

/// A part's `TYPE` or `TYPE@GB`.
fn gpu_type(spec: &str, text: &str) -> Result<(String, u32), ClusterShapeError> {
    let (name, memory) = match text.split_once('@') {
        None => (text.trim(), None),
        Some((name, gb)) => (name.trim(), Some(gb.trim())),
    };
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        return Err(ClusterShapeError::BadType {
            spec: spec.to_string(),
            part: text.to_string(),
        });
    }
    let memory_gb =
        match memory {
            Some(gb) => gb.trim_end_matches("GB").parse::<u32>().map_err(|_| {
                ClusterShapeError::BadType {
                    spec: spec.to_string(),
                    part: text.to_string(),
                }
            })?,
            None => KNOWN_GPU_MEMORY_GB
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map_or(0, |(_, gb)| *gb),
        };
    Ok((name.to_string(), memory_gb))
}

impl fmt::Display for ClusterSpec {
    /// The canonical form: the parts' shapes, each with `:TYPE@GB` where it
    /// has a type.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.parts.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}", p.shape)?;
            if let Some((name, gb)) = &p.gpu_type {
                write!(f, ":{name}@{gb}")?;
            }
        }
        Ok(())
    }
}

impl ClusterSpec {
    /// The topology: one untyped part is [`ClusterShape::topology`]; typed
    /// parts give racks `r0`, `r1`, ... in turn, servers `r{rack}-s{server}`,
    /// every server of a part of the part's type (parts naming one type
    /// share it; the memory of its first part stands).
    pub fn topology(&self) -> Result<Topology, TopologyError> {
        if let [
            ClusterPart {
                shape,
                gpu_type: None,
            },
        ] = self.parts.as_slice()
        {
            return shape.topology();
        }
        let mut b = TopologyBuilder::new();
        let root = b.root();
        let mut rack = 0u32;
        for p in &self.parts {
            let t = match &p.gpu_type {
                Some((name, gb)) => Some(match b.gpu_type(name) {
                    Some(t) => t,
                    None => b.add_gpu_type(name.clone(), *gb)?,
                }),
                None => None,
            };
            for _ in 0..p.shape.racks {
                let r = b.add_domain(root, format!("r{rack}"))?;
                for s in 0..p.shape.servers_per_rack {
                    let name = format!("r{rack}-s{s}");
                    match t {
                        Some(t) => b.add_server_of_type(r, name, p.shape.gpus_per_server, t)?,
                        None => b.add_server(r, name, p.shape.gpus_per_server)?,
                    };
                }
                rack += 1;
            }
        }
        b.build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(spec: &str) -> String {
        spec.parse::<ClusterShape>()
            .map(|s| s.to_string())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn both_forms_parse() {
        let s: ClusterShape = "311x8".parse().unwrap();
        assert_eq!(
            s,
            ClusterShape {
                racks: 1,
                servers_per_rack: 311,
                gpus_per_server: 8
            }
        );
        let s: ClusterShape = " 4X8x8 ".parse().unwrap();
        assert_eq!(
            s,
            ClusterShape {
                racks: 4,
                servers_per_rack: 8,
                gpus_per_server: 8
            }
        );
        assert_eq!(s.to_string(), "4x8x8");
        assert_eq!(s.to_string().parse::<ClusterShape>().unwrap(), s);
        let one: ClusterShape = "1x1".parse().unwrap();
        assert_eq!(one.to_string(), "1x1x1");
    }

    #[test]
    fn topology_has_the_shape() {
        let t = "3x5x4".parse::<ClusterShape>().unwrap().topology().unwrap();
        assert_eq!(t.servers().len(), 15);
        assert_eq!(t.total_gpus(), 60);
        let racks = t.domains_at(gangway_core::Level(1));
        assert_eq!(racks.len(), 3);
        assert!(t.server_by_name("r2-s4").is_some());
        assert!(t.server_by_name("r3-s0").is_none());
    }

    #[test]
    fn bad_forms_say_what_is_wrong() {
        assert_eq!(
            err("8"),
            "\"8\" has 1 part(s); expected SERVERSxGPUS (one rack) or RACKSxSERVERSxGPUS, e.g. 311x8 or 4x8x8"
        );
        assert!(err("1x2x3x4").starts_with("\"1x2x3x4\" has 4 part(s)"));
        assert_eq!(
            err("4x8xeight"),
            "\"eight\" in \"4x8xeight\" is not a whole number"
        );
        assert_eq!(err("4x-8x8"), "\"-8\" in \"4x-8x8\" is not a whole number");
        assert_eq!(err("4xx8"), "\"\" in \"4xx8\" is not a whole number");
        assert_eq!(
            err("0x8"),
            "\"0x8\": the number of servers per rack must be at least 1"
        );
        assert_eq!(
            err("0x8x8"),
            "\"0x8x8\": the number of racks must be at least 1"
        );
        assert_eq!(
            err("4x8x0"),
            "\"4x8x0\": the number of GPUs per server must be at least 1"
        );
        assert_eq!(
            err("4x8x65"),
            "\"4x8x65\": 65 GPUs per server; at most 64 are supported"
        );
        assert_eq!(
            err("4294967295x4294967295x64"),
            "\"4294967295x4294967295x64\" is 1180591620167655489600 GPUs in all; at most 1048576 are supported"
        );
        assert!(err("99999999999x8").contains("is not a whole number"));
        assert!(err("2000x1000x8").contains("16000000 GPUs in all"));
    }

    #[test]
    fn typed_specs_build_one_type_per_part() {
        let spec: ClusterSpec = "2x2x8:v100, 1x4:k80, 1x1x8:v100@32".parse().unwrap();
        let t = spec.topology().unwrap();
        assert_eq!(t.servers().len(), 6);
        assert_eq!(t.gpu_types().len(), 2);
        let v100 = t.gpu_type_by_name("v100").unwrap();
        assert_eq!(t.type_gpus(v100), 40);
        assert_eq!(
            t.gpu_types()[v100.index()].memory_gb,
            16,
            "the first part's memory"
        );
        assert!(t.server_by_name("r3-s0").is_some());
        let e = |s: &str| s.parse::<ClusterSpec>().unwrap_err().to_string();
        assert!(e("4x8:v100,2x8").contains("each of several parts"));
        assert!(e("4x8:").contains("is not a GPU type"));
        assert!(e("4x8:v100@lots").contains("is not a GPU type"));
        assert!(e("4x0:v100").contains("must be at least 1"));
        assert!(e("800000x1:a,800000x1:b").contains("GPUs in all"));
        let one: ClusterSpec = "12x1:h100".parse().unwrap();
        assert_eq!(one.to_string(), "1x12x1:h100@80");
        assert!(!one.topology().unwrap().is_heterogeneous());
    }
}
