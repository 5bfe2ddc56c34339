//! The test cluster and scheduler processes: a real control plane
//! (etcd, kube-apiserver, KWOK) started by `testenv/cluster.sh` from the
//! binaries in `GANGWAY_K8S_BIN`, the crate's manifests applied, fake GPU
//! nodes in racks, and `gangway-k8s run` as a child process authenticated
//! as its service account (the RBAC of `manifests/rbac.yaml`, nothing more).
//! Shared by the tests and the side-by-side example (each uses part of it).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::{Client, discovery};
use serde_json::json;

/// The crate's folder.
pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The control-plane binaries, or `None` (after printing SKIPPED) when
/// they are missing and the test may be skipped. With
/// `GANGWAY_REQUIRE_K8S` set (CI) a missing binary is a failure.
pub fn bin_dir(test: &str) -> Option<PathBuf> {
    let why = match std::env::var_os("GANGWAY_K8S_BIN") {
        None => {
            "GANGWAY_K8S_BIN is not set (host-examples/k8s/testenv/build.sh prints it)".to_string()
        }
        Some(dir) => {
            let dir = PathBuf::from(dir);
            let missing: Vec<&str> = ["etcd", "kube-apiserver", "kwok", "kube-scheduler"]
                .into_iter()
                .filter(|b| !dir.join(b).is_file())
                .collect();
            if missing.is_empty() {
                return Some(dir);
            }
            format!("{} missing from {}", missing.join(", "), dir.display())
        }
    };
    assert!(
        std::env::var_os("GANGWAY_REQUIRE_K8S").is_none(),
        "GANGWAY_REQUIRE_K8S is set but the Kubernetes test {test} cannot run: {why}"
    );
    println!("SKIPPED: {test}: {why}");
    None
}

/// One test's control plane, stopped when dropped.
pub struct Cluster {
    /// Its folder (logs under log/).
    pub dir: PathBuf,
    /// The admin client.
    pub client: Client,
    /// `cluster.sh`'s env file.
    pub env: BTreeMap<String, String>,
    bin: PathBuf,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

fn cluster_sh() -> PathBuf {
    crate_dir().join("testenv/cluster.sh")
}

/// A client from a kubeconfig file.
pub async fn client_from(path: &Path) -> Client {
    gangway_k8s::run::client(Some(path)).await.unwrap()
}

impl Cluster {
    /// Starts a control plane, applies the CRD and RBAC, creates the
    /// namespaces `team-a`, `team-b`, `team-c`.
    pub async fn start(bin: &Path, test: &str) -> Cluster {
        let c = Cluster::bare(bin, test).await;
        c.apply(&crate_dir().join("manifests/podgroup-crd.yaml"))
            .await;
        c.apply(&crate_dir().join("manifests/rbac.yaml")).await;
        for ns in ["team-a", "team-b", "team-c"] {
            c.namespace(ns).await;
        }
        let pgs: Api<gangway_k8s::podgroup::PodGroup> = Api::all(c.client.clone());
        wait_until(
            "the PodGroup CRD to be served",
            Duration::from_secs(30),
            || async { pgs.list(&ListParams::default()).await.is_ok() },
        )
        .await;
        c
    }

    /// Starts a control plane and nothing more: what a fresh cluster has
    /// (the API server's own namespaces and bootstrap RBAC, KWOK as the
    /// kubelets), no CRD, no RBAC of ours, no namespace of the tests.
    pub async fn bare(bin: &Path, test: &str) -> Cluster {
        let dir = std::env::temp_dir().join(format!(
            "gangway-k8s-{test}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let out = Command::new("bash")
            .arg(cluster_sh())
            .args(["start"])
            .arg(&dir)
            .env("GANGWAY_K8S_BIN", bin)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cluster.sh start failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let env: BTreeMap<String, String> = std::fs::read_to_string(dir.join("env"))
            .unwrap()
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let client = client_from(&dir.join("admin.kubeconfig")).await;
        Cluster {
            dir,
            client,
            env,
            bin: bin.to_path_buf(),
        }
    }

    /// Creates a namespace.
    pub async fn namespace(&self, name: &str) {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        let _ = api.create(&PostParams::default(), &ns).await;
    }

    /// Waits as `kubectl wait --for condition=established crd/NAME` does,
    /// then until the API server's discovery serves `kind` of its group.
    pub async fn wait_established(&self, crd: &str, kind: &GroupVersionKind) {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let crds: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        wait_until(
            "the CRD to be established",
            Duration::from_secs(30),
            || async {
                crds.get(crd).await.ok().is_some_and(|c| {
                    c.status
                        .and_then(|s| s.conditions)
                        .into_iter()
                        .flatten()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                })
            },
        )
        .await;
        wait_until(
            "the CRD's kind to be discovered",
            Duration::from_secs(30),
            || async { discovery::pinned_kind(&self.client, kind).await.is_ok() },
        )
        .await;
    }

    /// Creates every object of a YAML manifest (multi-document).
    pub async fn apply(&self, path: &Path) {
        let text = std::fs::read_to_string(path).unwrap();
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).unwrap();
        for doc in docs.into_iter().filter(|d| d.is_object()) {
            let (group, version) = match doc["apiVersion"].as_str().unwrap().split_once('/') {
                Some((g, v)) => (g.to_string(), v.to_string()),
                None => (
                    String::new(),
                    doc["apiVersion"].as_str().unwrap().to_string(),
                ),
            };
            let gvk = GroupVersionKind::gvk(&group, &version, doc["kind"].as_str().unwrap());
            let (ar, caps) = discovery::pinned_kind(&self.client, &gvk).await.unwrap();
            let obj: DynamicObject = serde_json::from_value(doc.clone()).unwrap();
            let api: Api<DynamicObject> = match (&caps.scope, doc["metadata"]["namespace"].as_str())
            {
                (discovery::Scope::Namespaced, Some(ns)) => {
                    Api::namespaced_with(self.client.clone(), ns, &ar)
                }
                _ => Api::all_with(self.client.clone(), &ar),
            };
            match api.create(&PostParams::default(), &obj).await {
                Ok(_) => {}
                // As `kubectl apply` does to what exists: leave it.
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => panic!("{}: {e}", path.display()),
            }
        }
    }

    /// Adds `racks` x `per_rack` nodes of `gpus` GPUs (`r<R>-n<N>`, label
    /// `gangway.test/rack=r<R>`) and waits until KWOK made them Ready.
    pub async fn add_nodes(&self, racks: u32, per_rack: u32, gpus: u32) {
        let mut names = Vec::new();
        for r in 0..racks {
            for n in 0..per_rack {
                let name = format!("r{r}-n{n}");
                self.add_node(&name, &format!("r{r}"), gpus).await;
                names.push(name);
            }
        }
        self.wait_ready(&names).await;
    }

    /// Waits until KWOK made the nodes `names` Ready.
    pub async fn wait_ready(&self, names: &[String]) {
        let api: Api<Node> = Api::all(self.client.clone());
        wait_until("the nodes to be Ready", Duration::from_secs(60), || async {
            let nodes = api.list(&ListParams::default()).await.unwrap();
            names.iter().all(|n| {
                nodes.items.iter().any(|x| {
                    x.metadata.name.as_deref() == Some(n.as_str())
                        && x.status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|c| {
                                c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                            })
                })
            })
        })
        .await;
    }

    /// Adds one fake GPU node.
    pub async fn add_node(&self, name: &str, rack: &str, gpus: u32) {
        self.add_node_labeled(name, rack, gpus, &[]).await;
    }

    /// Adds one fake GPU node with more labels (a GPU type's, say).
    pub async fn add_node_labeled(
        &self,
        name: &str,
        rack: &str,
        gpus: u32,
        labels: &[(&str, &str)],
    ) {
        let api: Api<Node> = Api::all(self.client.clone());
        let mut node = fake_node(name, rack, gpus);
        for (k, v) in labels {
            node["metadata"]["labels"][*k] = json!(v);
        }
        let node: Node = serde_json::from_value(node).unwrap();
        api.create(&PostParams::default(), &node).await.unwrap();
    }

    /// SIGKILLs a control-plane process (`etcd`, `kube-apiserver`,
    /// `kwok`), as a crash would.
    pub fn kill(&self, name: &str) {
        self.cluster_sh(&["kill", name]);
    }

    /// Starts a killed control-plane process again, on the same ports and
    /// data, and waits until it listens.
    pub fn restart(&self, name: &str) {
        self.cluster_sh(&["restart", name]);
    }

    /// Sends a signal (`STOP`, `CONT`) to a control-plane process: a
    /// stopped API server accepts connections and never answers.
    pub fn signal(&self, name: &str, signal: &str) {
        self.cluster_sh(&["signal", name, signal]);
    }

    fn cluster_sh(&self, args: &[&str]) {
        let out = Command::new("bash")
            .arg(cluster_sh())
            .arg(args[0])
            .arg(&self.dir)
            .args(&args[1..])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cluster.sh {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Makes a node NotReady (KWOK's stage for the label) or Ready again.
    pub async fn set_not_ready(&self, node: &str, not_ready: bool) {
        let api: Api<Node> = Api::all(self.client.clone());
        let value = if not_ready {
            json!("true")
        } else {
            json!(null)
        };
        let patch = json!({"metadata": {"labels": {"gangway.test/not-ready": value}}});
        api.patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// Sets the GPUs a node reports (capacity and allocatable), as a
    /// device plugin does when it registers (or restarts: 0).
    pub async fn set_node_gpus(&self, node: &str, gpus: u32) {
        let api: Api<Node> = Api::all(self.client.clone());
        let n = gpus.to_string();
        let patch = json!({"status": {"capacity": {"nvidia.com/gpu": n}, "allocatable": {"nvidia.com/gpu": n}}});
        api.patch_status(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    /// Whether a node's Ready condition is True.
    pub async fn node_ready(&self, node: &str) -> bool {
        let api: Api<Node> = Api::all(self.client.clone());
        api.get(node).await.ok().is_some_and(|n| {
            n.status
                .and_then(|s| s.conditions)
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
    }

    /// Writes a scheduler configuration and returns its path.
    pub fn config(&self, name: &str, extra: &str) -> PathBuf {
        let path = self.dir.join(format!("{name}.toml"));
        let text = format!(
            "levels = [\"gangway.test/rack\"]\ncycle_ms = 10\nresync_s = 1\nlease_duration_s = 4\nrenew_s = 1\n{extra}"
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Starts `gangway-k8s run` as the scheduler's service account.
    pub fn scheduler(&self, identity: &str, config: &Path) -> Sched {
        self.scheduler_from(&gangway_bin(), identity, config)
    }

    /// Starts `binary run` (a gangway-k8s binary) as the scheduler's
    /// service account.
    pub fn scheduler_from(&self, binary: &Path, identity: &str, config: &Path) -> Sched {
        let log = self.dir.join(format!("log/gangway-{identity}.log"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let port = free_port();
        let child = Command::new(binary)
            .arg("run")
            .arg("--kubeconfig")
            .arg(self.dir.join("scheduler.kubeconfig"))
            .arg("--config")
            .arg(config)
            .args([
                "--identity",
                identity,
                "--metrics-addr",
                &format!("127.0.0.1:{port}"),
                "-v",
            ])
            .stdout(Stdio::from(file.try_clone().unwrap()))
            .stderr(Stdio::from(file))
            .spawn()
            .unwrap();
        Sched {
            child: Some(child),
            log,
            metrics: format!("127.0.0.1:{port}"),
        }
    }

    /// Starts kube-scheduler (default profile) as system:kube-scheduler.
    pub fn kube_scheduler(&self) -> KubeScheduler {
        self.kube_scheduler_with(None)
    }

    /// kube-scheduler, its client limited to `qps` (default: its own, 50).
    pub fn kube_scheduler_with(&self, qps: Option<u32>) -> KubeScheduler {
        let log = std::fs::File::create(self.dir.join("log/kube-scheduler.log")).unwrap();
        let mut cmd = Command::new(self.bin.join("kube-scheduler"));
        if let Some(q) = qps {
            cmd.arg(format!("--kube-api-qps={q}"))
                .arg(format!("--kube-api-burst={q}"));
        }
        let kubeconfig = self.dir.join("kube-scheduler.kubeconfig");
        let child = cmd
            .arg(format!(
                "--kubeconfig={}",
                self.dir.join("kube-scheduler.kubeconfig").display()
            ))
            .arg(format!(
                "--authentication-kubeconfig={}",
                self.dir.join("kube-scheduler.kubeconfig").display()
            ))
            .arg(format!(
                "--authorization-kubeconfig={}",
                self.dir.join("kube-scheduler.kubeconfig").display()
            ))
            .args([
                "--bind-address=127.0.0.1",
                "--secure-port=0",
                "--leader-elect=false",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap();
        let _ = kubeconfig;
        KubeScheduler(child)
    }

    /// Waits until `n` pods of namespace `ns` are bound.
    pub async fn wait_bound(&self, ns: &str, n: usize, secs: u64) {
        let what = format!("{n} pods of {ns} bound");
        wait_until(&what, Duration::from_secs(secs), || async {
            let pods = self.pods(ns).await;
            pods.iter()
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
                .count()
                == n
        })
        .await;
    }

    /// Every pod of a namespace.
    pub async fn pods(&self, ns: &str) -> Vec<Pod> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        api.list(&ListParams::default()).await.unwrap().items
    }
}

/// Whether to leave failed tests' processes running (`GANGWAY_K8S_KEEP`).
fn keep() -> bool {
    std::thread::panicking() && std::env::var_os("GANGWAY_K8S_KEEP").is_some()
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if keep() {
            eprintln!(
                "GANGWAY_K8S_KEEP: the cluster in {} is left running",
                self.dir.display()
            );
            return;
        }
        let _ = Command::new("bash")
            .arg(cluster_sh())
            .arg("stop")
            .arg(&self.dir)
            .output();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!(
                "test failed; the cluster's logs are in {}/log",
                self.dir.display()
            );
        }
    }
}

/// A kube-scheduler process, killed when dropped.
pub struct KubeScheduler(pub Child);

impl KubeScheduler {
    /// Its process id.
    pub fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for KubeScheduler {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A fake node's object: GPUs allocatable, a rack label.
pub fn fake_node(name: &str, rack: &str, gpus: u32) -> serde_json::Value {
    let res =
        json!({"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": gpus.to_string()});
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"gangway.test/rack": rack, "type": "kwok"}},
        "status": {"allocatable": res, "capacity": res}
    })
}

/// The `gangway-k8s` binary: Cargo's for tests, else the one beside the
/// running example (`target/<profile>/gangway-k8s`).
pub fn gangway_bin() -> PathBuf {
    if let Some(p) = option_env!("CARGO_BIN_EXE_gangway-k8s") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .and_then(Path::parent)
        .unwrap()
        .join("gangway-k8s")
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A scheduler process, killed (SIGKILL) when dropped.
pub struct Sched {
    child: Option<Child>,
    /// Its log file.
    pub log: PathBuf,
    /// Its metrics address.
    pub metrics: String,
}

impl Sched {
    /// Kills it at once, as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Its log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A GET on its metrics server: the body.
    pub fn get(&self, path: &str) -> String {
        use std::io::{Read, Write};
        let Ok(mut s) = std::net::TcpStream::connect(&self.metrics) else {
            return String::new();
        };
        let _ = write!(s, "GET {path} HTTP/1.1\r\nhost: x\r\n\r\n");
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    /// The value of an unlabelled metric on `/metrics` (`None`: not
    /// served, or not a number).
    pub fn metric(&self, name: &str) -> Option<f64> {
        let text = self.get("/metrics");
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    }

    /// Whether it still runs.
    pub fn alive(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }
}

impl Drop for Sched {
    fn drop(&mut self) {
        if keep() {
            return;
        }
        self.kill();
    }
}

/// Polls `check` every 100 ms until it holds, failing after `timeout`.
pub async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A pod spec asking for `gpus` GPUs the way the README says: the
/// resource, and the indices through the downward API.
pub fn gpu_pod(name: &str, gpus: u32, group: Option<&str>, run: Option<&str>) -> serde_json::Value {
    let mut labels = serde_json::Map::new();
    if let Some(g) = group {
        labels.insert("scheduling.x-k8s.io/pod-group".into(), json!(g));
    }
    let mut annotations = serde_json::Map::new();
    if let Some(d) = run {
        annotations.insert("gangway.test/duration".into(), json!(d));
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {
            "schedulerName": "gangway",
            "containers": [{
                "name": "worker", "image": "training",
                "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}},
                "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"fieldRef":
                    {"fieldPath": "metadata.annotations['gangway.io/gpu-indices']"}}}]
            }]
        }
    })
}

/// Creates a pod from its JSON in `ns`.
pub async fn create_pod(client: &Client, ns: &str, pod: serde_json::Value) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod: Pod = serde_json::from_value(pod).unwrap();
    api.create(&PostParams::default(), &pod).await.unwrap();
}

/// Creates a PodGroup (`min_member` None: the field left out, i.e. 0).
pub async fn create_group(client: &Client, ns: &str, name: &str, min_member: Option<i64>) {
    let api: Api<gangway_k8s::podgroup::PodGroup> = Api::namespaced(client.clone(), ns);
    let mut spec = serde_json::Map::new();
    if let Some(m) = min_member {
        spec.insert("minMember".into(), json!(m));
    }
    let pg = serde_json::from_value(json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns}, "spec": spec
    }))
    .unwrap();
    api.create(&PostParams::default(), &pg).await.unwrap();
}

/// The `Scheduled` condition of a PodGroup: (status, reason, message).
pub async fn condition(client: &Client, ns: &str, name: &str) -> Option<(String, String, String)> {
    let api: Api<gangway_k8s::podgroup::PodGroup> = Api::namespaced(client.clone(), ns);
    let pg = api.get(name).await.ok()?;
    pg.status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == "Scheduled")
        .map(|c| (c.status, c.reason, c.message))
}

/// Events (events.k8s.io/v1) about an object: (reason, note).
pub async fn events(client: &Client, ns: &str, name: &str) -> Vec<(String, String)> {
    let api: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
    let list = api.list(&ListParams::default()).await.unwrap();
    list.items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}
