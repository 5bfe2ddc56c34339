//! The slots of the contract, and the registry that lists them.
//!
//! Each slot is one folder: `mod.rs` holds its view, its decision, the
//! trait a policy author implements and the marker type that describes the
//! slot to the host ([`crate::SlotContract`]); `rules.rs` the rules every
//! decision is checked against; `fallback.rs` its built-in policy. How its
//! view and decision cross the sandbox boundary is derived from their
//! definitions (`#[derive(Wire)]` and its `#[wire(...)]` attributes, see
//! [`crate::wire`]). The locality and gang slots share one view, in
//! `queue_view/`.
//!
//! This file is the registry: [`Slot`] names every slot at run time, and
//! [`with_slot!`](crate::with_slot) turns a [`Slot`] into its marker type,
//! so that code which must do something for every slot (a policy set, the
//! conformance kit, a host's configuration) is written once, generically,
//! and iterates [`Slot::ALL`]. Adding a slot is a new folder, its `mod`
//! and `pub use` here (and its marker's re-export at the crate root), and a
//! line in the registry table below.
//!
//! A round consults the slots in the order of [`Slot::ALL`]: [`Retry`]
//! (failed attempts since the last round), [`Fairness`], [`Locality`],
//! placement with [`Gang`], then [`Reclaim`] and [`Defragment`] for the jobs
//! still waiting.

pub(crate) mod defragment;
pub(crate) mod fairness;
pub(crate) mod gang;
pub(crate) mod locality;
mod nothing;
pub(crate) mod queue_view;
pub(crate) mod reclaim;
mod retry;

use serde::{Deserialize, Serialize};

pub use defragment::{Defragment, DefragmentDecision, DefragmentPolicy, DefragmentView, Move};
pub use fairness::{Fairness, FairnessDecision, FairnessPolicy, FairnessView, FifoQuota, Ranked};
pub use gang::{Backfill, Gang, GangAction, GangDecision, GangPolicy};
pub use locality::{Locality, LocalityDecision, LocalityPolicy, Strict};
pub use nothing::Nothing;
pub use queue_view::QueueView;
pub use reclaim::{
    GpuCounts, Reclaim, ReclaimDecision, ReclaimPolicy, ReclaimView, give_back_walk,
};
pub use retry::{
    FailedAttempt, FailureClass, Fixed, Retry, RetryAction, RetryDecision, RetryPolicy, RetryView,
};

/// The registry: every slot, one line each, in the order of their
/// [`Slot`] variants (their wire order: snapshots and reports encode a slot
/// by it), with its place in a round's order ([`Slot::ALL`]) and what the
/// variant's documentation says. Expands `$crate::$callback!` with
/// `{ $args }` and the lines; [`Slot`] and [`with_slot!`](crate::with_slot)
/// are made from it. Adding a slot is a folder (its view, decision, trait,
/// marker type with its [`crate::SlotContract`], rules, fallback, test
/// strategies and export macro) and a line here.
#[doc(hidden)]
#[macro_export]
macro_rules! __gangway_slots {
    ($callback:ident { $($args:tt)* }) => {
        $crate::$callback! { { $($args)* }
            /// Orders pending jobs and marks which may start now.
            Fairness = 1,
            /// Gives each eligible job its spread limit.
            Locality = 2,
            /// Decides what a job that does not fit does to the jobs behind it.
            Gang = 3,
            /// Chooses running jobs to stop so that waiting ones can start.
            Reclaim = 4,
            /// Decides what happens after an attempt fails.
            Retry = 0,
            /// Proposes migrations of running jobs that free room for a waiting gang.
            Defragment = 5,
        }
    };
}

/// [`Slot`] and its constants, from the registry's lines.
#[doc(hidden)]
#[macro_export]
macro_rules! __gangway_slot_enum {
    ({} $( $(#[$doc:meta])* $slot:ident = $round:literal, )*) => {
        /// A policy slot, named at run time. Its marker type, which carries
        /// everything about it, is what [`with_slot!`](crate::with_slot) gives.
        ///
        /// The variants' order is their wire order (snapshots and reports
        /// encode a slot by it); [`Slot::ALL`] is the order a round consults
        /// them.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub enum Slot {
            $( $(#[$doc])* $slot, )*
        }

        impl Slot {
            /// How many slots there are.
            pub const COUNT: usize = [$(stringify!($slot)),*].len();

            /// All slots in their declaration order (fairness, locality,
            /// gang, reclaim, retry, defragment): the order of their wire
            /// encoding, of a report's keys and of a CLI's flags.
            ///
            /// ```
            /// use gangway_plugin_sdk::Slot;
            /// assert_eq!(Slot::DECLARED[0], Slot::Fairness);
            /// assert!(Slot::DECLARED.windows(2).all(|w| w[0] < w[1]));
            /// ```
            pub const DECLARED: [Slot; Slot::COUNT] = [$(Slot::$slot),*];

            /// Each slot's place in a round's order, by declaration.
            const ROUND: [u8; Slot::COUNT] = [$($round),*];
        }
    };
}

__gangway_slots!(__gangway_slot_enum {});

/// Runs `$body` with the type name `$S` bound to the marker type of the
/// slot `$slot` (a [`Slot`] value): the one place that turns a slot named at
/// run time into its type (a `match` over the registry's lines).
///
/// ```
/// use gangway_plugin_sdk::{with_slot, Slot, SlotContract};
/// let names: Vec<&str> = Slot::ALL.iter().map(|&s| with_slot!(s, |S| S::FALLBACK)).collect();
/// assert_eq!(names, ["fixed", "fifo-quota", "strict", "backfill", "none", "none"]);
/// ```
#[macro_export]
macro_rules! with_slot {
    ($slot:expr, |$S:ident| $body:expr) => {
        $crate::__gangway_slots!(__gangway_with_slot { ($slot) $S ($body) })
    };
}

/// The `match` of [`with_slot!`](crate::with_slot).
#[doc(hidden)]
#[macro_export]
macro_rules! __gangway_with_slot {
    ({ ($slot:expr) $S:ident ($body:expr) } $( $(#[$doc:meta])* $marker:ident = $round:literal, )*) => {
        match $slot {
            $(
                $crate::Slot::$marker => {
                    type $S = $crate::$marker;
                    $body
                }
            )*
        }
    };
}

impl Slot {
    /// All slots, in the order a round consults them.
    ///
    /// ```
    /// use gangway_plugin_sdk::Slot;
    /// assert_eq!(Slot::ALL[0], Slot::Retry);
    /// assert_eq!(Slot::ALL[5], Slot::Defragment);
    /// ```
    pub const ALL: [Slot; Slot::COUNT] = {
        // DECLARED sorted by round position (an insertion sort: const code).
        let mut slots = Slot::DECLARED;
        let mut i = 1;
        while i < Slot::COUNT {
            let mut j = i;
            while j > 0 && Slot::ROUND[slots[j - 1] as usize] > Slot::ROUND[slots[j] as usize] {
                let t = slots[j - 1];
                slots[j - 1] = slots[j];
                slots[j] = t;
                j -= 1;
            }
            i += 1;
        }
        slots
    };

    /// The slot's name as used in WIT, configs and reports.
    ///
    /// ```
    /// use gangway_plugin_sdk::Slot;
    /// assert_eq!(Slot::Defragment.as_str(), "defragment");
    /// assert_eq!(Slot::from_name("gang"), Some(Slot::Gang));
    /// assert_eq!(Slot::Gang.call(), "on-blocked");
    /// ```
    pub const fn as_str(self) -> &'static str {
        with_slot!(self, |S| <S as crate::SlotContract>::NAME)
    }

    /// The name of the slot's per-round function in its WIT interface.
    pub const fn call(self) -> &'static str {
        with_slot!(self, |S| <S as crate::SlotContract>::CALL)
    }

    /// The name of the slot's built-in policy.
    pub const fn fallback(self) -> &'static str {
        with_slot!(self, |S| <S as crate::SlotContract>::FALLBACK)
    }

    /// The slot called `name`, if any.
    pub fn from_name(name: &str) -> Option<Slot> {
        Slot::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// Its position in [`Slot::ALL`]: where it sits in a table indexed by
    /// slot.
    ///
    /// ```
    /// use gangway_plugin_sdk::Slot;
    /// assert!(Slot::ALL.iter().enumerate().all(|(i, s)| s.index() == i));
    /// ```
    pub const fn index(self) -> usize {
        let mut i = 0;
        while i < Slot::COUNT {
            if Slot::ALL[i] as u8 == self as u8 {
                return i;
            }
            i += 1;
        }
        unreachable!()
    }
}

impl std::fmt::Display for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
