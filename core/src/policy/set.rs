//! The policies of every slot of one scheduler.

use std::any::Any;

use gangway_plugin_sdk::{Slot, SlotContract, with_slot};

use super::backend::{BoxedBackend, PolicyOrigin};
use super::guard::{GuardSettings, Guarded, SlotEvent, SlotHealth};

/// The policies of every slot, each [`Guarded`], indexed by slot: by type
/// (`set.slot::<Fairness>()`) or by name at run time (`set.name(slot)`).
///
/// ```
/// use gangway_core::policy::{Native, PolicySet};
/// use gangway_plugin_sdk::{Backfill, Fairness, Gang, Slot};
///
/// let set = PolicySet::fallbacks().with::<Gang>(Box::new(Native::new("mine", Backfill)));
/// assert_eq!(set.slot::<Fairness>().name(), "fifo-quota");
/// assert_eq!(set.name(Slot::Gang), "mine");
/// assert_eq!(set.name(Slot::Reclaim), "none");
/// ```
pub struct PolicySet {
    /// `slots[slot.index()]` is slot `slot`'s `Guarded<S>`.
    slots: [Box<dyn AnyGuarded>; Slot::COUNT],
}

impl PolicySet {
    /// Every slot with its fallback policy ([`SlotContract::FALLBACK`]):
    /// retry every failure, FIFO within VC quotas, strict locality,
    /// backfill, no reclaim, no defragmentation.
    pub fn fallbacks() -> PolicySet {
        PolicySet {
            slots: Slot::ALL.map(|slot| {
                with_slot!(slot, |S| Box::new(Guarded::<S>::fallback_only())
                    as Box<dyn AnyGuarded>)
            }),
        }
    }

    /// This set with slot `S` running `backend` (as its baseline).
    #[must_use]
    pub fn with<S: SlotContract>(mut self, backend: BoxedBackend<S>) -> PolicySet {
        *self.slot_mut::<S>() = Guarded::new(backend);
        self
    }

    /// Slot `S`.
    pub fn slot<S: SlotContract>(&self) -> &Guarded<S> {
        self.slots[S::SLOT.index()]
            .as_any()
            .downcast_ref()
            .expect("slots[S::SLOT.index()] holds a Guarded<S>")
    }

    /// Slot `S`, mutably (e.g. to [`Guarded::swap`] its policy between rounds).
    pub fn slot_mut<S: SlotContract>(&mut self) -> &mut Guarded<S> {
        self.slots[S::SLOT.index()]
            .as_any_mut()
            .downcast_mut()
            .expect("slots[S::SLOT.index()] holds a Guarded<S>")
    }

    /// The active policy's name in `slot`.
    pub fn name(&self, slot: Slot) -> &str {
        self.slots[slot.index()].name()
    }

    /// What each slot's active policy is, in round order ([`Slot::ALL`]).
    pub fn origins(&self) -> Vec<(Slot, PolicyOrigin)> {
        Slot::ALL
            .into_iter()
            .zip(&self.slots)
            .map(|(slot, g)| (slot, g.origin()))
            .collect()
    }

    /// The failure counters of `slot`.
    pub fn health(&self, slot: Slot) -> &SlotHealth {
        self.slots[slot.index()].health()
    }

    /// Sets the guard settings of every slot.
    pub fn set_guard(&mut self, guard: GuardSettings) {
        for slot in &mut self.slots {
            slot.set_guard(guard);
        }
    }

    /// What happened to each slot (swaps, rollbacks, quarantines) since the
    /// last call, slot by slot in round order.
    pub(crate) fn take_events(&mut self) -> Vec<(Slot, SlotEvent)> {
        let mut events = Vec::new();
        for (slot, g) in Slot::ALL.into_iter().zip(&mut self.slots) {
            events.extend(g.take_events().into_iter().map(|e| (slot, e)));
        }
        events
    }

    /// Applies staged swaps and rollbacks of every slot; returns the slots
    /// whose active policy changed.
    pub(crate) fn prepare_round(&mut self) -> Vec<Slot> {
        Slot::ALL
            .into_iter()
            .zip(&mut self.slots)
            .filter_map(|(slot, g)| g.prepare_round().then_some(slot))
            .collect()
    }
}

/// What every guarded slot offers whatever its slot: for the set's loops.
trait AnyGuarded: Send {
    fn name(&self) -> &str;
    fn origin(&self) -> PolicyOrigin;
    fn health(&self) -> &SlotHealth;
    fn set_guard(&mut self, guard: GuardSettings);
    fn prepare_round(&mut self) -> bool;
    fn take_events(&mut self) -> Vec<SlotEvent>;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<S: SlotContract> AnyGuarded for Guarded<S> {
    fn name(&self) -> &str {
        Guarded::name(self)
    }
    fn origin(&self) -> PolicyOrigin {
        Guarded::origin(self)
    }
    fn health(&self) -> &SlotHealth {
        Guarded::health(self)
    }
    fn set_guard(&mut self, guard: GuardSettings) {
        Guarded::set_guard(self, guard);
    }
    fn prepare_round(&mut self) -> bool {
        Guarded::prepare_round(self)
    }
    fn take_events(&mut self) -> Vec<SlotEvent> {
        Guarded::take_events(self)
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

impl Default for PolicySet {
    fn default() -> Self {
        PolicySet::fallbacks()
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
