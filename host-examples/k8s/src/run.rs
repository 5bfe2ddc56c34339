//! The scheduler process: watch caches of nodes, pods, PodGroups and the
//! two ConfigMaps; a Lease election; and, while this replica leads, a
//! cycle of the [`Host`] after every change (batched) or every `resync_s`,
//! whose actions are carried out against the API server.
//!
//! A replica that stops leading drops its host; one that starts leading
//! builds a new one from the caches, exactly as a restarted scheduler
//! does: the cluster is the truth.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Binding, ConfigMap, Node, ObjectReference, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use tokio::sync::Notify;

use super::K8sError;
use super::config::Config;
use super::host::{Host, Inputs, VcTable};
use super::leader::{Elector, Role};
use super::metrics::{self, State};
use super::objects::{self, GroupInfo, NodeInfo, PodInfo};
use super::podgroup::PodGroup;
use super::policies::{self, Policies};
use super::report::{Action, EventOrder, PodBind, Target};

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A client from a kubeconfig file, or the in-cluster/default config.
pub async fn client(kubeconfig: Option<&Path>) -> Result<Client, K8sError> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| K8sError::Config {
                file: path.display().to_string(),
                message: e.to_string(),
            })?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| K8sError::Config {
                    file: path.display().to_string(),
                    message: e.to_string(),
                })?
        }
        None => kube::Config::infer().await.map_err(|e| K8sError::Config {
            file: "(in-cluster or default kubeconfig)".into(),
            message: e.to_string(),
        })?,
    };
    Client::try_from(config).map_err(|e| K8sError::api("building the client", e))
}

/// The watch caches.
struct Caches {
    nodes: Store<Node>,
    pods: Store<Pod>,
    groups: Store<PodGroup>,
    vcs: Store<ConfigMap>,
    policies: Store<ConfigMap>,
}

/// Starts a reflector for `api` that pokes `notify` on every change.
fn watch<K>(api: Api<K>, cfg: watcher::Config, notify: Arc<Notify>) -> Store<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, cfg)).default_backoff();
    tokio::spawn(drain(stream, notify, K::kind(&()).to_string()));
    reader
}

async fn drain<S, T, E>(stream: S, notify: Arc<Notify>, kind: String)
where
    S: Stream<Item = Result<T, E>>,
    E: std::fmt::Display,
{
    futures::pin_mut!(stream);
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(_) => notify.notify_one(),
            Err(e) => tracing::warn!(kind, "watch: {e}"),
        }
    }
}

fn caches(client: &Client, cfg: &Config, notify: &Arc<Notify>) -> Caches {
    let by_name = |name: &str| watcher::Config::default().fields(&format!("metadata.name={name}"));
    let ns = &cfg.namespace;
    Caches {
        nodes: watch(
            Api::all(client.clone()),
            watcher::Config::default(),
            Arc::clone(notify),
        ),
        pods: watch(
            Api::all(client.clone()),
            watcher::Config::default(),
            Arc::clone(notify),
        ),
        groups: watch(
            Api::all(client.clone()),
            watcher::Config::default(),
            Arc::clone(notify),
        ),
        vcs: watch(
            Api::namespaced(client.clone(), ns),
            by_name(&cfg.vcs_configmap),
            Arc::clone(notify),
        ),
        policies: watch(
            Api::namespaced(client.clone(), ns),
            by_name(&cfg.policies_configmap),
            Arc::clone(notify),
        ),
    }
}

/// The VC table from the VCs ConfigMap: each key a VC, each value its
/// quota in GPUs (`none` or empty: no quota). A value that is neither is
/// logged and taken as no quota.
pub fn vc_table(cm: Option<&ConfigMap>, source: &str) -> VcTable {
    let listed = cm.map(|cm| {
        cm.data
            .iter()
            .flatten()
            .map(|(vc, v)| {
                let v = v.trim();
                let quota = if v.is_empty() || v == "none" {
                    None
                } else {
                    let q = objects::parse_gpu_count(v);
                    if q.is_none() {
                        tracing::warn!(
                            vc,
                            value = v,
                            "{source}: quota is not a GPU count or none; no quota"
                        );
                    }
                    q
                };
                (vc.clone(), quota)
            })
            .collect::<BTreeMap<_, _>>()
    });
    VcTable {
        listed,
        source: source.to_string(),
    }
}

/// The scheduler's live pieces while this replica leads.
struct Leading {
    host: Host,
    policies: Policies,
}

fn new_leading(cfg: &Config) -> Result<Leading, K8sError> {
    let (set, strategy, policies) = policies::build(&cfg.preset)?;
    let mut host = Host::new(cfg.levels.clone(), set, strategy);
    host.set_view_window(cfg.view_window);
    Ok(Leading { host, policies })
}

/// Runs the scheduler until it fails to start; it never returns otherwise.
pub async fn run(cfg: Config, client: Client) -> Result<(), K8sError> {
    let notify = Arc::new(Notify::new());
    let caches = caches(&client, &cfg, &notify);
    let state = Arc::new(Mutex::new(State::default()));
    if !cfg.metrics_addr.is_empty() {
        let (addr, st) = (cfg.metrics_addr.clone(), Arc::clone(&state));
        tokio::spawn(async move {
            if let Err(e) = metrics::serve(&addr, st).await {
                tracing::error!("metrics endpoint: {e}");
            }
        });
    }
    let identity = cfg.identity();
    let valid_until: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    if cfg.leader_elect {
        let elector = Elector::new(
            Api::<Lease>::namespaced(client.clone(), &cfg.namespace),
            &cfg.lease_name,
            &identity,
            cfg.lease_duration_s,
            cfg.renew_s,
        );
        tokio::spawn(elect(
            elector,
            Arc::clone(&valid_until),
            Arc::clone(&notify),
        ));
    }
    caches
        .nodes
        .wait_until_ready()
        .await
        .map_err(|e| K8sError::Scheduler(e.to_string()))?;
    caches
        .pods
        .wait_until_ready()
        .await
        .map_err(|e| K8sError::Scheduler(e.to_string()))?;
    let _ = tokio::time::timeout(Duration::from_secs(5), caches.groups.wait_until_ready()).await;
    set(&state, |s| s.ready = true);
    tracing::info!(identity, "caches synced");
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "gangway-scheduler".into(),
            instance: Some(identity.clone()),
        },
    );
    let (reports, rx) = tokio::sync::mpsc::channel(100_000);
    tokio::spawn(reporter(client.clone(), recorder, rx));
    let mut leading: Option<Leading> = None;
    loop {
        let _ = tokio::time::timeout(Duration::from_secs(cfg.resync_s), notify.notified()).await;
        tokio::time::sleep(Duration::from_millis(cfg.cycle_ms)).await;
        let leads = !cfg.leader_elect
            || valid_until
                .lock()
                .ok()
                .and_then(|v| *v)
                .is_some_and(|t| Instant::now() < t);
        set(&state, |s| s.leader = leads);
        if !leads {
            if leading.take().is_some() {
                tracing::warn!("lost the lease; stopped scheduling");
            }
            continue;
        }
        if leading.is_none() {
            tracing::info!(identity, "leading: rebuilding the state from the cluster");
            leading = Some(new_leading(&cfg)?);
        }
        let Some(lead) = leading.as_mut() else {
            continue;
        };
        if let Err(e) = cycle(&cfg, &client, &caches, lead, &reports, &state).await {
            tracing::error!("cycle: {e}");
        }
    }
}

fn set(state: &Mutex<State>, f: impl FnOnce(&mut State)) {
    if let Ok(mut s) = state.lock() {
        f(&mut s);
    }
}

/// The election loop: a step every renew period (sooner after losing).
async fn elect(
    mut elector: Elector,
    valid_until: Arc<Mutex<Option<Instant>>>,
    notify: Arc<Notify>,
) {
    let mut was = false;
    loop {
        match elector.step().await {
            Ok(role) => {
                let leads = role == Role::Leader;
                if leads != was {
                    tracing::info!(identity = elector.identity(), ?role, "leadership changed");
                    notify.notify_one();
                }
                was = leads;
            }
            Err(e) => tracing::warn!("leader election: {e}"),
        }
        if let Ok(mut v) = valid_until.lock() {
            *v = elector.valid_until();
        }
        tokio::time::sleep(elector.period()).await;
    }
}

/// What the caches hold, as the host's inputs.
fn read_caches(cfg: &Config, caches: &Caches) -> (Vec<NodeInfo>, Vec<PodInfo>, Vec<GroupInfo>) {
    let nodes = caches
        .nodes
        .state()
        .iter()
        .map(|n| objects::node_info(n, &cfg.gpu_resource, &cfg.levels))
        .collect();
    let pods = caches
        .pods
        .state()
        .iter()
        .map(|p| objects::pod_info(p, &cfg.scheduler_name, &cfg.gpu_resource, &cfg.vc_label))
        .filter(|p| p.ours || (p.holds() && p.gpus.as_ref().is_ok_and(|g| *g > 0)))
        .collect();
    let groups = caches
        .groups
        .state()
        .iter()
        .map(|g| objects::group_info(g))
        .collect();
    (nodes, pods, groups)
}

/// One cycle: policies from their ConfigMap, the host's decisions, and
/// the API calls that carry them out.
async fn cycle(
    cfg: &Config,
    client: &Client,
    caches: &Caches,
    lead: &mut Leading,
    reports: &tokio::sync::mpsc::Sender<Action>,
    state: &Mutex<State>,
) -> Result<(), K8sError> {
    let source = format!("{}/{}", cfg.namespace, cfg.policies_configmap);
    let pcm = caches.policies.state().first().cloned();
    for r in lead.policies.sync(pcm.as_deref(), &source) {
        match r {
            Ok(m) => tracing::info!("{m}"),
            Err(e) => tracing::error!("policy swap from {source}: {e}"),
        }
    }
    let t = Instant::now();
    let (nodes, pods, groups) = read_caches(cfg, caches);
    let vsource = format!("{}/{}", cfg.namespace, cfg.vcs_configmap);
    let vcm = caches.vcs.state().first().cloned();
    let vcs = vc_table(vcm.as_deref(), &vsource);
    let inputs = Inputs {
        nodes: &nodes,
        pods: &pods,
        groups: &groups,
        vcs: &vcs,
        now_ms: unix_ms(),
    };
    let actions = lead.host.cycle(&inputs)?;
    let took = t.elapsed().as_secs_f64();
    execute(cfg, client, lead, reports, state, actions).await;
    set(state, |s| {
        s.cycles += 1;
        s.cycle_seconds += took;
        s.stats = lead.host.stats.clone();
    });
    Ok(())
}

/// Carries out a cycle's actions: every Binding at once (up to
/// `bind_concurrency` in flight), then evictions; status writes and Events
/// go to the reporter task, so a cycle never waits for them.
async fn execute(
    cfg: &Config,
    client: &Client,
    lead: &mut Leading,
    reports: &tokio::sync::mpsc::Sender<Action>,
    state: &Mutex<State>,
    actions: Vec<Action>,
) {
    let mut orders = Vec::new();
    let mut evictions = Vec::new();
    for a in actions {
        match a {
            Action::Bind(order) => orders.push(order),
            a @ Action::Evict { .. } => evictions.push(a),
            other => {
                if reports.try_send(other).is_err() {
                    set(state, |s| s.reports_dropped += 1);
                }
            }
        }
    }
    let flat: Vec<(usize, PodBind)> = orders
        .iter()
        .enumerate()
        .flat_map(|(i, o)| o.binds.iter().cloned().map(move |b| (i, b)))
        .collect();
    let done: Vec<(usize, (String, String), bool, u64)> = futures::stream::iter(flat)
        .map(|(i, b)| async move {
            let ok = bind_pod(client, &b).await;
            (i, (b.namespace, b.pod), ok, unix_ms())
        })
        .buffer_unordered(cfg.bind_concurrency)
        .collect()
        .await;
    type Outcome = (Vec<(String, String)>, Vec<(String, String)>, u64);
    let mut per: Vec<Outcome> = vec![(Vec::new(), Vec::new(), 0); orders.len()];
    for (i, pod, ok, at) in done {
        let slot = &mut per[i];
        slot.2 = slot.2.max(at);
        if ok {
            slot.0.push(pod);
        } else {
            slot.1.push(pod);
        }
    }
    for (order, (ok, failed, at)) in orders.iter().zip(per) {
        if failed.is_empty() {
            let secs = at.saturating_sub(order.last_pod_ms) as f64 / 1000.0;
            set(state, |s| s.observe_latency(secs));
        } else {
            set(state, |s| s.bind_errors += failed.len() as u64);
        }
        lead.host
            .on_bound(&order.gang, order.job, &ok, &failed, unix_ms());
    }
    futures::stream::iter(evictions)
        .for_each_concurrent(cfg.bind_concurrency, |a| other_action(client, None, a))
        .await;
}

/// The reporter task: status writes and Events, a few at a time, in the
/// order the cycles decided them.
async fn reporter(client: Client, recorder: Recorder, mut rx: tokio::sync::mpsc::Receiver<Action>) {
    let limit = Arc::new(tokio::sync::Semaphore::new(16));
    while let Some(a) = rx.recv().await {
        let Ok(permit) = Arc::clone(&limit).acquire_owned().await else {
            return;
        };
        let (client, recorder) = (client.clone(), recorder.clone());
        tokio::spawn(async move {
            other_action(&client, Some(&recorder), a).await;
            drop(permit);
        });
    }
}

/// One Binding, tried up to three times on errors that may pass.
async fn bind_pod(client: &Client, b: &super::report::PodBind) -> bool {
    let api: Api<Pod> = Api::namespaced(client.clone(), &b.namespace);
    let binding = Binding {
        metadata: kube::api::ObjectMeta {
            name: Some(b.pod.clone()),
            namespace: Some(b.namespace.clone()),
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
    for attempt in 0..3 {
        let r: Result<serde_json::Value, kube::Error> = api
            .create_subresource("binding", &b.pod, &PostParams::default(), &binding)
            .await;
        match r {
            Ok(_) => return true,
            Err(kube::Error::Api(e)) if e.code < 500 && e.code != 429 => {
                tracing::warn!(pod = %format!("{}/{}", b.namespace, b.pod), node = b.node, "binding refused: {}", e.message);
                return false;
            }
            Err(e) => {
                tracing::warn!(pod = %format!("{}/{}", b.namespace, b.pod), attempt, "binding failed: {e}");
                tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
            }
        }
    }
    false
}

/// An eviction, status write or Event.
async fn other_action(client: &Client, recorder: Option<&Recorder>, a: Action) {
    match a {
        Action::Evict { pods, grace0, gang } => {
            for (ns, name) in pods {
                let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
                let dp = DeleteParams {
                    grace_period_seconds: grace0.then_some(0),
                    ..DeleteParams::default()
                };
                match api.delete(&name, &dp).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => tracing::warn!(%gang, pod = name, "eviction failed: {e}"),
                }
            }
        }
        Action::Status {
            gang,
            phase,
            condition,
        } => {
            if let super::gangs::GangKey::Group { namespace, name } = &gang {
                let api: Api<PodGroup> = Api::namespaced(client.clone(), namespace);
                let now = k8s_openapi::jiff::Timestamp::now();
                let patch = serde_json::json!({"status": {"phase": phase, "conditions": [{
                    "type": "Scheduled", "status": condition.0, "reason": condition.1,
                    "message": condition.2, "lastTransitionTime": now.to_string()}]}});
                if let Err(e) = api
                    .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    tracing::warn!(%gang, "status: {e}");
                }
            }
        }
        Action::Event(ev) => {
            if let Some(r) = recorder {
                publish(r, ev).await;
            }
        }
        Action::Bind(_) => {}
    }
}

async fn publish(recorder: &Recorder, ev: EventOrder) {
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
        reason: ev.reason,
        note: Some(ev.note.chars().take(1000).collect()),
        action: "Scheduling".into(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &reference).await {
        tracing::warn!("event on {kind} {namespace}/{name}: {e}");
    }
}
