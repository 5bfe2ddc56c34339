//! The conformance kit for policy authors (feature `testing`): proptest
//! strategies for realistic views of every slot ([`strategy`]), each
//! slot's views as one strategy ([`SlotViews`]), and the one step smaller
//! views a failing view shrinks through ([`shrink`]).
pub mod shrink;
pub mod strategy;

use proptest::strategy::BoxedStrategy;

use crate::SlotContract;

/// A slot whose realistic views the kit can generate (every slot: each
/// implements it in its own folder).
pub trait SlotViews: SlotContract {
    /// Realistic views of the slot.
    fn views() -> BoxedStrategy<Self::View>;

    /// The largest views a host sends the slot at Philly scale (see
    /// [`strategy::Scale::Largest`]); by default the realistic ones.
    fn largest() -> BoxedStrategy<Self::View> {
        Self::views()
    }

    /// Views one step smaller than `view`, the largest steps first: a
    /// virtual cluster with its jobs, half of a list, one job or server.
    /// The kit tries them in order and keeps the first that still fails the
    /// same way, until none does (see [`shrink`]).
    fn smaller(view: &Self::View) -> Vec<Self::View>;
}
