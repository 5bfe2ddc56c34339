//! The locality-relaxation slot: how widely each eligible gang may spread.

use serde::{Deserialize, Serialize};

use crate::slot::{Policy, Slot, SlotContract};
use crate::view::{ClusterSummary, PendingJob, SpreadLimit};
use crate::wire::codec::{self, WireError};
use crate::wire::{compact, delta, fast};

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

/// The locality slot's answer: one spread limit per job of the
/// [`QueueView`], in the same order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocalityDecision {
    /// `limits[i]` bounds where job `i` may go this round: no level deeper
    /// than the server level.
    pub limits: Vec<SpreadLimit>,
}

/// The locality-relaxation slot: a spread limit per eligible job.
pub trait LocalityPolicy {
    /// Returns one spread limit per job of `view`, in order.
    fn spread(&self, view: &QueueView) -> LocalityDecision;
}

impl<P: LocalityPolicy + ?Sized> Policy<Locality> for P {
    fn decide(&self, view: &QueueView) -> LocalityDecision {
        self.spread(view)
    }
}

/// The locality slot (WIT interface `locality`, function `spread`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Locality;

impl SlotContract for Locality {
    const SLOT: Slot = Slot::Locality;
    const VIEW_CHANGES: bool = true;
    type View = QueueView;
    type Decision = LocalityDecision;

    fn max_reply_bytes(view: &QueueView) -> usize {
        codec::LEN + view.jobs.len() * (1 + codec::U32)
    }
    fn encode_view(view: &QueueView, out: &mut Vec<u8>) {
        fast::encode_queue_view(view, out);
    }
    fn decode_view_into(bytes: &[u8], view: &mut QueueView) -> Result<(), WireError> {
        fast::decode_queue_view_into(bytes, view)
    }
    fn encode_view_delta(base: &QueueView, view: &QueueView, out: &mut Vec<u8>) -> bool {
        delta::encode_queue_view_delta(base, view, out)
    }
    fn apply_view_delta(bytes: &[u8], view: &mut QueueView) -> Result<(), WireError> {
        delta::apply_queue_view_delta(bytes, view)
    }
    fn encode_decision_compact(d: &LocalityDecision, _view: &QueueView, out: &mut Vec<u8>) -> bool {
        compact::encode_locality(d, out)
    }
    fn decode_decision_compact(
        bytes: &[u8],
        view: &QueueView,
    ) -> Result<LocalityDecision, WireError> {
        compact::decode_locality(bytes, view)
    }
    fn encode_decision(d: &LocalityDecision, out: &mut Vec<u8>) {
        fast::encode_locality(d, out);
    }
    fn decode_decision(bytes: &[u8], view: &QueueView) -> Result<LocalityDecision, WireError> {
        codec::check_reply_len::<Self::Decision>(bytes, Self::max_reply_bytes(view))?;
        fast::decode_locality(bytes, view.jobs.len())
    }
}
