//! `none`, the policy that decides nothing: the built-in policy of the
//! reclaim and defragment slots (never stop or move a running job).

use super::{
    DefragmentDecision, DefragmentPolicy, DefragmentView, ReclaimDecision, ReclaimPolicy,
    ReclaimView,
};
use crate::config::{ConfigError, Configure, no_options};

/// `none`: stops no running job and moves none. A host knows it without
/// asking it ([`crate::SlotContract::FALLBACK_DECIDES_NOTHING`]), so a round
/// with it neither builds the slot's view nor calls it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Nothing;

impl ReclaimPolicy for Nothing {
    fn reclaim(&self, _view: &ReclaimView) -> ReclaimDecision {
        ReclaimDecision::default()
    }
}

impl DefragmentPolicy for Nothing {
    fn plan(&self, _view: &DefragmentView) -> DefragmentDecision {
        DefragmentDecision::default()
    }
}

impl Configure for Nothing {
    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        no_options("none", config)?;
        Ok(Nothing)
    }
}
