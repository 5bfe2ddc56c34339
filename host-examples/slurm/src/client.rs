//! The client commands: `submit`, `status`, `why`, `cancel`, `swap`, and
//! how their answers are printed.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use super::SlurmError;
use super::protocol::{FinishedPage, JobReport, Request, Response, StatusReport, call};

/// Where the daemon is and how long to wait for it.
#[derive(Clone, Debug, PartialEq)]
pub struct Daemon<'a> {
    /// Its socket.
    pub socket: &'a Path,
    /// How long to wait for each answer.
    pub timeout: Duration,
}

impl<'a> Daemon<'a> {
    /// The daemon at `socket`, waited for [`crate::protocol::CLIENT_TIMEOUT`].
    pub fn at(socket: &'a Path) -> Daemon<'a> {
        Daemon {
            socket,
            timeout: crate::protocol::CLIENT_TIMEOUT,
        }
    }

    fn call(&self, request: &Request) -> Result<Response, SlurmError> {
        call(self.socket, request, self.timeout)
    }
}

fn expect_done(response: Response) -> Result<String, SlurmError> {
    match response {
        Response::Done(text) => Ok(text),
        Response::Refused(why) => Err(SlurmError::Refused(why)),
        other => Err(SlurmError::Protocol(format!("unexpected answer {other:?}"))),
    }
}

/// This process's environment, for a job (variables that are not UTF-8
/// are left out; the daemon drops what Slurm and Gangway set).
pub fn environment() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

/// Submits a job of `gpus` GPUs of the types `gpu_request` accepts (its
/// default: any), to run as the caller in `cwd` with `env`; returns its id.
pub fn submit(
    daemon: &Daemon<'_>,
    gpus: u32,
    gpu_request: &gangway_core::GpuRequest,
    vc: &str,
    cmd: Vec<String>,
    cwd: &Path,
    env: Vec<(String, String)>,
) -> Result<u64, SlurmError> {
    let request = Request::Submit {
        gpus,
        vc: vc.to_string(),
        cmd,
        cwd: cwd.display().to_string(),
        env,
        gpu_request: gpu_request.clone(),
    };
    match daemon.call(&request)? {
        Response::Submitted(id) => Ok(id),
        Response::Refused(why) => Err(SlurmError::Refused(why)),
        other => Err(SlurmError::Protocol(format!("unexpected answer {other:?}"))),
    }
}

/// The daemon's status report (the newest 200 finished jobs, or `page`).
pub fn status(daemon: &Daemon<'_>, page: Option<FinishedPage>) -> Result<StatusReport, SlurmError> {
    match daemon.call(&Request::Status(page))? {
        Response::Status(report) => Ok(*report),
        Response::Refused(why) => Err(SlurmError::Refused(why)),
        other => Err(SlurmError::Protocol(format!("unexpected answer {other:?}"))),
    }
}

/// The status report with every finished job the daemon keeps, read
/// page by page (a job that finishes meanwhile may be listed or not, never
/// twice).
pub fn status_all(daemon: &Daemon<'_>) -> Result<StatusReport, SlurmError> {
    const PAGE: u32 = 500;
    let mut report = status(
        daemon,
        Some(FinishedPage {
            offset: 0,
            count: PAGE,
        }),
    )?;
    let mut seen: std::collections::BTreeSet<u64> = report.finished.iter().map(|j| j.id).collect();
    let mut offset = report.finished_offset + u32::try_from(report.finished.len()).unwrap_or(0);
    while offset < report.finished_total {
        let page = status(
            daemon,
            Some(FinishedPage {
                offset,
                count: PAGE,
            }),
        )?;
        if page.finished.is_empty() {
            break;
        }
        offset = page.finished_offset + u32::try_from(page.finished.len()).unwrap_or(0);
        report.finished_total = page.finished_total;
        let new: Vec<JobReport> = page
            .finished
            .into_iter()
            .filter(|j| seen.insert(j.id))
            .collect();
        report.finished.extend(new);
    }
    report.finished_offset = 0;
    Ok(report)
}

/// One job's report.
pub fn why(daemon: &Daemon<'_>, id: u64) -> Result<JobReport, SlurmError> {
    match daemon.call(&Request::Why(id))? {
        Response::Job(report) => Ok(*report),
        Response::Refused(why) => Err(SlurmError::Refused(why)),
        other => Err(SlurmError::Protocol(format!("unexpected answer {other:?}"))),
    }
}

/// Cancels a job.
pub fn cancel(daemon: &Daemon<'_>, id: u64) -> Result<String, SlurmError> {
    expect_done(daemon.call(&Request::Cancel(id))?)
}

/// Stages a Wasm module in a slot.
pub fn swap(
    daemon: &Daemon<'_>,
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
    expect_done(daemon.call(&request)?)
}

/// Rolls a slot back.
pub fn rollback(daemon: &Daemon<'_>, slot: &str) -> Result<String, SlurmError> {
    expect_done(daemon.call(&Request::Rollback {
        slot: slot.to_string(),
    })?)
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
    write_alerts(&mut out, r);
    write_cluster(&mut out, r);
    write_jobs(&mut out, r);
    write_daemon(&mut out, r);
    out
}

/// Seconds since `since_ms` (Unix milliseconds).
fn ago(since_ms: u64) -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    now.saturating_sub(since_ms) / 1000
}

/// What an operator must see first: an outage, a held queue, how the
/// state was recovered, warnings.
fn write_alerts(out: &mut String, r: &StatusReport) {
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
    for w in &r.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
}

/// Nodes and policies.
fn write_cluster(out: &mut String, r: &StatusReport) {
    let free: u32 = r.nodes.iter().map(|n| n.free).sum();
    let total: u32 = r.nodes.iter().map(|n| n.gpus).sum();
    let _ = writeln!(
        out,
        "cluster: {} nodes, {free}/{total} GPUs free, {} held by jobs started in Slurm directly",
        r.nodes.len(),
        r.foreign_gpus
    );
    for n in &r.nodes {
        let _ = write!(
            out,
            "  {:<10} rack {:<8} {:>2}/{:<2} free  {}",
            n.name, n.rack, n.free, n.gpus, n.health
        );
        if !n.gpu_type.is_empty() {
            let _ = write!(out, "  {}", n.gpu_type);
        }
        let _ = writeln!(out);
    }
    write_type_use(out, r);
    let _ = write!(out, "policies:");
    for p in &r.policies {
        let _ = write!(out, " {}={}", p.slot, p.active);
    }
    let _ = writeln!(out);
}

/// Each VC's use of each GPU type, against its quota of it if it has one:
/// `a100 6 held of 8 (+4 borrowing)`.
fn write_type_use(out: &mut String, r: &StatusReport) {
    if r.type_use.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "GPU types by virtual cluster (held, of nominal quota + borrowing limit):"
    );
    let mut vc = "";
    for u in &r.type_use {
        if u.vc != vc {
            if !vc.is_empty() {
                let _ = writeln!(out);
            }
            vc = &u.vc;
            let _ = write!(out, "  {:<10}", u.vc);
        }
        let _ = write!(out, " {} {}", u.gpu_type, u.held);
        match (u.nominal, u.borrowing_limit) {
            (Some(n), Some(b)) => {
                let _ = write!(out, " of {n}+{b};");
            }
            (Some(n), None) => {
                let _ = write!(out, " of {n}+any;");
            }
            (None, _) => {
                let _ = write!(out, ";");
            }
        }
    }
    let _ = writeln!(out);
}

/// Pending, running and the last finished jobs.
fn write_jobs(out: &mut String, r: &StatusReport) {
    let _ = writeln!(out, "pending ({}):", r.pending.len());
    let _ = writeln!(
        out,
        "  {:>6} {:<10} {:<8} {:>4}  {:<15} {:>7}  waited by reason",
        "job", "vc", "user", "gpus", "reason", "waiting"
    );
    for j in &r.pending {
        let reason = j.reason.as_deref().unwrap_or("(next round)");
        let _ = writeln!(
            out,
            "  {:>6} {:<10} {:<8} {:>4}  {reason:<15} {:>6}s  {}",
            j.id,
            j.vc,
            j.user,
            j.gpus,
            j.waiting_s,
            waits(&j.wait)
        );
    }
    let _ = writeln!(out, "running ({}):", r.running.len());
    for j in &r.running {
        let slurm = j.slurm_job.map_or("-".into(), |s| s.to_string());
        let _ = writeln!(
            out,
            "  {:>6} {:<10} {:<8} {:>4}  {:<9} slurm {slurm:<6} on {}",
            j.id,
            j.vc,
            j.user,
            j.gpus,
            j.state,
            placement(&j.placement)
        );
    }
    let recent = r.finished.iter().rev().take(10).collect::<Vec<_>>();
    let _ = writeln!(
        out,
        "finished (last {} of {}; `status --json --all-finished` lists them all):",
        recent.len(),
        r.finished_total
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
}

/// The daemon's own figures and last error.
fn write_daemon(out: &mut String, r: &StatusReport) {
    let s = &r.stats;
    let per_round = s.round_us.checked_div(s.rounds).unwrap_or(0);
    let per_cycle = s.cycle_us.checked_div(s.cycles).unwrap_or(0);
    let recovered = if s.recovered {
        ", recovered from saved state"
    } else {
        ""
    };
    let _ = writeln!(
        out,
        "daemon ({} mode): up {}s, {} cycles ({per_cycle} us each), {} rounds ({per_round} us each), {} launches, {} refused, {} KiB resident{recovered}",
        r.mode, s.uptime_s, s.cycles, s.rounds, s.launches, s.refusals, s.rss_kib,
    );
    if let Some(e) = &r.last_error {
        let _ = writeln!(out, "last error: {e}");
    }
}

/// One job's report, for `why`.
pub fn format_job(j: &JobReport) -> String {
    let mut out = String::new();
    let what = if j.private {
        "(another user's job: command not shown)".to_string()
    } else if j.cmd.is_empty() {
        format!(
            "Slurm job {}",
            j.slurm_job.map_or("?".into(), |g| g.to_string())
        )
    } else {
        j.cmd.join(" ")
    };
    let _ = writeln!(
        out,
        "job {}: {} GPUs in {} by {}: {what}",
        j.id, j.gpus, j.vc, j.user
    );
    if !j.gpu_types.is_empty() {
        let _ = writeln!(
            out,
            "GPU types: {} (the whole gang on one)",
            j.gpu_types.join(", ")
        );
    }
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
        crate::protocol::TYPE_QUOTA => {
            "its virtual cluster's quota of every GPU type it may use is full (nominal plus borrowing limit)"
        }
        "fragmentation" => {
            "enough GPUs are free, but not close enough together for its locality limit"
        }
        "reserved" => "the GPUs it could use are held for a reserved larger job",
        "held-by-policy" => "a blocked job ahead of it holds the queue (gang policy)",
        "no-capacity" => "fewer GPUs are free in the whole cluster than it needs",
        _ => "",
    }
}
