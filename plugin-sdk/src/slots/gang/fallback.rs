//! The gang slot's built-in policy, `backfill`.

use super::{GangAction, GangDecision, GangPolicy};
use crate::config::{ConfigError, Configure, no_options};
use crate::slots::QueueView;

/// `backfill`: a blocked job lets every later job try.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Backfill;

impl GangPolicy for Backfill {
    fn on_blocked(&self, view: &QueueView) -> GangDecision {
        GangDecision {
            on_blocked: vec![GangAction::Backfill; view.jobs.len()],
            max_reservations: 0,
        }
    }
}

impl Configure for Backfill {
    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        no_options("backfill", config)?;
        Ok(Backfill)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_takes_no_options() {
        assert!(Backfill::from_config(b"# defaults\n").is_ok());
        assert!(Backfill::from_config(b"max = 2").is_err());
    }
}
