//! Bindings the watch cache does not show yet. A Binding the API server
//! accepted, or one whose reply was lost (the server may have applied it),
//! holds its GPUs in the books from the moment it is sent until the cache
//! shows the pod bound, the pod is gone, or reading the pod says the
//! Binding never happened. So a stale cache (a slow watch, an API server
//! restart) never lets the same GPUs go to two gangs, and a lost reply is
//! resolved by reading the pod, never by sending the Binding again blindly.

use std::collections::BTreeMap;

use crate::gangs::GangKey;
use crate::objects::PodInfo;

/// How long an accepted Binding may stay unseen by the cache before the
/// pod is read to confirm it.
pub const CONFIRM_MS: u64 = 10_000;
/// How often an unresolved Binding's pod is read again.
pub(crate) const READ_EVERY_MS: u64 = 1_000;

/// What is known of a Binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimState {
    /// The API server accepted it (or a read showed it applied).
    Sent,
    /// Its reply was lost: it may or may not have been applied.
    Unknown,
}

/// One pod's Binding not yet seen by the cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Claim {
    /// The pod's uid (a pod of the same name made again is another pod).
    pub(crate) uid: String,
    /// Its gang.
    pub(crate) gang: GangKey,
    /// The node it was bound to.
    pub(crate) node: String,
    /// The GPU indices it was bound with.
    pub(crate) gpus: Vec<u32>,
    /// What is known.
    pub(crate) state: ClaimState,
    /// Unix ms the Binding was sent (or last confirmed).
    pub(crate) since_ms: u64,
    /// Unix ms the pod was last read for it.
    read_ms: u64,
}

/// What reading a pod said of its Binding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadOutcome {
    /// The pod (of this uid) is bound to this node.
    BoundTo(String),
    /// The pod exists, unbound: the Binding did not happen.
    Unbound,
    /// The pod is gone (or was made again under a new uid).
    Gone,
}

/// A pod to read to resolve its Binding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadOrder {
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub pod: String,
    /// The uid the Binding was for.
    pub uid: String,
}

/// The Bindings not yet seen, by pod (`namespace`, `name`).
#[derive(Clone, Debug, Default)]
pub(crate) struct Claims {
    by_pod: BTreeMap<(String, String), Claim>,
}

impl Claims {
    /// Records a Binding of pod `namespace/name` (`uid`) to `node`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn add(
        &mut self,
        namespace: &str,
        pod: &str,
        uid: &str,
        gang: &GangKey,
        node: &str,
        gpus: &[u32],
        state: ClaimState,
        now_ms: u64,
    ) {
        self.by_pod.insert(
            (namespace.to_string(), pod.to_string()),
            Claim {
                uid: uid.to_string(),
                gang: gang.clone(),
                node: node.to_string(),
                gpus: gpus.to_vec(),
                state,
                since_ms: now_ms,
                read_ms: 0,
            },
        );
    }

    /// Drops the claims the cache now answers for: the pod shows bound,
    /// or is gone (or made again). An accepted Binding unseen for
    /// [`CONFIRM_MS`] becomes unknown, so its pod is read.
    pub(crate) fn settle(&mut self, pods: &[PodInfo], now_ms: u64) {
        if self.by_pod.is_empty() {
            return;
        }
        let by_key: BTreeMap<(&str, &str), &PodInfo> = pods
            .iter()
            .map(|p| ((p.namespace.as_str(), p.name.as_str()), p))
            .collect();
        self.by_pod.retain(
            |(ns, name), c| match by_key.get(&(ns.as_str(), name.as_str())) {
                None => false,
                Some(p) if p.uid != c.uid || p.node.is_some() => false,
                Some(_) => {
                    if c.state == ClaimState::Sent && now_ms.saturating_sub(c.since_ms) > CONFIRM_MS
                    {
                        c.state = ClaimState::Unknown;
                    }
                    true
                }
            },
        );
    }

    /// The pods to read now: unknown claims not read for [`READ_EVERY_MS`].
    pub(crate) fn due_reads(&mut self, now_ms: u64) -> Vec<ReadOrder> {
        let mut out = Vec::new();
        for ((ns, name), c) in &mut self.by_pod {
            if c.state == ClaimState::Unknown && now_ms.saturating_sub(c.read_ms) >= READ_EVERY_MS {
                c.read_ms = now_ms;
                out.push(ReadOrder {
                    namespace: ns.clone(),
                    pod: name.clone(),
                    uid: c.uid.clone(),
                });
            }
        }
        out
    }

    /// What a read of pod `namespace/name` (for `uid`) said. Returns the
    /// gang whose Binding went elsewhere (it cannot run as planned).
    pub(crate) fn resolve(
        &mut self,
        namespace: &str,
        pod: &str,
        uid: &str,
        outcome: &ReadOutcome,
        now_ms: u64,
    ) -> Option<GangKey> {
        let key = (namespace.to_string(), pod.to_string());
        let c = self.by_pod.get_mut(&key).filter(|c| c.uid == uid)?;
        match outcome {
            ReadOutcome::BoundTo(node) if *node == c.node => {
                c.state = ClaimState::Sent;
                c.since_ms = now_ms;
                None
            }
            ReadOutcome::BoundTo(_) => self.by_pod.remove(&key).map(|c| c.gang),
            ReadOutcome::Unbound | ReadOutcome::Gone => {
                self.by_pod.remove(&key);
                None
            }
        }
    }

    /// Every claim, by pod.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&(String, String), &Claim)> {
        self.by_pod.iter()
    }

    /// The claim on a pod, if any.
    pub(crate) fn get(&self, namespace: &str, pod: &str) -> Option<&Claim> {
        self.by_pod.get(&(namespace.to_string(), pod.to_string()))
    }

    /// Claims whose reply was lost and not yet resolved.
    pub(crate) fn unknown(&self) -> usize {
        self.by_pod
            .values()
            .filter(|c| c.state == ClaimState::Unknown)
            .count()
    }

    /// How many claims there are.
    pub(crate) fn len(&self) -> usize {
        self.by_pod.len()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::objects::Phase;

    fn pod(name: &str, uid: &str, node: Option<&str>) -> PodInfo {
        PodInfo {
            namespace: "ns".into(),
            name: name.into(),
            uid: uid.into(),
            ours: true,
            node: node.map(String::from),
            phase: Phase::Pending,
            terminating: false,
            gpus: Ok(1),
            gpus_annotation: None,
            group: None,
            vc_label: None,
            created_ms: 0,
            gpu_indices: None,
            plan: None,
            needs: Default::default(),
        }
    }

    fn gang() -> GangKey {
        GangKey::Pod {
            namespace: "ns".into(),
            name: "a".into(),
        }
    }

    #[test]
    fn the_cache_answers_for_a_claim_once_it_shows_the_pod() {
        let mut c = Claims::default();
        c.add("ns", "a", "u1", &gang(), "n1", &[0], ClaimState::Sent, 0);
        c.settle(&[pod("a", "u1", None)], 1_000);
        assert_eq!(c.len(), 1);
        assert!(c.due_reads(1_000).is_empty());
        // Unseen too long: read it.
        c.settle(&[pod("a", "u1", None)], CONFIRM_MS + 1);
        assert_eq!(c.unknown(), 1);
        assert_eq!(c.due_reads(CONFIRM_MS + 1).len(), 1);
        assert!(
            c.due_reads(CONFIRM_MS + 2).is_empty(),
            "not read twice at once"
        );
        c.settle(&[pod("a", "u1", Some("n1"))], CONFIRM_MS + 3);
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn a_gone_or_remade_pod_ends_its_claim() {
        let mut c = Claims::default();
        c.add("ns", "a", "u1", &gang(), "n1", &[0], ClaimState::Unknown, 0);
        c.settle(&[pod("a", "u2", None)], 1);
        assert_eq!(c.len(), 0);
        c.add("ns", "a", "u1", &gang(), "n1", &[0], ClaimState::Unknown, 0);
        c.settle(&[], 1);
        assert_eq!(c.len(), 0);
    }

    #[test]
    fn reads_resolve_lost_replies() {
        let mut c = Claims::default();
        c.add("ns", "a", "u1", &gang(), "n1", &[0], ClaimState::Unknown, 0);
        let bound = ReadOutcome::BoundTo("n1".into());
        assert_eq!(c.resolve("ns", "a", "u1", &bound, 5), None);
        assert_eq!(c.get("ns", "a").unwrap().state, ClaimState::Sent);
        // A read for another uid says nothing of this claim.
        assert_eq!(c.resolve("ns", "a", "u9", &ReadOutcome::Gone, 5), None);
        assert_eq!(c.len(), 1);
        let elsewhere = ReadOutcome::BoundTo("n2".into());
        assert_eq!(c.resolve("ns", "a", "u1", &elsewhere, 6), Some(gang()));
        assert_eq!(c.len(), 0);
        c.add("ns", "a", "u1", &gang(), "n1", &[0], ClaimState::Unknown, 0);
        assert_eq!(c.resolve("ns", "a", "u1", &ReadOutcome::Unbound, 7), None);
        assert_eq!(c.len(), 0);
    }
}
