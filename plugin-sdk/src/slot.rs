//! What a slot is: its name and contract call, its view and decision, and
//! how each crosses the sandbox boundary. Every slot is described once, by a
//! marker type in [`crate::slots`] implementing [`SlotContract`]; the host's
//! validation, the Wasm glue and the export macros are generic over it.

use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::wire::codec::{self, WireError};

/// A policy slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Slot {
    /// Orders pending jobs and marks which may start now.
    Fairness,
    /// Gives each eligible job its spread limit.
    Locality,
    /// Decides what a job that does not fit does to the jobs behind it.
    Gang,
    /// Chooses running jobs to stop so that waiting ones can start.
    Reclaim,
    /// Decides what happens after an attempt fails.
    Retry,
    /// Proposes migrations of running jobs that free room for a waiting gang.
    Defragment,
}

impl Slot {
    /// All slots, in the order a round consults them.
    pub const ALL: [Slot; 6] = [
        Slot::Retry,
        Slot::Fairness,
        Slot::Locality,
        Slot::Gang,
        Slot::Reclaim,
        Slot::Defragment,
    ];

    /// The slot's name as used in WIT, configs and reports.
    ///
    /// ```
    /// use gangway_plugin_sdk::Slot;
    /// assert_eq!(Slot::Defragment.as_str(), "defragment");
    /// assert_eq!(Slot::from_name("gang"), Some(Slot::Gang));
    /// assert_eq!(Slot::Gang.call(), "on-blocked");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            Slot::Fairness => "fairness",
            Slot::Locality => "locality",
            Slot::Gang => "gang",
            Slot::Reclaim => "reclaim",
            Slot::Retry => "retry",
            Slot::Defragment => "defragment",
        }
    }

    /// The name of the slot's per-round function in its WIT interface.
    pub const fn call(self) -> &'static str {
        match self {
            Slot::Fairness => "order",
            Slot::Locality => "spread",
            Slot::Gang => "on-blocked",
            Slot::Reclaim => "reclaim",
            Slot::Retry => "retry",
            Slot::Defragment => "plan",
        }
    }

    /// The slot called `name`, if any.
    pub fn from_name(name: &str) -> Option<Slot> {
        Slot::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// Its position in a table indexed by slot (`0..6`).
    pub const fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One slot of the contract, described once: its [`Slot`], its view and
/// decision types, and their wire encoding. Implemented by the marker types
/// of [`crate::slots`]; everything that handles "any slot" (the host's
/// backends and validation, the guest glue) is generic over it.
pub trait SlotContract: Copy + Default + Send + Sync + std::fmt::Debug + 'static {
    /// Which slot.
    const SLOT: Slot;
    /// What the policy sees each round.
    type View: Clone
        + std::fmt::Debug
        + Default
        + PartialEq
        + Serialize
        + DeserializeOwned
        + Send
        + Sync;
    /// What it answers.
    type Decision: Clone
        + std::fmt::Debug
        + Default
        + PartialEq
        + Serialize
        + DeserializeOwned
        + Send;

    /// The most bytes a well-formed reply to `view` can take. A longer reply
    /// is refused before anything is decoded, so a reply can never make the
    /// host allocate more than a bounded multiple of the view.
    fn max_reply_bytes(view: &Self::View) -> usize;

    /// Encodes a view into `out` (cleared first).
    fn encode_view(view: &Self::View, out: &mut Vec<u8>) {
        codec::encode_into(view, out);
    }

    /// Decodes a view into `view`, reusing its memory where it can.
    fn decode_view_into(bytes: &[u8], view: &mut Self::View) -> Result<(), WireError> {
        *view = codec::decode(bytes)?;
        Ok(())
    }

    /// Whether the slot's views can travel as changes
    /// ([`SlotContract::encode_view_delta`]): a host keeps a copy of the last
    /// view it sent only for such slots.
    const VIEW_CHANGES: bool = false;

    /// Encodes `view` as a change from `base`, the view of the instance's
    /// last answered call, into `out` (cleared first); `false` (leaving
    /// `out` unspecified) when the slot has no change encoding or the
    /// whole view is about as short. See `wire::encode_view_message`.
    fn encode_view_delta(_base: &Self::View, _view: &Self::View, _out: &mut Vec<u8>) -> bool {
        false
    }

    /// Applies a change written by [`SlotContract::encode_view_delta`] to
    /// `view`, which holds its base.
    fn apply_view_delta(_bytes: &[u8], _view: &mut Self::View) -> Result<(), WireError> {
        Err(WireError {
            what: "view change",
            reason: format!("the {} slot's views travel whole", Self::SLOT),
        })
    }

    /// Encodes `decision` as runs over the `view` it answers into `out`
    /// (cleared first); `false` (leaving `out` unspecified) when the slot
    /// has no compact encoding or it would not be shorter. See
    /// `wire::encode_reply_message`.
    fn encode_decision_compact(
        _decision: &Self::Decision,
        _view: &Self::View,
        _out: &mut Vec<u8>,
    ) -> bool {
        false
    }

    /// Decodes a compact reply to `view`.
    fn decode_decision_compact(
        _bytes: &[u8],
        _view: &Self::View,
    ) -> Result<Self::Decision, WireError> {
        Err(WireError {
            what: "compact reply",
            reason: format!("the {} slot's replies are plain", Self::SLOT),
        })
    }

    /// Encodes a decision into `out` (cleared first).
    fn encode_decision(decision: &Self::Decision, out: &mut Vec<u8>) {
        codec::encode_into(decision, out);
    }

    /// Decodes the reply to `view`: refused unheard if longer than
    /// [`SlotContract::max_reply_bytes`].
    fn decode_decision(bytes: &[u8], view: &Self::View) -> Result<Self::Decision, WireError> {
        codec::check_reply_len::<Self::Decision>(bytes, Self::max_reply_bytes(view))?;
        codec::decode(bytes)
    }
}

/// A policy for slot `S`, whichever slot that is: what the host calls. Every
/// type implementing a slot trait ([`crate::FairnessPolicy`] and the others)
/// implements it for that slot; implement the slot trait, not this.
pub trait Policy<S: SlotContract> {
    /// The policy's decision for `view`.
    fn decide(&self, view: &S::View) -> S::Decision;
    /// What the policy tells the host about itself once, when it is loaded.
    fn manifest(&self) -> Manifest {
        Manifest::default()
    }
}

/// Which pending jobs the fairness policy needs to see: the core keeps each
/// VC's pending jobs sorted by this key and a round's view holds only the
/// first jobs of each VC (the host's window, e.g. 128), so a round costs what
/// can start, not the whole backlog. A policy that orders the jobs *within
/// each VC* by this key (whatever it does across VCs) then decides as it
/// would over the full backlog whenever no VC has more pending jobs than the
/// window; beyond it, a VC's later jobs wait with [`crate::WaitReason::Queued`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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
    Borrowed,
}

/// What a policy declares when it is loaded (the reply of `init` in WIT).
///
/// An empty reply means the default manifest. A manifest of an earlier
/// layout (the queue order alone; then with the running scope) still
/// decodes, with the defaults for the fields added since.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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
    pub view_deltas: bool,
}

/// The first layout of [`Manifest`]: the queue order alone.
#[derive(Deserialize)]
struct ManifestV1 {
    queue_order: QueueOrder,
}

/// The second layout of [`Manifest`]: the queue order and running scope.
#[derive(Deserialize)]
struct ManifestV2 {
    queue_order: QueueOrder,
    running: RunningScope,
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
        if *self == Manifest::default() {
            Vec::new()
        } else {
            codec::encode(self)
        }
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
        let m: Manifest = match codec::decode(bytes) {
            Ok(m) => m,
            Err(e) => match (
                codec::decode::<ManifestV2>(bytes),
                codec::decode::<ManifestV1>(bytes),
            ) {
                (Ok(v2), _) => Manifest {
                    queue_order: v2.queue_order,
                    running: v2.running,
                    ..Manifest::default()
                },
                (_, Ok(v1)) => Manifest {
                    queue_order: v1.queue_order,
                    ..Manifest::default()
                },
                _ => return Err(e),
            },
        };
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
