//! Contract 2.2 in a round: the GPU types shown beside the fairness and
//! reclaim views of policies that take them ([`TypesView`]), and the types
//! the fairness policy chose applied to placement.

use gangway_plugin_sdk::{
    GpuTypeId, GpuTypeSummary, JobId, JobTypes, SlotContract, TypesView, VcId, VcTypeUsage,
};

use super::Round;
use crate::ServerId;
use crate::book::StartReach;
use crate::reach::Where;
use crate::state::Health;

impl Round<'_> {
    /// Whether slot `S`'s active policy is shown the GPU types this round:
    /// its manifest takes them and the cluster has several.
    pub(super) fn takes_types<S: SlotContract>(&self) -> bool {
        self.state.topology().is_heterogeneous() && self.policies.slot::<S>().manifest().gpu_types
    }

    /// The GPU types as a policy is shown them beside a view of `jobs`.
    pub(super) fn types_view(&self, jobs: impl IntoIterator<Item = JobId>) -> TypesView {
        let topo = self.state.topology();
        let n = topo.gpu_types().len();
        let mut types: Vec<GpuTypeSummary> = topo
            .gpu_types()
            .iter()
            .enumerate()
            .map(|(i, t)| GpuTypeSummary {
                id: GpuTypeId(u8::try_from(i).unwrap_or(u8::MAX)),
                memory_gb: t.memory_gb,
                ..GpuTypeSummary::default()
            })
            .collect();
        for (i, s) in topo.servers().iter().enumerate() {
            let id = ServerId(u32::try_from(i).unwrap_or(u32::MAX));
            if let Some(t) = types.get_mut(s.gpu_type.index())
                && self.state.health(id) != Some(Health::Down)
            {
                t.total_gpus = t.total_gpus.saturating_add(s.gpus);
                t.free_gpus = t.free_gpus.saturating_add(self.state.avail(id));
            }
        }
        let all: Vec<GpuTypeId> = types.iter().map(|t| t.id).collect();
        let mut ids: Vec<JobId> = jobs.into_iter().collect();
        ids.sort_unstable();
        ids.dedup();
        let jobs = ids
            .into_iter()
            .map(|job| JobTypes {
                job,
                allowed: self
                    .book
                    .gpu_types
                    .get(&job)
                    .map_or_else(|| all.clone(), |t| t.to_vec()),
                running: self.state.running_type(job),
                class: self.book.job_classes.get(&job).copied().unwrap_or(0),
            })
            .collect();
        TypesView {
            types,
            jobs,
            vcs: self.vc_types(n),
            speeds: self.book.class_speeds.clone(),
            servers: Vec::new(),
        }
    }

    /// The GPU type of each of `servers`, in their order.
    pub(super) fn server_types(
        &self,
        servers: &[gangway_plugin_sdk::ServerState],
    ) -> Vec<GpuTypeId> {
        let all = self.state.topology().servers();
        servers
            .iter()
            .map(|s| {
                all.get(s.id.index())
                    .map_or_else(GpuTypeId::default, |t| t.gpu_type)
            })
            .collect()
    }

    /// Every VC's use and quota of each of the `n` types, by (VC, type).
    pub(super) fn vc_types(&self, n: usize) -> Vec<VcTypeUsage> {
        let running = self.book.running_index();
        let vcs = self.book.vcs.len();
        let mut out = Vec::with_capacity(vcs.saturating_mul(n));
        for v in 0..vcs {
            let vc = VcId(u32::try_from(v).unwrap_or(u32::MAX));
            let quotas = self.book.type_quotas.get(&vc);
            for t in 0..n {
                let gpu_type = GpuTypeId(u8::try_from(t).unwrap_or(u8::MAX));
                // A VC with quotas per type may not use a type it does not
                // name: a nominal quota and a limit of 0.
                let quota = quotas.map(|q| q.get(&gpu_type).copied().unwrap_or_default());
                out.push(VcTypeUsage {
                    vc,
                    gpu_type,
                    held_gpus: running.held_of_type(vc, gpu_type),
                    nominal_gpus: quota.map(|q| q.nominal_gpus),
                    borrowing_limit_gpus: quota.and_then(|q| match quotas {
                        Some(qs) if !qs.contains_key(&gpu_type) => Some(0),
                        _ => q.borrowing_limit_gpus,
                    }),
                });
            }
        }
        out
    }

    /// Where job `id`'s gang of `gpus` may start now: where its VC's caps
    /// leave room ([`crate::book`]'s `start_reach`), and only on the type
    /// the fairness policy chose for it this round, if it chose one.
    pub(super) fn start_reach(&self, id: &JobId, gpus: u32) -> Option<StartReach<'_>> {
        let reach = self.book.start_reach(id, gpus)?;
        let Some(&chosen) = self.scratch.chosen.get(id) else {
            return Some(reach);
        };
        let kept = match reach.at() {
            Where::Types(r) => r.keeping(|t| t == chosen),
            _ => return Some(reach),
        };
        (!kept.sets.is_empty()).then_some(StartReach::Capped(kept))
    }
}
