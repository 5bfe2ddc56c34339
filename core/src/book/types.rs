//! The book's knowledge of where each job may run: the GPU types it may
//! use and the servers a host restricted it to, kept together as its
//! [`Reach`].

use std::sync::Arc;

use gangway_plugin_sdk::{GpuTypeId, JobId, Level};

use super::JobBook;
use crate::reach::{Reach, Where};
use crate::server_set::ServerSet;

impl JobBook {
    /// Where job `id` may be placed.
    #[inline]
    pub(crate) fn reach_of(&self, id: &JobId) -> Where<'_> {
        if !self.reach.is_empty()
            && let Some(reach) = self.reach.get(id)
        {
            return Where::Types(reach);
        }
        match self.allowed.get(id) {
            Some(set) => Where::Among(set),
            None => Where::Anywhere,
        }
    }

    /// Allows job `id` on `types` only, most preferred first. A queued
    /// job's entry is filed again: its narrowest spread depends on its
    /// types (a restored job is queued before its types are known).
    pub(crate) fn set_gpu_types(&mut self, id: JobId, types: Arc<[GpuTypeId]>) {
        self.gpu_types.insert(id, types);
        self.refresh_reach(id);
        if let Some(job) = self.records.get(&id)
            && self.queues.get(job).is_some()
        {
            let queued = self.queued(job);
            self.queues.remove(job);
            self.queues.insert(job, queued);
        }
    }

    /// Restricts job `id` to the servers of `allowed` (`None`: anywhere).
    pub(crate) fn restrict(&mut self, id: JobId, allowed: Option<Arc<ServerSet>>) {
        match allowed {
            Some(set) => {
                self.allowed.insert(id, set);
            }
            None => {
                self.allowed.remove(&id);
            }
        }
        self.refresh_reach(id);
    }

    /// Drops what the book knows of job `id`'s types.
    pub(crate) fn forget_types(&mut self, id: JobId) {
        self.gpu_types.remove(&id);
        self.reach.remove(&id);
        self.job_classes.remove(&id);
    }

    /// Rebuilds job `id`'s reach from its types and restriction.
    fn refresh_reach(&mut self, id: JobId) {
        let Some(types) = self.gpu_types.get(&id) else {
            return;
        };
        let allowed = self.allowed.get(&id).map(|a| &**a);
        let reach = Reach::of(&self.topology, types, allowed);
        self.reach.insert(id, Arc::new(reach));
    }

    /// The narrowest level and fewest servers that can ever hold job `id`'s
    /// gang of `gpus`: over the whole topology, or over its GPU types.
    pub(crate) fn min_spread(&self, id: JobId, gpus: u32) -> (Level, u32) {
        let topo = &self.topology;
        match self.gpu_types.get(&id) {
            Some(types) => topo
                .min_spread_among(crate::GpuTypeSet::of(types.iter().copied()), gpus)
                .unwrap_or((Level::ANY, u32::MAX)),
            None => (
                topo.min_level_for(gpus).unwrap_or(Level::ANY),
                topo.min_servers_for(gpus).unwrap_or(u32::MAX),
            ),
        }
    }
}
