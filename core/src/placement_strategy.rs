//! How the placement search breaks ties: a setting of the allocation state
//! (kept in snapshots), used by the search in `placement.rs`.

use serde::{Deserialize, Serialize};

/// How the search breaks ties between servers and domains that need the
/// same number of servers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum PlacementStrategy {
    /// The tightest fit: the smallest hole that holds the gang, so large
    /// holes stay free for large gangs (the default; the study's guideline
    /// to avoid fragmentation).
    #[default]
    BestFit,
    /// The emptiest server or domain first, spreading load as YARN-style
    /// schedulers do. Small jobs then break up the large holes that gangs
    /// need: use it to model such a scheduler, not to run a cluster.
    Spread,
    /// YARN-like assignment as servers heartbeat: the servers with room are
    /// offered in a random order and the first that fits takes the part (a
    /// seeded, uniform pick among the servers that fit); domains that need
    /// the same number of servers are likewise picked at random. Philly's
    /// YARN assigned containers this way (PHILLY.md §3.3 item 8, §5.2: 2-4
    /// and 5-8 GPU jobs on one server 85.4 % / 76.1 % of the time). The
    /// draw is a hash of `seed` and the allocation state, so the same state
    /// and seed always give the same placement (replays stay deterministic
    /// and a restored snapshot places as the original would).
    Heartbeat {
        /// Seed of the heartbeat order.
        seed: u64,
    },
}
