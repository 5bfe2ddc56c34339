//! The conformance kit for policy authors (feature `testing`): proptest
//! strategies for realistic views of every slot ([`strategy`]), each
//! slot's views as one strategy ([`SlotViews`]), and the one step smaller
//! views a failing view shrinks through ([`shrink`]), and contract 2.2's
//! GPU types beside the fairness and reclaim views ([`types`]).
pub mod rng;
pub mod shrink;
pub mod strategy;
pub mod types;

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

    /// The GPU types a host shows beside `view` to a policy that takes them
    /// (contract 2.2), made from `plan` ([`types::types_view`]); `None`
    /// (the default) for a slot that is never shown types. The fairness
    /// and reclaim slots describe their views' jobs.
    fn types_of(view: &Self::View, plan: &types::TypesPlan) -> Option<crate::TypesView> {
        let _ = (view, plan);
        None
    }
}
