//! A cluster of two GPU types (node label `nvidia.com/gpu.product`, as GPU
//! Feature Discovery sets it): pods that select a type run on it, a gang
//! never spans two types, a PodGroup asks for types and memory by
//! annotation, and a type no node has is a reason, not a silent wait; a
//! VC's quotas per type (`A100=8+0` in the VC ConfigMap) cap what it holds
//! of each type, and a gang that no type has room for says why it waits.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::harness::{Cluster, condition, create_group, create_pod, gpu_pod, wait_until};
use super::{SERIAL, checker, node_of};
use k8s_openapi::api::core::v1::Pod;

const PRODUCT: &str = "nvidia.com/gpu.product";
const MEMORY: &str = "nvidia.com/gpu.memory";

/// r0-n0 and r0-n1: A100s of 80 GB; r1-n0 and r1-n1: V100s of 16 GB.
async fn two_types(c: &Cluster) {
    let mut names = Vec::new();
    for (rack, product, mib) in [("r0", "A100", "81920"), ("r1", "V100", "16384")] {
        for n in 0..2 {
            let name = format!("{rack}-n{n}");
            c.add_node_labeled(&name, rack, 8, &[(PRODUCT, product), (MEMORY, mib)])
                .await;
            names.push(name);
        }
    }
    c.wait_ready(&names).await;
}

/// A pod asking for `gpus` GPUs whose nodeSelector names `product`.
fn typed_pod(name: &str, gpus: u32, group: Option<&str>, product: &str) -> serde_json::Value {
    let mut pod = gpu_pod(name, gpus, group, None);
    pod["spec"]["nodeSelector"] = json!({ PRODUCT: product });
    pod
}

async fn node(pods: &Api<Pod>, name: &str) -> Option<String> {
    pods.get(name).await.ok().and_then(|p| node_of(&p))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gangs_run_on_one_gpu_type_and_the_type_they_ask_for() {
    let Some(bin) = super::harness::bin_dir("gangs_run_on_one_gpu_type_and_the_type_they_ask_for")
    else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let c = Cluster::start(&bin, "types").await;
    two_types(&c).await;
    let check = checker::Checker::start(&c.client, super::grid(2, 2, 8));
    let _s = c.scheduler("a", &c.config("gangway", "preset = \"fifo\"\n"));
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "team-a");
    create_pod(&c.client, "team-a", typed_pod("v", 8, None, "V100")).await;
    create_pod(&c.client, "team-a", typed_pod("a", 8, None, "A100")).await;
    c.wait_bound("team-a", 2, 30).await;
    let v = node(&pods, "v").await.unwrap();
    let a = node(&pods, "a").await.unwrap();
    assert!(v.starts_with("r1-"), "the V100 pod is on {v}");
    assert!(a.starts_with("r0-"), "the A100 pod is on {a}");

    // One node of each type free: 16 GPUs, not of one type. The gang waits.
    create_group(&c.client, "team-a", "any", Some(2)).await;
    for k in 0..2 {
        create_pod(
            &c.client,
            "team-a",
            gpu_pod(&format!("any-{k}"), 8, Some("any"), None),
        )
        .await;
    }
    // A PodGroup asking for a type no node has: its reason says so.
    create_group(&c.client, "team-a", "h", Some(1)).await;
    let groups: Api<gangway_k8s::podgroup::PodGroup> = Api::namespaced(c.client.clone(), "team-a");
    let notes = json!({"metadata": {"annotations": {"gangway.io/gpu-types": "H100"}}});
    groups
        .patch("h", &PatchParams::default(), &Patch::Merge(&notes))
        .await
        .unwrap();
    create_pod(&c.client, "team-a", gpu_pod("h-0", 8, Some("h"), None)).await;
    wait_until("h's NoGpuType reason", Duration::from_secs(20), || async {
        condition(&c.client, "team-a", "h")
            .await
            .is_some_and(|(_, r, m)| r == "NoGpuType" && m.contains("H100"))
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        node(&pods, "any-0").await,
        None,
        "a gang split across types"
    );
    assert_eq!(
        node(&pods, "any-1").await,
        None,
        "a gang split across types"
    );

    // The A100 pod is deleted (a cancel): the gang takes both A100 nodes.
    pods.delete("a", &DeleteParams::default()).await.unwrap();
    wait_until("the gang bound", Duration::from_secs(30), || async {
        node(&pods, "any-0").await.is_some() && node(&pods, "any-1").await.is_some()
    })
    .await;
    for k in 0..2 {
        let n = node(&pods, &format!("any-{k}")).await.unwrap();
        assert!(n.starts_with("r0-"), "any-{k} is on {n}, not an A100 node");
    }
    assert_eq!(node(&pods, "h-0").await, None);
    assert!(check.violations().is_empty(), "{:?}", check.violations());
}

/// Pods of `pods` bound, by node.
async fn bound_nodes(pods: &Api<Pod>, names: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for name in names {
        out.extend(node(pods, name).await);
    }
    out
}

/// team-a may hold 8 A100s and nothing else (`A100=8+0`): its gangs of 4
/// GPUs bind on A100 nodes only, two at a time, a third waits with the
/// reason `TypeQuota` while V100 nodes stand free, and binds once one of
/// the two is gone. team-b (no quota) takes a gang of 16 as before. Under
/// the default preset (philly), which backfills: under fifo the waiting
/// gang would hold every VC's queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vc_quota_per_gpu_type_caps_its_gangs_on_that_type() {
    let Some(bin) = super::harness::bin_dir("a_vc_quota_per_gpu_type_caps_its_gangs_on_that_type")
    else {
        return;
    };
    let _serial = SERIAL.lock().await;
    let c = Cluster::start(&bin, "type-quotas").await;
    two_types(&c).await;
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "gangway-system");
    let vcs: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "gangway-vcs"},
        "data": {"team-a": "A100=8+0", "team-b": "none"}
    }))
    .unwrap();
    cms.create(&PostParams::default(), &vcs).await.unwrap();
    let check = checker::Checker::start(&c.client, super::grid(2, 2, 8));
    let _s = c.scheduler("a", &c.config("gangway", ""));
    let a: Api<Pod> = Api::namespaced(c.client.clone(), "team-a");
    let gang = |g: &str| [format!("{g}-0"), format!("{g}-1")];
    let make = |g: &'static str| {
        let c = &c;
        async move {
            create_group(&c.client, "team-a", g, Some(2)).await;
            for p in gang(g) {
                create_pod(&c.client, "team-a", gpu_pod(&p, 2, Some(g), None)).await;
            }
        }
    };
    make("g0").await;
    make("g1").await;
    c.wait_bound("team-a", 4, 30).await;
    make("g2").await;
    wait_until("g2's TypeQuota reason", Duration::from_secs(20), || async {
        condition(&c.client, "team-a", "g2")
            .await
            .is_some_and(|(_, r, m)| {
                r == "TypeQuota" && m.contains("team-a") && m.contains("A100: 8 of its cap 8")
            })
    })
    .await;
    // team-b is unaffected: 16 GPUs of one type are free on V100s only.
    create_group(&c.client, "team-b", "b", Some(2)).await;
    for k in 0..2 {
        create_pod(
            &c.client,
            "team-b",
            gpu_pod(&format!("b-{k}"), 8, Some("b"), None),
        )
        .await;
    }
    c.wait_bound("team-b", 2, 30).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let held = bound_nodes(&a, &[gang("g0"), gang("g1"), gang("g2")].concat()).await;
    assert_eq!(held.len(), 4, "team-a holds more than 8 A100s: {held:?}");
    assert!(
        held.iter().all(|n| n.starts_with("r0-")),
        "team-a off A100s: {held:?}"
    );
    let (_, r, _) = condition(&c.client, "team-a", "g2").await.unwrap();
    assert_eq!(r, "TypeQuota");

    // g0 ends (its pods deleted): g2 takes its place, on A100s.
    for p in gang("g0") {
        a.delete(&p, &DeleteParams::default()).await.unwrap();
    }
    wait_until("g2 bound", Duration::from_secs(30), || async {
        bound_nodes(&a, &gang("g2")).await.len() == 2
    })
    .await;
    let g2 = bound_nodes(&a, &gang("g2")).await;
    assert!(g2.iter().all(|n| n.starts_with("r0-")), "g2 on {g2:?}");
    assert!(check.violations().is_empty(), "{:?}", check.violations());
}
