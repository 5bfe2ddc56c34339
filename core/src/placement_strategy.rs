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

impl PlacementStrategy {
    /// One of each strategy (the heartbeat's seed 0), in the order of
    /// [`PlacementStrategy::NAMES`].
    pub const ALL: [PlacementStrategy; 3] = [
        PlacementStrategy::BestFit,
        PlacementStrategy::Spread,
        PlacementStrategy::Heartbeat { seed: 0 },
    ];

    /// Every strategy's name (`best-fit`, `spread`, `heartbeat`): what
    /// presets, command lines and bindings accept.
    pub const NAMES: [&'static str; 3] = {
        let mut names = [""; 3];
        let mut i = 0;
        while i < names.len() {
            names[i] = PlacementStrategy::ALL[i].as_str();
            i += 1;
        }
        names
    };

    /// The strategy's name: the one place it is written.
    ///
    /// ```
    /// use gangway_core::PlacementStrategy;
    /// assert_eq!(PlacementStrategy::Heartbeat { seed: 7 }.as_str(), "heartbeat");
    /// assert_eq!(PlacementStrategy::NAMES, ["best-fit", "spread", "heartbeat"]);
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            PlacementStrategy::BestFit => "best-fit",
            PlacementStrategy::Spread => "spread",
            PlacementStrategy::Heartbeat { .. } => "heartbeat",
        }
    }

    /// The strategy named `name` (a name of [`PlacementStrategy::NAMES`]);
    /// a heartbeat order gets seed 0 until its host sets one.
    ///
    /// ```
    /// use gangway_core::PlacementStrategy;
    /// assert_eq!(PlacementStrategy::from_name("spread"), Some(PlacementStrategy::Spread));
    /// assert_eq!(PlacementStrategy::from_name("first-fit"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<PlacementStrategy> {
        PlacementStrategy::ALL
            .into_iter()
            .find(|p| p.as_str() == name)
    }
}

impl std::fmt::Display for PlacementStrategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_strategy_round_trips_through_its_name() {
        for p in PlacementStrategy::ALL {
            assert_eq!(PlacementStrategy::from_name(p.as_str()), Some(p));
            assert_eq!(p.to_string(), p.as_str());
        }
        let mut names = PlacementStrategy::NAMES.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(
            names.len(),
            PlacementStrategy::ALL.len(),
            "names are distinct"
        );
        // The seed is not part of the name.
        let seeded = PlacementStrategy::Heartbeat { seed: 99 };
        assert_eq!(
            PlacementStrategy::from_name(seeded.as_str()),
            Some(PlacementStrategy::Heartbeat { seed: 0 })
        );
    }
}
