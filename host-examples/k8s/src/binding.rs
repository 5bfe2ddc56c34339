//! Bindings as kube-scheduler sends them, and what to do when one's reply
//! does not say it worked. A Binding names the pod's uid, so a pod made
//! again under the same name is never bound by a plan meant for the old
//! one. A reply that is an error the API server may have applied anyway
//! (a timeout, a 5xx, a dropped connection) or an "already assigned"
//! conflict is resolved by reading the pod: bound where we asked is done,
//! bound elsewhere or gone is refused, still unbound is sent again after
//! a back-off. When the pod cannot be read either (the API server is
//! down), nothing more is sent: the outcome is unknown, the host keeps the
//! GPUs held (its claims) and reads the pod again every second until it
//! can tell; only a read that shows the pod unbound lets a Binding be sent
//! again.
//!
//! Why sending the same Binding again cannot book a pod twice: every copy
//! is the same request (the pod's uid, the node, the GPU indices and the
//! plan as annotations), and the API server applies a Binding in one
//! compare-and-swap of the pod in etcd that requires the uid to match and
//! `spec.nodeName` to be empty (`BindingREST.setPodNodeAndMetadata`;
//! otherwise 409 "already assigned"). So at most one copy takes effect,
//! and it puts the pod exactly where the first was meant to; a copy that
//! arrives after another was applied gets the 409, which is read as above.
//! The GPUs are held in the books from the first send until the pod is
//! seen bound or shown unbound or gone, so no other gang gets them
//! meanwhile.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};

use crate::host::ReadOutcome;
use crate::report::{BindOutcome, PodBind};

/// Binding requests sent for one pod at most (each after reading that the
/// previous one did not happen).
const ATTEMPTS: u32 = 4;
/// The first back-off between attempts; it doubles.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);

/// What to do after a Binding whose reply was an error it may have been
/// applied despite, once the pod was read (`None`: it could not be).
#[derive(Clone, Debug, PartialEq, Eq)]
enum Next {
    /// The read shows the pod unbound: send the same Binding again.
    SendAgain,
    /// Settled, or unknown (left to the host to read again).
    Done(BindOutcome),
}

/// The decision after attempt `attempt` (from 0) failed with `error` and
/// the pod was read: sent again only when the read shows it unbound and
/// attempts are left; never when the pod could not be read.
fn after_failed_send(b: &PodBind, read: Option<ReadOutcome>, attempt: u32, error: &str) -> Next {
    match read {
        Some(ReadOutcome::Unbound) if attempt + 1 < ATTEMPTS => Next::SendAgain,
        // The last attempt may still be in flight: the host reads again.
        Some(ReadOutcome::Unbound) | None => Next::Done(BindOutcome::Unknown(error.to_string())),
        Some(outcome) => Next::Done(settled(b, outcome, error)),
    }
}

/// Sends one pod's Binding and finds out how it went (see the module docs).
pub(crate) async fn bind(client: &Client, b: &PodBind) -> BindOutcome {
    let api: Api<Pod> = Api::namespaced(client.clone(), &b.namespace);
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(b.pod.clone()),
            namespace: Some(b.namespace.clone()),
            uid: (!b.uid.is_empty()).then(|| b.uid.clone()),
            annotations: Some(b.annotations.clone()),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(b.node.clone()),
            ..Default::default()
        },
    };
    let key = format!("{}/{}", b.namespace, b.pod);
    let mut attempt = 0;
    loop {
        let sent: Result<serde_json::Value, kube::Error> = api
            .create_subresource("binding", &b.pod, &PostParams::default(), &binding)
            .await;
        let err = match sent {
            Ok(_) => return BindOutcome::Bound,
            Err(kube::Error::Api(e)) if e.code == 404 => {
                return BindOutcome::Refused("the pod is gone".into());
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {
                // Already assigned (perhaps by our own lost reply), or the
                // pod was made again: the pod says which.
                return match read(client, &b.namespace, &b.pod, &b.uid).await {
                    Some(outcome) => settled(b, outcome, &e.message),
                    None => BindOutcome::Unknown(e.message),
                };
            }
            Err(kube::Error::Api(e)) if e.code < 500 && e.code != 429 => {
                tracing::warn!(pod = %key, node = b.node, "binding refused: {}", e.message);
                return BindOutcome::Refused(e.message);
            }
            Err(e) => e.to_string(),
        };
        tracing::warn!(pod = %key, attempt, "binding failed: {err}; reading the pod");
        tokio::time::sleep(FIRST_BACKOFF * (1 << attempt)).await;
        let seen = read(client, &b.namespace, &b.pod, &b.uid).await;
        match after_failed_send(b, seen, attempt, &err) {
            Next::SendAgain => attempt += 1,
            Next::Done(outcome) => return outcome,
        }
    }
}

/// What a read of the pod says of its Binding to `b.node`.
fn settled(b: &PodBind, outcome: ReadOutcome, error: &str) -> BindOutcome {
    match outcome {
        ReadOutcome::BoundTo(node) if node == b.node => BindOutcome::Bound,
        ReadOutcome::BoundTo(node) => BindOutcome::Refused(format!("the pod is bound to {node}")),
        ReadOutcome::Gone => BindOutcome::Refused("the pod is gone or was made again".into()),
        ReadOutcome::Unbound => BindOutcome::Refused(error.to_string()),
    }
}

/// Reads pod `namespace/name`: bound to a node, unbound, or gone (or made
/// again under another uid than `uid`); `None` if it cannot be read.
pub(crate) async fn read(
    client: &Client,
    namespace: &str,
    name: &str,
    uid: &str,
) -> Option<ReadOutcome> {
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    match api.get(name).await {
        Ok(pod) => {
            if !uid.is_empty() && pod.metadata.uid.as_deref() != Some(uid) {
                return Some(ReadOutcome::Gone);
            }
            let node = pod.spec.and_then(|s| s.node_name).filter(|n| !n.is_empty());
            Some(node.map_or(ReadOutcome::Unbound, ReadOutcome::BoundTo))
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Some(ReadOutcome::Gone),
        Err(e) => {
            tracing::debug!(pod = %format!("{namespace}/{name}"), "cannot read: {e}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order() -> PodBind {
        PodBind {
            namespace: "ns".into(),
            pod: "p".into(),
            uid: "u1".into(),
            node: "n1".into(),
            gpus: vec![0, 1],
            annotations: Default::default(),
        }
    }

    /// After a reply that may hide an applied Binding, the Binding is sent
    /// again only when a read shows the pod unbound and attempts are left;
    /// a pod that cannot be read is left unknown (the host reads it again
    /// and holds its GPUs), never sent to blindly.
    #[test]
    fn a_failed_binding_is_sent_again_only_after_a_read_shows_it_did_not_happen() {
        let b = order();
        let unknown = Next::Done(BindOutcome::Unknown("timeout".into()));
        for attempt in 0..ATTEMPTS {
            assert_eq!(after_failed_send(&b, None, attempt, "timeout"), unknown);
        }
        for attempt in 0..ATTEMPTS - 1 {
            let next = after_failed_send(&b, Some(ReadOutcome::Unbound), attempt, "timeout");
            assert_eq!(next, Next::SendAgain);
        }
        let last = after_failed_send(&b, Some(ReadOutcome::Unbound), ATTEMPTS - 1, "timeout");
        assert_eq!(last, unknown, "the last attempt may still be in flight");
        let here = Some(ReadOutcome::BoundTo("n1".into()));
        assert_eq!(
            after_failed_send(&b, here, 0, "timeout"),
            Next::Done(BindOutcome::Bound)
        );
        let there = Some(ReadOutcome::BoundTo("n2".into()));
        assert!(matches!(
            after_failed_send(&b, there, 0, "timeout"),
            Next::Done(BindOutcome::Refused(_))
        ));
        assert!(matches!(
            after_failed_send(&b, Some(ReadOutcome::Gone), 0, "timeout"),
            Next::Done(BindOutcome::Refused(_))
        ));
    }
}
