//! The cluster's use over a replay's arrival window.

use gangway_core::Scheduler;

use super::Sample;
use crate::trace::Trace;

/// The cluster's use over the arrival window: time-weighted means and
/// periodic samples.
pub(super) struct Meter {
    /// The last arrival: the window's end.
    arrival_end: u64,
    /// Seconds between samples.
    sample_step: u64,
    /// When the next sample is due.
    next_sample: u64,
    /// Samples for plots.
    pub(super) samples: Vec<Sample>,
    /// Integral of allocated / online GPUs over time.
    pub(super) alloc_integral: f64,
    /// Integral of GPUs held over time, per VC.
    pub(super) vc_integral: Vec<f64>,
    /// Accounted up to here.
    last_t: u64,
}

impl Meter {
    /// A meter of `trace`'s arrival window over `vcs` VCs.
    pub(super) fn new(trace: &Trace, vcs: usize) -> Self {
        let arrival_end = trace.jobs.last().map_or(0, |j| j.submit_s);
        Meter {
            arrival_end,
            sample_step: (arrival_end / 2000).max(60),
            next_sample: 0,
            samples: Vec::new(),
            alloc_integral: 0.0,
            vc_integral: vec![0.0; vcs],
            last_t: 0,
        }
    }

    /// Accounts the state `sched` held over [last accounted, `t`), and
    /// takes the samples due by `t`.
    #[inline]
    pub(super) fn account(&mut self, sched: &Scheduler, t: u64) {
        let window_end = t.min(self.arrival_end);
        if window_end > self.last_t {
            let dt = (window_end - self.last_t) as f64;
            let state = sched.state();
            let online = state.online_gpus().max(1) as f64;
            self.alloc_integral += state.allocated_gpus() as f64 / online * dt;
            for (v, acc) in sched.virtual_clusters().iter().zip(&mut self.vc_integral) {
                *acc += f64::from(v.held_gpus) * dt;
            }
        }
        while self.next_sample <= t && self.next_sample <= self.arrival_end {
            self.samples.push(Sample {
                t_s: self.next_sample,
                allocated: sched.state().allocated_gpus(),
                online: sched.state().online_gpus(),
                per_vc: sched
                    .virtual_clusters()
                    .iter()
                    .map(|v| v.held_gpus)
                    .collect(),
            });
            self.next_sample += self.sample_step;
        }
        self.last_t = self.last_t.max(t);
    }

    /// The window's length, for means (at least 1 s).
    pub(super) fn span(&self) -> f64 {
        self.arrival_end.max(1) as f64
    }
}
