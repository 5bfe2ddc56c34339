//! The six slots' policies of one scheduler.

use gangway_plugin_sdk::Slot;
use gangway_plugin_sdk::slots::{Defragment, Fairness, Gang, Locality, Reclaim, Retry};

use super::backend::BoxedBackend;
use super::guard::{AnyGuarded, GuardPolicy, Guarded, SlotHealth};
use super::rules::SlotCheck;

/// The policies of every slot, each [`Guarded`], indexed by slot type:
/// `set.slot::<Fairness>()`.
///
/// ```
/// use gangway_core::policy::{Native, PolicySet};
/// use gangway_plugin_sdk::{builtin::Backfill, slots::{Fairness, Gang}, Slot};
///
/// let set = PolicySet::builtin().with::<Gang>(Box::new(Native::new("mine", Backfill)));
/// assert_eq!(set.slot::<Fairness>().name(), "fifo-quota");
/// assert_eq!(set.name(Slot::Gang), "mine");
/// assert_eq!(set.name(Slot::Reclaim), "none");
/// ```
pub struct PolicySet {
    pub(crate) retry: Guarded<Retry>,
    pub(crate) fairness: Guarded<Fairness>,
    pub(crate) locality: Guarded<Locality>,
    pub(crate) gang: Guarded<Gang>,
    pub(crate) reclaim: Guarded<Reclaim>,
    pub(crate) defragment: Guarded<Defragment>,
}

impl PolicySet {
    /// Every slot with its built-in policy: FIFO within VC quotas, strict
    /// locality, backfill, retry every failure, no reclaim, no
    /// defragmentation.
    pub fn builtin() -> PolicySet {
        PolicySet {
            retry: Guarded::builtin(),
            fairness: Guarded::builtin(),
            locality: Guarded::builtin(),
            gang: Guarded::builtin(),
            reclaim: Guarded::builtin(),
            defragment: Guarded::builtin(),
        }
    }

    /// This set with slot `S` running `backend` (as its baseline).
    #[must_use]
    pub fn with<S: SlotRules>(mut self, backend: BoxedBackend<S>) -> PolicySet {
        *S::entry_mut(&mut self) = Guarded::new(backend);
        self
    }

    /// Slot `S`.
    pub fn slot<S: SlotRules>(&self) -> &Guarded<S> {
        S::entry(self)
    }

    /// Slot `S`, mutably (e.g. to [`Guarded::swap`] its policy between rounds).
    pub fn slot_mut<S: SlotRules>(&mut self) -> &mut Guarded<S> {
        S::entry_mut(self)
    }

    /// The active policy's name in `slot`.
    pub fn name(&self, slot: Slot) -> &str {
        self.any(slot).name()
    }

    /// The failure counters of `slot`.
    pub fn health(&self, slot: Slot) -> &SlotHealth {
        self.any(slot).health()
    }

    /// Sets the guard policy of every slot.
    pub fn set_guard(&mut self, guard: GuardPolicy) {
        self.retry.set_guard(guard);
        self.fairness.set_guard(guard);
        self.locality.set_guard(guard);
        self.gang.set_guard(guard);
        self.reclaim.set_guard(guard);
        self.defragment.set_guard(guard);
    }

    fn any(&self, slot: Slot) -> &dyn AnyGuarded {
        match slot {
            Slot::Retry => &self.retry,
            Slot::Fairness => &self.fairness,
            Slot::Locality => &self.locality,
            Slot::Gang => &self.gang,
            Slot::Reclaim => &self.reclaim,
            Slot::Defragment => &self.defragment,
        }
    }

    /// Applies staged swaps and rollbacks of every slot; returns the slots
    /// whose active policy changed.
    pub(crate) fn prepare_round(&mut self) -> Vec<Slot> {
        let all: [&mut dyn AnyGuarded; 6] = [
            &mut self.retry,
            &mut self.fairness,
            &mut self.locality,
            &mut self.gang,
            &mut self.reclaim,
            &mut self.defragment,
        ];
        all.into_iter()
            .filter_map(|g| g.prepare_round().then(|| g.slot()))
            .collect()
    }
}

/// A slot as the core runs it: its checks ([`SlotCheck`]) and its place in
/// a [`PolicySet`]. Implemented for the six slot types of
/// [`gangway_plugin_sdk::slots`]; what generic code over "any slot" bounds on.
pub trait SlotRules: SlotCheck {
    /// The slot in a policy set.
    fn entry(set: &PolicySet) -> &Guarded<Self>;

    /// The slot in a policy set, mutably.
    fn entry_mut(set: &mut PolicySet) -> &mut Guarded<Self>;
}

/// Each slot's field of [`PolicySet`].
macro_rules! slot_entries {
    ($($slot:ident => $field:ident),* $(,)?) => {$(
        impl SlotRules for $slot {
            fn entry(set: &PolicySet) -> &Guarded<Self> {
                &set.$field
            }

            fn entry_mut(set: &mut PolicySet) -> &mut Guarded<Self> {
                &mut set.$field
            }
        }
    )*};
}

slot_entries!(
    Fairness => fairness,
    Locality => locality,
    Gang => gang,
    Reclaim => reclaim,
    Retry => retry,
    Defragment => defragment,
);

impl Default for PolicySet {
    fn default() -> Self {
        PolicySet::builtin()
    }
}

impl std::fmt::Debug for PolicySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("PolicySet");
        for slot in Slot::ALL {
            d.field(slot.as_str(), &self.name(slot));
        }
        d.finish()
    }
}
