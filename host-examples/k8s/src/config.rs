//! The scheduler's configuration: a TOML file (every key optional), some
//! keys also settable on the command line.
//!
//! ```toml
//! scheduler_name = "gangway"            # pods with this spec.schedulerName are ours
//! namespace = "gangway-system"          # where the Lease and the two ConfigMaps live
//! gpu_resource = "nvidia.com/gpu"       # the extended resource that counts GPUs
//! levels = ["topology.kubernetes.io/zone", "gangway.io/rack"]  # node labels, widest first
//! gpu_type_label = "nvidia.com/gpu.product"   # node label naming its GPU type ("": one type)
//! gpu_memory_label = "nvidia.com/gpu.memory"  # node label: MiB of one GPU (GPU Feature Discovery's)
//! vc_label = ""                         # "": a gang's VC is its namespace; else this pod label
//! vcs_configmap = "gangway-vcs"         # VC name -> quota in GPUs, "none", or "A100=8+4,..." per type
//! policies_configmap = "gangway-policies"  # Wasm modules hot-swapped per slot
//! preset = "philly"                     # the catalog preset (native policies)
//! cycle_ms = 20                         # a cycle at most this soon after a change
//! resync_s = 2                          # and at least this often
//! bind_concurrency = 64                 # Binding requests in flight at once
//! view_window = 1024                    # pending gangs per VC a round considers (0: all)
//! not_ready_grace_s = 300               # a NotReady node keeps its gangs this long
//! gpu_drop_grace_s = 60                 # a node's GPU count may read low this long
//! min_run_s = 300                       # reclaim and defragment leave younger gangs alone
//! locality_widen_after_s = []           # the delay ladder; []: sized to the cluster
//! metrics_addr = "0.0.0.0:10251"        # /metrics, /healthz, /readyz
//! healthz_stuck_s = 0                   # /healthz fails after the loop stalls this long (0: 10 resyncs, at least 60 s)
//! leader_elect = true                   # a coordination.k8s.io Lease; only the leader binds
//! lease_name = "gangway-scheduler"
//! lease_duration_s = 15
//! renew_s = 5
//! ```

use std::path::Path;

use serde::Deserialize;

use super::K8sError;

/// The configuration (see the module docs for the file).
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Pods whose `spec.schedulerName` is this are scheduled by us.
    pub scheduler_name: String,
    /// The scheduler's own namespace: its Lease and ConfigMaps.
    pub namespace: String,
    /// The extended resource that counts GPUs on nodes and pods.
    pub gpu_resource: String,
    /// Node labels naming topology levels between the cluster and the
    /// node, widest first (e.g. zone, then rack). A node without one of
    /// them is in a domain named `(none)` at that level.
    pub levels: Vec<String>,
    /// The node label naming the type of a node's GPUs (GPU Feature
    /// Discovery sets `nvidia.com/gpu.product`); a gang runs on one type.
    /// Nodes without it are of the type `gpu`; empty: every GPU is alike.
    pub gpu_type_label: String,
    /// The node label giving the memory of one of its GPUs in MiB (GPU
    /// Feature Discovery's `nvidia.com/gpu.memory`), for gangs that ask
    /// for a minimum; a type's memory is the least its nodes report.
    pub gpu_memory_label: String,
    /// The pod label naming a gang's virtual cluster; empty: its namespace.
    pub vc_label: String,
    /// ConfigMap (in `namespace`) listing the virtual clusters and their
    /// GPU quotas (of any type, or per type: see [`crate::vcs`]). When it
    /// does not exist, every VC is admitted without a quota; when it does,
    /// a gang of an unlisted VC is refused with an Event.
    pub vcs_configmap: String,
    /// ConfigMap (in `namespace`) holding Wasm policy modules to swap in.
    pub policies_configmap: String,
    /// The catalog preset whose native policies fill every slot.
    pub preset: String,
    /// Milliseconds a cycle waits after a change, to batch changes.
    pub cycle_ms: u64,
    /// Seconds between cycles when nothing changes.
    pub resync_s: u64,
    /// Binding requests in flight at once.
    pub bind_concurrency: usize,
    /// Pending gangs of each VC a round shows the fairness policy (0: all);
    /// at most this many gangs of one VC start in one round.
    pub view_window: usize,
    /// Seconds a node that is not Ready keeps its gangs (draining: no new
    /// ones) before they are evicted. Kubernetes' own default: pods
    /// tolerate `node.kubernetes.io/not-ready` for 300 s.
    pub not_ready_grace_s: u64,
    /// Seconds a node's GPU count may read lower than before (a device
    /// plugin or kubelet restart reads 0 for a moment) before the drop is
    /// believed; meanwhile the node keeps its gangs and takes no new ones.
    pub gpu_drop_grace_s: u64,
    /// The preset's `delay` locality ladder in seconds (how long a gang
    /// waits before it may span one level more); empty: sized to the
    /// cluster (`policies::sized_ladder`). Ignored when the preset's
    /// locality policy is not `delay` or a module holds the slot.
    pub locality_widen_after_s: Vec<u64>,
    /// Seconds a gang runs before a reclaim or defragment policy may stop
    /// or move it (deleting a gang's pods loses their work and their
    /// start-up).
    pub min_run_s: u64,
    /// Where `/metrics`, `/healthz` and `/readyz` are served ("" = off).
    pub metrics_addr: String,
    /// Seconds the scheduling loop may go without turning before
    /// `/healthz` fails (0: ten resyncs, at least a minute).
    pub healthz_stuck_s: u64,
    /// Elect a leader with a Lease (off: this replica always binds).
    pub leader_elect: bool,
    /// The Lease's name (in `namespace`).
    pub lease_name: String,
    /// How long a Lease holds without renewal.
    pub lease_duration_s: u64,
    /// How often the leader renews it.
    pub renew_s: u64,
    /// This replica's identity in the Lease (default: `$POD_NAME`, else
    /// the host name and process id).
    pub identity: String,
    /// Where the configuration came from (for errors).
    #[serde(skip)]
    pub file: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            scheduler_name: "gangway".into(),
            namespace: "gangway-system".into(),
            gpu_resource: "nvidia.com/gpu".into(),
            levels: vec!["topology.kubernetes.io/zone".into()],
            gpu_type_label: "nvidia.com/gpu.product".into(),
            gpu_memory_label: "nvidia.com/gpu.memory".into(),
            vc_label: String::new(),
            vcs_configmap: "gangway-vcs".into(),
            policies_configmap: "gangway-policies".into(),
            preset: "philly".into(),
            cycle_ms: 20,
            resync_s: 2,
            bind_concurrency: 64,
            view_window: 1024,
            not_ready_grace_s: 300,
            gpu_drop_grace_s: 60,
            min_run_s: 300,
            locality_widen_after_s: Vec::new(),
            metrics_addr: "0.0.0.0:10251".into(),
            healthz_stuck_s: 0,
            leader_elect: true,
            lease_name: "gangway-scheduler".into(),
            lease_duration_s: 15,
            renew_s: 5,
            identity: String::new(),
            file: "(defaults)".into(),
        }
    }
}

impl Config {
    /// Reads a configuration file; every key is optional.
    pub fn load(path: &Path) -> Result<Config, K8sError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| K8sError::Config {
            file: file.clone(),
            message: format!("cannot read: {e}"),
        })?;
        Config::parse(&text, &file)
    }

    /// Parses a configuration from its text, `file` naming it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Config, K8sError> {
        let mut cfg: Config = toml::from_str(text).map_err(|e| K8sError::Config {
            file: file.to_string(),
            message: e.to_string(),
        })?;
        cfg.file = file.to_string();
        cfg.check()?;
        Ok(cfg)
    }

    /// Checks values no type can: names not empty, times positive.
    pub fn check(&self) -> Result<(), K8sError> {
        let bad = |message: String| K8sError::Config {
            file: self.file.clone(),
            message,
        };
        for (key, value) in [
            ("scheduler_name", &self.scheduler_name),
            ("namespace", &self.namespace),
            ("gpu_resource", &self.gpu_resource),
            ("lease_name", &self.lease_name),
        ] {
            if value.trim().is_empty() {
                return Err(bad(format!("{key} must not be empty")));
            }
        }
        if self.levels.iter().any(|l| l.trim().is_empty()) {
            return Err(bad("levels: a label key is empty".into()));
        }
        if self.resync_s == 0 || self.lease_duration_s == 0 || self.renew_s == 0 {
            return Err(bad(
                "resync_s, lease_duration_s and renew_s must be at least 1".into(),
            ));
        }
        if self.renew_s >= self.lease_duration_s {
            return Err(bad(format!(
                "renew_s ({}) must be below lease_duration_s ({})",
                self.renew_s, self.lease_duration_s
            )));
        }
        if self.bind_concurrency == 0 {
            return Err(bad("bind_concurrency must be at least 1".into()));
        }
        Ok(())
    }

    /// How long the scheduling loop may go without turning before
    /// `/healthz` fails: ten resyncs, at least a minute (a cycle binding a
    /// large burst against a slow API server takes seconds).
    pub fn stuck_after(&self) -> std::time::Duration {
        let auto = self.resync_s.saturating_mul(10).max(60);
        std::time::Duration::from_secs(if self.healthz_stuck_s > 0 {
            self.healthz_stuck_s
        } else {
            auto
        })
    }

    /// The node signals' grace periods.
    pub fn grace(&self) -> crate::host::nodes::Grace {
        crate::host::nodes::Grace {
            not_ready_ms: self.not_ready_grace_s.saturating_mul(1000),
            gpu_drop_ms: self.gpu_drop_grace_s.saturating_mul(1000),
        }
    }

    /// This replica's identity: the configured one, `$POD_NAME`, or the
    /// host name and process id.
    pub fn identity(&self) -> String {
        if !self.identity.is_empty() {
            return self.identity.clone();
        }
        if let Ok(pod) = std::env::var("POD_NAME")
            && !pod.is_empty()
        {
            return pod;
        }
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "gangway".into());
        format!("{host}_{}", std::process::id())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        let cfg = Config::parse("levels = [\"rack\"]\ncycle_ms = 5\n", "t.toml").unwrap();
        assert_eq!(cfg.levels, ["rack"]);
        assert_eq!(cfg.cycle_ms, 5);
        assert_eq!(cfg.scheduler_name, "gangway");
        assert_eq!(cfg.file, "t.toml");
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        let e = Config::parse("nope = 1\n", "t.toml").unwrap_err();
        assert!(
            e.to_string().contains("t.toml") && e.to_string().contains("nope"),
            "{e}"
        );
        let e = Config::parse("renew_s = 20\n", "t.toml").unwrap_err();
        assert!(e.to_string().contains("renew_s (20)"), "{e}");
        let e = Config::parse("namespace = \" \"\n", "t.toml").unwrap_err();
        assert!(e.to_string().contains("namespace must not be empty"), "{e}");
    }
}
