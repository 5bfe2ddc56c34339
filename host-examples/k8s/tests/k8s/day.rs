//! A cluster's ordinary day: users cancel running gangs by deleting them,
//! the API server restarts under a bind burst, nodes flap NotReady and
//! device plugins restart, objects arrive in any order, and users write
//! annotations. Each case against a real control plane.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use serde_json::json;

use crate::harness::{self, Cluster, create_group, create_pod, events, gpu_pod, wait_until};
use crate::{SERIAL, checker, grid, node_of, phase};

/// Names of a namespace's pods bound to a node.
async fn bound_names(c: &Cluster, ns: &str) -> Vec<String> {
    c.pods(ns)
        .await
        .iter()
        .filter(|p| node_of(p).is_some())
        .filter_map(|p| p.metadata.name.clone())
        .collect()
}

/// Creates a gang: a PodGroup of `n` pods of `gpus` GPUs each, running
/// `run` (a Go duration; `None`: until deleted).
async fn gang(c: &Cluster, ns: &str, name: &str, n: usize, gpus: u32, run: Option<&str>) {
    create_group(&c.client, ns, name, Some(n as i64)).await;
    for k in 0..n {
        let pod = gpu_pod(&format!("{name}-{k}"), gpus, Some(name), run);
        create_pod(&c.client, ns, pod).await;
    }
}

/// Deletes a pod as `kubectl delete` does; one already gone is fine (the
/// scheduler ends a partly deleted gang whole, so its other pods may be
/// deleted before the user gets to them).
async fn cancel(pods: &Api<Pod>, name: &str) {
    match pods.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => panic!("deleting pod {name}: {e}"),
    }
}

/// Waits until none of `names` exists.
async fn gone(c: &Cluster, ns: &str, names: &[String]) {
    wait_until("the pods to be gone", Duration::from_secs(20), || async {
        let pods = c.pods(ns).await;
        names
            .iter()
            .all(|n| pods.iter().all(|p| p.metadata.name.as_ref() != Some(n)))
    })
    .await;
}

/// Deleting a running gang is how users cancel: its GPUs come back at the
/// next cycle, and a gang waiting for them binds within a second. Deleted
/// pod by pod, and as `kubectl delete -f` does (the PodGroup and its pods).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_running_gang_frees_its_gpus() {
    let Some(bin) = harness::bin_dir("deleting_a_running_gang_frees_its_gpus") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let c = Cluster::start(&bin, "delete").await;
    c.add_nodes(2, 2, 8).await;
    let check = checker::Checker::start(&c.client, grid(2, 2, 8));
    let _s = c.scheduler("a", &c.config("gangway", ""));
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "team-a");
    gang(&c, "team-a", "first", 4, 8, None).await;
    c.wait_bound("team-a", 4, 20).await;
    // Waits for the whole cluster.
    gang(&c, "team-a", "second", 4, 8, None).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(bound_names(&c, "team-a").await.len(), 4);
    // Cancelled pod by pod.
    let first: Vec<String> = (0..4).map(|k| format!("first-{k}")).collect();
    for name in &first {
        cancel(&pods, name).await;
    }
    gone(&c, "team-a", &first).await;
    let t = Instant::now();
    c.wait_bound("team-a", 4, 20).await;
    let pod_by_pod = t.elapsed();
    // Cancelled as `kubectl delete -f` does: the PodGroup, then its pods.
    gang(&c, "team-a", "third", 4, 8, None).await;
    let groups: Api<gangway_k8s::podgroup::PodGroup> = Api::namespaced(c.client.clone(), "team-a");
    groups
        .delete("second", &DeleteParams::default())
        .await
        .unwrap();
    let second: Vec<String> = (0..4).map(|k| format!("second-{k}")).collect();
    for name in &second {
        cancel(&pods, name).await;
    }
    gone(&c, "team-a", &second).await;
    let t = Instant::now();
    c.wait_bound("team-a", 4, 20).await;
    let with_group = t.elapsed();
    assert!(
        bound_names(&c, "team-a")
            .await
            .iter()
            .all(|n| n.starts_with("third")),
        "{:?}",
        bound_names(&c, "team-a").await
    );
    println!("freed and rebound: pod by pod {pod_by_pod:?}, PodGroup and pods {with_group:?}");
    for (how, took) in [
        ("pod by pod", pod_by_pod),
        ("PodGroup and pods", with_group),
    ] {
        assert!(
            took < Duration::from_secs(1),
            "{how}: the waiting gang bound {took:?} after the deleted one was gone"
        );
    }
    assert!(check.violations().is_empty(), "{:?}", check.violations());
}

/// A pod of a running gang that ends gives its GPUs back while the rest
/// of its gang runs on: a gang waiting for them binds within a second of
/// the pod's end, beside the gang's other pod, and no GPU is held twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_ends_frees_its_share_of_a_running_gang() {
    let Some(bin) = harness::bin_dir("a_pod_that_ends_frees_its_share_of_a_running_gang") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let c = Cluster::start(&bin, "podend").await;
    c.add_nodes(1, 1, 8).await;
    let check = checker::Checker::start(&c.client, grid(1, 1, 8));
    let _s = c.scheduler("a", &c.config("gangway", ""));
    create_group(&c.client, "team-a", "pair", Some(2)).await;
    let short = gpu_pod("pair-0", 4, Some("pair"), Some("4s"));
    create_pod(&c.client, "team-a", short).await;
    create_pod(
        &c.client,
        "team-a",
        gpu_pod("pair-1", 4, Some("pair"), None),
    )
    .await;
    c.wait_bound("team-a", 2, 20).await;
    // Waits for pair-0's GPUs.
    create_pod(&c.client, "team-a", gpu_pod("late", 4, None, None)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !bound_names(&c, "team-a")
            .await
            .contains(&"late".to_string())
    );
    let pod_phase = |name: &'static str| {
        let c = &c;
        async move {
            c.pods("team-a")
                .await
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some(name))
                .map(phase)
                .unwrap_or_default()
        }
    };
    wait_until("pair-0 to succeed", Duration::from_secs(30), || async {
        pod_phase("pair-0").await == "Succeeded"
    })
    .await;
    let t = Instant::now();
    wait_until("late to bind", Duration::from_secs(20), || async {
        bound_names(&c, "team-a")
            .await
            .contains(&"late".to_string())
    })
    .await;
    let took = t.elapsed();
    println!("a pod's end to the waiting gang bound: {took:?}");
    assert!(
        took < Duration::from_secs(1),
        "late bound {took:?} after pair-0 ended"
    );
    assert_eq!(
        pod_phase("pair-1").await,
        "Running",
        "the rest of the gang runs on"
    );
    assert!(check.violations().is_empty(), "{:?}", check.violations());
}

/// kube-apiserver SIGKILLed during a burst of Bindings, down for 8 s, and
/// started again: no GPU index is ever held by two pods, no node holds
/// more GPUs than it has, every pod is bound once (to one node) and every
/// gang runs to completion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_restart_during_binding_holds_no_gpu_twice() {
    let Some(bin) = harness::bin_dir("an_api_server_restart_during_binding_holds_no_gpu_twice")
    else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let c = Cluster::start(&bin, "apiserver").await;
    c.add_nodes(4, 4, 8).await;
    let check = checker::Checker::start(&c.client, grid(4, 4, 8));
    let _s = c.scheduler("a", &c.config("gangway", ""));
    // 48 gangs of 2 pods x 4 GPUs: three times the cluster, short runs.
    let mut total = 0;
    for i in 0..48 {
        let ns = ["team-a", "team-b", "team-c"][i % 3];
        let run = format!("{}s", 2 + i % 4);
        gang(&c, ns, &format!("g{i}"), 2, 4, Some(&run)).await;
        total += 2;
        if i == 24 {
            c.kill("kube-apiserver");
            tokio::time::sleep(Duration::from_secs(8)).await;
            c.restart("kube-apiserver");
        }
    }
    wait_until("every pod to succeed", Duration::from_secs(180), || async {
        let mut all = Vec::new();
        for ns in ["team-a", "team-b", "team-c"] {
            all.extend(c.pods(ns).await);
        }
        all.len() == total && all.iter().all(|p| phase(p) == "Succeeded")
    })
    .await;
    let findings = check.findings.lock().unwrap();
    assert!(findings.violations.is_empty(), "{:?}", findings.violations);
    assert_eq!(findings.bound.len(), total, "every pod bound");
}

/// A node NotReady for 10 s (within Kubernetes' 300 s toleration), and a
/// node whose GPU count reads 0 for 3 s (a device plugin restarting),
/// evict nothing: the gangs on them keep running, with the same pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_node_signals_evict_nothing() {
    let Some(bin) = harness::bin_dir("short_node_signals_evict_nothing") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let c = Cluster::start(&bin, "signals").await;
    c.add_nodes(1, 2, 8).await;
    let _s = c.scheduler("a", &c.config("gangway", ""));
    gang(&c, "team-a", "flap", 1, 8, None).await;
    gang(&c, "team-a", "blip", 1, 8, None).await;
    c.wait_bound("team-a", 2, 20).await;
    let before: BTreeMap<String, (String, String)> = c
        .pods("team-a")
        .await
        .iter()
        .map(|p| {
            let name = p.metadata.name.clone().unwrap();
            (name, (p.metadata.uid.clone().unwrap(), node_of(p).unwrap()))
        })
        .collect();
    let flap_node = before["flap-0"].1.clone();
    let blip_node = before["blip-0"].1.clone();
    c.set_not_ready(&flap_node, true).await;
    wait_until(
        "the node to go NotReady",
        Duration::from_secs(10),
        || async { !c.node_ready(&flap_node).await },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    c.set_not_ready(&flap_node, false).await;
    wait_until("the node to be Ready", Duration::from_secs(10), || async {
        c.node_ready(&flap_node).await
    })
    .await;
    c.set_node_gpus(&blip_node, 0).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    c.set_node_gpus(&blip_node, 8).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after: BTreeMap<String, (String, String)> = c
        .pods("team-a")
        .await
        .iter()
        .filter(|p| phase(p) == "Running")
        .map(|p| {
            let name = p.metadata.name.clone().unwrap();
            (name, (p.metadata.uid.clone().unwrap(), node_of(p).unwrap()))
        })
        .collect();
    assert_eq!(after, before, "the same pods, running where they were");
    for g in ["flap", "blip"] {
        let ev = events(&c.client, "team-a", g).await;
        assert!(
            ev.iter().all(|(r, _)| r != "GangInterrupted"),
            "{g}: {ev:?}"
        );
    }
}

/// Pods created before their PodGroup wait for it (never bound as gangs
/// of one), with a reason; once it exists the gang binds whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_created_before_their_podgroup_bind_whole() {
    let Some(bin) = harness::bin_dir("pods_created_before_their_podgroup_bind_whole") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let c = Cluster::start(&bin, "order").await;
    c.add_nodes(1, 2, 8).await;
    let check = checker::Checker::start(&c.client, grid(1, 2, 8));
    let _s = c.scheduler("a", &c.config("gangway", ""));
    for k in 0..4 {
        let pod = gpu_pod(&format!("late-{k}"), 2, Some("late"), None);
        create_pod(&c.client, "team-a", pod).await;
    }
    wait_until(
        "a WaitingForPodGroup event",
        Duration::from_secs(15),
        || async {
            events(&c.client, "team-a", "late")
                .await
                .iter()
                .any(|(_, n)| n.contains("WaitingForPodGroup") || n.contains("does not exist"))
        },
    )
    .await;
    assert!(bound_names(&c, "team-a").await.is_empty());
    create_group(&c.client, "team-a", "late", Some(4)).await;
    c.wait_bound("team-a", 4, 15).await;
    let findings = check.findings.lock().unwrap();
    let times: Vec<Instant> = (0..4)
        .map(|k| findings.bound[&format!("team-a/late-{k}")].1)
        .collect();
    let spread = times
        .iter()
        .max()
        .unwrap()
        .duration_since(*times.iter().min().unwrap());
    assert!(spread < Duration::from_secs(1), "bound {spread:?} apart");
    assert!(findings.violations.is_empty(), "{:?}", findings.violations);
}

/// A PodGroup deleted while 3 of its 4 pods wait leaves them pending
/// (with a reason), never bound as gangs of one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_podgroup_leaves_its_pods_pending() {
    let Some(bin) = harness::bin_dir("a_deleted_podgroup_leaves_its_pods_pending") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let c = Cluster::start(&bin, "podgroup").await;
    c.add_nodes(1, 2, 8).await;
    let _s = c.scheduler("a", &c.config("gangway", ""));
    create_group(&c.client, "team-a", "short", Some(4)).await;
    for k in 0..3 {
        let pod = gpu_pod(&format!("short-{k}"), 2, Some("short"), None);
        create_pod(&c.client, "team-a", pod).await;
    }
    wait_until("WaitingForPods", Duration::from_secs(15), || async {
        events(&c.client, "team-a", "short")
            .await
            .iter()
            .any(|(_, n)| n.contains("minMember"))
    })
    .await;
    let groups: Api<gangway_k8s::podgroup::PodGroup> = Api::namespaced(c.client.clone(), "team-a");
    groups
        .delete("short", &DeleteParams::default())
        .await
        .unwrap();
    wait_until(
        "a WaitingForPodGroup event",
        Duration::from_secs(15),
        || async {
            events(&c.client, "team-a", "short")
                .await
                .iter()
                .any(|(_, n)| n.contains("does not exist"))
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(bound_names(&c, "team-a").await.is_empty());
}

/// A pod's GPUs are its resources: an annotation saying 1 on a pod asking
/// for 8 is reported and ignored, so two such pods never share an 8-GPU
/// node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_annotation_cannot_change_a_pods_gpu_count() {
    let Some(bin) = harness::bin_dir("an_annotation_cannot_change_a_pods_gpu_count") else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let c = Cluster::start(&bin, "annotation").await;
    c.add_nodes(1, 1, 8).await;
    let check = checker::Checker::start(&c.client, grid(1, 1, 8));
    let _s = c.scheduler("a", &c.config("gangway", ""));
    for name in ["big-1", "big-2"] {
        let mut pod = gpu_pod(name, 8, None, None);
        pod["metadata"]["annotations"]["gangway.io/gpus"] = json!("1");
        create_pod(&c.client, "team-a", pod).await;
    }
    wait_until("GPUAnnotationIgnored", Duration::from_secs(15), || async {
        events(&c.client, "team-a", "big-1")
            .await
            .iter()
            .any(|(r, _)| r == "GPUAnnotationIgnored")
    })
    .await;
    c.wait_bound("team-a", 1, 15).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(bound_names(&c, "team-a").await.len(), 1);
    let pods = c.pods("team-a").await;
    let bound = pods.iter().find(|p| node_of(p).is_some()).unwrap();
    let indices = bound.metadata.annotations.as_ref().unwrap()["gangway.io/gpu-indices"].clone();
    assert_eq!(indices, "0,1,2,3,4,5,6,7");
    assert!(check.violations().is_empty(), "{:?}", check.violations());
}
