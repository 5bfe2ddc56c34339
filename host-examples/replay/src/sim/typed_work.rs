//! Jobs whose run time depends on the GPU type they run on (Gavel's
//! traces): each has steps to run and a throughput per type of the
//! cluster; an attempt runs what is left at its type's speed, and a job
//! stopped on one type (preempted, interrupted) keeps the steps it did
//! and may resume on another.

use gangway_core::{GpuRequest, Topology};

use crate::throughputs::Throughputs;
use crate::trace::Work;

/// One job's work, and where it stands.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct TypedWork {
    /// Steps per second on each type of the cluster (indexed by
    /// `GpuTypeId`): on one server, and spread over several. 0: it cannot
    /// run there.
    rates: Vec<(f64, f64)>,
    /// Steps still to run.
    steps_left: f64,
    /// Steps per second of the attempt running now.
    rate: f64,
    /// When the running attempt started making progress (after its restart).
    progress_from_s: u64,
}

impl TypedWork {
    /// The work of `work` on `gpus` GPUs on the types of `topo`, at the
    /// speeds of `table` (a type the table lacks runs nothing).
    pub(super) fn new(work: &Work, gpus: u32, topo: &Topology, table: &Throughputs) -> TypedWork {
        let rates = topo
            .gpu_types()
            .iter()
            .map(|t| {
                let one = table.steps_per_s(&t.name, &work.class, gpus, true);
                let spread = table.steps_per_s(&t.name, &work.class, gpus, false);
                (one.unwrap_or(0.0), spread.or(one).unwrap_or(0.0))
            })
            .collect();
        TypedWork {
            rates,
            steps_left: work.steps as f64,
            rate: 0.0,
            progress_from_s: 0,
        }
    }

    /// Its speed on each type of the cluster, on one server, in
    /// thousandths of a step per second: what a policy that takes the GPU
    /// types is shown as its class's speeds (0: it cannot run there).
    pub(super) fn speeds(&self) -> Vec<u32> {
        self.rates
            .iter()
            .map(|(one, _)| (one * 1000.0).round().clamp(0.0, f64::from(u32::MAX)) as u32)
            .collect()
    }

    /// What the job asks of its GPUs: the types it runs on at all, in the
    /// topology's order (no preference among them: which is faster is a
    /// policy's knowledge, not the request's).
    pub(super) fn request(&self, topo: &Topology) -> GpuRequest {
        GpuRequest::types(
            topo.gpu_types()
                .iter()
                .zip(&self.rates)
                .filter(|(_, r)| r.0 > 0.0)
                .map(|(t, _)| t.name.clone()),
        )
    }

    /// An attempt starts at `t` on type `gpu_type`, spread over several
    /// servers or not, after a restart of `restart_s`: how long it runs.
    pub(super) fn start(&mut self, gpu_type: usize, spread: bool, t: u64, restart_s: u64) -> u64 {
        let (one, many) = self.rates.get(gpu_type).copied().unwrap_or((0.0, 0.0));
        self.rate = if spread { many } else { one };
        self.progress_from_s = t.saturating_add(restart_s);
        if self.rate <= 0.0 {
            // Cannot happen: the job asks only for types it runs on.
            return u64::MAX / 4;
        }
        let run = (self.steps_left / self.rate).ceil().max(1.0) as u64;
        run.saturating_add(restart_s)
    }

    /// The running attempt stops at `t` keeping `kept_s` seconds of its
    /// progress (all of it after a preemption; up to its last checkpoint
    /// after a failure): the steps done are no longer left.
    pub(super) fn stop(&mut self, t: u64, kept_s: Option<u64>) {
        let ran = t.saturating_sub(self.progress_from_s);
        let kept = kept_s.map_or(ran, |k| k.min(ran));
        self.steps_left = (self.steps_left - kept as f64 * self.rate).max(0.0);
        self.rate = 0.0;
    }

    /// Seconds of progress the running attempt has made by `t`.
    pub(super) fn progress_s(&self, t: u64) -> u64 {
        t.saturating_sub(self.progress_from_s)
    }

    /// The attempt ended: nothing is left.
    pub(super) fn finish(&mut self) {
        self.steps_left = 0.0;
        self.rate = 0.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_left_on_one_type_resumes_on_another() {
        let table = Throughputs::parse(
            "t.json",
            r#"{"k80": {"('A', 1)": {"null": 1.0}}, "v100": {"('A', 1)": {"null": 4.0}},
                "p100": {"('A', 1)": {"null": 0.0}}}"#,
        )
        .unwrap();
        let topo: crate::cluster_shape::ClusterSpec = "2x1:k80,2x1:v100,1x1:p100".parse().unwrap();
        let topo = topo.topology().unwrap();
        let work = Work {
            class: "A".into(),
            steps: 1000,
        };
        let mut w = TypedWork::new(&work, 1, &topo, &table);
        assert_eq!(w.request(&topo).types, ["k80", "v100"]);
        // 1000 steps on a K80: 1000 s; stopped after 400 s.
        assert_eq!(w.start(0, false, 0, 0), 1000);
        w.stop(400, None);
        // 600 left, on a V100 after a 60 s restart: 150 s + 60.
        assert_eq!(w.start(1, false, 1000, 60), 210);
        // A failure at 1160 s keeps the progress up to a checkpoint at 60 s of it.
        assert_eq!(w.progress_s(1160), 100);
        w.stop(1160, Some(60));
        assert_eq!(w.start(1, false, 2000, 0), 90);
    }
}
