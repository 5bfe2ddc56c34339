//! The conformance kit for policy authors (feature `testing`): proptest
//! strategies for realistic views of every slot ([`strategy`]), and each
//! slot's views as one strategy ([`SlotViews`]).
pub mod strategy;

use proptest::strategy::BoxedStrategy;

use crate::SlotContract;

/// A slot whose realistic views the kit can generate (every slot: each
/// implements it in its own folder).
pub trait SlotViews: SlotContract {
    /// Realistic views of the slot.
    fn views() -> BoxedStrategy<Self::View>;
}
