//! The view the locality and gang slots share: the jobs fairness made
//! eligible, in fairness order, and (for the gang slot) their spread limits.

pub(crate) mod wire;

use serde::{Deserialize, Serialize};

use crate::view::{ClusterSummary, PendingJob, SpreadLimit};

pub(crate) use wire::{apply_view_change, decode_view_into, encode_view, encode_view_change};

/// What the locality and gang slots see: the jobs fairness made eligible, in
/// fairness order.
#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueView {
    /// The host's clock for this round (seconds).
    pub now_s: u64,
    /// Cluster capacity.
    pub cluster: ClusterSummary,
    /// The eligible jobs, in the order they will be placed.
    pub jobs: Vec<PendingJob>,
    /// For the gang slot: the spread limit the locality slot chose for each
    /// job (same order as `jobs`); empty when the locality slot is asked.
    pub spread: Vec<SpreadLimit>,
}

impl Clone for QueueView {
    fn clone(&self) -> Self {
        QueueView {
            now_s: self.now_s,
            cluster: self.cluster.clone(),
            jobs: self.jobs.clone(),
            spread: self.spread.clone(),
        }
    }

    /// Field by field, reusing the vectors' memory (a Wasm host keeps a
    /// copy of each view it sent, the base of the next view change).
    fn clone_from(&mut self, source: &Self) {
        let QueueView {
            now_s,
            cluster,
            jobs,
            spread,
        } = source;
        self.now_s = *now_s;
        self.cluster.clone_from(cluster);
        self.jobs.clone_from(jobs);
        self.spread.clone_from(spread);
    }
}
