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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::Api;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use tokio::sync::Notify;

use super::K8sError;
use super::apply::{self, unix_ms};
use super::config::Config;
use super::fit;
use super::host::{Host, Inputs, VcTable};
use super::leader::{Elector, Role};
use super::metrics::{self, State};
use super::objects::{self, GroupInfo, NodeInfo, PodInfo};
use super::podgroup::PodGroup;
use super::policies::{self, Policies};
use super::report::Action;

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
    /// When a watch of nodes, pods or PodGroups last failed (Unix ms).
    last_error_ms: Arc<AtomicU64>,
}

/// How long after a watch failed nothing new is placed: the watch resumes
/// (or re-lists) and its cache catches up first.
const SETTLE_AFTER_WATCH_ERROR_MS: u64 = 2_000;

impl Caches {
    /// Whether the caches are current: no watch failed within
    /// [`SETTLE_AFTER_WATCH_ERROR_MS`].
    fn fresh(&self, now_ms: u64) -> bool {
        settled(self.last_error_ms.load(Ordering::Relaxed), now_ms)
    }
}

/// Whether [`SETTLE_AFTER_WATCH_ERROR_MS`] passed since a watch last
/// failed at `last_error_ms` (0: never).
fn settled(last_error_ms: u64, now_ms: u64) -> bool {
    now_ms.saturating_sub(last_error_ms) > SETTLE_AFTER_WATCH_ERROR_MS
}

/// Starts a reflector for `api` that pokes `notify` on every change and
/// notes in `errors` when it fails (`None`: its failures are only logged).
fn watch<K>(
    api: Api<K>,
    cfg: watcher::Config,
    notify: Arc<Notify>,
    errors: Option<Arc<AtomicU64>>,
) -> Store<K>
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
    tokio::spawn(drain(stream, notify, errors, K::kind(&()).to_string()));
    reader
}

async fn drain<S, T, E>(
    stream: S,
    notify: Arc<Notify>,
    errors: Option<Arc<AtomicU64>>,
    kind: String,
) where
    S: Stream<Item = Result<T, E>>,
    E: std::fmt::Display,
{
    futures::pin_mut!(stream);
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(_) => notify.notify_one(),
            Err(e) => {
                if let Some(at) = &errors {
                    at.store(unix_ms(), Ordering::Relaxed);
                }
                tracing::warn!(kind, "watch: {e}");
            }
        }
    }
}

fn caches(client: &Client, cfg: &Config, notify: &Arc<Notify>) -> Caches {
    let by_name = |name: &str| watcher::Config::default().fields(&format!("metadata.name={name}"));
    let ns = &cfg.namespace;
    let errors = Arc::new(AtomicU64::new(0));
    let all = watcher::Config::default;
    Caches {
        nodes: watch(
            Api::all(client.clone()),
            all(),
            Arc::clone(notify),
            Some(Arc::clone(&errors)),
        ),
        pods: watch(
            Api::all(client.clone()),
            all(),
            Arc::clone(notify),
            Some(Arc::clone(&errors)),
        ),
        groups: watch(
            Api::all(client.clone()),
            all(),
            Arc::clone(notify),
            Some(Arc::clone(&errors)),
        ),
        vcs: watch(
            Api::namespaced(client.clone(), ns),
            by_name(&cfg.vcs_configmap),
            Arc::clone(notify),
            None,
        ),
        policies: watch(
            Api::namespaced(client.clone(), ns),
            by_name(&cfg.policies_configmap),
            Arc::clone(notify),
            None,
        ),
        last_error_ms: errors,
    }
}

/// The VC table from the VCs ConfigMap (see [`crate::vcs`]): each key a
/// VC, each value its quota. A value not taken is a problem the host logs,
/// and no quota.
pub fn vc_table(cm: Option<&ConfigMap>, source: &str) -> VcTable {
    crate::vcs::table(cm.map(|cm| cm.data.as_ref().unwrap_or(&EMPTY)), source)
}

/// No data.
static EMPTY: BTreeMap<String, String> = BTreeMap::new();

/// The scheduler's live pieces while this replica leads.
struct Leading {
    host: Host,
    policies: Policies,
}

fn new_leading(cfg: &Config) -> Result<Leading, K8sError> {
    let (set, strategy, policies) = policies::build(&cfg.preset)?;
    let mut host = Host::new(cfg.levels.clone(), set, strategy);
    host.set_view_window(cfg.view_window);
    host.set_gpu_resource(&cfg.gpu_resource);
    host.set_gpu_type_label(&cfg.gpu_type_label);
    host.set_grace(cfg.grace());
    host.set_min_run_s(cfg.min_run_s);
    Ok(Leading { host, policies })
}

/// Runs the scheduler until it fails to start; it never returns otherwise.
pub async fn run(cfg: Config, client: Client) -> Result<(), K8sError> {
    let notify = Arc::new(Notify::new());
    let caches = caches(&client, &cfg, &notify);
    let state = Arc::new(Mutex::new(State {
        stuck_after: cfg.stuck_after(),
        ..State::default()
    }));
    serve_metrics(&cfg, &state);
    let identity = cfg.identity();
    let valid_until = start_election(&cfg, &client, &identity, &notify);
    wait_for_caches(&caches).await?;
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
    tokio::spawn(apply::reporter(client.clone(), recorder, rx));
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
        set(&state, |s| {
            s.leader = leads;
            s.heartbeat = Some(Instant::now());
        });
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

/// Serves `/metrics`, `/healthz` and `/readyz` (unless `metrics_addr` is
/// empty).
fn serve_metrics(cfg: &Config, state: &Arc<Mutex<State>>) {
    if cfg.metrics_addr.is_empty() {
        return;
    }
    let (addr, st) = (cfg.metrics_addr.clone(), Arc::clone(state));
    tokio::spawn(async move {
        if let Err(e) = metrics::serve(&addr, st).await {
            tracing::error!("metrics endpoint: {e}");
        }
    });
}

/// Starts the Lease election (if configured); the returned time is when
/// this replica's leadership lapses (`None`: it does not lead).
fn start_election(
    cfg: &Config,
    client: &Client,
    identity: &str,
    notify: &Arc<Notify>,
) -> Arc<Mutex<Option<Instant>>> {
    let valid_until: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    if cfg.leader_elect {
        let elector = Elector::new(
            Api::<Lease>::namespaced(client.clone(), &cfg.namespace),
            &cfg.lease_name,
            identity,
            cfg.lease_duration_s,
            cfg.renew_s,
        );
        tokio::spawn(elect(elector, Arc::clone(&valid_until), Arc::clone(notify)));
    }
    valid_until
}

/// Waits until the nodes and pods are listed (PodGroups for at most 5 s:
/// the CRD may not be installed yet).
async fn wait_for_caches(caches: &Caches) -> Result<(), K8sError> {
    let failed =
        |e: kube::runtime::reflector::store::WriterDropped| K8sError::Scheduler(e.to_string());
    caches.nodes.wait_until_ready().await.map_err(failed)?;
    caches.pods.wait_until_ready().await.map_err(failed)?;
    let _ = tokio::time::timeout(Duration::from_secs(5), caches.groups.wait_until_ready()).await;
    Ok(())
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
struct Read {
    nodes: Vec<NodeInfo>,
    pods: Vec<PodInfo>,
    groups: Vec<GroupInfo>,
    usage: BTreeMap<String, fit::Resources>,
}

/// What every pod that has not ended requests of its node, GPUs left out.
fn usage(cfg: &Config, pods: &[Arc<Pod>]) -> BTreeMap<String, fit::Resources> {
    let mut out: BTreeMap<String, fit::Resources> = BTreeMap::new();
    for p in pods {
        let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
            continue;
        };
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            continue;
        }
        let u = out.entry(node.to_string()).or_default();
        for (r, v) in fit::pod_requests(p, &cfg.gpu_resource) {
            *u.entry(r).or_default() += v;
        }
        *u.entry("pods".into()).or_default() += 1_000;
    }
    out
}

fn read_caches(cfg: &Config, caches: &Caches) -> Read {
    let types = objects::GpuTypeLabels {
        type_label: cfg.gpu_type_label.clone(),
        memory_label: cfg.gpu_memory_label.clone(),
    };
    let nodes = caches
        .nodes
        .state()
        .iter()
        .map(|n| objects::node_info(n, &cfg.gpu_resource, &cfg.levels, &types))
        .collect();
    let all = caches.pods.state();
    let pods = all
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
    Read {
        nodes,
        pods,
        groups,
        usage: usage(cfg, &all),
    }
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
    let read = read_caches(cfg, caches);
    let vsource = format!("{}/{}", cfg.namespace, cfg.vcs_configmap);
    let vcm = caches.vcs.state().first().cloned();
    let vcs = vc_table(vcm.as_deref(), &vsource);
    let now_ms = unix_ms();
    let inputs = Inputs {
        nodes: &read.nodes,
        pods: &read.pods,
        groups: &read.groups,
        vcs: &vcs,
        now_ms,
        fresh: caches.fresh(now_ms),
        usage: &read.usage,
    };
    let actions = lead.host.cycle(&inputs)?;
    if let Some(gpus) = lead.host.map().map(|m| m.topology.total_gpus())
        && let Some(r) = lead
            .policies
            .size_locality(gpus, &cfg.locality_widen_after_s)
    {
        match r {
            Ok(m) => tracing::info!("{m}"),
            Err(e) => tracing::error!("locality ladder: {e}"),
        }
    }
    let took = t.elapsed().as_secs_f64();
    apply::execute(
        client,
        cfg.bind_concurrency,
        &mut lead.host,
        reports,
        state,
        actions,
    )
    .await;
    apply::read_binds(client, cfg.bind_concurrency, &mut lead.host).await;
    set(state, |s| {
        s.cycles += 1;
        s.cycle_seconds += took;
        s.last_cycle = Some(Instant::now());
        s.stats = lead.host.stats.clone();
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The caches are fresh unless a watch failed within the last
    /// [`SETTLE_AFTER_WATCH_ERROR_MS`].
    #[test]
    fn caches_are_fresh_two_seconds_after_a_watch_fails() {
        let now = 1_000_000;
        assert!(settled(0, now), "no watch ever failed");
        assert!(!settled(now, now));
        assert!(!settled(now - SETTLE_AFTER_WATCH_ERROR_MS, now));
        assert!(settled(now - SETTLE_AFTER_WATCH_ERROR_MS - 1, now));
        assert!(!settled(now + 5, now), "a clock step back is not fresh");
    }
}
