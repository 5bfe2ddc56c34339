//! Each slot's rules in the core, one file per slot ([`super::SlotRules`]).

mod defragment;
mod fairness;
mod gang;
mod locality;
mod reclaim;
mod retry;
