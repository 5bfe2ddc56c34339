//! `/metrics` (Prometheus text format), `/healthz` and `/readyz`, served by
//! a small HTTP/1.1 server (GET only, one request per connection).
//!
//! Metrics: pending gangs by wait reason, the time from a gang's last pod
//! to its whole gang bound (a histogram), pods and gangs bound (binds per
//! second is `rate(gangway_pods_bound_total[1m])`), policy errors and
//! quarantines, round and cycle time, interrupted gangs, leadership and
//! resident memory.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::K8sError;
use super::report::Stats;

/// Upper bounds (seconds) of the bind-latency histogram's buckets: from a
/// millisecond (a gang is usually bound within tens of them) to a minute.
pub const BUCKETS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// What the endpoints show; the scheduler loop updates it.
#[derive(Debug, Default)]
pub struct State {
    /// The host's counters, copied after each cycle.
    pub stats: Stats,
    /// Bind-latency histogram: counts per bucket (cumulative at export).
    pub latency_buckets: [u64; BUCKETS.len()],
    /// Observations and their sum (seconds).
    pub latency_count: u64,
    /// Sum of observed latencies (seconds).
    pub latency_sum: f64,
    /// Cycles run and their total seconds.
    pub cycles: u64,
    /// Seconds spent in cycles (host logic, not API calls).
    pub cycle_seconds: f64,
    /// Whether this replica leads.
    pub leader: bool,
    /// Whether the watch caches have synced.
    pub ready: bool,
    /// Status writes and Events dropped (the reporter's queue was full).
    pub reports_dropped: u64,
    /// When the scheduling loop last turned (leading or not).
    pub heartbeat: Option<Instant>,
    /// When this replica last finished a cycle as leader.
    pub last_cycle: Option<Instant>,
    /// How long without a turn of the loop `/healthz` fails.
    pub stuck_after: Duration,
}

impl State {
    /// Records one gang's time from its last pod to bound.
    pub fn observe_latency(&mut self, seconds: f64) {
        for (i, le) in BUCKETS.iter().enumerate() {
            if seconds <= *le {
                self.latency_buckets[i] += 1;
                break;
            }
        }
        self.latency_count += 1;
        self.latency_sum += seconds;
    }

    /// `/healthz`: fails when the scheduling loop has not turned for
    /// `stuck_after` (a cycle stuck, or the loop dead); says how long ago
    /// the loop turned and the last cycle ran.
    pub fn health(&self, now: Instant) -> (&'static str, String) {
        let ago = |t: Option<Instant>| {
            t.map_or_else(
                || "never".to_string(),
                |t| {
                    format!(
                        "{:.1} s ago",
                        now.saturating_duration_since(t).as_secs_f64()
                    )
                },
            )
        };
        let body = format!(
            "loop turned {}, last cycle as leader {}\n",
            ago(self.heartbeat),
            ago(self.last_cycle)
        );
        let stuck = self
            .heartbeat
            .is_none_or(|t| now.saturating_duration_since(t) > self.stuck_after);
        if stuck && self.ready {
            ("503 Service Unavailable", format!("stuck: {body}"))
        } else {
            ("200 OK", format!("ok: {body}"))
        }
    }

    /// The Prometheus text exposition of everything.
    pub fn render(&self) -> String {
        let mut o = String::new();
        let waiting: Vec<(String, String)> = self
            .stats
            .waiting
            .iter()
            .map(|(r, n)| (format!("{{reason=\"{r}\"}}"), n.to_string()))
            .collect();
        write_metric(
            &mut o,
            "gangway_pending_gangs",
            "gauge",
            "Gangs waiting, by the reason Gangway gives.",
            &waiting,
        );
        for (name, kind, help, value) in self.scalars() {
            write_metric(&mut o, name, kind, help, &[(String::new(), value)]);
        }
        let mut lines = Vec::new();
        let mut cumulative = 0;
        for (le, n) in BUCKETS.iter().zip(self.latency_buckets) {
            cumulative += n;
            lines.push((format!("_bucket{{le=\"{le}\"}}"), cumulative.to_string()));
        }
        lines.push((
            "_bucket{le=\"+Inf\"}".into(),
            self.latency_count.to_string(),
        ));
        lines.push(("_sum".into(), self.latency_sum.to_string()));
        lines.push(("_count".into(), self.latency_count.to_string()));
        write_metric(
            &mut o,
            "gangway_gang_bind_latency_seconds",
            "histogram",
            "From a gang's last pod created to every pod bound.",
            &lines,
        );
        o
    }

    /// Every single-valued metric: name, type, help, value.
    fn scalars(&self) -> Vec<(&'static str, &'static str, &'static str, String)> {
        SCALARS
            .iter()
            .map(|(name, kind, help, value)| (*name, *kind, *help, value(self)))
            .collect()
    }
}

/// A single-valued metric: name, type, help, and how to read it.
type Scalar = (
    &'static str,
    &'static str,
    &'static str,
    fn(&State) -> String,
);

/// Every single-valued metric, in the order `/metrics` shows them.
const SCALARS: &[Scalar] = &[
    ("gangway_pods_bound_total", "counter", "Pods bound.", |s| {
        s.stats.pods_bound.to_string()
    }),
    (
        "gangway_gangs_bound_total",
        "counter",
        "Gangs bound whole.",
        |s| s.stats.gangs_bound.to_string(),
    ),
    (
        "gangway_gangs_finished_total",
        "counter",
        "Gangs whose pods all ended.",
        |s| s.stats.gangs_finished.to_string(),
    ),
    (
        "gangway_gangs_interrupted_total",
        "counter",
        "Gangs evicted whole (node lost, preempted, moved, bound in part).",
        |s| s.stats.gangs_interrupted.to_string(),
    ),
    (
        "gangway_bind_errors_total",
        "counter",
        "Bindings refused (the pod gone, made again, or bound elsewhere).",
        |s| s.stats.bind_errors.to_string(),
    ),
    (
        "gangway_binds_unknown_total",
        "counter",
        "Bindings whose reply was lost (each resolved by reading the pod).",
        |s| s.stats.binds_unknown.to_string(),
    ),
    (
        "gangway_binds_unresolved",
        "gauge",
        "Bindings whose reply was lost and whose pod could not be read yet.",
        |s| s.stats.binds_unresolved.to_string(),
    ),
    (
        "gangway_gangs_waiting_for_evictions",
        "gauge",
        "Gangs placed on GPUs that pods on their way out still hold.",
        |s| s.stats.nominated.to_string(),
    ),
    (
        "gangway_reports_dropped_total",
        "counter",
        "Status writes and Events dropped (the reporter's queue was full).",
        |s| s.reports_dropped.to_string(),
    ),
    (
        "gangway_gang_problems_total",
        "counter",
        "Problems with users' gangs reported as Events.",
        |s| s.stats.problems.to_string(),
    ),
    (
        "gangway_policy_errors_total",
        "counter",
        "Policy calls that failed (the built-in policy answered).",
        |s| s.stats.policy_errors.to_string(),
    ),
    (
        "gangway_policy_quarantines_total",
        "counter",
        "Policy modules quarantined.",
        |s| s.stats.quarantines.to_string(),
    ),
    (
        "gangway_topology_rebuilds_total",
        "counter",
        "Topology rebuilds from the nodes.",
        |s| s.stats.topology_rebuilds.to_string(),
    ),
    (
        "gangway_round_seconds_total",
        "counter",
        "Seconds in scheduling rounds.",
        |s| s.stats.round_seconds.to_string(),
    ),
    (
        "gangway_rounds_total",
        "counter",
        "Scheduling rounds.",
        |s| s.stats.rounds.to_string(),
    ),
    (
        "gangway_last_round_seconds",
        "gauge",
        "The last round's seconds.",
        |s| s.stats.last_round_seconds.to_string(),
    ),
    (
        "gangway_cycle_seconds_total",
        "counter",
        "Seconds in cycles (host logic, API calls excluded).",
        |s| s.cycle_seconds.to_string(),
    ),
    ("gangway_cycles_total", "counter", "Cycles.", |s| {
        s.cycles.to_string()
    }),
    (
        "gangway_leader",
        "gauge",
        "Whether this replica leads (1) or not (0).",
        |s| u8::from(s.leader).to_string(),
    ),
    (
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory.",
        |_| (rss_kib() * 1024).to_string(),
    ),
];

/// One metric in the text format: HELP, TYPE, then a line per
/// `(labels or suffix, value)`.
fn write_metric(o: &mut String, name: &str, kind: &str, help: &str, lines: &[(String, String)]) {
    let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, value) in lines {
        let _ = writeln!(o, "{name}{labels} {value}");
    }
}

/// Resident memory of this process, KiB (0 where unknown).
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// Serves the endpoints on `addr` until the process ends.
pub async fn serve(addr: &str, state: Arc<Mutex<State>>) -> Result<(), K8sError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| K8sError::io(format!("listening on {addr}"), e))?;
    tracing::info!(addr, "serving /metrics, /healthz, /readyz");
    loop {
        let Ok((mut sock, _)) = listener.accept().await else {
            continue;
        };
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let mut n = 0;
            while n < buf.len() {
                match sock.read(&mut buf[n..]).await {
                    Ok(0) | Err(_) => break,
                    Ok(k) => n += k,
                }
                if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
            let head = String::from_utf8_lossy(&buf[..n]);
            let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
            let (code, body) = respond(&path, &state);
            let reply = format!(
                "HTTP/1.1 {code}\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = sock.write_all(reply.as_bytes()).await;
        });
    }
}

/// The status line and body for a path.
fn respond(path: &str, state: &Mutex<State>) -> (&'static str, String) {
    let Ok(s) = state.lock() else {
        return ("500 Internal Server Error", "state poisoned\n".into());
    };
    match path {
        "/metrics" => ("200 OK", s.render()),
        "/healthz" | "/livez" => s.health(Instant::now()),
        "/readyz" if s.ready => ("200 OK", "ok\n".into()),
        "/readyz" => ("503 Service Unavailable", "caches not synced\n".into()),
        _ => ("404 Not Found", "not found\n".into()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn exposition() {
        let mut s = State::default();
        s.observe_latency(0.02);
        s.observe_latency(3.0);
        s.stats.waiting.insert("Fragmentation".into(), 2);
        let text = s.render();
        assert!(
            text.contains("gangway_pending_gangs{reason=\"Fragmentation\"} 2"),
            "{text}"
        );
        assert!(text.contains("gangway_gang_bind_latency_seconds_bucket{le=\"0.0025\"} 0"));
        assert!(text.contains("gangway_gang_bind_latency_seconds_bucket{le=\"0.025\"} 1"));
        assert!(text.contains("gangway_cycles_total 0"), "{text}");
        assert!(text.contains("gangway_gang_bind_latency_seconds_bucket{le=\"5\"} 2"));
        assert!(text.contains("gangway_gang_bind_latency_seconds_count 2"));
        let m = Mutex::new(s);
        assert_eq!(respond("/readyz", &m).0, "503 Service Unavailable");
        assert_eq!(respond("/healthz", &m).0, "200 OK");
    }

    #[test]
    fn healthz_fails_when_the_loop_stops() {
        let t0 = Instant::now();
        let s = State {
            ready: true,
            heartbeat: Some(t0),
            stuck_after: Duration::from_secs(30),
            ..State::default()
        };
        let (code, body) = s.health(t0 + Duration::from_secs(5));
        assert_eq!(code, "200 OK");
        assert!(body.contains("loop turned 5.0 s ago"), "{body}");
        let (code, body) = s.health(t0 + Duration::from_secs(31));
        assert_eq!(code, "503 Service Unavailable");
        assert!(body.starts_with("stuck"), "{body}");
    }
}
