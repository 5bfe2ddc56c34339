//! gangway-k8s side by side with kube-scheduler on one KWOK cluster of
//! fake 8-GPU nodes (the control plane of `testenv/`, on 127.0.0.1):
//!
//! 1. 10,000 one-GPU pods created while no scheduler runs, then
//!    kube-scheduler (default profile, built from the same Go module)
//!    started: pods bound per second from its first bind to its last, and
//!    its peak memory;
//! 2. the same with gangway-k8s;
//! 3. with `--background` single pods running, gangs of 8 and 16 one-GPU
//!    pods created one at a time: the time from a gang's last pod created
//!    (its create call returned) to every pod of it bound.
//!
//! Every pod asks for 4 CPUs and 32 GiB beside its GPU, so both schedulers
//! check every node's CPU and memory (gangway-k8s its filters of
//! `src/fit.rs`, kube-scheduler NodeResourcesFit).
//!
//! ```sh
//! export GANGWAY_K8S_BIN="$(host-examples/k8s/testenv/build.sh | tail -1)"
//! cargo build --release -p gangway-k8s --bin gangway-k8s --example side_by_side
//! target/release/examples/side_by_side --nodes 1000
//! target/release/examples/side_by_side --nodes 5000
//! # kube-scheduler's client not held to its default 50 requests/s:
//! target/release/examples/side_by_side --nodes 5000 --kube-scheduler-qps 1000
//! ```
//!
//! gangway-k8s runs with its default configuration but for `levels` (the
//! fake nodes' rack label); kube-scheduler with its defaults (default
//! profile, client at 50 requests/s, burst 100) unless
//! `--kube-scheduler-qps` sets both its QPS and burst.

#![allow(clippy::unwrap_used, missing_docs, unreachable_pub)]

#[path = "../tests/k8s/harness.rs"]
mod harness;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use harness::{Cluster, create_group, fake_node, gpu_pod, wait_until};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;

struct Args {
    nodes: u32,
    pods: u32,
    gangs: u32,
    background: u32,
    ks_qps: Option<u32>,
}

fn args() -> Args {
    let mut a = Args {
        nodes: 1000,
        pods: 10_000,
        gangs: 20,
        background: 2000,
        ks_qps: None,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i + 1 < v.len() {
        let n: u32 = v[i + 1].parse().unwrap();
        match v[i].as_str() {
            "--nodes" => a.nodes = n,
            "--pods" => a.pods = n,
            "--gangs" => a.gangs = n,
            "--background" => a.background = n,
            "--kube-scheduler-qps" => a.ks_qps = Some(n),
            other => panic!("unknown option {other}"),
        }
        i += 2;
    }
    a
}

/// Watches pods in a namespace; records when each was first seen bound.
fn bind_times(
    client: &Client,
    ns: &str,
) -> (
    Arc<Mutex<BTreeMap<String, Instant>>>,
    tokio::task::JoinHandle<()>,
) {
    let times = Arc::new(Mutex::new(BTreeMap::new()));
    let t = Arc::clone(&times);
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let task = tokio::spawn(async move {
        let stream = watcher(api, watcher::Config::default());
        futures::pin_mut!(stream);
        while let Some(ev) = stream.next().await {
            if let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = ev
                && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
            {
                t.lock()
                    .unwrap()
                    .entry(p.name_any())
                    .or_insert_with(Instant::now);
            }
        }
    });
    (times, task)
}

async fn create_many(client: &Client, ns: &str, pods: Vec<serde_json::Value>) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    futures::stream::iter(pods)
        .for_each_concurrent(48, |p| {
            let api = api.clone();
            async move {
                let pod: Pod = serde_json::from_value(p).unwrap();
                api.create(&PostParams::default(), &pod).await.unwrap();
            }
        })
        .await;
}

fn peak_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Pods bound per second (first bind to last) and how many were bound.
async fn throughput(
    times: &Mutex<BTreeMap<String, Instant>>,
    expect: usize,
    limit: Duration,
) -> (f64, usize) {
    let start = Instant::now();
    let mut last = (0, Instant::now());
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let n = times.lock().unwrap().len();
        if n != last.0 {
            last = (n, Instant::now());
        }
        // Done: all bound, or nothing new for 10 s (the rest do not fit).
        if n >= expect
            || (n > 0 && last.1.elapsed() > Duration::from_secs(10))
            || start.elapsed() > limit
        {
            break;
        }
    }
    let t = times.lock().unwrap();
    let (Some(first), Some(lastb)) = (t.values().min(), t.values().max()) else {
        return (0.0, 0);
    };
    let secs = lastb.duration_since(*first).as_secs_f64().max(1e-3);
    (t.len() as f64 / secs, t.len())
}

async fn clear(client: &Client, ns: &str) {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    // A failed call (the API server closing a kept-alive connection under
    // load, as a delete of 10,000 pods can) is made again.
    for attempt in 1.. {
        match api.delete_collection(&dp, &ListParams::default()).await {
            Ok(_) => break,
            Err(e) if attempt < 10 => {
                eprintln!("deleting the pods of {ns}: {e}; again");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            Err(e) => panic!("deleting the pods of {ns}: {e}"),
        }
    }
    wait_until("pods deleted", Duration::from_secs(300), || async {
        api.list(&ListParams::default().limit(1))
            .await
            .is_ok_and(|l| l.items.is_empty())
    })
    .await;
}

fn one_gpu(name: &str, scheduler: &str) -> serde_json::Value {
    let mut p = with_requests(gpu_pod(name, 1, None, None));
    p["spec"]["schedulerName"] = json!(scheduler);
    p
}

/// A pod asking for CPU and memory beside its GPU, so both schedulers run
/// their resource filters on every node (a fake node has 64 CPUs and
/// 512 GiB for its 8 GPUs).
fn with_requests(mut pod: serde_json::Value) -> serde_json::Value {
    pod["spec"]["containers"][0]["resources"]["requests"] =
        json!({"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": "1"});
    pod
}

/// Creates `count` fake 8-GPU nodes, 40 to a rack.
async fn add_nodes(c: &Cluster, count: u32) {
    let t = Instant::now();
    let nodes: Api<Node> = Api::all(c.client.clone());
    futures::stream::iter(0..count)
        .for_each_concurrent(64, |i| {
            let nodes = nodes.clone();
            async move {
                let node = fake_node(&format!("n{i:05}"), &format!("r{:03}", i / 40), 8);
                let n: Node = serde_json::from_value(node).unwrap();
                nodes.create(&PostParams::default(), &n).await.unwrap();
            }
        })
        .await;
    println!(
        "{count} nodes created in {:.1} s",
        t.elapsed().as_secs_f64()
    );
}

/// Phase 1: kube-scheduler binds `pods` one-GPU pods created before it
/// starts. Returns (pods/s, pods bound, peak RSS KiB).
async fn kube_scheduler_phase(c: &Cluster, a: &Args) -> (f64, usize, u64) {
    let pods: Vec<_> = (0..a.pods)
        .map(|i| one_gpu(&format!("p{i:05}"), "default-scheduler"))
        .collect();
    create_many(&c.client, "bench-ks", pods).await;
    let (times, task) = bind_times(&c.client, "bench-ks");
    let ks = c.kube_scheduler_with(a.ks_qps);
    let (rate, bound) = throughput(&times, a.pods as usize, Duration::from_secs(900)).await;
    let mem = peak_kib(ks.id());
    drop(ks);
    task.abort();
    println!(
        "kube-scheduler: {bound} pods bound, {rate:.0} pods/s, peak RSS {} MiB",
        mem / 1024
    );
    clear(&c.client, "bench-ks").await;
    (rate, bound, mem)
}

/// Phase 2: the same pods for gangway-k8s, started after they exist.
/// Returns the running scheduler (for phase 3), pods/s and pods bound.
async fn gangway_phase(c: &Cluster, a: &Args) -> (harness::Sched, f64, usize) {
    let pods: Vec<_> = (0..a.pods)
        .map(|i| one_gpu(&format!("p{i:05}"), "gangway"))
        .collect();
    create_many(&c.client, "bench-gw", pods).await;
    let (times, task) = bind_times(&c.client, "bench-gw");
    // The defaults (cycle_ms 20, resync_s 2, bind_concurrency 64, leader
    // election on) but for the rack label of the fake nodes.
    let config = c.dir.join("bench.toml");
    std::fs::write(&config, "levels = [\"gangway.test/rack\"]\n").unwrap();
    let gw = c.scheduler("bench", &config);
    let (rate, bound) = throughput(&times, a.pods as usize, Duration::from_secs(900)).await;
    task.abort();
    println!(
        "gangway-k8s: {bound} pods bound, {rate:.0} pods/s, peak RSS {} MiB",
        peak_kib(gw.pid()) / 1024
    );
    clear(&c.client, "bench-gw").await;
    (gw, rate, bound)
}

/// Phase 3: `background` single pods bound, then gangs of 8 and 16 one-GPU
/// pods one at a time; per size, each gang's time from its last pod
/// created to all its pods bound.
async fn gang_phase(c: &Cluster, a: &Args) -> BTreeMap<u32, Vec<f64>> {
    let bg: Vec<_> = (0..a.background)
        .map(|i| one_gpu(&format!("bg{i:05}"), "gangway"))
        .collect();
    create_many(&c.client, "bench-gw", bg).await;
    let (times, task) = bind_times(&c.client, "bench-gang");
    let mut lat: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    for g in 0..a.gangs * 2 {
        let size = if g % 2 == 0 { 8 } else { 16 };
        let name = format!("gang{g:03}");
        create_group(&c.client, "bench-gang", &name, Some(i64::from(size))).await;
        let names: Vec<String> = (0..size).map(|k| format!("{name}-{k:02}")).collect();
        let pods: Vec<_> = names
            .iter()
            .map(|n| with_requests(gpu_pod(n, 1, Some(&name), None)))
            .collect();
        create_many(&c.client, "bench-gang", pods).await;
        let created = Instant::now();
        wait_until("the gang bound", Duration::from_secs(60), || async {
            let t = times.lock().unwrap();
            names.iter().all(|n| t.contains_key(n))
        })
        .await;
        let done = {
            let t = times.lock().unwrap();
            names.iter().map(|n| t[n]).max().unwrap()
        };
        lat.entry(size)
            .or_default()
            .push(done.saturating_duration_since(created).as_secs_f64());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    task.abort();
    lat
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let a = args();
    let Some(bin) = harness::bin_dir("side_by_side") else {
        return;
    };
    let c = Cluster::start(&bin, "bench").await;
    for ns in ["bench-ks", "bench-gw", "bench-gang"] {
        c.namespace(ns).await;
    }
    add_nodes(&c, a.nodes).await;
    let (ks_rate, ks_bound, ks_mem) = kube_scheduler_phase(&c, &a).await;
    let (gw, gw_rate, gw_bound) = gangway_phase(&c, &a).await;
    let lat = gang_phase(&c, &a).await;
    let mut gangs = Vec::new();
    for (size, mut v) in lat {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let p = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        println!(
            "{size}-GPU gangs ({} of them): last pod to bound p50 {:.3} s, p90 {:.3} s, max {:.3} s",
            v.len(),
            p(0.5),
            p(0.9),
            v[v.len() - 1]
        );
        gangs.push(format!(
            "{size} GPUs p50 {:.2} s max {:.2} s",
            p(0.5),
            v[v.len() - 1]
        ));
    }
    let gw_mem = peak_kib(gw.pid()) / 1024;
    println!(
        "| {} | {ks_rate:.0} ({ks_bound} bound, {} MiB) | {gw_rate:.0} ({gw_bound} bound, {gw_mem} MiB) | {} |",
        a.nodes,
        ks_mem / 1024,
        gangs.join("; ")
    );
}
