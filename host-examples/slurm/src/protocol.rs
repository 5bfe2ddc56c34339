//! What `gangway-slurm` clients and the daemon say to each other over the
//! Unix socket `<state_dir>/gangway.sock`: one request, one response, each a
//! postcard message behind a 4-byte little-endian length.
//!
//! A request says nothing of who sends it: the daemon takes the caller's
//! uid and gid from the kernel (the socket's peer credentials) and
//! authorizes each request by them.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::SlurmError;

/// The wait reason of a job whose virtual cluster's quotas per GPU type
/// leave none of the types it may use room for its gang (the core's
/// `fair-share`, told apart by the daemon).
pub const TYPE_QUOTA: &str = "type-quota";
/// Largest message accepted (a Wasm module for `swap` is the big one).
pub const MAX_MESSAGE: usize = 64 << 20;

/// How long a client waits for the daemon by default.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

/// Which finished jobs a status report lists: `count` of them from the
/// `offset`-th oldest kept (see [`StatusReport::finished_total`]); by
/// default the newest 200.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinishedPage {
    /// The first one listed, counted from the oldest kept.
    pub offset: u32,
    /// How many.
    pub count: u32,
}

/// A client's request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// Queue a job, to run as the caller.
    Submit {
        /// GPUs of the gang.
        gpus: u32,
        /// Virtual cluster name.
        vc: String,
        /// Command and arguments.
        cmd: Vec<String>,
        /// Working directory (absolute).
        cwd: String,
        /// The caller's environment, for the job (the daemon drops what
        /// Slurm and Gangway set themselves).
        env: Vec<(String, String)>,
        /// The GPU types it accepts, most preferred first, and the least
        /// memory per GPU (the default: any GPU).
        gpu_request: gangway_core::GpuRequest,
    },
    /// The queue, the cluster and the daemon's own figures; `None` lists
    /// the newest 200 finished jobs.
    Status(Option<FinishedPage>),
    /// One job.
    Why(u64),
    /// Cancel a pending or running job.
    Cancel(u64),
    /// Stage a Wasm module into a slot (active from the next round).
    Swap {
        /// `fairness`, `locality` or `gang`.
        slot: String,
        /// The module's name (its file name).
        name: String,
        /// The module.
        wasm: Vec<u8>,
        /// Its configuration (TOML bytes; empty: defaults).
        config: Vec<u8>,
    },
    /// Go back to a slot's previous policy (from the next round).
    Rollback {
        /// The slot.
        slot: String,
    },
}

/// The daemon's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    /// The job was queued under this id.
    Submitted(u64),
    /// The status report.
    Status(Box<StatusReport>),
    /// One job's report.
    Job(Box<JobReport>),
    /// Done; what happened.
    Done(String),
    /// Refused, and why.
    Refused(String),
}

/// One job as reported to users.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobReport {
    /// Gangway's id.
    pub id: u64,
    /// Virtual cluster.
    pub vc: String,
    /// User.
    pub user: String,
    /// GPUs.
    pub gpus: u32,
    /// The command (empty in another user's report, and for jobs submitted
    /// with sbatch).
    pub cmd: Vec<String>,
    /// Working directory (empty in another user's report).
    pub cwd: String,
    /// Whether this is another user's job, shown without its command,
    /// working directory and environment.
    pub private: bool,
    /// `pending`, `launching`, `running`, `passed`, `failed`, `killed`.
    pub state: String,
    /// Why it waits (pending jobs): `fair-share`, `fragmentation`, ...,
    /// or [`TYPE_QUOTA`].
    pub reason: Option<String>,
    /// Seconds waited so far, per reason, largest first.
    pub wait: Vec<(String, u64)>,
    /// Seconds since it was submitted or last re-queued (pending jobs).
    pub waiting_s: u64,
    /// The GPU types it may run on, most preferred first, when it may not
    /// run on every type of the cluster (its request, or its size); empty
    /// otherwise.
    pub gpu_types: Vec<String>,
    /// Launches Slurm took so far.
    pub attempts: u32,
    /// The Slurm job of the current attempt.
    pub slurm_job: Option<u64>,
    /// Where the current (or last) attempt runs: node and GPU indices.
    pub placement: Vec<(String, Vec<u32>)>,
    /// Unix milliseconds: submitted.
    pub submitted_ms: u64,
    /// Unix milliseconds: first seen running in Slurm.
    pub first_running_ms: Option<u64>,
    /// Unix milliseconds: finished.
    pub ended_ms: Option<u64>,
    /// What happened to it, oldest first (launches, refusals, interruptions, end).
    pub events: Vec<String>,
}

/// One node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeReport {
    /// Slurm node name.
    pub name: String,
    /// Its rack.
    pub rack: String,
    /// GPUs.
    pub gpus: u32,
    /// GPUs free for new work.
    pub free: u32,
    /// `Up`, `Draining` or `Down`.
    pub health: String,
    /// The type of its GPUs (empty on a cluster of one type).
    pub gpu_type: String,
}

/// One virtual cluster's use of one GPU type, and its quota of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TypeUseReport {
    /// The virtual cluster.
    pub vc: String,
    /// The GPU type.
    pub gpu_type: String,
    /// GPUs of the type its running jobs hold.
    pub held: u32,
    /// Its nominal quota of the type, when it has quotas per type.
    pub nominal: Option<u32>,
    /// How many it may hold beyond the nominal quota (`None`: no limit).
    pub borrowing_limit: Option<u32>,
}

/// One policy slot.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotReport {
    /// The slot.
    pub slot: String,
    /// The active policy.
    pub active: String,
    /// Earlier ones (rollback targets), nearest first.
    pub previous: Vec<String>,
    /// Swaps applied.
    pub swaps: u64,
    /// Modules quarantined after repeated failures.
    pub quarantined: Vec<String>,
}

/// The daemon's own figures.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonStats {
    /// Cycles run (read Slurm, round, launch).
    pub cycles: u64,
    /// Rounds run.
    pub rounds: u64,
    /// Total microseconds in `Scheduler::round`.
    pub round_us: u64,
    /// Total microseconds in whole cycles.
    pub cycle_us: u64,
    /// Total microseconds waiting for `sinfo` and `squeue`.
    pub slurm_read_us: u64,
    /// Jobs launched with `sbatch`.
    pub launches: u64,
    /// Launches Slurm refused.
    pub refusals: u64,
    /// Seconds since the daemon started.
    pub uptime_s: u64,
    /// Resident memory in KiB.
    pub rss_kib: u64,
    /// Whether this run recovered from a saved state.
    pub recovered: bool,
}

/// Everything `gangway-slurm status` shows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusReport {
    /// Nodes.
    pub nodes: Vec<NodeReport>,
    /// Policies per slot.
    pub policies: Vec<SlotReport>,
    /// Pending jobs, in queue order.
    pub pending: Vec<JobReport>,
    /// Running (or launching) jobs.
    pub running: Vec<JobReport>,
    /// Finished jobs, oldest first: the page asked for.
    pub finished: Vec<JobReport>,
    /// Finished jobs kept (`history`), of which `finished` is a page.
    pub finished_total: u32,
    /// Where in them `finished` starts (0: the oldest kept).
    pub finished_offset: u32,
    /// GPUs held by jobs started in Slurm directly.
    pub foreign_gpus: u32,
    /// Each configured VC's use of each GPU type, by VC then type (empty
    /// on a cluster of one type whose VCs have no quotas per type).
    pub type_use: Vec<TypeUseReport>,
    /// The daemon's figures.
    pub stats: DaemonStats,
    /// The last error of a cycle (reading Slurm, saving the state), if the
    /// last cycle failed.
    pub last_error: Option<String>,
    /// Since when (Unix ms) Slurm has not answered, and what it said: the
    /// daemon holds every decision that depends on Slurm meanwhile.
    pub slurm_unreachable: Option<(u64, String)>,
    /// Since when (Unix ms) the queue is held because Slurm refuses
    /// launches for a reason of its configuration, and the refusal.
    pub queue_held: Option<(u64, String)>,
    /// How this run recovered its state, when not from its newest file
    /// (and which acknowledged changes it lost).
    pub state_note: Option<String>,
    /// What an operator should know: a module cache refused, a lock taken
    /// over, a partition not held by job_submit.lua, ...
    pub warnings: Vec<String>,
    /// `submit` or `native`.
    pub mode: String,
}

/// Writes one length-prefixed postcard message.
pub fn write_message<T: Serialize>(stream: &mut UnixStream, msg: &T) -> Result<(), SlurmError> {
    let bytes = postcard::to_allocvec(msg).map_err(|e| SlurmError::Protocol(e.to_string()))?;
    let len =
        u32::try_from(bytes.len()).map_err(|_| SlurmError::Protocol("message too large".into()))?;
    stream
        .write_all(&len.to_le_bytes())
        .and_then(|()| stream.write_all(&bytes))
        .map_err(|e| SlurmError::io("writing to the socket", e))
}

/// A read from the socket that failed: the other side closing it before a
/// whole message arrived says so.
fn closed(e: std::io::Error) -> SlurmError {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        SlurmError::Protocol(
            "the other side closed the connection before a whole message arrived \
             (did the daemon stop? see its log)"
                .into(),
        )
    } else {
        SlurmError::io("reading from the socket", e)
    }
}

/// Reads one length-prefixed postcard message of at most `limit` bytes.
pub fn read_message_within<T: DeserializeOwned>(
    stream: &mut UnixStream,
    limit: usize,
) -> Result<T, SlurmError> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).map_err(closed)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > limit {
        return Err(SlurmError::Protocol(format!(
            "message of {len} bytes is over the {limit}-byte limit"
        )));
    }
    let mut buf = vec![0u8; len];
    stream.read_exact(&mut buf).map_err(closed)?;
    postcard::from_bytes(&buf).map_err(|e| SlurmError::Protocol(e.to_string()))
}

/// Reads one length-prefixed postcard message of at most [`MAX_MESSAGE`].
pub fn read_message<T: DeserializeOwned>(stream: &mut UnixStream) -> Result<T, SlurmError> {
    read_message_within(stream, MAX_MESSAGE)
}

/// Sends one request to the daemon listening on `socket` and returns its
/// response, waiting at most `timeout` for each read and write: a daemon
/// that is stopped (SIGSTOP) or stuck is an error saying so, not a wait
/// without end.
pub fn call(socket: &Path, request: &Request, timeout: Duration) -> Result<Response, SlurmError> {
    let mut stream = UnixStream::connect(socket).map_err(|e| {
        SlurmError::io(
            format!(
                "connecting to the daemon at {} (is `gangway-slurm serve` running?)",
                socket.display()
            ),
            e,
        )
    })?;
    let timeout = timeout.max(Duration::from_millis(1));
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| SlurmError::io("setting the socket's timeout", e))?;
    let timed_out = |e: SlurmError| match e {
        SlurmError::Io { source, .. }
            if matches!(
                source.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            SlurmError::Timeout {
                socket: socket.display().to_string(),
                seconds: timeout.as_secs_f64(),
            }
        }
        other => other,
    };
    // The daemon answers a request over its limits and closes before it
    // has read all of it: the write then fails (a broken pipe), but its
    // answer, which says why, is there to read.
    let written = write_message(&mut stream, request);
    match (written, read_message(&mut stream)) {
        (_, Ok(response)) => Ok(response),
        (Err(e), Err(_)) => Err(timed_out(e)),
        (Ok(()), Err(e)) => Err(timed_out(e)),
    }
}
