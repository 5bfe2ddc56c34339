//! Watches every pod for a test's whole run and checks, at every change,
//! that no GPU index of a node is held by two pods at once and that no
//! node holds more GPUs than it has. A pod holds its GPUs from its binding
//! until it ends or is gone (a pod being deleted still holds them, as its
//! kubelet would until it stopped). Also records when each pod was bound.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};

/// What one pod holds.
#[derive(Clone, Debug)]
struct Held {
    key: String,
    node: String,
    indices: Option<Vec<u32>>,
    gpus: u32,
}

/// The checker's findings.
#[derive(Debug, Default)]
pub struct Findings {
    /// Every violation seen, in words.
    pub violations: Vec<String>,
    /// Per pod (`ns/name`): the node it was bound to and when.
    pub bound: BTreeMap<String, (String, Instant)>,
    /// Per pod uid: the node, seen once bound (a second, different one is a violation).
    nodes: BTreeMap<String, String>,
    held: BTreeMap<String, Held>,
    /// GPUs per node.
    pub capacity: BTreeMap<String, u32>,
    /// Most GPU pods seen holding at once.
    pub peak: usize,
}

/// A running checker.
pub struct Checker {
    /// What it found so far.
    pub findings: Arc<Mutex<Findings>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Checker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A pod's GPUs: its resources, as the kubelet counts them.
pub fn gpus_of(p: &Pod) -> u32 {
    p.spec
        .iter()
        .flat_map(|s| &s.containers)
        .filter_map(|c| c.resources.as_ref()?.limits.as_ref()?.get("nvidia.com/gpu"))
        .filter_map(|q| q.0.parse::<u32>().ok())
        .sum()
}

impl Checker {
    /// Starts watching; `capacity` gives each node's GPUs.
    pub fn start(client: &Client, capacity: BTreeMap<String, u32>) -> Checker {
        let findings = Arc::new(Mutex::new(Findings {
            capacity,
            ..Findings::default()
        }));
        let f = Arc::clone(&findings);
        let api: Api<Pod> = Api::all(client.clone());
        let task = tokio::spawn(async move {
            let stream = watcher(api, watcher::Config::default());
            futures::pin_mut!(stream);
            while let Some(ev) = stream.next().await {
                let Ok(ev) = ev else { continue };
                let mut f = f.lock().unwrap();
                match ev {
                    watcher::Event::Apply(p) | watcher::Event::InitApply(p) => f.update(&p),
                    watcher::Event::Delete(p) => {
                        f.held.remove(&p.uid().unwrap_or_default());
                    }
                    _ => {}
                }
            }
        });
        Checker { findings, task }
    }

    /// The violations so far.
    pub fn violations(&self) -> Vec<String> {
        self.findings.lock().unwrap().violations.clone()
    }
}

impl Findings {
    fn update(&mut self, p: &Pod) {
        let uid = p.uid().unwrap_or_default();
        let key = format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any());
        let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
        let phase = p
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        let Some(node) = node else {
            self.held.remove(&uid);
            return;
        };
        if let Some(was) = self.nodes.get(&uid)
            && *was != node
        {
            self.violations
                .push(format!("{key} was bound to {was} and then to {node}"));
        }
        self.nodes.insert(uid.clone(), node.clone());
        self.bound
            .entry(key.clone())
            .or_insert_with(|| (node.clone(), Instant::now()));
        if phase == "Succeeded" || phase == "Failed" {
            self.held.remove(&uid);
            return;
        }
        let gpus = gpus_of(p);
        if gpus == 0 {
            return;
        }
        let indices = p
            .annotations()
            .get("gangway.io/gpu-indices")
            .map(|t| t.split(',').filter_map(|x| x.trim().parse().ok()).collect());
        self.held.insert(
            uid,
            Held {
                key,
                node: node.clone(),
                indices,
                gpus,
            },
        );
        self.check(&node);
        self.peak = self.peak.max(self.held.len());
    }

    fn check(&mut self, node: &str) {
        let on: Vec<&Held> = self.held.values().filter(|h| h.node == node).collect();
        let mut owner: BTreeMap<u32, &str> = BTreeMap::new();
        let mut total = 0;
        let mut found = Vec::new();
        for h in &on {
            total += h.gpus;
            for g in h.indices.iter().flatten() {
                if let Some(other) = owner.insert(*g, &h.key) {
                    found.push(format!("GPU {g} of {node} held by {other} and {}", h.key));
                }
            }
        }
        if let Some(cap) = self.capacity.get(node)
            && total > *cap
        {
            found.push(format!("{node} holds {total} GPUs of {cap}"));
        }
        self.violations.extend(found);
    }
}
