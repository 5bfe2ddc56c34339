//! A cluster of two GPU types (node label `nvidia.com/gpu.product`, as GPU
//! Feature Discovery sets it): pods that select a type run on it, a gang
//! never spans two types, a PodGroup asks for types and memory by
//! annotation, and a type no node has is a reason, not a silent wait.

use std::time::Duration;

use kube::api::{Api, DeleteParams, Patch, PatchParams};
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
