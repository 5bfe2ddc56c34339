//! What a platform team installs and relies on: pods bound only where they
//! fit (and kube-scheduler, given the same objects, agrees), health that
//! fails when scheduling stops, status that survives an outage.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};

use crate::harness::{self, Cluster, create_group, create_pod, gpu_pod, wait_until};
use crate::{SERIAL, node_of};

/// A fake node with 8 GPUs, 8 CPUs, 64 GiB, labels and taints.
fn node(name: &str, labels: Value, taints: Value) -> Node {
    let res = json!({"cpu": "8", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": "8"});
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"taints": taints},
        "status": {"allocatable": res, "capacity": res}
    }))
    .unwrap()
}

/// A pod bound to `node` by nobody's scheduler, holding CPU or memory.
fn hog(name: &str, node: &str, requests: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x",
            "resources": {"requests": requests}}]}
    })
}

/// The probes: each fits exactly one node, or none. Name, what it adds to
/// the spec, and the node.
fn probes() -> Vec<(&'static str, Value, Option<&'static str>)> {
    let name_in = |op: &str, names: &[&str]| {
        json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": op, "values": names}]}]}}})
    };
    vec![
        (
            "plain",
            json!({"nodeSelector": {"pool": "train"}}),
            Some("n-ok"),
        ),
        (
            "tolerates",
            json!({"nodeSelector": {"pool": "train"},
                   "tolerations": [{"key": "dedicated", "operator": "Exists"}],
                   "affinity": name_in("NotIn", &["n-ok"])}),
            Some("n-taint"),
        ),
        (
            "affine",
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["other"]}]}]}}}}),
            Some("n-other"),
        ),
        (
            "untolerated",
            json!({"affinity": name_in("In", &["n-taint"])}),
            None,
        ),
        (
            "cpu-taken",
            json!({"affinity": name_in("In", &["n-cpu"])}),
            None,
        ),
        (
            "memory-taken",
            json!({"affinity": name_in("In", &["n-mem"])}),
            None,
        ),
        ("too-big", json!({"nodeSelector": {"pool": "train"}}), None),
    ]
}

/// A probe pod for `scheduler`: 2 CPUs (9 for `too-big`), 8 GiB, 1 GPU.
fn probe(name: &str, extra: &Value, scheduler: &str) -> Value {
    let cpu = if name == "too-big" { "9" } else { "2" };
    let mut pod = gpu_pod(name, 1, None, None);
    pod["spec"]["schedulerName"] = json!(scheduler);
    pod["spec"]["containers"][0]["resources"]["requests"] =
        json!({"cpu": cpu, "memory": "8Gi", "nvidia.com/gpu": "1"});
    for (k, v) in extra.as_object().unwrap() {
        pod["spec"][k] = v.clone();
    }
    pod
}

/// Where each probe of `ns` ended after they settle: node or unbound.
async fn placements(c: &Cluster, ns: &str) -> BTreeMap<String, Option<String>> {
    let expected = probes().iter().filter(|p| p.2.is_some()).count();
    c.wait_bound(ns, expected, 30).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    c.pods(ns)
        .await
        .iter()
        .map(|p| (p.metadata.name.clone().unwrap(), node_of(p)))
        .collect()
}

/// Pods that do not fit a node's CPU or memory (counting pods already on
/// it that no scheduler placed), do not tolerate its taint, or do not
/// match its node selector or required affinity are not bound there: each
/// probe lands where exactly one node fits it, or waits as Unschedulable;
/// and kube-scheduler, given the same objects, places every probe the
/// same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_fit_their_node_and_kube_scheduler_agrees() {
    let Some(bin) = harness::bin_dir("pods_fit_their_node_and_kube_scheduler_agrees") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let c = Cluster::start(&bin, "fit").await;
    let nodes: Api<Node> = Api::all(c.client.clone());
    let taint = json!([{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]);
    for (name, labels, taints) in [
        ("n-ok", json!({"pool": "train"}), json!([])),
        ("n-cpu", json!({"pool": "train"}), json!([])),
        ("n-mem", json!({"pool": "train"}), json!([])),
        ("n-taint", json!({"pool": "train"}), taint),
        ("n-other", json!({"pool": "other"}), json!([])),
    ] {
        nodes
            .create(&PostParams::default(), &node(name, labels, taints))
            .await
            .unwrap();
    }
    for n in ["n-ok", "n-cpu", "n-mem", "n-taint", "n-other"] {
        wait_until("the node Ready", Duration::from_secs(30), || async {
            c.node_ready(n).await
        })
        .await;
    }
    create_pod(
        &c.client,
        "team-c",
        hog("hog-cpu", "n-cpu", json!({"cpu": "7"})),
    )
    .await;
    create_pod(
        &c.client,
        "team-c",
        hog("hog-mem", "n-mem", json!({"memory": "60Gi"})),
    )
    .await;
    let expected: BTreeMap<String, Option<String>> = probes()
        .into_iter()
        .map(|(n, _, at)| (n.to_string(), at.map(String::from)))
        .collect();
    // Gangway.
    let mut s = c.scheduler("a", &c.config("gangway", ""));
    for (name, extra, _) in probes() {
        create_pod(&c.client, "team-a", probe(name, &extra, "gangway")).await;
    }
    let gangway = placements(&c, "team-a").await;
    let reasons = harness::events(&c.client, "team-a", "too-big").await;
    assert!(
        reasons
            .iter()
            .any(|(_, n)| n.contains("nodes are available") && n.contains("Insufficient cpu")),
        "{reasons:?}"
    );
    s.kill();
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "team-a");
    for (name, _, _) in probes() {
        pods.delete(name, &DeleteParams::default()).await.unwrap();
    }
    // kube-scheduler, on the same nodes and hogs.
    let _ks = c.kube_scheduler();
    for (name, extra, _) in probes() {
        create_pod(
            &c.client,
            "team-b",
            probe(name, &extra, "default-scheduler"),
        )
        .await;
    }
    let kube = placements(&c, "team-b").await;
    assert_eq!(gangway, expected, "Gangway");
    assert_eq!(kube, expected, "kube-scheduler");
}

/// `/healthz` answers 200 with the loop's age while cycles run, and 503
/// once a cycle hangs: a gang on a node NotReady past its grace is to be
/// evicted while the API server is stopped (SIGSTOP: it takes the
/// connection and never answers), so the cycle waits on the delete.
/// Once the API server runs again the loop turns and `/healthz` is 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_fails_when_cycles_stop() {
    let Some(bin) = harness::bin_dir("healthz_fails_when_cycles_stop") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let c = Cluster::start(&bin, "healthz").await;
    c.add_nodes(1, 1, 8).await;
    // One replica without an election: a stopped API server would take its
    // Lease away, and a replica that does not lead has no cycle to hang.
    let config = c.config(
        "gangway",
        "not_ready_grace_s = 4\nhealthz_stuck_s = 5\nleader_elect = false\n",
    );
    let s = c.scheduler("a", &config);
    create_group(&c.client, "team-a", "g", Some(1)).await;
    create_pod(&c.client, "team-a", gpu_pod("g-0", 1, Some("g"), None)).await;
    c.wait_bound("team-a", 1, 15).await;
    let ok = s.get("/healthz");
    assert!(
        ok.starts_with("HTTP/1.1 200") && ok.contains("loop turned"),
        "{ok}"
    );
    c.set_not_ready("r0-n0", true).await;
    wait_until("the node NotReady", Duration::from_secs(10), || async {
        !c.node_ready("r0-n0").await
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    c.signal("kube-apiserver", "STOP");
    let stuck = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let h = s.get("/healthz");
            if h.starts_with("HTTP/1.1 503") {
                return h;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
    .await;
    c.signal("kube-apiserver", "CONT");
    let stuck = stuck.expect("/healthz never failed while the cycle hung");
    assert!(stuck.contains("stuck"), "{stuck}");
    wait_until("healthz ok again", Duration::from_secs(60), || async {
        s.get("/healthz").starts_with("HTTP/1.1 200")
    })
    .await;
}

/// A status write refused while the API server is down is written once it
/// is back: a gang waiting for its pods passes its scheduleTimeoutSeconds
/// while kube-apiserver is killed, and its PodGroup shows ScheduleTimeout
/// after the restart (without the reporter's retries it never does: the
/// reason is written once, when it changes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_write_refused_in_an_outage_is_written_after_it() {
    let Some(bin) = harness::bin_dir("a_status_write_refused_in_an_outage_is_written_after_it")
    else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let c = Cluster::start(&bin, "status").await;
    c.add_nodes(1, 1, 8).await;
    // One replica without an election, so that the write after the outage
    // can only be the refused one tried again: with an election the
    // replica loses its Lease in the outage, and the one that leads after
    // it rebuilds its state and writes the reason anew.
    let config = c.config("gangway", "leader_elect = false\n");
    let s = c.scheduler("a", &config);
    let groups: Api<gangway_k8s::podgroup::PodGroup> = Api::namespaced(c.client.clone(), "team-a");
    let pg = serde_json::from_value(json!({
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "slow", "namespace": "team-a"},
        "spec": {"minMember": 2, "scheduleTimeoutSeconds": 6}
    }))
    .unwrap();
    groups.create(&PostParams::default(), &pg).await.unwrap();
    create_pod(
        &c.client,
        "team-a",
        gpu_pod("slow-0", 1, Some("slow"), None),
    )
    .await;
    wait_until("WaitingForPods", Duration::from_secs(10), || async {
        harness::condition(&c.client, "team-a", "slow")
            .await
            .is_some_and(|(_, r, _)| r == "WaitingForPods")
    })
    .await;
    c.kill("kube-apiserver");
    tokio::time::sleep(Duration::from_secs(8)).await;
    c.restart("kube-apiserver");
    wait_until(
        "ScheduleTimeout written",
        Duration::from_secs(60),
        || async {
            harness::condition(&c.client, "team-a", "slow")
                .await
                .is_some_and(|(_, r, _)| r == "ScheduleTimeout")
        },
    )
    .await;
    // The write was refused in the outage (and so tried again).
    let log = s.log_text();
    assert!(
        log.lines().any(|l| l.contains("podgroup team-a/slow")
            && l.contains("status:")
            && l.contains("tried again")),
        "no status write refused in the outage (see the scheduler log)"
    );
}

/// The image archive `image/build.sh` wrote (`GANGWAY_K8S_IMAGE`), or
/// `None` (after printing SKIPPED) when the test may be skipped.
fn image_archive(test: &str) -> Option<std::path::PathBuf> {
    if let Some(p) = std::env::var_os("GANGWAY_K8S_IMAGE") {
        return Some(p.into());
    }
    assert!(
        std::env::var_os("GANGWAY_REQUIRE_K8S").is_none(),
        "GANGWAY_REQUIRE_K8S is set but {test} has no image: GANGWAY_K8S_IMAGE is not set \
         (host-examples/k8s/image/build.sh prints it)"
    );
    println!(
        "SKIPPED: {test}: GANGWAY_K8S_IMAGE is not set (host-examples/k8s/image/build.sh prints it)"
    );
    None
}

/// Unpacks an OCI archive and its image's layers into `dir/rootfs`, as a
/// container runtime would; returns the image's config.
fn unpack_image(archive: &std::path::Path, dir: &std::path::Path) -> Value {
    let layout = dir.join("layout");
    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(&layout).unwrap();
    std::fs::create_dir_all(&rootfs).unwrap();
    let tar = |args: &[&std::ffi::OsStr]| {
        let ok = std::process::Command::new("tar")
            .args(args)
            .status()
            .unwrap();
        assert!(ok.success(), "tar {args:?}");
    };
    tar(&[
        "-xf".as_ref(),
        archive.as_os_str(),
        "-C".as_ref(),
        layout.as_os_str(),
    ]);
    let blob = |digest: &str| {
        layout
            .join("blobs/sha256")
            .join(digest.trim_start_matches("sha256:"))
    };
    let read = |p: std::path::PathBuf| -> Value {
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    };
    let index = read(layout.join("index.json"));
    let entry = &index["manifests"][0];
    assert_eq!(
        entry["annotations"]["io.containerd.image.name"]
            .as_str()
            .unwrap(),
        "docker.io/library/gangway-k8s:0.1.0"
    );
    let manifest = read(blob(entry["digest"].as_str().unwrap()));
    for layer in manifest["layers"].as_array().unwrap() {
        let path = blob(layer["digest"].as_str().unwrap());
        tar(&[
            "-xzf".as_ref(),
            path.as_os_str(),
            "-C".as_ref(),
            rootfs.as_os_str(),
        ]);
    }
    read(blob(manifest["config"]["digest"].as_str().unwrap()))
}

/// The image as an operator installs it: its archive unpacked as a runtime
/// would (FROM scratch: one static binary, run as user 65532), the
/// manifests applied on a fresh control plane (nothing of ours on it: no
/// CRD, RBAC or namespace) in the README's order and nothing else (the
/// CRD, RBAC with the `gangway-system` namespace, the quota ConfigMap, the
/// Deployment and its configuration; then the example, which brings its
/// own namespace), the image's binary run as the scheduler with that
/// configuration and service account, and the example gang binds whole.
/// An object a manifest needs and none of them makes (a namespace, the
/// CRD) fails the apply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_runs_and_the_manifests_bind_the_example_gang() {
    let test = "the_image_runs_and_the_manifests_bind_the_example_gang";
    let Some(bin) = harness::bin_dir(test) else {
        return;
    };
    let Some(archive) = image_archive(test) else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let c = Cluster::bare(&bin, "image").await;
    let binary = image_binary(&archive, &c.dir);
    // The README's install steps, in order.
    let manifests = harness::crate_dir().join("manifests");
    for m in [
        "podgroup-crd.yaml",
        "rbac.yaml",
        "quotas.yaml",
        "deployment.yaml",
    ] {
        c.apply(&manifests.join(m)).await;
    }
    let podgroup = kube::core::GroupVersionKind::gvk("scheduling.x-k8s.io", "v1alpha1", "PodGroup");
    c.wait_established("podgroups.scheduling.x-k8s.io", &podgroup)
        .await;
    c.add_nodes(1, 2, 8).await;
    // The Deployment's own configuration, from its ConfigMap.
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(c.client.clone(), "gangway-system");
    let toml = cms.get("gangway-config").await.unwrap().data.unwrap()["gangway.toml"].clone();
    let path = c.dir.join("deployed.toml");
    std::fs::write(&path, toml).unwrap();
    let _s = c.scheduler_from(&binary, "from-image", &path);
    c.apply(&manifests.join("example-gang.yaml")).await;
    c.wait_bound("team-a", 2, 30).await;
    let (status, reason, _) = harness::condition(&c.client, "team-a", "trainer")
        .await
        .unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Scheduled"));
}

/// The image's binary, unpacked from its archive into `dir`, after
/// checking the image's entrypoint, user and that the binary is static.
fn image_binary(archive: &std::path::Path, dir: &std::path::Path) -> std::path::PathBuf {
    let config = unpack_image(archive, dir);
    assert_eq!(config["config"]["Entrypoint"], json!(["/gangway-k8s"]));
    assert_eq!(config["config"]["User"], json!("65532:65532"));
    let binary = dir.join("rootfs/gangway-k8s");
    let out = std::process::Command::new("ldd")
        .arg(&binary)
        .output()
        .unwrap();
    let ldd =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        ldd.contains("not a dynamic executable") || ldd.contains("statically linked"),
        "{ldd}"
    );
    binary
}
