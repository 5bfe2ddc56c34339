//! Carrying out a cycle's actions against the API server: Bindings (each
//! resolved as [`binding`](super::binding) says), evictions, and the
//! reporter task that writes PodGroup status and Events without ever
//! making a cycle wait. Status writes and Events refused by an API server
//! that is down or overloaded are tried again with a back-off, and a
//! gang's status write is dropped only when a newer one for the same gang
//! supersedes it, so every waiting gang ends with its latest reason.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use tokio::sync::mpsc::{Receiver, Sender};

use super::binding;
use super::gangs::GangKey;
use super::host::{Host, ReadOrder, ReadOutcome};
use super::metrics::State;
use super::podgroup::PodGroup;
use super::report::{Action, BindOrder, BindOutcome, EventOrder, PodBind, Target};

/// The first wait before a refused status write or Event is tried again;
/// it doubles up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);
/// How long a status write or Event is tried before it is given up.
const RETRY_FOR: Duration = Duration::from_secs(600);

/// Unix milliseconds now.
pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn set(state: &Mutex<State>, f: impl FnOnce(&mut State)) {
    if let Ok(mut s) = state.lock() {
        f(&mut s);
    }
}

/// Carries out a cycle's actions: every Binding at once (up to
/// `concurrency` in flight), then evictions; status writes and Events go
/// to the reporter task, so a cycle never waits for them.
pub(crate) async fn execute(
    client: &Client,
    concurrency: usize,
    host: &mut Host,
    reports: &Sender<Action>,
    state: &Mutex<State>,
    actions: Vec<Action>,
) {
    let mut orders = Vec::new();
    let mut evictions = Vec::new();
    for a in actions {
        match a {
            Action::Bind(order) => orders.push(order),
            Action::Evict { pods, grace0, gang } => evictions.push((gang, pods, grace0)),
            other => {
                if reports.try_send(other).is_err() {
                    set(state, |s| s.reports_dropped += 1);
                }
            }
        }
    }
    bind_all(client, concurrency, host, state, &orders).await;
    let pods = evictions
        .into_iter()
        .flat_map(|(gang, pods, grace0)| pods.into_iter().map(move |p| (gang.clone(), p, grace0)));
    futures::stream::iter(pods)
        .for_each_concurrent(concurrency, |(gang, (ns, name), grace0)| async move {
            evict(client, &gang, &ns, &name, grace0).await;
        })
        .await;
}

/// Sends every Binding of `orders` and tells the host how each went.
async fn bind_all(
    client: &Client,
    concurrency: usize,
    host: &mut Host,
    state: &Mutex<State>,
    orders: &[BindOrder],
) {
    let flat: Vec<(usize, usize, &PodBind)> = orders
        .iter()
        .enumerate()
        .flat_map(|(i, o)| o.binds.iter().enumerate().map(move |(k, b)| (i, k, b)))
        .collect();
    let done: Vec<(usize, usize, BindOutcome, u64)> = futures::stream::iter(flat)
        .map(|(i, k, b)| async move { (i, k, binding::bind(client, b).await, unix_ms()) })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let mut per: Vec<(Vec<BindOutcome>, u64)> = orders
        .iter()
        .map(|o| {
            (
                vec![BindOutcome::Unknown("not sent".into()); o.binds.len()],
                0,
            )
        })
        .collect();
    for (i, k, outcome, at) in done {
        let slot = &mut per[i];
        slot.1 = slot.1.max(at);
        slot.0[k] = outcome;
    }
    for (order, (outcomes, at)) in orders.iter().zip(per) {
        if outcomes.iter().all(|o| *o == BindOutcome::Bound) {
            let secs = at.saturating_sub(order.last_pod_ms) as f64 / 1000.0;
            set(state, |s| s.observe_latency(secs));
        }
        host.on_bound(order, &outcomes, unix_ms());
    }
}

/// Deletes one pod of an evicted gang (`grace0`: at once). A failure is
/// logged; the host orders the eviction again while the pod is there.
async fn evict(client: &Client, gang: &GangKey, ns: &str, name: &str, grace0: bool) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let dp = DeleteParams {
        grace_period_seconds: grace0.then_some(0),
        ..DeleteParams::default()
    };
    match api.delete(name, &dp).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => tracing::warn!(%gang, pod = name, "eviction failed: {e}"),
    }
}

/// Reads the pods whose Binding's reply was lost, and tells the host what
/// each read said.
pub(crate) async fn read_binds(client: &Client, concurrency: usize, host: &mut Host) {
    let orders = host.binds_to_read(unix_ms());
    if orders.is_empty() {
        return;
    }
    let read: Vec<(ReadOrder, Option<ReadOutcome>)> = futures::stream::iter(orders)
        .map(|o| async move {
            let r = binding::read(client, &o.namespace, &o.pod, &o.uid).await;
            (o, r)
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    for (order, outcome) in read {
        if let Some(outcome) = outcome {
            let pod = format!("{}/{}", order.namespace, order.pod);
            tracing::info!(
                pod,
                ?outcome,
                "a lost Binding reply resolved by reading the pod"
            );
            host.on_read(&order, &outcome, unix_ms());
        }
    }
}

/// The reporter task: status writes and Events, a few at a time, each
/// tried until it is written, superseded or too old (see the module docs).
pub(crate) async fn reporter(client: Client, recorder: Recorder, mut rx: Receiver<Action>) {
    let limit = Arc::new(tokio::sync::Semaphore::new(16));
    let latest: Arc<Mutex<BTreeMap<GangKey, u64>>> = Arc::default();
    let mut seq = 0u64;
    while let Some(a) = rx.recv().await {
        seq += 1;
        if let Action::Status { gang, .. } = &a
            && let Ok(mut l) = latest.lock()
        {
            l.insert(gang.clone(), seq);
        }
        let Ok(permit) = Arc::clone(&limit).acquire_owned().await else {
            return;
        };
        let (client, recorder, latest) = (client.clone(), recorder.clone(), Arc::clone(&latest));
        tokio::spawn(async move {
            report(&client, &recorder, &latest, seq, a).await;
            drop(permit);
        });
    }
}

/// One status write or Event, tried again after a refusal that may pass.
async fn report(
    client: &Client,
    recorder: &Recorder,
    latest: &Mutex<BTreeMap<GangKey, u64>>,
    seq: u64,
    a: Action,
) {
    let start = tokio::time::Instant::now();
    let mut wait = RETRY_FIRST;
    loop {
        let current = |gang: &GangKey| latest.lock().ok().and_then(|l| l.get(gang).copied());
        let done = match &a {
            Action::Status { gang, .. } if current(gang) != Some(seq) => true,
            Action::Status {
                gang,
                phase,
                condition,
            } => write_status(client, gang, phase, condition).await,
            Action::Event(ev) => publish(recorder, ev).await,
            Action::Bind(_) | Action::Evict { .. } => true,
        };
        if done || start.elapsed() > RETRY_FOR {
            return;
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(RETRY_MAX);
    }
}

/// Writes a PodGroup's phase and `Scheduled` condition. Returns whether
/// it is done: written, or not worth trying again (no such PodGroup, or a
/// gang of one pod, which has Events only).
async fn write_status(
    client: &Client,
    gang: &GangKey,
    phase: &str,
    condition: &(String, String, String),
) -> bool {
    let GangKey::Group { namespace, name } = gang else {
        return true;
    };
    let api: Api<PodGroup> = Api::namespaced(client.clone(), namespace);
    let now = k8s_openapi::jiff::Timestamp::now();
    let patch = serde_json::json!({"status": {"phase": phase, "conditions": [{
        "type": "Scheduled", "status": condition.0, "reason": condition.1,
        "message": condition.2, "lastTransitionTime": now.to_string()}]}});
    match api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => true,
        Err(kube::Error::Api(e)) if e.code == 404 => true,
        Err(e) => {
            tracing::warn!(%gang, "status: {e}; tried again");
            false
        }
    }
}

/// Publishes an Event; returns whether it is done (published, or refused
/// for good).
async fn publish(recorder: &Recorder, ev: &EventOrder) -> bool {
    let (api_version, kind, namespace, name) = match &ev.target {
        Target::PodGroup { namespace, name } => {
            ("scheduling.x-k8s.io/v1alpha1", "PodGroup", namespace, name)
        }
        Target::Pod { namespace, name } => ("v1", "Pod", namespace, name),
    };
    let reference = ObjectReference {
        api_version: Some(api_version.into()),
        kind: Some(kind.into()),
        namespace: Some(namespace.clone()),
        name: Some(name.clone()),
        ..Default::default()
    };
    let event = Event {
        type_: if ev.warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: ev.reason.clone(),
        note: Some(ev.note.chars().take(1000).collect()),
        action: ev.action.clone(),
        secondary: None,
    };
    match recorder.publish(&event, &reference).await {
        Ok(()) => true,
        Err(kube::Error::Api(e)) if e.code < 500 && e.code != 429 => {
            tracing::warn!("event on {kind} {namespace}/{name}: {}", e.message);
            true
        }
        Err(e) => {
            tracing::warn!("event on {kind} {namespace}/{name}: {e}; tried again");
            false
        }
    }
}
