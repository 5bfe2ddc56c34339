//! Bindings as kube-scheduler sends them, and what to do when one's reply
//! does not say it worked. A Binding names the pod's uid, so a pod made
//! again under the same name is never bound by a plan meant for the old
//! one. A reply that is an error the API server may have applied anyway
//! (a timeout, a 5xx, a dropped connection) or an "already assigned"
//! conflict is resolved by reading the pod: bound where we asked is done,
//! bound elsewhere or gone is refused, still unbound is tried again after
//! a back-off. When the pod cannot be read either (the API server is
//! down), the outcome is unknown: the host keeps the GPUs held and reads
//! the pod again each cycle until it can tell.

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
    let mut last = String::new();
    for attempt in 0..ATTEMPTS {
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
        last = err;
        tokio::time::sleep(FIRST_BACKOFF * (1 << attempt)).await;
        match read(client, &b.namespace, &b.pod, &b.uid).await {
            Some(ReadOutcome::Unbound) | None => {}
            Some(outcome) => return settled(b, outcome, &last),
        }
    }
    BindOutcome::Unknown(last)
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
