//! One scheduling round with 1,000 pending jobs, on the Philly topology
//! (552 servers, 2,490 GPUs) and on a 100,000-GPU topology, with the built-in
//! native policies (FIFO within quotas, strict locality, backfill); and on
//! the Philly topology with 1,000, 10,000 and 100,000 pending jobs, where a
//! round shows fairness each VC's first 32 jobs (the default view window;
//! FIFO within quotas declares its order), so its cost grows with the
//! window, not the backlog.
//!
//! * `backlog`: the steady state of a busy cluster. All but 64 GPUs are
//!   busy and 1,000 jobs wait (8 VCs); after a warm-up round, every round
//!   builds the view (each VC's first 32 jobs), runs the three policies and
//!   searches a placement for each eligible job (most fail). The state does
//!   not change between iterations, so the same round is measured each
//!   time. `backlog_all_viewed` is the same round with no view window: all
//!   1,000 jobs in the view.
//! * `placing`: a half-empty cluster where the round places hundreds of the
//!   1,000 jobs (fresh state per iteration).
//!
//! `cargo bench -p gangway-benches --bench round`

// criterion_group! generates an undocumented public function.
#![allow(missing_docs)]

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use gangway_benches::{hundred_thousand_gpus, loaded_scheduler, philly_official};
use gangway_core::Topology;
use gangway_core::policy::PolicySet;

fn backlog(c: &mut Criterion, name: &str, topo: Topology, window: usize) {
    // Leave 64 GPUs free whatever the cluster's size.
    let fill = 1.0 - 64.0 / f64::from(topo.total_gpus());
    let mut sched = loaded_scheduler(topo, fill, 1_000, PolicySet::fallbacks());
    sched.set_view_window(window);
    let warm = sched.round(1_000).expect("round");
    assert!(sched.pending_len() > 500, "the backlog must stay pending");
    let viewed = warm.waiting.len() + warm.starts.len();
    assert!(
        if window == 0 {
            viewed > 500
        } else {
            viewed <= 8 * window
        },
        "{viewed} jobs viewed with window {window}"
    );
    let mut now = 1_000;
    c.bench_function(name, |b| {
        b.iter(|| {
            now += 1;
            sched.round(now).expect("round")
        })
    });
}

fn rounds(c: &mut Criterion) {
    let window = gangway_core::Scheduler::DEFAULT_VIEW_WINDOW;
    backlog(
        c,
        "round_1000_pending/philly_552_servers/backlog",
        philly_official().expect("topology"),
        window,
    );
    backlog(
        c,
        "round_1000_pending/philly_552_servers/backlog_all_viewed",
        philly_official().expect("topology"),
        0,
    );
    backlog(
        c,
        "round_1000_pending/100k_gpus/backlog",
        hundred_thousand_gpus().expect("topology"),
        window,
    );
    let mut group = c.benchmark_group("round_1000_pending");
    group.sample_size(20);
    group.bench_function("philly_552_servers/placing", |b| {
        b.iter_batched(
            || {
                let topo = philly_official().expect("topology");
                loaded_scheduler(topo, 0.5, 1_000, PolicySet::fallbacks())
            },
            |mut sched| sched.round(10_000).expect("round"),
            BatchSize::LargeInput,
        )
    });
    group.finish();
    let mut group = c.benchmark_group("round_backlog_philly");
    for pending in [1_000usize, 10_000, 100_000] {
        let topo = philly_official().expect("topology");
        let fill = 1.0 - 64.0 / f64::from(topo.total_gpus());
        let mut sched = loaded_scheduler(topo, fill, pending, PolicySet::fallbacks());
        sched.round(1_000).expect("round");
        let mut now = 1_000;
        group.bench_function(format!("{pending}_pending"), |b| {
            b.iter(|| {
                now += 1;
                sched.round(now).expect("round")
            })
        });
    }
    group.finish();
}

criterion_group!(benches, rounds);
criterion_main!(benches);
