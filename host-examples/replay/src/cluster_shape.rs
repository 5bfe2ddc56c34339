//! `--cluster`: a uniform cluster said in one word, `SERVERSxGPUS` (one rack)
//! or `RACKSxSERVERSxGPUS`, instead of a machine list of as many lines.

use std::fmt;
use std::str::FromStr;

use gangway_core::{MAX_GPUS_PER_SERVER, Topology, TopologyError};

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
}
