//! gangway-k8s against a real control plane: etcd, kube-apiserver and KWOK
//! built from Go modules by `testenv/build.sh` (`GANGWAY_K8S_BIN`), one
//! control plane per test, the scheduler as a child process with the RBAC
//! of `manifests/rbac.yaml`. Without the binaries each test prints
//! `SKIPPED` and passes, unless `GANGWAY_REQUIRE_K8S` is set (CI).
//!
//! The tests run one at a time (a lock): each starts three Go daemons and
//! the scheduler, and two cores do not hold two of those sets well.

#![allow(clippy::unwrap_used, missing_docs, unreachable_pub)]

mod checker;
mod day;
mod gpu_types;
mod harness;
mod install;
mod soak;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use harness::{Cluster, condition, create_group, create_pod, events, gpu_pod, wait_until};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tokio::sync::Mutex;

pub(crate) static SERIAL: Mutex<()> = Mutex::const_new(());

const REASONS: [&str; 7] = [
    "FairShare",
    "Fragmentation",
    "Reserved",
    "HeldByPolicy",
    "NoCapacity",
    "Queued",
    "RetryDelay",
];

/// Waits until pod `name` of `api` is bound.
async fn bound(api: &Api<Pod>, name: &str, secs: u64) {
    let what = format!("{name} bound");
    wait_until(&what, Duration::from_secs(secs), || async {
        api.get(name).await.ok().and_then(|p| node_of(&p)).is_some()
    })
    .await;
}

pub(crate) fn node_of(p: &Pod) -> Option<String> {
    p.spec.as_ref()?.node_name.clone()
}

pub(crate) fn phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

fn indices(p: &Pod) -> Option<String> {
    p.metadata
        .annotations
        .as_ref()?
        .get("gangway.io/gpu-indices")
        .cloned()
}

pub(crate) fn grid(racks: u32, per_rack: u32, gpus: u32) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for r in 0..racks {
        for n in 0..per_rack {
            out.insert(format!("r{r}-n{n}"), gpus);
        }
    }
    out
}

/// Gangs of 1 to 16 GPUs from three namespaces, more than fit at once:
/// every gang is bound whole (its pods within a second of each other),
/// never beyond a node's GPUs, no GPU index held twice on a node at any
/// time, and every pod runs to completion; the scheduler's metrics count
/// no refused Binding (no spurious "already assigned"), no lost reply and
/// one Binding per pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gangs_bound_whole_within_capacity() {
    let Some(bin) = harness::bin_dir("gangs_bound_whole_within_capacity") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let c = Cluster::start(&bin, "whole").await;
    c.add_nodes(4, 4, 8).await;
    let check = checker::Checker::start(&c.client, grid(4, 4, 8));
    let s = c.scheduler("a", &c.config("gangway", ""));
    // (GPUs per pod, pods): 1, 2, 4, 8 and 16 GPUs.
    let shapes = [
        (1, 1),
        (2, 1),
        (4, 1),
        (8, 1),
        (2, 2),
        (4, 2),
        (8, 2),
        (4, 4),
    ];
    let mut gangs: Vec<(String, String, usize)> = Vec::new();
    for (i, (per, n)) in shapes.iter().cycle().take(36).enumerate() {
        let ns = ["team-a", "team-b", "team-c"][i % 3];
        let name = format!("g{i}");
        let run = format!("{}s", 2 + i % 3);
        if *n > 1 {
            create_group(&c.client, ns, &name, Some(*n as i64)).await;
        }
        for k in 0..*n {
            let pod = format!("{name}-{k}");
            let group = (*n > 1).then_some(name.as_str());
            create_pod(&c.client, ns, gpu_pod(&pod, *per, group, Some(&run))).await;
        }
        gangs.push((ns.to_string(), name, *n));
    }
    let pods: usize = gangs.iter().map(|g| g.2).sum();
    wait_until("every pod to succeed", Duration::from_secs(120), || async {
        let mut all = Vec::new();
        for ns in ["team-a", "team-b", "team-c"] {
            all.extend(c.pods(ns).await);
        }
        all.len() == pods && all.iter().all(|p| phase(p) == "Succeeded")
    })
    .await;
    let f = check.findings.lock().unwrap();
    assert!(f.violations.is_empty(), "{:?}", f.violations);
    for (ns, name, n) in &gangs {
        let times: Vec<Instant> = (0..*n)
            .map(|k| f.bound[&format!("{ns}/{name}-{k}")].1)
            .collect();
        let spread = times
            .iter()
            .max()
            .unwrap()
            .duration_since(*times.iter().min().unwrap());
        assert!(
            spread < Duration::from_secs(1),
            "{ns}/{name} bound over {spread:?}"
        );
    }
    assert!(
        f.peak > 4,
        "the cluster was never busy: {} pods at once",
        f.peak
    );
    // Without faults no Binding is refused ("already assigned" included),
    // none has its reply lost, and each pod is bound by one Binding.
    for (metric, want) in [
        ("gangway_bind_errors_total", 0.0),
        ("gangway_binds_unknown_total", 0.0),
        ("gangway_gangs_interrupted_total", 0.0),
        ("gangway_pods_bound_total", pods as f64),
    ] {
        assert_eq!(s.metric(metric), Some(want), "{metric}");
    }
    println!(
        "{pods} pods of {} gangs bound whole; at most {} pods held GPUs at once",
        gangs.len(),
        f.peak
    );
}

/// A gang that cannot fit stays entirely unbound, its reason in the
/// PodGroup's Scheduled condition and in a FailedScheduling Event; it is
/// bound whole once the GPUs free up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_that_cannot_fit_waits_with_its_reason() {
    let Some(bin) = harness::bin_dir("a_gang_that_cannot_fit_waits_with_its_reason") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let c = Cluster::start(&bin, "nofit").await;
    c.add_nodes(2, 2, 8).await;
    let check = checker::Checker::start(&c.client, grid(2, 2, 8));
    let _s = c.scheduler("a", &c.config("gangway", ""));
    create_group(&c.client, "team-a", "big", Some(3)).await;
    for k in 0..3 {
        create_pod(
            &c.client,
            "team-a",
            gpu_pod(&format!("big-{k}"), 8, Some("big"), Some("8s")),
        )
        .await;
    }
    wait_until("the first gang to run", Duration::from_secs(20), || async {
        c.pods("team-a")
            .await
            .iter()
            .filter(|p| phase(p) == "Running")
            .count()
            == 3
    })
    .await;
    create_group(&c.client, "team-b", "wide", Some(2)).await;
    for k in 0..2 {
        create_pod(
            &c.client,
            "team-b",
            gpu_pod(&format!("wide-{k}"), 8, Some("wide"), Some("1s")),
        )
        .await;
    }
    wait_until(
        "the waiting gang's condition",
        Duration::from_secs(10),
        || async {
            condition(&c.client, "team-b", "wide")
                .await
                .is_some_and(|(s, r, _)| s == "False" && REASONS.contains(&r.as_str()))
        },
    )
    .await;
    let (_, reason, message) = condition(&c.client, "team-b", "wide").await.unwrap();
    println!("wide waits: {reason}: {message}");
    assert!(message.contains("waits"), "{message}");
    for p in c.pods("team-b").await {
        assert_eq!(node_of(&p), None, "a pod of the waiting gang was bound");
    }
    let ev = events(&c.client, "team-b", "wide").await;
    assert!(
        ev.iter()
            .any(|(r, n)| r == "FailedScheduling" && n.contains("waits")),
        "{ev:?}"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gangway-k8s"))
        .arg("why")
        .arg("team-b/wide")
        .arg("--kubeconfig")
        .arg(c.dir.join("admin.kubeconfig"))
        .output()
        .unwrap();
    let why = String::from_utf8_lossy(&out.stdout);
    assert!(why.contains("pending") && why.contains(&reason), "{why}");
    // Still nothing bound while the first gang runs.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(c.pods("team-b").await.iter().all(|p| node_of(p).is_none()));
    c.wait_bound("team-b", 2, 30).await;
    let (s, r, _) = condition(&c.client, "team-b", "wide").await.unwrap();
    assert_eq!((s.as_str(), r.as_str()), ("True", "Scheduled"));
    assert!(check.violations().is_empty(), "{:?}", check.violations());
}

/// A PodGroup with fewer pods than minMember waits (WaitingForPods) and
/// none of its pods is bound; its last pod makes it bound whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gang_short_of_min_member_waits() {
    let Some(bin) = harness::bin_dir("a_gang_short_of_min_member_waits") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let c = Cluster::start(&bin, "minmember").await;
    c.add_nodes(1, 2, 8).await;
    let _s = c.scheduler("a", &c.config("gangway", ""));
    create_group(&c.client, "team-a", "three", Some(3)).await;
    for k in 0..2 {
        create_pod(
            &c.client,
            "team-a",
            gpu_pod(&format!("three-{k}"), 2, Some("three"), None),
        )
        .await;
    }
    // The condition may first say "1 of minMember 3" (a cycle that saw one
    // pod): it must come to say 2.
    wait_until(
        "WaitingForPods, 2 of 3",
        Duration::from_secs(10),
        || async {
            condition(&c.client, "team-a", "three")
                .await
                .is_some_and(|(_, r, m)| r == "WaitingForPods" && m.contains("2 of minMember 3"))
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(c.pods("team-a").await.iter().all(|p| node_of(p).is_none()));
    create_pod(
        &c.client,
        "team-a",
        gpu_pod("three-2", 2, Some("three"), None),
    )
    .await;
    c.wait_bound("team-a", 3, 10).await;
}

/// The scheduler killed (SIGKILL) while it binds, and restarted: every pod
/// bound once, to one node, no GPU index twice; and a gang a previous
/// scheduler had bound in part (its plan on the bound pod) is finished on
/// the planned GPUs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_binds_nothing_twice() {
    let Some(bin) = harness::bin_dir("restart_binds_nothing_twice") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let c = Cluster::start(&bin, "restart").await;
    c.add_nodes(2, 4, 8).await;
    let check = checker::Checker::start(&c.client, grid(2, 4, 8));
    // A gang "half bound" by a scheduler that died: pod 0 bound with the plan.
    create_group(&c.client, "team-a", "half", Some(2)).await;
    for k in 0..2 {
        create_pod(
            &c.client,
            "team-a",
            gpu_pod(&format!("half-{k}"), 4, Some("half"), None),
        )
        .await;
    }
    let plan = "half-0=r0-n0:0,1,2,3;half-1=r0-n0:4,5,6,7";
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": "half-0", "annotations": {
            "gangway.io/gpu-indices": "0,1,2,3", "gangway.io/gang-plan": plan,
            "gangway.io/gang": "podgroup team-a/half#1"}},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "r0-n0"}
    });
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "team-a");
    let _: serde_json::Value = pods
        .create_subresource("binding", "half-0", &PostParams::default(), &binding)
        .await
        .unwrap();
    let config = c.config("gangway", "");
    let mut s = c.scheduler("a", &config);
    for i in 0..60 {
        create_pod(
            &c.client,
            "team-b",
            gpu_pod(&format!("p{i}"), 1 + i % 2, None, Some("20s")),
        )
        .await;
        if i == 30 {
            s.kill();
            s = c.scheduler("a", &config);
        }
    }
    c.wait_bound("team-b", 60, 60).await;
    bound(&pods, "half-1", 20).await;
    let p1 = pods.get("half-1").await.unwrap();
    assert_eq!(node_of(&p1).as_deref(), Some("r0-n0"));
    assert_eq!(indices(&p1).as_deref(), Some("4,5,6,7"));
    assert!(
        s.log_text().contains("finishing a gang bound in part"),
        "{}",
        s.log_text()
    );
    assert!(check.violations().is_empty(), "{:?}", check.violations());
}

/// Two replicas: one holds the Lease and binds; killed, the other takes
/// over and binds what comes next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_one_leader() {
    let Some(bin) = harness::bin_dir("two_replicas_one_leader") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let c = Cluster::start(&bin, "ha").await;
    c.add_nodes(1, 4, 8).await;
    let check = checker::Checker::start(&c.client, grid(1, 4, 8));
    let config = c.config("gangway", "");
    let mut a = c.scheduler("replica-a", &config);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut b = c.scheduler("replica-b", &config);
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(c.client.clone(), "gangway-system");
    let holder = || async {
        leases
            .get("gangway-scheduler")
            .await
            .ok()
            .and_then(|l| l.spec?.holder_identity)
    };
    wait_until("a leader", Duration::from_secs(10), || async {
        holder().await.is_some()
    })
    .await;
    let first = holder().await.unwrap();
    wait_until("both replicas ready", Duration::from_secs(10), || async {
        a.get("/readyz").contains("200 OK") && b.get("/readyz").contains("200 OK")
    })
    .await;
    wait_until(
        "exactly one replica leads",
        Duration::from_secs(10),
        || async {
            let la = a.get("/metrics").contains("\ngangway_leader 1\n");
            let lb = b.get("/metrics").contains("\ngangway_leader 1\n");
            la != lb
        },
    )
    .await;
    for i in 0..10 {
        create_pod(
            &c.client,
            "team-a",
            gpu_pod(&format!("x{i}"), 1, None, None),
        )
        .await;
    }
    c.wait_bound("team-a", 10, 20).await;
    let (leader, other) = if first == "replica-a" {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    assert!(leader.log_text().contains("leading"));
    assert!(
        !other.log_text().contains("leading: rebuilding"),
        "{}",
        other.log_text()
    );
    leader.kill();
    wait_until(
        "the other replica to take the Lease",
        Duration::from_secs(20),
        || async { holder().await.is_some_and(|h| h != first) },
    )
    .await;
    for i in 10..20 {
        create_pod(
            &c.client,
            "team-a",
            gpu_pod(&format!("x{i}"), 1, None, None),
        )
        .await;
    }
    c.wait_bound("team-a", 20, 20).await;
    assert!(other.alive());
    assert!(check.violations().is_empty(), "{:?}", check.violations());
}

/// A node deleted and one gone NotReady past its grace under running
/// gangs: each gang's surviving pods are evicted, the gang reported interrupted, and once its
/// pods are back (as a Job controller would recreate them) it is bound
/// whole on healthy nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_nodes_requeue_their_gangs_whole() {
    let Some(bin) = harness::bin_dir("lost_nodes_requeue_their_gangs_whole") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let c = Cluster::start(&bin, "lost").await;
    c.add_nodes(4, 2, 8).await;
    let check = checker::Checker::start(&c.client, grid(4, 2, 8));
    // A NotReady node's gangs are evicted once its grace has passed.
    let _s = c.scheduler("a", &c.config("gangway", "not_ready_grace_s = 3\n"));
    for g in ["ga", "gb"] {
        create_group(&c.client, "team-a", g, Some(2)).await;
        for k in 0..2 {
            create_pod(
                &c.client,
                "team-a",
                gpu_pod(&format!("{g}-{k}"), 8, Some(g), None),
            )
            .await;
        }
    }
    c.wait_bound("team-a", 4, 20).await;
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "team-a");
    let node_a = node_of(&pods.get("ga-0").await.unwrap()).unwrap();
    let node_b = node_of(&pods.get("gb-0").await.unwrap()).unwrap();
    let nodes: Api<Node> = Api::all(c.client.clone());
    nodes
        .delete(&node_a, &DeleteParams::default())
        .await
        .unwrap();
    let label = json!({"metadata": {"labels": {"gangway.test/not-ready": "true"}}});
    nodes
        .patch(&node_b, &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    for (g, node, word) in [("ga", &node_a, "deleted"), ("gb", &node_b, "NotReady")] {
        wait_until(
            &format!("{g}'s pods evicted"),
            Duration::from_secs(20),
            || async {
                c.pods("team-a")
                    .await
                    .iter()
                    .all(|p| !p.metadata.name.as_deref().unwrap_or("").starts_with(g))
            },
        )
        .await;
        let ev = events(&c.client, "team-a", g).await;
        assert!(
            ev.iter().any(|(r, n)| r == "GangInterrupted"
                && n.contains(node.as_str())
                && n.contains(word)),
            "{g}: {ev:?}"
        );
        // The controller's part: the gang's pods again.
        for k in 0..2 {
            create_pod(
                &c.client,
                "team-a",
                gpu_pod(&format!("{g}-{k}"), 8, Some(g), None),
            )
            .await;
        }
    }
    c.wait_bound("team-a", 4, 30).await;
    for p in c.pods("team-a").await {
        let n = node_of(&p).unwrap();
        assert!(
            n != node_a && n != node_b,
            "{:?} bound to lost node {n}",
            p.metadata.name
        );
    }
    assert!(check.violations().is_empty(), "{:?}", check.violations());
}

/// A pod of the default scheduler (kube-scheduler) holding GPUs counts as
/// foreign load: Gangway never binds beyond what is left of its node, and
/// uses the rest once it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_scheduler_pods_are_respected() {
    let Some(bin) = harness::bin_dir("default_scheduler_pods_are_respected") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let c = Cluster::start(&bin, "foreign").await;
    c.add_nodes(1, 1, 8).await;
    let check = checker::Checker::start(&c.client, grid(1, 1, 8));
    let ks = c.kube_scheduler();
    let mut other = gpu_pod("theirs", 6, None, None);
    other["spec"]["schedulerName"] = json!("default-scheduler");
    create_pod(&c.client, "team-c", other).await;
    let pods_c: Api<Pod> = Api::namespaced(c.client.clone(), "team-c");
    wait_until(
        "kube-scheduler to bind its pod",
        Duration::from_secs(30),
        || async {
            pods_c
                .get("theirs")
                .await
                .ok()
                .and_then(|p| node_of(&p))
                .is_some()
        },
    )
    .await;
    let _s = c.scheduler("a", &c.config("gangway", ""));
    // 2 of the node's 8 GPUs are left: a 2-GPU pod fits, then a 4-GPU one
    // does not (it waits, with a reason) until the foreign pod ends.
    create_pod(&c.client, "team-a", gpu_pod("two", 2, None, None)).await;
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "team-a");
    bound(&pods, "two", 20).await;
    create_pod(&c.client, "team-a", gpu_pod("four", 4, None, None)).await;
    wait_until(
        "the 4-GPU pod's reason",
        Duration::from_secs(10),
        || async {
            events(&c.client, "team-a", "four")
                .await
                .iter()
                .any(|(r, n)| r == "FailedScheduling" && n.contains("waits"))
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        node_of(&pods.get("four").await.unwrap()),
        None,
        "4 GPUs bound where 2 were left"
    );
    pods_c
        .delete("theirs", &DeleteParams::default())
        .await
        .unwrap();
    bound(&pods, "four", 20).await;
    drop(ks);
    assert!(check.violations().is_empty(), "{:?}", check.violations());
}

/// A policy module swapped in through the ConfigMap (`gangway-k8s swap`)
/// changes the decisions: with the preset the older 8-GPU gang goes before
/// a later 1-GPU pod; with example-smallest-first in the fairness slot the
/// small pod goes first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_swap_takes_effect() {
    let Some(bin) = harness::bin_dir("a_module_swap_takes_effect") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let c = Cluster::start(&bin, "swap").await;
    c.add_nodes(1, 1, 8).await;
    let s = c.scheduler("a", &c.config("gangway", ""));
    // Which went first: the bind times the checker recorded.
    let check = checker::Checker::start(&c.client, grid(1, 1, 8));
    let small_first = |round: u32| {
        let f = check.findings.lock().unwrap();
        f.bound[&format!("team-a/small{round}")].1 < f.bound[&format!("team-a/big{round}")].1
    };
    big_then_small(&c, 0).await;
    assert!(
        !small_first(0),
        "the preset let the later small pod go first"
    );
    let module = gangway_plugin_artifacts::path("example-smallest-first").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gangway-k8s"))
        .arg("swap")
        .arg("fairness")
        .arg(module)
        .arg("--kubeconfig")
        .arg(c.dir.join("admin.kubeconfig"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("the module staged", Duration::from_secs(10), || async {
        s.log_text().contains("staged in the fairness slot")
    })
    .await;
    big_then_small(&c, 1).await;
    assert!(
        small_first(1),
        "after the swap the small pod should go first"
    );
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "gangway-system");
    let cm = cms.get("gangway-policies").await.unwrap();
    assert!(cm.binary_data.unwrap().contains_key("fairness.wasm"));
}

/// A pod whose `nvidia.com/gpu` limit is fractional never reaches a
/// scheduler: the API server refuses it (extended resources are whole).
async fn fractional_resource_is_refused(pods: &Api<Pod>) {
    let mut bad = gpu_pod("bad-resource", 1, None, None);
    bad["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = json!("0.5");
    let bad: Pod = serde_json::from_value(bad).unwrap();
    let refused = pods.create(&PostParams::default(), &bad).await.unwrap_err();
    assert!(
        refused.to_string().contains("must be an integer"),
        "{refused}"
    );
}

/// The node busy with an 8-GPU pod; then an 8-GPU pod, and 1.5 s later a
/// 1-GPU pod, both waiting; returns once both are bound.
async fn big_then_small(c: &Cluster, round: u32) {
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "team-a");
    let name = |what: &str| format!("{what}{round}");
    create_pod(
        &c.client,
        "team-a",
        gpu_pod(&name("block"), 8, None, Some("3s")),
    )
    .await;
    wait_until("the blocker to run", Duration::from_secs(10), || async {
        pods.get(&name("block"))
            .await
            .ok()
            .is_some_and(|p| phase(&p) == "Running")
    })
    .await;
    create_pod(
        &c.client,
        "team-a",
        gpu_pod(&name("big"), 8, None, Some("2s")),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    create_pod(
        &c.client,
        "team-a",
        gpu_pod(&name("small"), 1, None, Some("2s")),
    )
    .await;
    bound(&pods, &name("big"), 40).await;
    bound(&pods, &name("small"), 40).await;
}

/// Bad input gets an Event naming the problem, and the scheduler keeps
/// scheduling everyone else: minMember 0, minMember larger than the
/// cluster holds, an unknown VC, and GPU annotations that disagree with
/// the pod's resources (ignored: the resources count); a fractional GPU
/// resource is refused by the API server itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_input_gets_events_and_never_stops_the_scheduler() {
    let Some(bin) = harness::bin_dir("malformed_input") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let c = Cluster::start(&bin, "malformed").await;
    c.add_nodes(1, 2, 8).await;
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "gangway-system");
    let vcs: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "gangway-vcs"}, "data": {"team-a": "16", "team-b": "none"}
    }))
    .unwrap();
    cms.create(&PostParams::default(), &vcs).await.unwrap();
    let mut s = c.scheduler("a", &c.config("gangway", ""));
    create_group(&c.client, "team-a", "zero", None).await;
    create_pod(
        &c.client,
        "team-a",
        gpu_pod("zero-0", 1, Some("zero"), None),
    )
    .await;
    create_group(&c.client, "team-a", "huge", Some(100)).await;
    create_pod(
        &c.client,
        "team-a",
        gpu_pod("huge-0", 1, Some("huge"), None),
    )
    .await;
    for (name, value) in [("negative", "-1"), ("fraction", "0.5")] {
        let mut p = gpu_pod(name, 1, None, None);
        p["metadata"]["annotations"]["gangway.io/gpus"] = json!(value);
        create_pod(&c.client, "team-a", p).await;
    }
    create_pod(&c.client, "team-c", gpu_pod("stranger", 1, None, None)).await;
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "team-a");
    fractional_resource_is_refused(&pods).await;
    create_pod(&c.client, "team-a", gpu_pod("fine", 2, None, None)).await;
    let expect = [
        ("team-a", "zero", "InvalidMinMember", "minMember is 0"),
        ("team-a", "huge", "GangTooLarge", "minMember 100"),
        ("team-a", "negative", "GPUAnnotationIgnored", "\"-1\""),
        ("team-a", "fraction", "GPUAnnotationIgnored", "\"0.5\""),
        ("team-c", "stranger", "UnknownVirtualCluster", "\"team-c\""),
    ];
    for (ns, name, reason, text) in expect {
        wait_until(
            &format!("the {reason} event on {name}"),
            Duration::from_secs(15),
            || async {
                events(&c.client, ns, name)
                    .await
                    .iter()
                    .any(|(r, n)| r == reason && n.contains(text))
            },
        )
        .await;
    }
    for name in ["fine", "negative", "fraction"] {
        bound(&pods, name, 15).await;
    }
    assert!(s.alive(), "the scheduler stopped: {}", s.log_text());
    for name in ["zero-0", "huge-0"] {
        assert_eq!(
            node_of(&pods.get(name).await.unwrap()),
            None,
            "{name} was bound"
        );
    }
    let (_, r, _) = condition(&c.client, "team-a", "zero").await.unwrap();
    assert_eq!(r, "InvalidMinMember");
}
