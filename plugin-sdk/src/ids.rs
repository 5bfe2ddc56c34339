//! Small copyable identifiers that cross the policy boundary.

use serde::{Deserialize, Serialize};

use crate::wire::Wire;

/// A job's identifier, chosen by the host (unique per scheduler).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Wire,
)]
pub struct JobId(pub u64);

/// A virtual cluster (tenant): an index into the views' `vcs` tables.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Wire,
)]
pub struct VcId(pub u32);

impl VcId {
    /// Its position in the views' `vcs` tables (and any list indexed the
    /// same way).
    ///
    /// ```
    /// assert_eq!(gangway_plugin_sdk::VcId(3).index(), 3);
    /// ```
    pub fn index(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

/// A server: a dense index (`0..servers`) fixed when the topology is built,
/// the same number in every view and in the host's placements.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Wire,
)]
pub struct ServerId(pub u32);

impl ServerId {
    /// Its position in lists indexed by server (`0..servers`).
    ///
    /// ```
    /// assert_eq!(gangway_plugin_sdk::ServerId(7).index(), 7);
    /// ```
    pub fn index(self) -> usize {
        usize::try_from(self.0).unwrap_or(usize::MAX)
    }
}

/// A GPU type (a SKU: `v100`, `a100-80gb`, ...): a dense index
/// (`0..types`) into the topology's list of types, fixed when the topology
/// is built, the same number in every view. At most [`GpuTypeSet::MAX`]
/// types.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Wire,
)]
pub struct GpuTypeId(pub u8);

impl GpuTypeId {
    /// Its position in lists indexed by type (`0..types`).
    ///
    /// ```
    /// assert_eq!(gangway_plugin_sdk::GpuTypeId(2).index(), 2);
    /// ```
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

/// A set of GPU types, as a bit per [`GpuTypeId`].
///
/// ```
/// use gangway_plugin_sdk::{GpuTypeId, GpuTypeSet};
/// let set = GpuTypeSet::of([GpuTypeId(0), GpuTypeId(3)]);
/// assert!(set.contains(GpuTypeId(3)) && !set.contains(GpuTypeId(1)));
/// assert_eq!(set.iter().collect::<Vec<_>>(), [GpuTypeId(0), GpuTypeId(3)]);
/// assert_eq!(set.len(), 2);
/// assert_eq!(GpuTypeSet::all(2), GpuTypeSet::of([GpuTypeId(0), GpuTypeId(1)]));
/// ```
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Wire,
)]
pub struct GpuTypeSet(pub u32);

impl GpuTypeSet {
    /// Most GPU types a topology may have.
    pub const MAX: usize = 32;

    /// The set of `types`.
    pub fn of(types: impl IntoIterator<Item = GpuTypeId>) -> GpuTypeSet {
        let mut set = GpuTypeSet(0);
        for t in types {
            set.insert(t);
        }
        set
    }

    /// The first `n` types (all of a topology's `n`).
    pub fn all(n: usize) -> GpuTypeSet {
        match n {
            0 => GpuTypeSet(0),
            n if n >= GpuTypeSet::MAX => GpuTypeSet(u32::MAX),
            n => GpuTypeSet((1u32 << n) - 1),
        }
    }

    /// Adds a type (one beyond [`GpuTypeSet::MAX`] is ignored).
    pub fn insert(&mut self, t: GpuTypeId) {
        if t.index() < GpuTypeSet::MAX {
            self.0 |= 1 << t.0;
        }
    }

    /// Whether it holds `t`.
    pub fn contains(self, t: GpuTypeId) -> bool {
        t.index() < GpuTypeSet::MAX && self.0 >> t.0 & 1 == 1
    }

    /// How many types it holds.
    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// Whether it holds none.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Its types, lowest id first.
    pub fn iter(self) -> impl Iterator<Item = GpuTypeId> {
        (0..32u8)
            .filter(move |b| self.0 >> b & 1 == 1)
            .map(GpuTypeId)
    }
}

/// A level of the topology tree, counted from the root: `Level(0)` is the whole
/// cluster, `Level(1)` the racks (network / RDMA domains) in the usual
/// cluster > rack > server shape, and [`crate::ClusterSummary::server_level`] the servers.
///
/// As a *spread limit* it names the level whose single domain must contain a
/// job's whole gang: the server level means "one server", level 0 means "anywhere".
/// A larger number is a *narrower* (more local) limit.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, Wire,
)]
pub struct Level(pub u8);

impl Level {
    /// The root level: a job may span the whole cluster.
    pub const ANY: Level = Level(0);

    /// The level one step wider (closer to the root), saturating at [`Level::ANY`].
    ///
    /// ```
    /// use gangway_plugin_sdk::Level;
    /// assert_eq!(Level(2).wider(), Level(1));
    /// assert_eq!(Level::ANY.wider(), Level::ANY);
    /// ```
    #[must_use]
    pub fn wider(self) -> Level {
        Level(self.0.saturating_sub(1))
    }
}

impl std::fmt::Display for JobId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "job {}", self.0)
    }
}

impl std::fmt::Display for VcId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VC {}", self.0)
    }
}

impl std::fmt::Display for ServerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "server {}", self.0)
    }
}

impl std::fmt::Display for GpuTypeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GPU type {}", self.0)
    }
}

impl std::fmt::Display for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "level {}", self.0)
    }
}
