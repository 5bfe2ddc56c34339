//! How a backend checks a 2.1 module's `-buffered` twin against the slot's
//! own function (which the component runtime calls): on its first call and
//! on calls drawn at random, one in [`SandboxConfig::twin_check_every`] on
//! average, by a generator seeded by the host's seed
//! ([`SandboxConfig::seed`]), the module's hash and the slot, so the module
//! cannot count its way to the checked calls while a run stays
//! reproducible. A checked call's view is also given whole to a second
//! instance entered through the slot's function, kept across checks (made
//! once, not for every check) and charged to the backend's budgets as any
//! call is. On a difference a host's backend declines the twins (the
//! function's answer stands, and every later call goes through the
//! function), saying why; the conformance kit's checks every call and
//! fails it.
//!
//! [`SandboxConfig::twin_check_every`]: super::SandboxConfig::twin_check_every
//! [`SandboxConfig::seed`]: super::SandboxConfig::seed

use gangway_plugin_sdk::Slot;

use super::live::Live;
use super::module::PolicyModule;

/// A backend's twin checks (see the module docs).
pub(crate) struct TwinCheck<V> {
    /// One call in this many is checked, on average (0: none; 1: every).
    pub(crate) every: u64,
    /// Whether a difference fails the call (the kit) instead of declining
    /// the twins (a host).
    pub(crate) fail: bool,
    /// The generator's state (splitmix64).
    state: u64,
    /// Calls answered through the twins so far.
    calls: u64,
    /// Why the twins were declined, once they are.
    pub(crate) declined: Option<String>,
    /// The instance entered through the slot's function, between checks.
    pub(crate) checker: Option<Box<Live<V>>>,
}

impl<V> TwinCheck<V> {
    /// A host's checks of `module`'s `slot`, as its engine says.
    pub(crate) fn sampled(module: &PolicyModule, slot: Slot) -> TwinCheck<V> {
        let config = &module.engine.config;
        let hash = &module.compiled.hash;
        let mixed = u64::from_le_bytes([
            hash[0], hash[1], hash[2], hash[3], hash[4], hash[5], hash[6], hash[7],
        ]);
        let position = Slot::ALL.iter().position(|s| *s == slot).unwrap_or(0);
        TwinCheck {
            every: config.twin_check_every,
            fail: false,
            state: config.seed ^ mixed ^ (position as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            calls: 0,
            declined: None,
            checker: None,
        }
    }

    /// The kit's checks: every call, a difference fails it.
    #[cfg(feature = "conformance")]
    pub(crate) fn every_call() -> TwinCheck<V> {
        TwinCheck {
            every: 1,
            fail: true,
            state: 0,
            calls: 0,
            declined: None,
            checker: None,
        }
    }

    /// Whether the call just answered through the twins is checked.
    pub(crate) fn due(&mut self) -> bool {
        if self.every == 0 || self.declined.is_some() {
            return false;
        }
        let first = self.calls == 0;
        self.calls += 1;
        // Drawn for every call, checked or not: which calls are checked
        // depends on the seed and the call's number alone.
        let draw = self.next().is_multiple_of(self.every);
        first || draw
    }

    /// splitmix64.
    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}
