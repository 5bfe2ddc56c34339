//! The sandbox's cost per round as one number, measured so that a shared
//! machine's drifting speed cancels out: the Philly-scale round of the
//! `wasm_round` bench (by default 1,000 pending jobs, all in the view),
//! natively and with the built-in policies as one Wasm module under the
//! default fuel budget, in alternating blocks of rounds. Each pair of
//! adjacent blocks gives one Wasm/native ratio; the median is printed, with
//! each side's fastest block (per round).
//!
//! `cargo run --release -p gangway-benches --example wasm_ratio [blocks] [rounds per block] [pending] [window]`
//! (window 0: every pending job in the view; 32 is the scheduler's default)

use std::time::{Duration, Instant};

use gangway_benches::{fallback_wasm_policies, philly_backlog};
use gangway_core::Scheduler;
use gangway_core::policy::PolicySet;
use gangway_core::wasm::{Budget, CallPath};

/// Runs `rounds` rounds of `sched` from `now`, returning the time they took.
fn block(sched: &mut Scheduler, now: &mut u64, rounds: u32) -> Duration {
    let start = Instant::now();
    for _ in 0..rounds {
        *now += 1;
        let report = sched.round(*now).expect("round");
        assert!(
            report.policy_errors.is_empty(),
            "{:?}",
            report.policy_errors
        );
    }
    start.elapsed()
}

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u32>());
    let blocks = args.next().and_then(Result::ok).unwrap_or(60);
    let rounds = args.next().and_then(Result::ok).unwrap_or(200);
    let pending = args.next().and_then(Result::ok).unwrap_or(1_000);
    let window = args.next().and_then(Result::ok).unwrap_or(0);
    let mut native = philly_backlog(PolicySet::fallbacks(), pending.into(), window as usize);
    let mut wasm = philly_backlog(
        fallback_wasm_policies(Budget::Fuel(Budget::DEFAULT_FUEL), CallPath::Direct),
        pending.into(),
        window as usize,
    );
    let (mut now_native, mut now_wasm) = (1_000, 1_000);
    // One block each to warm up.
    block(&mut native, &mut now_native, rounds);
    block(&mut wasm, &mut now_wasm, rounds);
    let mut ratios = Vec::new();
    let (mut best_native, mut best_wasm) = (Duration::MAX, Duration::MAX);
    for _ in 0..blocks {
        let n = block(&mut native, &mut now_native, rounds);
        let w = block(&mut wasm, &mut now_wasm, rounds);
        best_native = best_native.min(n);
        best_wasm = best_wasm.min(w);
        ratios.push(w.as_secs_f64() / n.as_secs_f64());
    }
    ratios.sort_by(f64::total_cmp);
    let per_round = |d: Duration| d.as_secs_f64() * 1e6 / f64::from(rounds);
    println!(
        "{blocks} blocks of {rounds} rounds, {pending} pending jobs, view window {window}:\n\
         fastest block: native {:.1} us/round, wasm {:.1} us/round ({:.2}x)\n\
         wasm/native of adjacent blocks: median {:.2}, quartiles {:.2}-{:.2}",
        per_round(best_native),
        per_round(best_wasm),
        best_wasm.as_secs_f64() / best_native.as_secs_f64(),
        ratios[ratios.len() / 2],
        ratios[ratios.len() / 4],
        ratios[ratios.len() * 3 / 4],
    );
}
