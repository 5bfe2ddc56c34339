//! A set of servers: where a job may be placed when it cannot go anywhere
//! (a node selector, taints it does not tolerate, too little memory for its
//! pods). Hosts build one per distinct constraint and share it between the
//! jobs that have it ([`Scheduler::restrict`](crate::Scheduler::restrict)).

use gangway_plugin_sdk::ServerId;

/// A set of servers, as a bit per server id.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ServerSet {
    words: Vec<u64>,
    len: u32,
}

impl ServerSet {
    /// The empty set, as a constant.
    pub const EMPTY: ServerSet = ServerSet {
        words: Vec::new(),
        len: 0,
    };

    /// The servers in both `self` and `other`.
    ///
    /// ```
    /// use gangway_core::{ServerId, ServerSet};
    /// let a: ServerSet = [ServerId(1), ServerId(2), ServerId(70)].into_iter().collect();
    /// let b: ServerSet = [ServerId(2), ServerId(70), ServerId(71)].into_iter().collect();
    /// assert_eq!(a.intersection(&b).iter().collect::<Vec<_>>(), [ServerId(2), ServerId(70)]);
    /// ```
    #[must_use]
    pub fn intersection(&self, other: &ServerSet) -> ServerSet {
        let words: Vec<u64> = self
            .words
            .iter()
            .zip(&other.words)
            .map(|(a, b)| a & b)
            .collect();
        let mut words = words;
        while words.last() == Some(&0) {
            words.pop();
        }
        let len = words.iter().map(|w| w.count_ones()).sum();
        ServerSet { words, len }
    }

    /// The empty set.
    pub fn new() -> ServerSet {
        ServerSet::default()
    }

    /// Adds a server; whether it was new.
    pub fn insert(&mut self, s: ServerId) -> bool {
        let (w, b) = (s.0 as usize / 64, s.0 % 64);
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        let new = self.words[w] >> b & 1 == 0;
        self.words[w] |= 1 << b;
        self.len += u32::from(new);
        new
    }

    /// Whether it holds `s`.
    pub fn contains(&self, s: ServerId) -> bool {
        self.words
            .get(s.0 as usize / 64)
            .is_some_and(|w| w >> (s.0 % 64) & 1 == 1)
    }

    /// How many servers it holds.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its servers, lowest id first.
    pub fn iter(&self) -> impl Iterator<Item = ServerId> + '_ {
        self.words.iter().enumerate().flat_map(|(w, word)| {
            (0..64u32)
                .filter(move |b| word >> b & 1 == 1)
                .map(move |b| ServerId(w as u32 * 64 + b))
        })
    }
}

impl FromIterator<ServerId> for ServerSet {
    fn from_iter<I: IntoIterator<Item = ServerId>>(iter: I) -> ServerSet {
        let mut set = ServerSet::new();
        for s in iter {
            set.insert(s);
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_of_servers() {
        let set: ServerSet = [ServerId(3), ServerId(70), ServerId(3)]
            .into_iter()
            .collect();
        assert_eq!(set.len(), 2);
        assert!(set.contains(ServerId(70)) && !set.contains(ServerId(4)));
        assert!(!set.contains(ServerId(7000)));
        assert_eq!(set.iter().collect::<Vec<_>>(), [ServerId(3), ServerId(70)]);
        assert!(ServerSet::new().is_empty());
    }
}
