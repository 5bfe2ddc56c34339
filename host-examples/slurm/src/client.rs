//! The client commands: `submit`, `status`, `why`, `cancel`, `swap`, and
//! how their answers are printed.

use std::fmt::Write as _;
use std::path::Path;

use super::SlurmError;
use super::protocol::{JobReport, Request, Response, StatusReport, call};

fn expect_done(response: Response) -> Result<String, SlurmError> {
    match response {
        Response::Done(text) => Ok(text),
        Response::Refused(why) => Err(SlurmError::Refused(why)),
        other => Err(SlurmError::Protocol(format!("unexpected answer {other:?}"))),
    }
}

/// Submits a job; returns its id.
pub fn submit(
    socket: &Path,
    gpus: u32,
    vc: &str,
    user: &str,
    cmd: Vec<String>,
    cwd: &Path,
) -> Result<u64, SlurmError> {
    let request = Request::Submit {
        gpus,
        vc: vc.to_string(),
        user: user.to_string(),
        cmd,
        cwd: cwd.display().to_string(),
    };
    match call(socket, &request)? {
        Response::Submitted(id) => Ok(id),
        Response::Refused(why) => Err(SlurmError::Refused(why)),
        other => Err(SlurmError::Protocol(format!("unexpected answer {other:?}"))),
    }
}

/// The daemon's status report.
pub fn status(socket: &Path) -> Result<StatusReport, SlurmError> {
    match call(socket, &Request::Status)? {
        Response::Status(report) => Ok(*report),
        Response::Refused(why) => Err(SlurmError::Refused(why)),
        other => Err(SlurmError::Protocol(format!("unexpected answer {other:?}"))),
    }
}

/// One job's report.
pub fn why(socket: &Path, id: u64) -> Result<JobReport, SlurmError> {
    match call(socket, &Request::Why(id))? {
        Response::Job(report) => Ok(*report),
        Response::Refused(why) => Err(SlurmError::Refused(why)),
        other => Err(SlurmError::Protocol(format!("unexpected answer {other:?}"))),
    }
}

/// Cancels a job.
pub fn cancel(socket: &Path, id: u64) -> Result<String, SlurmError> {
    expect_done(call(socket, &Request::Cancel(id))?)
}

/// Stages a Wasm module in a slot.
pub fn swap(
    socket: &Path,
    slot: &str,
    module: &Path,
    config: Option<&Path>,
) -> Result<String, SlurmError> {
    let wasm = super::policies::read_module(module)?;
    let config = match config {
        Some(p) => {
            std::fs::read(p).map_err(|e| SlurmError::io(format!("reading {}", p.display()), e))?
        }
        None => Vec::new(),
    };
    let request = Request::Swap {
        slot: slot.to_string(),
        name: module.display().to_string(),
        wasm,
        config,
    };
    expect_done(call(socket, &request)?)
}

/// Rolls a slot back.
pub fn rollback(socket: &Path, slot: &str) -> Result<String, SlurmError> {
    expect_done(call(
        socket,
        &Request::Rollback {
            slot: slot.to_string(),
        },
    )?)
}

fn placement(p: &[(String, Vec<u32>)]) -> String {
    p.iter()
        .map(|(n, g)| {
            let g: Vec<String> = g.iter().map(u32::to_string).collect();
            format!("{n}:{}", g.join(","))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn waits(w: &[(String, u64)]) -> String {
    if w.is_empty() {
        return "-".into();
    }
    w.iter()
        .map(|(r, s)| format!("{r} {s}s"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The status report as a table.
pub fn format_status(r: &StatusReport) -> String {
    let mut out = String::new();
    let ago = |since_ms: u64| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        now.saturating_sub(since_ms) / 1000
    };
    if let Some((since, why)) = &r.slurm_unreachable {
        let _ = writeln!(
            out,
            "SLURM UNREACHABLE for {} s: {why}\n  holding: no job is re-queued, failed or launched until Slurm answers",
            ago(*since)
        );
    }
    if let Some((since, why)) = &r.queue_held {
        let _ = writeln!(
            out,
            "QUEUE HELD for {} s: {why}\n  nothing is launched until the configuration is fixed (tried again every 30 s)",
            ago(*since)
        );
    }
    if let Some(note) = &r.state_note {
        let _ = writeln!(out, "state: {note}");
    }
    let free: u32 = r.nodes.iter().map(|n| n.free).sum();
    let total: u32 = r.nodes.iter().map(|n| n.gpus).sum();
    let _ = writeln!(
        out,
        "cluster: {} nodes, {free}/{total} GPUs free, {} held by jobs started in Slurm directly",
        r.nodes.len(),
        r.foreign_gpus
    );
    for n in &r.nodes {
        let _ = writeln!(
            out,
            "  {:<10} rack {:<8} {:>2}/{:<2} free  {}",
            n.name, n.rack, n.free, n.gpus, n.health
        );
    }
    let _ = write!(out, "policies:");
    for p in &r.policies {
        let _ = write!(out, " {}={}", p.slot, p.active);
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "pending ({}):", r.pending.len());
    let _ = writeln!(
        out,
        "  {:>6} {:<10} {:<8} {:>4}  {:<15} {:>7}  waited by reason",
        "job", "vc", "user", "gpus", "reason", "waiting"
    );
    for j in &r.pending {
        let _ = writeln!(
            out,
            "  {:>6} {:<10} {:<8} {:>4}  {:<15} {:>6}s  {}",
            j.id,
            j.vc,
            j.user,
            j.gpus,
            j.reason.as_deref().unwrap_or("(next round)"),
            j.waiting_s,
            waits(&j.wait)
        );
    }
    let _ = writeln!(out, "running ({}):", r.running.len());
    for j in &r.running {
        let _ = writeln!(
            out,
            "  {:>6} {:<10} {:<8} {:>4}  {:<9} slurm {:<6} on {}",
            j.id,
            j.vc,
            j.user,
            j.gpus,
            j.state,
            j.slurm_job.map_or("-".into(), |s| s.to_string()),
            placement(&j.placement)
        );
    }
    let recent = r.finished.iter().rev().take(10).collect::<Vec<_>>();
    let _ = writeln!(
        out,
        "finished (last {} of {}):",
        recent.len(),
        r.finished.len()
    );
    for j in recent.into_iter().rev() {
        let _ = writeln!(
            out,
            "  {:>6} {:<10} {:<8} {:>4}  {:<7} attempts {}  waited {}",
            j.id,
            j.vc,
            j.user,
            j.gpus,
            j.state,
            j.attempts,
            waits(&j.wait)
        );
    }
    let s = &r.stats;
    let per_round = s.round_us.checked_div(s.rounds).unwrap_or(0);
    let per_cycle = s.cycle_us.checked_div(s.cycles).unwrap_or(0);
    let _ = writeln!(
        out,
        "daemon: up {}s, {} cycles ({per_cycle} us each), {} rounds ({per_round} us each), {} launches, {} refused, {} KiB resident{}",
        s.uptime_s,
        s.cycles,
        s.rounds,
        s.launches,
        s.refusals,
        s.rss_kib,
        if s.recovered {
            ", recovered from saved state"
        } else {
            ""
        }
    );
    if let Some(e) = &r.last_error {
        let _ = writeln!(out, "last error: {e}");
    }
    out
}

/// One job's report, for `why`.
pub fn format_job(j: &JobReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "job {}: {} GPUs in {} by {}: {}",
        j.id,
        j.gpus,
        j.vc,
        j.user,
        j.cmd.join(" ")
    );
    match (&j.state[..], &j.reason) {
        ("pending", Some(reason)) => {
            let _ = writeln!(
                out,
                "pending for {}s: {reason}: {}",
                j.waiting_s,
                explain(reason)
            );
        }
        ("pending", None) => {
            let _ = writeln!(out, "pending: not yet considered by a round");
        }
        (state, _) => {
            let _ = writeln!(out, "{state}, attempts {}", j.attempts);
        }
    }
    let _ = writeln!(out, "waited by reason: {}", waits(&j.wait));
    if !j.placement.is_empty() {
        let _ = writeln!(out, "placement: {}", placement(&j.placement));
    }
    for e in &j.events {
        let _ = writeln!(out, "  - {e}");
    }
    out
}

/// What a wait reason means, in a sentence.
pub fn explain(reason: &str) -> &'static str {
    match reason {
        "fair-share" => "its virtual cluster is at or over its share (quota or fair share)",
        "fragmentation" => {
            "enough GPUs are free, but not close enough together for its locality limit"
        }
        "reserved" => "the GPUs it could use are held for a reserved larger job",
        "held-by-policy" => "a blocked job ahead of it holds the queue (gang policy)",
        "no-capacity" => "fewer GPUs are free in the whole cluster than it needs",
        _ => "",
    }
}
