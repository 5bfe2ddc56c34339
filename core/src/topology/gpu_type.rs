//! GPU types: what a server's GPUs are (a name and their memory), and what
//! the topology knows per type (its servers, and how large a gang one
//! domain of each level can hold on them), so that a gang is placed on one
//! type and a request for types is checked against what exists.

use std::sync::Arc;

use gangway_plugin_sdk::{GpuTypeId, Level};
use serde::{Deserialize, Serialize};

use super::{Domain, Server};
use crate::server_set::ServerSet;

/// The name of the one type a topology built without types has.
pub const DEFAULT_GPU_TYPE: &str = "gpu";

/// A GPU type (a SKU): every GPU of a server is of its server's type.
///
/// ```
/// use gangway_core::TopologyBuilder;
/// let mut b = TopologyBuilder::new();
/// let v100 = b.add_gpu_type("v100", 16).unwrap();
/// let k80 = b.add_gpu_type("k80", 12).unwrap();
/// let rack = b.add_domain(b.root(), "r0").unwrap();
/// b.add_server_of_type(rack, "m0", 8, v100).unwrap();
/// b.add_server_of_type(rack, "m1", 4, k80).unwrap();
/// let topo = b.build().unwrap();
/// assert_eq!(topo.gpu_types()[1].name, "k80");
/// assert_eq!(topo.type_gpus(v100), 8);
/// assert_eq!(topo.gpu_type_by_name("k80"), Some(k80));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GpuType {
    /// Its name, unique in the topology (`v100`, `a100-80gb`, `24GB`).
    pub name: String,
    /// Memory of one GPU in GB (0: not known; such a type satisfies no
    /// memory minimum).
    pub memory_gb: u32,
}

/// What the topology knows about the servers of one GPU type.
#[derive(Clone, Debug)]
pub(crate) struct TypeCapacity {
    /// The servers of the type.
    pub(crate) servers: Arc<ServerSet>,
    /// Their GPUs.
    pub(crate) gpus: u32,
    /// Per level (the server level last): the most GPUs of the type one
    /// domain of the level offers on its `k + 1` largest servers of the
    /// type, at index `k`.
    pub(crate) servers_cap: Vec<Vec<u32>>,
}

impl TypeCapacity {
    /// The capacity of the servers for which `of_type` holds, in a tree of
    /// `levels` levels (servers last).
    pub(crate) fn of(
        servers: &[Server],
        domains: &[Domain],
        levels: usize,
        of_type: impl Fn(&Server) -> bool,
    ) -> TypeCapacity {
        let mut set = ServerSet::new();
        let mut gpus = 0u32;
        let mut largest = 0u32;
        for (i, s) in servers.iter().enumerate() {
            if !of_type(s) {
                continue;
            }
            set.insert(crate::ServerId(u32::try_from(i).unwrap_or(u32::MAX)));
            gpus = gpus.saturating_add(s.gpus);
            largest = largest.max(s.gpus);
        }
        let mut servers_cap =
            super::builder::domain_caps(servers.iter().filter(|s| of_type(s)), domains, levels);
        if let Some(last) = servers_cap.last_mut() {
            *last = if largest > 0 {
                vec![largest]
            } else {
                Vec::new()
            };
        }
        TypeCapacity {
            servers: Arc::new(set),
            gpus,
            servers_cap,
        }
    }

    /// The narrowest level at which one domain can hold a gang of `gpus`
    /// on servers of this capacity, and the fewest servers it takes there;
    /// `None` if no domain can.
    pub(crate) fn min_spread(&self, gpus: u32) -> Option<(Level, u32)> {
        self.servers_cap
            .iter()
            .enumerate()
            .rev()
            .find_map(|(l, cap)| {
                let k = cap.partition_point(|&sum| sum < gpus);
                (k < cap.len()).then(|| {
                    (
                        Level(u8::try_from(l).unwrap_or(u8::MAX)),
                        u32::try_from(k + 1).unwrap_or(u32::MAX),
                    )
                })
            })
    }
}

/// What a job asks of the GPUs it runs on: acceptable types in order of
/// preference (empty: any type) and a minimum memory per GPU. The scheduler
/// resolves it against the topology when the job is submitted
/// ([`crate::Scheduler::submit_requesting`]) to the types allowed; a
/// request no type satisfies is refused.
///
/// ```
/// use gangway_core::GpuRequest;
/// let any = GpuRequest::default();
/// assert!(any.is_any());
/// let r = GpuRequest::types(["a100", "h100"]).with_min_memory_gb(40);
/// assert_eq!(r.to_string(), "types a100,h100 with at least 40 GB");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GpuRequest {
    /// Acceptable types by name, most preferred first (empty: any type).
    pub types: Vec<String>,
    /// The least memory per GPU, in GB (0: no minimum).
    pub min_memory_gb: u32,
}

impl GpuRequest {
    /// A request for `types`, most preferred first.
    pub fn types<S: Into<String>>(types: impl IntoIterator<Item = S>) -> GpuRequest {
        GpuRequest {
            types: types.into_iter().map(Into::into).collect(),
            min_memory_gb: 0,
        }
    }

    /// The same request with a memory minimum.
    #[must_use]
    pub fn with_min_memory_gb(mut self, gb: u32) -> GpuRequest {
        self.min_memory_gb = gb;
        self
    }

    /// Whether it accepts every type (no types named, no memory minimum).
    pub fn is_any(&self) -> bool {
        self.types.is_empty() && self.min_memory_gb == 0
    }
}

impl std::fmt::Display for GpuRequest {
    /// `any type`, `types a100,h100`, `at least 40 GB`, or both.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.types.is_empty(), self.min_memory_gb) {
            (true, 0) => f.write_str("any type"),
            (true, gb) => write!(f, "at least {gb} GB"),
            (false, 0) => write!(f, "types {}", self.types.join(",")),
            (false, gb) => write!(f, "types {} with at least {gb} GB", self.types.join(",")),
        }
    }
}

/// Why a [`GpuRequest`] cannot be satisfied on a topology.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GpuRequestError {
    /// It names a type the topology does not have.
    #[error("no GPU type {name:?} in the cluster (it has {known})")]
    UnknownType {
        /// The name asked for.
        name: String,
        /// The types the topology has, comma-separated.
        known: String,
    },
    /// It names a type twice.
    #[error("GPU type {name:?} is named twice")]
    Repeated {
        /// The name.
        name: String,
    },
    /// No type it accepts has the memory asked for.
    #[error("no GPU type it accepts has {min_memory_gb} GB (largest known: {largest_gb} GB)")]
    TooLittleMemory {
        /// The minimum asked for.
        min_memory_gb: u32,
        /// The most memory any accepted type has.
        largest_gb: u32,
    },
    /// No accepted type has servers enough for the gang, even empty.
    #[error("{gpus} GPUs of one type do not fit: the accepted types have at most {largest} GPUs")]
    TooLarge {
        /// The gang.
        gpus: u32,
        /// GPUs of the largest accepted type.
        largest: u32,
    },
}

/// Resolves `request` for a gang of `gpus` against `types` (each with its
/// capacity): the allowed types, most preferred first (any type: the
/// topology's order).
pub(crate) fn resolve(
    request: &GpuRequest,
    gpus: u32,
    types: &[GpuType],
    capacity: &[TypeCapacity],
) -> Result<Vec<GpuTypeId>, GpuRequestError> {
    let mut named: Vec<GpuTypeId> = Vec::with_capacity(request.types.len());
    for name in &request.types {
        let Some(i) = types.iter().position(|t| t.name == *name) else {
            return Err(GpuRequestError::UnknownType {
                name: name.clone(),
                known: types
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        let id = GpuTypeId(u8::try_from(i).unwrap_or(u8::MAX));
        if named.contains(&id) {
            return Err(GpuRequestError::Repeated { name: name.clone() });
        }
        named.push(id);
    }
    if request.types.is_empty() {
        named = (0..types.len())
            .map(|i| GpuTypeId(u8::try_from(i).unwrap_or(u8::MAX)))
            .collect();
    }
    let memory = |t: &GpuTypeId| types.get(t.index()).map_or(0, |t| t.memory_gb);
    let largest_gb = named.iter().map(memory).max().unwrap_or(0);
    named.retain(|t| memory(t) >= request.min_memory_gb);
    if named.is_empty() {
        return Err(GpuRequestError::TooLittleMemory {
            min_memory_gb: request.min_memory_gb,
            largest_gb,
        });
    }
    let type_gpus = |t: &GpuTypeId| capacity.get(t.index()).map_or(0, |c| c.gpus);
    let largest = named.iter().map(type_gpus).max().unwrap_or(0);
    named.retain(|t| type_gpus(t) >= gpus);
    if named.is_empty() {
        return Err(GpuRequestError::TooLarge { gpus, largest });
    }
    Ok(named)
}
