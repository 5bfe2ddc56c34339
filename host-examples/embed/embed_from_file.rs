//! The README's embedding example, run as written: a scheduler with the
//! built-in policies, a failed attempt retried, a policy module loaded from
//! a file and swapped into two slots between rounds, the running jobs, and
//! a snapshot restored with the same policies. The module is the built-in
//! LAS, written to a temporary file first (a host would load its own).
//!
//! `cargo run -p gangway-embed --example embed_from_file`
//! (also run by `cargo test`).

use gangway_core::policy::{Fairness, PolicySet, Reclaim};
use gangway_core::snapshot::Snapshot;
use gangway_core::wasm::{PolicyEngine, SandboxConfig};
use gangway_core::{AttemptEnd, FailureClass, JobId, JobSpec, Scheduler, Slot, Topology};

fn run(module: &std::path::Path) -> Result<String, Box<dyn std::error::Error>> {
    let mut log = String::new();
    // 2 racks of 4 servers with 8 GPUs each, built-in policies in every slot.
    let mut sched = Scheduler::with_policies(Topology::uniform(2, 4, 8)?, PolicySet::fallbacks());
    let vc = sched.virtual_cluster("research");
    sched.set_quota(vc, Some(32));
    sched.submit(JobSpec {
        id: JobId(1),
        vc,
        user: 0,
        gpus: 16,
        submitted_s: 0,
    })?;

    let round = sched.round(1)?;
    for start in &round.starts {
        log.push_str(&format!(
            "{} on {} servers\n",
            start.job, start.choice.servers
        ));
    }
    for job in sched.running_jobs(300) {
        log.push_str(&format!(
            "{} holds {} GPUs, {} GPU-s so far\n",
            job.id, job.gpus, job.attained_gpu_s
        ));
    }
    sched.end_attempt(
        JobId(1),
        600,
        AttemptEnd::Failed {
            class: FailureClass::CudaFailure,
            last: false,
        },
    )?;

    let engine = PolicyEngine::new(SandboxConfig::default())?;
    let las = engine.load_file(module)?;
    sched.swap::<Fairness>(las.backend::<Fairness>(b"")?);
    sched.swap::<Reclaim>(las.backend::<Reclaim>(b"")?);

    let round = sched.round(601)?;
    if round.swapped != [Slot::Fairness, Slot::Reclaim] {
        return Err(format!("swapped {:?}", round.swapped).into());
    }
    if round.starts.len() != 1 {
        return Err(format!("{} starts after the retry", round.starts.len()).into());
    }
    log.push_str(&format!(
        "fairness: {}, reclaim: {}\n",
        sched.policies().name(Slot::Fairness),
        sched.policies().name(Slot::Reclaim)
    ));
    sched.check_invariants()?;

    let bytes = sched.snapshot().to_bytes()?;
    let policies = PolicySet::fallbacks()
        .with::<Fairness>(las.backend::<Fairness>(b"")?)
        .with::<Reclaim>(las.backend::<Reclaim>(b"")?);
    let restored = Scheduler::restore(
        Topology::uniform(2, 4, 8)?,
        policies,
        Snapshot::from_bytes(&bytes)?,
    )?;
    if restored.jobs() != sched.jobs() {
        return Err("the restored scheduler's jobs differ".into());
    }
    log.push_str(&format!("restored {} jobs\n", restored.jobs().len()));
    Ok(log)
}

/// Writes the built-in LAS module to a file of its own and runs the example.
fn with_module_file() -> Result<String, Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("gangway-embed-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("las.wasm");
    std::fs::write(
        &path,
        gangway_plugin_artifacts::module("las").ok_or("no las module")?,
    )?;
    let log = run(&path);
    std::fs::remove_dir_all(&dir)?;
    log
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    print!("{}", with_module_file()?);
    Ok(())
}

#[test]
fn the_readme_example_runs() {
    let log = with_module_file().unwrap();
    assert!(log.contains("job 1 on 2 servers"), "{log}");
    assert!(
        log.contains("job 1 holds 16 GPUs, 4784 GPU-s so far"),
        "{log}"
    );
    assert!(
        log.contains("fairness: las.wasm, reclaim: las.wasm"),
        "{log}"
    );
    assert!(log.contains("restored 1 jobs"), "{log}");
}
