//! The conformance kit for policy authors (feature `testing`): proptest
//! strategies for realistic views of every slot ([`strategy`]).
pub mod strategy;
