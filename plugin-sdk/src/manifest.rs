//! What a policy declares about itself when it is loaded: [`Manifest`],
//! with the pending jobs a fairness policy needs to see ([`QueueOrder`]) and
//! the running jobs a reclaim policy needs to see ([`RunningScope`]).

use serde::{Deserialize, Serialize};

use crate::wire::postcard::{decode_into, encode_into};
use crate::wire::{Wire, WireError};

/// Which pending jobs the fairness policy needs to see: the core keeps each
/// VC's pending jobs sorted by this key and a round's view holds only the
/// first jobs of each VC (the host's window, e.g. 128), so a round costs what
/// can start, not the whole backlog. A policy that orders the jobs *within
/// each VC* by this key (whatever it does across VCs) then decides as it
/// would over the full backlog whenever no VC has more pending jobs than the
/// window; beyond it, a VC's later jobs wait with [`crate::WaitReason::Queued`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
pub enum QueueOrder {
    /// Every pending job, every round (the cost grows with the backlog).
    #[default]
    All,
    /// Oldest first: submit time, then id.
    Submit,
    /// Least attained service first, in bands: the number of these
    /// thresholds (GPU-seconds, ascending) that the job's attained service
    /// reaches, then submit time, then id (Tiresias's discretized LAS).
    AttainedBands(Vec<u64>),
    /// Smallest gang first: GPUs, then submit time, then id.
    Smallest,
}

/// Which running jobs the reclaim policy needs to see.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
pub enum RunningScope {
    /// Every running job, every round in which a job waits.
    #[default]
    All,
    /// Only the jobs of virtual clusters that borrow: that hold more GPUs
    /// than their quota, or hold any without a quota. The host does not
    /// call the policy in a round in which no VC borrows. The view's
    /// `waiting` are only the jobs whose VC's quota covers them (held GPUs
    /// plus the job's at most the quota; no call if there are none), and
    /// its `servers` only those with free GPUs or running a shown job (no
    /// other server can make room by stopping borrowed work). For policies that
    /// only ever stop borrowed work (YARN's fair-share preemption, Volcano's
    /// reclaim): a round then costs the borrowed jobs, not every running job.
    ///
    /// To a policy that takes the GPU types (contract 2.2), a VC with
    /// quotas per type borrows each type on its own: the jobs shown are
    /// those of the types it holds more of than its nominal quota of them,
    /// and a waiting job is covered when one of its allowed types has room
    /// for it in its VC's nominal quota of that type.
    Borrowed,
    /// Only the jobs each borrowing VC could give back, newest first
    /// ([`crate::ReclaimView::give_back`]): of the VC's running jobs that
    /// ran at least `min_run_s` seconds, latest start first (then highest
    /// id), each job whose VC keeps at least its quota without it, counting
    /// down from the GPUs it holds (a VC without a quota can give back every
    /// such job). `servers` are as for [`RunningScope::Borrowed`] (those with
    /// free GPUs or running a shown job), and `waiting` the jobs of
    /// `Borrowed` that wait for GPUs ([`crate::WaitReason::waits_for_gpus`]).
    /// For policies
    /// that stop borrowed work newest first and only as far as each VC
    /// borrows (YARN's fair-share preemption, `quota-reclaim`): a round then
    /// costs what reclaim can change, not every running job of a borrowing
    /// VC. To a policy that takes the GPU types, a VC with quotas per type
    /// gives back each type it borrows apart, down to its nominal quota of
    /// the type ([`crate::ReclaimView::give_back_typed`]).
    GiveBack {
        /// Jobs that started less than this many seconds ago are neither
        /// shown nor counted down (they cannot be given back).
        min_run_s: u64,
    },
}

/// What a policy declares when it is loaded (the reply of `init` in WIT).
///
/// An empty reply means the default manifest. A manifest of an earlier
/// layout (the queue order alone; then with the running scope; then with
/// view changes) still decodes, with the defaults for the fields added
/// since.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Wire)]
pub struct Manifest {
    /// The order of the pending jobs the fairness policy needs to see
    /// (ignored for other slots).
    pub queue_order: QueueOrder,
    /// The running jobs the reclaim policy needs to see (ignored for other
    /// slots).
    pub running: RunningScope,
    /// Whether the module takes each view as a message that may hold a
    /// change from the view of its last answered call
    /// (`wire::encode_view_message`) rather than the bare view.
    /// The SDK's export glue sets it for every slot it exports; a policy
    /// leaves it `false`, and native backends ignore it.
    pub view_changes: bool,
    /// Whether the fairness or reclaim policy takes the GPU types beside
    /// its view ([`crate::TypesView`], contract 2.2; the fairness policy
    /// may then answer a type for a job). Ignored for other slots, and on
    /// a cluster of one type.
    pub gpu_types: bool,
    /// Whether the reclaim policy that takes the GPU types also takes each
    /// shown server's type ([`crate::TypesView::servers`]). The SDK's
    /// export glue sets it with [`Manifest::gpu_types`] for a reclaim
    /// policy; a module built before it (its manifest in the layout
    /// without it) is sent the types without the servers'.
    pub server_types: bool,
}

/// The manifest of contract 2.1, before [`Manifest::gpu_types`].
#[derive(Default, Wire)]
struct Manifest21 {
    queue_order: QueueOrder,
    running: RunningScope,
    view_changes: bool,
}

/// The manifest of contract 2.2 before [`Manifest::server_types`].
#[derive(Default, Wire)]
struct Manifest22 {
    queue_order: QueueOrder,
    running: RunningScope,
    view_changes: bool,
    gpu_types: bool,
}

impl Manifest {
    /// The manifest's bytes: empty for the default one.
    ///
    /// ```
    /// use gangway_plugin_sdk::{Manifest, QueueOrder};
    /// assert!(Manifest::default().encode().is_empty());
    /// let m = Manifest {
    ///     queue_order: QueueOrder::AttainedBands(vec![3600]),
    ///     ..Manifest::default()
    /// };
    /// assert_eq!(Manifest::decode(&m.encode()).unwrap(), m);
    /// assert_eq!(Manifest::decode(&[]).unwrap(), Manifest::default());
    /// ```
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if *self == Manifest::default() {
            return out;
        }
        encode_into(self, &mut out);
        // The last fields are bools, one byte each: without the servers'
        // types the bytes are contract 2.2's layout, and without the types
        // too 2.1's, so a module loads on a host of the layout it needs.
        // (Cut rather than written from structs of the older layouts: one
        // encoder in every module instead of three.)
        if !self.server_types {
            out.pop();
            if !self.gpu_types {
                out.pop();
            }
        }
        out
    }

    /// Decodes a manifest; empty bytes are the default. Thresholds of an
    /// [`QueueOrder::AttainedBands`] order must ascend and number at most 64.
    pub fn decode(bytes: &[u8]) -> Result<Manifest, WireError> {
        if bytes.is_empty() {
            return Ok(Manifest::default());
        }
        if bytes.len() > 1024 {
            return Err(WireError {
                what: "Manifest",
                reason: format!(
                    "{} bytes, more than the 1024 a manifest may take",
                    bytes.len()
                ),
            });
        }
        // The earlier layouts: the queue order alone; then with the
        // running scope; then with view changes (contract 2.1); then with
        // the GPU types (contract 2.2, before the servers' types).
        let mut m = Manifest::default();
        if let Err(e) = decode_into(bytes, &mut m) {
            let mut v4 = Manifest22::default();
            let mut v3 = Manifest21::default();
            let mut v2 = <(QueueOrder, RunningScope)>::default();
            let mut v1 = QueueOrder::default();
            m = if decode_into(bytes, &mut v4).is_ok() {
                Manifest {
                    queue_order: v4.queue_order,
                    running: v4.running,
                    view_changes: v4.view_changes,
                    gpu_types: v4.gpu_types,
                    ..Manifest::default()
                }
            } else if decode_into(bytes, &mut v3).is_ok() {
                Manifest {
                    queue_order: v3.queue_order,
                    running: v3.running,
                    view_changes: v3.view_changes,
                    ..Manifest::default()
                }
            } else if decode_into(bytes, &mut v2).is_ok() {
                Manifest {
                    queue_order: v2.0,
                    running: v2.1,
                    ..Manifest::default()
                }
            } else if decode_into(bytes, &mut v1).is_ok() {
                Manifest {
                    queue_order: v1,
                    ..Manifest::default()
                }
            } else {
                return Err(e);
            };
        }
        if let QueueOrder::AttainedBands(t) = &m.queue_order
            && (t.len() > 64 || t.windows(2).any(|w| w[0] >= w[1]))
        {
            return Err(WireError {
                what: "Manifest",
                reason: "attained-service thresholds must ascend strictly and number at most 64"
                    .into(),
            });
        }
        Ok(m)
    }
}
