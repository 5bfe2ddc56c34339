//! The virtual clusters (tenants): their configuration, their names, and
//! the counters the book keeps for each (GPUs held and asked for, GPU time
//! received).

use std::collections::HashMap;

use gangway_plugin_sdk::{VcId, VcUsage};

/// A virtual cluster (tenant) and its bookkeeping.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VirtualCluster {
    /// Its name.
    pub name: String,
    /// Its GPU quota, if any.
    pub quota_gpus: Option<u32>,
    /// Its weight for weighted fair shares.
    pub weight: u32,
    /// GPUs its running jobs hold.
    pub held_gpus: u32,
    /// GPU-seconds its jobs received (finished attempts).
    pub attained_gpu_s: u64,
    /// GPUs its pending jobs ask for.
    pub pending_gpus: u32,
    /// Its pending jobs.
    pub pending_jobs: u32,
}

/// Every virtual cluster, indexed by [`VcId`], and their names.
#[derive(Clone, Debug, Default)]
pub(crate) struct Vcs {
    list: Vec<VirtualCluster>,
    names: HashMap<String, VcId>,
}

impl Vcs {
    /// The id of the VC named `name`, created (without a quota) on first use.
    pub(crate) fn named(&mut self, name: &str) -> VcId {
        if let Some(id) = self.names.get(name) {
            return *id;
        }
        let id = VcId(u32::try_from(self.list.len()).unwrap_or(u32::MAX));
        self.list.push(VirtualCluster {
            name: name.to_string(),
            quota_gpus: None,
            weight: 1,
            held_gpus: 0,
            attained_gpu_s: 0,
            pending_gpus: 0,
            pending_jobs: 0,
        });
        self.names.insert(name.to_string(), id);
        id
    }

    /// The id of the VC named `name`, if it exists.
    pub(crate) fn find(&self, name: &str) -> Option<VcId> {
        self.names.get(name).copied()
    }

    /// Every VC, by id.
    pub(crate) fn list(&self) -> &[VirtualCluster] {
        &self.list
    }

    /// How many VCs there are.
    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    /// VC `vc`'s record, to configure it (quota, weight) or restore it.
    pub(crate) fn get_mut(&mut self, vc: VcId) -> Option<&mut VirtualCluster> {
        self.list.get_mut(vc.0 as usize)
    }

    /// Every VC's configuration and use, as views show them.
    pub(crate) fn usage(&self) -> Vec<VcUsage> {
        self.list
            .iter()
            .enumerate()
            .map(|(i, v)| VcUsage {
                id: VcId(u32::try_from(i).unwrap_or(u32::MAX)),
                quota_gpus: v.quota_gpus,
                weight: v.weight,
                held_gpus: v.held_gpus,
                pending_gpus: v.pending_gpus,
                attained_gpu_s: v.attained_gpu_s,
                pending_jobs: v.pending_jobs,
            })
            .collect()
    }

    /// A job of `gpus` GPUs of `vc` became pending.
    pub(crate) fn add_pending(&mut self, vc: VcId, gpus: u32) {
        if let Some(v) = self.list.get_mut(vc.0 as usize) {
            v.pending_gpus += gpus;
            v.pending_jobs += 1;
        }
    }

    /// A pending job of `gpus` GPUs of `vc` stopped being pending.
    pub(crate) fn remove_pending(&mut self, vc: VcId, gpus: u32) {
        if let Some(v) = self.list.get_mut(vc.0 as usize) {
            v.pending_gpus = v.pending_gpus.saturating_sub(gpus);
            v.pending_jobs = v.pending_jobs.saturating_sub(1);
        }
    }

    /// A job of `vc` started on `gpus` GPUs.
    pub(crate) fn add_held(&mut self, vc: VcId, gpus: u32) {
        if let Some(v) = self.list.get_mut(vc.0 as usize) {
            v.held_gpus += gpus;
        }
    }

    /// A job of `vc` released `gpus` GPUs after `used` GPU-seconds.
    pub(crate) fn book_stop(&mut self, vc: VcId, gpus: u32, used: u64) {
        if let Some(v) = self.list.get_mut(vc.0 as usize) {
            v.held_gpus = v.held_gpus.saturating_sub(gpus);
            v.attained_gpu_s += used;
        }
    }
}
