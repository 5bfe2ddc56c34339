//! Slurm through its command line: `sinfo --json`, `squeue --json`,
//! `sbatch`, `scancel`, `scontrol`. Both JSON commands exist in Slurm 22.05
//! (`scontrol ... --json` does not). Parsing is separate from running, so it
//! is tested on recorded output.
//!
//! Commands on a user's behalf (`sbatch`, `scancel` of their job) run as
//! that user ([`RunAs`]), so Slurm authenticates them by munge as the user
//! and applies the user's own limits, partitions and accounts; they get a
//! clean environment (`PATH`, `SLURM_CONF`), never the daemon's.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gangway_core::Health;
use serde::Deserialize;

use super::SlurmError;
use super::hostlist;
use super::identity::RunAs;

/// How to run Slurm's commands.
#[derive(Clone, Debug)]
pub struct Slurm {
    bin_dir: Option<PathBuf>,
    conf: Option<PathBuf>,
    timeout: Duration,
}

/// What Slurm's commands print on stderr when the controller cannot be
/// reached (Slurm 22.05's wording).
const UNREACHABLE: [&str; 9] = [
    "Unable to contact slurm controller",
    "Socket timed out",
    "Connection refused",
    "Zero Bytes were transmitted or received",
    "Unable to establish connection",
    "Communication connection failure",
    "Transport endpoint is not connected",
    "backup controller in standby mode",
    "Slurm controller not responding",
];

/// What `sbatch` prints when it refuses for a reason of Slurm's own
/// configuration rather than the job's or its user's (sbatch runs as the
/// user: a refusal of their account or of their access to the partition is
/// theirs, not the whole queue's).
const MISCONFIGURED: [&str; 2] = ["Invalid partition name", "Required partition not available"];

/// The error of `command` (`line`), which exited with `status` and printed
/// `stderr`: unreachable, misconfigured or plainly refused.
fn classify(line: String, status: String, stderr: String) -> SlurmError {
    if UNREACHABLE.iter().any(|m| stderr.contains(m)) {
        SlurmError::Unreachable {
            command: line,
            message: stderr,
        }
    } else if MISCONFIGURED.iter().any(|m| stderr.contains(m)) {
        SlurmError::Misconfigured {
            command: line,
            message: stderr,
        }
    } else {
        SlurmError::CommandFailed {
            command: line,
            status,
            stderr,
        }
    }
}

/// A node as `sinfo` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    /// Node name.
    pub name: String,
    /// How its GPUs are typed in its GRES (gres.conf `Type=`): one type
    /// per index (pinned exactly), one type for all (asked by count), or
    /// neither.
    pub gres_types: GresTypes,
    /// GPUs the node has.
    pub gpus: u32,
    /// Its Slurm features (`Features=` in slurm.conf): one of them may
    /// name the GPU type of its GPUs (the config's `[gpu_types]`).
    pub features: Vec<String>,
    /// Its health for Gangway: down and failed nodes are down; drained,
    /// draining, not responding or not yet registered nodes take no new work.
    pub health: Health,
    /// Slurm's state words, for reports (`idle`, `down+DRAIN`, ...).
    pub state: String,
    /// CPUs it has, and how many jobs hold.
    pub cpus: u32,
    /// CPUs jobs hold on it.
    pub alloc_cpus: u32,
    /// Memory it has (MB, Slurm's `RealMemory`).
    pub memory_mb: u64,
    /// Memory jobs hold on it (MB; 0 unless Slurm tracks memory).
    pub alloc_memory_mb: u64,
}

/// Where a Slurm job runs: per node, its GPU indices.
pub type NodeGpus = Vec<(String, Vec<u32>)>;

/// One job record of `squeue` (a component, for heterogeneous jobs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlurmJob {
    /// Its own job id.
    pub job_id: u64,
    /// The heterogeneous job it belongs to (its own id when it is not a
    /// component).
    pub group: u64,
    /// Job name.
    pub name: String,
    /// Comment (Gangway tags its launches: see `launch::tag`).
    pub comment: String,
    /// The user it runs as.
    pub user_id: u32,
    /// Their name.
    pub user_name: String,
    /// Its group.
    pub group_id: u32,
    /// Its Slurm account.
    pub account: String,
    /// Its partition.
    pub partition: String,
    /// Its priority (0: held).
    pub priority: u64,
    /// Its admin comment (only root, SlurmUser and job_submit plugins set it).
    pub admin_comment: String,
    /// Its component index in a heterogeneous job (0 otherwise).
    pub het_offset: u64,
    /// Whether it belongs to a job array.
    pub array: bool,
    /// Nodes it asks for (or holds).
    pub node_count: u32,
    /// State word (`RUNNING`, `COMPLETED`, `NODE_FAIL`, ...).
    pub state: String,
    /// Slurm's reason (`None`, `Resources`, `NodeDown`, ...).
    pub reason: String,
    /// Exit code, as Slurm reports it.
    pub exit_code: i64,
    /// Nodes and GPU indices it holds (while running).
    pub gpus: NodeGpus,
    /// CPUs it asks for (pending) or holds (running), in all.
    pub cpus: u32,
    /// Memory it asks for in all (MB), when it asks explicitly (`--mem`,
    /// `--mem-per-cpu`).
    pub memory_mb: u64,
    /// Whether it asks for whole nodes (`--exclusive`).
    pub exclusive: bool,
    /// How many times Slurm requeued it.
    pub restarts: u32,
}

#[derive(Deserialize)]
struct SinfoOut {
    #[serde(default)]
    nodes: Vec<RawNode>,
    #[serde(default)]
    errors: Vec<serde_json::Value>,
}

/// Slurm's `errors` list, as one line (empty when there is none).
fn errors_text(errors: &[serde_json::Value]) -> String {
    errors
        .iter()
        .map(|e| {
            e.get("error")
                .and_then(|m| m.as_str())
                .map_or_else(|| e.to_string(), str::to_string)
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[derive(Deserialize)]
struct RawNode {
    name: String,
    #[serde(default)]
    state: String,
    #[serde(default)]
    state_flags: Vec<String>,
    #[serde(default)]
    gres: String,
    #[serde(default)]
    features: String,
    #[serde(default)]
    cpus: u32,
    #[serde(default)]
    alloc_cpus: u32,
    #[serde(default)]
    real_memory: u64,
    #[serde(default)]
    alloc_memory: u64,
}

#[derive(Deserialize)]
struct SqueueOut {
    #[serde(default)]
    jobs: Vec<RawJob>,
    #[serde(default)]
    errors: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
struct RawJob {
    job_id: u64,
    #[serde(default)]
    het_job_id: u64,
    #[serde(default)]
    name: String,
    #[serde(default)]
    comment: String,
    #[serde(default)]
    job_state: String,
    #[serde(default)]
    state_reason: String,
    #[serde(default)]
    exit_code: Option<i64>,
    #[serde(default)]
    nodes: String,
    #[serde(default)]
    gres_detail: Vec<String>,
    #[serde(default)]
    job_resources: Option<RawResources>,
    #[serde(default)]
    user_id: u32,
    #[serde(default)]
    user_name: String,
    #[serde(default)]
    group_id: u32,
    #[serde(default)]
    account: String,
    #[serde(default)]
    partition: String,
    #[serde(default)]
    priority: Option<u64>,
    #[serde(default)]
    admin_comment: String,
    #[serde(default)]
    het_job_offset: u64,
    #[serde(default)]
    array_job_id: u64,
    #[serde(default)]
    node_count: Option<u32>,
    #[serde(default)]
    cpus: Option<u32>,
    #[serde(default)]
    memory_per_node: Option<u64>,
    #[serde(default)]
    memory_per_cpu: Option<u64>,
    #[serde(default)]
    shared: Option<String>,
    #[serde(default)]
    restart_cnt: Option<u32>,
}

#[derive(Deserialize)]
struct RawResources {
    #[serde(default)]
    allocated_nodes: Vec<RawAllocNode>,
}

#[derive(Deserialize)]
struct RawAllocNode {
    nodename: String,
}

/// How a node's GPUs are typed in its GRES (gres.conf `Type=`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GresTypes {
    /// Each GPU index has a type of its own (`gpu:g0:1,gpu:g1:1`, from one
    /// gres.conf line per GPU): asking for those types asks for exactly
    /// those GPUs, so a placement is pinned to its indices. A node with one
    /// GPU is always this.
    PerIndex(Vec<String>),
    /// Its GPUs (more than one) all carry this one type, usually the
    /// product (`gpu:a100:4`, from `Type=a100 File=/dev/nvidia[0-3]`): the
    /// type does not tell the GPUs apart, so they are asked for by count and
    /// Slurm chooses which.
    OneType(String),
    /// Untyped (`gpu:8`) or typed otherwise (several types, some of them
    /// on more than one GPU), or no GPUs: neither pinned nor counted.
    Other,
}

impl GresTypes {
    /// The one GRES type every GPU of the node carries, if they carry one
    /// (a one-GPU node's type too).
    pub fn single(&self) -> Option<&str> {
        match self {
            GresTypes::OneType(t) => Some(t),
            GresTypes::PerIndex(types) if types.len() == 1 => types.first().map(String::as_str),
            _ => None,
        }
    }

    /// The GRES type of each of `gpus` (indices) to ask Slurm for: each
    /// index's own type, or the one type for every GPU (asked by count);
    /// empty when the node has neither.
    pub fn for_gpus(&self, gpus: &[u32]) -> Vec<String> {
        match self {
            GresTypes::PerIndex(types) => gpus
                .iter()
                .map(|g| types.get(*g as usize).cloned().unwrap_or_default())
                .collect(),
            GresTypes::OneType(t) => vec![t.clone(); gpus.len()],
            GresTypes::Other => Vec::new(),
        }
    }
}

/// Parses a node's GRES string (`gpu:g0:1,gpu:g1:1(S:0)`, `gpu:a100:4(S:0-1)`):
/// the GPU count and how the GPUs are typed ([`GresTypes`]): per index when
/// every GPU entry has a type of its own and count 1, one type when every
/// GPU entry has the same type.
pub fn parse_gres(gres: &str) -> (u32, GresTypes) {
    let mut count = 0u32;
    let mut entries: Vec<(Option<&str>, u32)> = Vec::new();
    for entry in gres.split(',') {
        let entry = entry.split('(').next().unwrap_or("").trim();
        let fields: Vec<&str> = entry.split(':').collect();
        if fields.first() != Some(&"gpu") {
            continue;
        }
        let (ty, n) = match fields.as_slice() {
            [_, ty, n] => (Some(*ty), n.parse::<u32>().unwrap_or(0)),
            [_, n] => (None, n.parse::<u32>().unwrap_or(0)),
            _ => (None, 0),
        };
        count = count.saturating_add(n);
        if n > 0 {
            entries.push((ty, n));
        }
    }
    let Some(types) = entries
        .iter()
        .map(|(t, _)| *t)
        .collect::<Option<Vec<&str>>>()
    else {
        return (count, GresTypes::Other);
    };
    let distinct: std::collections::BTreeSet<&str> = types.iter().copied().collect();
    let one_each = distinct.len() == types.len() && entries.iter().all(|(_, n)| *n == 1);
    let typing = match distinct.first() {
        Some(t) if distinct.len() == 1 && count > 1 => GresTypes::OneType((*t).to_string()),
        Some(_) if one_each => {
            GresTypes::PerIndex(types.iter().map(|t| (*t).to_string()).collect())
        }
        _ => GresTypes::Other,
    };
    (count, typing)
}

/// A node's feature list (`a100,ib`; `(null)` or empty: none).
pub fn parse_features(features: &str) -> Vec<String> {
    features
        .split(',')
        .map(str::trim)
        .filter(|f| !f.is_empty() && *f != "(null)")
        .map(str::to_string)
        .collect()
}

/// The GPU indices in a `gres_detail` entry (`gpu:g0:1(IDX:0),gpu:2(IDX:3-4)`).
pub fn parse_gpu_indices(detail: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let mut rest = detail;
    while let Some(at) = rest.find("IDX:") {
        let tail = &rest[at + 4..];
        let end = tail.find(')').unwrap_or(tail.len());
        for range in tail[..end].split(',') {
            let (lo, hi) = range.split_once('-').unwrap_or((range, range));
            if let (Ok(a), Ok(b)) = (lo.trim().parse::<u32>(), hi.trim().parse::<u32>()) {
                out.extend(a..=b.min(a + 63));
            }
        }
        rest = &tail[end..];
    }
    out.sort_unstable();
    out.dedup();
    out
}

fn node_health(state: &str, flags: &[String]) -> Health {
    let s = state.to_ascii_lowercase();
    let base = s.split('+').next().unwrap_or("");
    let flag = |f: &str| {
        flags.iter().any(|x| x.eq_ignore_ascii_case(f)) || s.contains(&f.to_ascii_lowercase())
    };
    if matches!(base, "down" | "fail" | "future") {
        Health::Down
    } else if flag("DRAIN")
        || flag("NOT_RESPONDING")
        || flag("FAIL")
        || flag("MAINTENANCE")
        || flag("REBOOT_REQUESTED")
        || matches!(
            base,
            "unknown" | "drained" | "draining" | "maint" | "reboot" | "powered_down" | "power_down"
        )
    {
        Health::Draining
    } else {
        Health::Up
    }
}

/// What a JSON command printed: its data, or Slurm's own error list in
/// place of it (Slurm 22.05 exits 0 with `"errors"` and no data while the
/// controller is down).
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed<T> {
    /// The data.
    Data(T),
    /// Slurm answered with errors instead (the controller is down).
    SlurmErrors(String),
}

/// Parses `sinfo --json`.
pub fn parse_sinfo(json: &str) -> Result<Parsed<Vec<NodeInfo>>, String> {
    let out: SinfoOut = serde_json::from_str(json).map_err(|e| e.to_string())?;
    if !out.errors.is_empty() {
        return Ok(Parsed::SlurmErrors(errors_text(&out.errors)));
    }
    let mut nodes: Vec<NodeInfo> = Vec::with_capacity(out.nodes.len());
    for n in out.nodes {
        if nodes.iter().any(|m| m.name == n.name) {
            continue;
        }
        let (gpus, gres_types) = parse_gres(&n.gres);
        let mut state = n.state.clone();
        for f in &n.state_flags {
            state.push('+');
            state.push_str(f);
        }
        nodes.push(NodeInfo {
            health: node_health(&n.state, &n.state_flags),
            name: n.name,
            gres_types,
            gpus,
            features: parse_features(&n.features),
            state,
            cpus: n.cpus,
            alloc_cpus: n.alloc_cpus,
            memory_mb: n.real_memory,
            alloc_memory_mb: n.alloc_memory,
        });
    }
    Ok(Parsed::Data(nodes))
}

/// The memory a job asks for in all (MB), when it asks explicitly.
fn asked_memory(j: &RawJob) -> u64 {
    let nodes = u64::from(j.node_count.unwrap_or(1).max(1));
    match (j.memory_per_node, j.memory_per_cpu) {
        (Some(per_node), _) => per_node.saturating_mul(nodes),
        (None, Some(per_cpu)) => per_cpu.saturating_mul(u64::from(j.cpus.unwrap_or(1))),
        (None, None) => 0,
    }
}

/// Parses `squeue --json`.
pub fn parse_squeue(json: &str) -> Result<Parsed<Vec<SlurmJob>>, String> {
    let out: SqueueOut = serde_json::from_str(json).map_err(|e| e.to_string())?;
    if !out.errors.is_empty() {
        return Ok(Parsed::SlurmErrors(errors_text(&out.errors)));
    }
    let mut jobs = Vec::with_capacity(out.jobs.len());
    for j in out.jobs {
        let memory_mb = asked_memory(&j);
        let mut names: Vec<String> = j
            .job_resources
            .map(|r| r.allocated_nodes.into_iter().map(|n| n.nodename).collect())
            .unwrap_or_default();
        if names.is_empty() && !j.gres_detail.is_empty() {
            names = hostlist::expand(&j.nodes).unwrap_or_default();
        }
        let gpus = if j.gres_detail.len() == names.len() {
            names
                .into_iter()
                .zip(&j.gres_detail)
                .map(|(n, d)| (n, parse_gpu_indices(d)))
                .filter(|(_, g)| !g.is_empty())
                .collect()
        } else {
            Vec::new()
        };
        jobs.push(SlurmJob {
            job_id: j.job_id,
            group: if j.het_job_id != 0 {
                j.het_job_id
            } else {
                j.job_id
            },
            name: j.name,
            comment: j.comment,
            user_id: j.user_id,
            user_name: j.user_name,
            group_id: j.group_id,
            account: j.account,
            partition: j.partition,
            priority: j.priority.unwrap_or(0),
            admin_comment: j.admin_comment,
            het_offset: j.het_job_offset,
            array: j.array_job_id != 0,
            node_count: j.node_count.unwrap_or(0),
            state: j.job_state,
            reason: j.state_reason,
            exit_code: j.exit_code.unwrap_or(0),
            gpus,
            cpus: j.cpus.unwrap_or(0),
            memory_mb,
            // Slurm 22.05 says "none" for --exclusive (no sharing).
            exclusive: j.shared.as_deref() == Some("none"),
            restarts: j.restart_cnt.unwrap_or(0),
        });
    }
    Ok(Parsed::Data(jobs))
}

impl Slurm {
    /// How long a command may run, by default, before Slurm counts as
    /// unreachable (Slurm's own `MessageTimeout` is 10 s).
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(20);

    /// Slurm commands from `bin_dir` (else `PATH`), with `SLURM_CONF=conf`
    /// when given, each allowed [`Slurm::DEFAULT_TIMEOUT`].
    pub fn new(bin_dir: Option<PathBuf>, conf: Option<PathBuf>) -> Slurm {
        Slurm {
            bin_dir,
            conf,
            timeout: Slurm::DEFAULT_TIMEOUT,
        }
    }

    /// The same, each command allowed `timeout`.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Slurm {
        self.timeout = timeout;
        self
    }

    fn command(&self, name: &str) -> Command {
        let program = match &self.bin_dir {
            Some(d) => d.join(name),
            None => PathBuf::from(name),
        };
        let mut cmd = Command::new(program);
        if let Some(conf) = &self.conf {
            cmd.env("SLURM_CONF", conf);
        }
        cmd
    }

    /// Runs `name args`, feeding `stdin`; returns stdout. A command that
    /// does not end within the timeout is killed and Slurm is unreachable.
    fn run(&self, name: &str, args: &[String], stdin: Option<&str>) -> Result<String, SlurmError> {
        self.run_as(name, args, stdin, None)
    }

    /// [`Slurm::run`] as `user` (with a clean environment), or as the
    /// daemon when `None`.
    fn run_as(
        &self,
        name: &str,
        args: &[String],
        stdin: Option<&str>,
        user: Option<&RunAs>,
    ) -> Result<String, SlurmError> {
        let line = format!("{name} {}", args.join(" ")).trim_end().to_string();
        let mut cmd = self.command(name);
        if let Some(user) = user {
            cmd.env_clear().env("PATH", CLEAN_PATH).env("LANG", "C");
            if let Some(conf) = &self.conf {
                cmd.env("SLURM_CONF", conf);
            } else if let Some(conf) = std::env::var_os("SLURM_CONF") {
                cmd.env("SLURM_CONF", conf);
            }
            cmd.current_dir("/");
            user.apply(&mut cmd);
        }
        cmd.args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|source| SlurmError::CommandMissing {
            command: name.to_string(),
            source,
        })?;
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(text.as_bytes())
                .map_err(|e| SlurmError::io(format!("writing to `{name}`"), e))?;
        }
        let (stdout, stderr) = (drain(child.stdout.take()), drain(child.stderr.take()));
        let status = match wait_until(&mut child, Instant::now() + self.timeout) {
            Ok(Some(status)) => status,
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(SlurmError::Unreachable {
                    command: line,
                    message: format!("no answer within {} s", self.timeout.as_secs()),
                });
            }
            Err(e) => return Err(SlurmError::io(format!("waiting for `{name}`"), e)),
        };
        let stdout = stdout.join().unwrap_or_default();
        let stderr = String::from_utf8_lossy(&stderr.join().unwrap_or_default())
            .trim()
            .to_string();
        if !status.success() {
            // `scontrol show partition nope` says why on stdout.
            let said = if stderr.is_empty() {
                String::from_utf8_lossy(&stdout).trim().to_string()
            } else {
                stderr
            };
            return Err(classify(line, status.to_string(), said));
        }
        String::from_utf8(stdout).map_err(|e| SlurmError::Output {
            command: name.to_string(),
            message: e.to_string(),
        })
    }

    /// Runs a JSON command and parses it; Slurm's own error list means it
    /// is unreachable.
    fn json<T>(
        &self,
        name: &str,
        parse: impl Fn(&str) -> Result<Parsed<T>, String>,
    ) -> Result<T, SlurmError> {
        let command = format!("{name} --json");
        let out = self.run(name, &["--json".into()], None)?;
        match parse(&out) {
            Ok(Parsed::Data(data)) => Ok(data),
            Ok(Parsed::SlurmErrors(message)) => Err(SlurmError::Unreachable { command, message }),
            Err(message) => Err(SlurmError::Output { command, message }),
        }
    }

    /// Every node, from `sinfo --json`.
    pub fn nodes(&self) -> Result<Vec<NodeInfo>, SlurmError> {
        self.json("sinfo", parse_sinfo)
    }

    /// Every job Slurm remembers (pending, running, recently ended), from
    /// `squeue --json`.
    pub fn jobs(&self) -> Result<Vec<SlurmJob>, SlurmError> {
        self.json("squeue", parse_squeue)
    }

    /// Submits a batch job (`sbatch --parsable ARGS`, script on stdin) and
    /// returns its job id.
    pub fn sbatch(&self, args: &[String], script: &str) -> Result<u64, SlurmError> {
        self.sbatch_as(args, script, None)
    }

    /// [`Slurm::sbatch`] as `user` (None: as the daemon).
    pub fn sbatch_as(
        &self,
        args: &[String],
        script: &str,
        user: Option<&RunAs>,
    ) -> Result<u64, SlurmError> {
        let mut all = vec!["--parsable".to_string()];
        all.extend_from_slice(args);
        let out = self.run_as("sbatch", &all, Some(script), user)?;
        let id = out.trim().split(';').next().unwrap_or("");
        id.parse().map_err(|_| SlurmError::Output {
            command: "sbatch --parsable".into(),
            message: format!("expected a job id, got {:?}", out.trim()),
        })
    }

    /// Cancels a job (all its components).
    pub fn scancel(&self, job: u64) -> Result<(), SlurmError> {
        self.scancel_as(job, None)
    }

    /// Cancels a job as `user` (None: as the daemon): Slurm refuses it
    /// unless the job is theirs.
    pub fn scancel_as(&self, job: u64, user: Option<&RunAs>) -> Result<(), SlurmError> {
        self.run_as("scancel", &[job.to_string()], None, user)
            .map(|_| ())
    }

    /// `scontrol update JobId=<job> FIELDS...`.
    pub fn update_job(&self, job: u64, fields: &[String]) -> Result<(), SlurmError> {
        let mut args = vec!["update".to_string(), format!("JobId={job}")];
        args.extend_from_slice(fields);
        self.run("scontrol", &args, None).map(|_| ())
    }

    /// `scontrol VERB <job>` (`release`, `hold`, `requeuehold`).
    pub fn job_verb(&self, verb: &str, job: u64) -> Result<(), SlurmError> {
        self.run("scontrol", &[verb.to_string(), job.to_string()], None)
            .map(|_| ())
    }

    /// `scontrol show config`, as `Key = Value` pairs.
    pub fn config(&self) -> Result<Vec<(String, String)>, SlurmError> {
        let out = self.run("scontrol", &["show".into(), "config".into()], None)?;
        Ok(out
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect())
    }

    /// Whether Slurm's accounting lists an association of `user` with
    /// `account` (`sacctmgr show associations`).
    pub fn has_association(&self, user: &str, account: &str) -> Result<bool, SlurmError> {
        let args = [
            "--noheader",
            "--parsable2",
            "show",
            "associations",
            &format!("user={user}"),
            &format!("account={account}"),
            "format=account",
        ]
        .map(String::from);
        let out = self.run("sacctmgr", &args, None)?;
        Ok(out.lines().any(|l| l.trim().eq_ignore_ascii_case(account)))
    }

    /// Runs `command --version`: whether the command is there and runs.
    pub fn version(&self, command: &str) -> Result<String, SlurmError> {
        self.run(command, &["--version".into()], None)
            .map(|v| v.trim().to_string())
    }

    /// Every partition, one per line (`scontrol show partition -o`).
    pub fn partitions(&self) -> Result<String, SlurmError> {
        let args = ["show".into(), "partition".into(), "-o".into()];
        self.run("scontrol", &args, None)
    }

    /// One job's state and comment (`squeue -t all -j JOB -o %T|%k`), or
    /// `None` when Slurm lists no such job.
    pub fn job_state_and_comment(&self, job: u64) -> Result<Option<(String, String)>, SlurmError> {
        let args = ["-h", "-t", "all", "-j", &job.to_string(), "-o", "%T|%k"].map(String::from);
        let out = self.run("squeue", &args, None)?;
        Ok(out.lines().find_map(|l| {
            let (state, comment) = l.split_once('|')?;
            Some((state.trim().to_string(), comment.trim().to_string()))
        }))
    }

    /// Whether Slurm knows `partition` (`scontrol show partition`): an
    /// error saying what Slurm answered if it does not.
    pub fn partition_exists(&self, partition: &str) -> Result<(), SlurmError> {
        let args = ["show".into(), "partition".into(), partition.to_string()];
        self.run("scontrol", &args, None).map(|_| ())
    }
}

/// `PATH` for commands run as a user: the system's folders, not the
/// daemon's (the Slurm commands themselves come from `bin_dir` when set).
const CLEAN_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Reads a pipe to its end on a thread of its own (so a chatty command
/// cannot block on a full pipe while it is waited for).
fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut out);
        }
        out
    })
}

/// Waits for `child` until `deadline`: its status, or `None` if it is
/// still running then.
fn wait_until(
    child: &mut Child,
    deadline: Instant,
) -> std::io::Result<Option<std::process::ExitStatus>> {
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gres_types_by_index() {
        let (n, t) = parse_gres("gpu:g0:1,gpu:g1:1(S:0),mps:100");
        assert_eq!(n, 2);
        assert_eq!(t, GresTypes::PerIndex(vec!["g0".into(), "g1".into()]));
        assert_eq!(t.single(), None);
        assert_eq!(t.for_gpus(&[1]), ["g1"]);
        assert_eq!(parse_gres("gpu:8"), (8, GresTypes::Other));
        assert_eq!(parse_gres("(null)"), (0, GresTypes::Other));
        // One GPU: pinned by its type, which is also the node's one type.
        let (n, t) = parse_gres("gpu:a100:1(S:0)");
        assert_eq!((n, t.single()), (1, Some("a100")));
        assert_eq!(t.for_gpus(&[0]), ["a100"]);
    }

    #[test]
    fn gres_of_one_type_is_asked_by_count() {
        let one = |t: &str| GresTypes::OneType(t.into());
        assert_eq!(parse_gres("gpu:a100:4(S:0-1)"), (4, one("a100")));
        // Split by socket, or listed per GPU: still one type for all.
        assert_eq!(
            parse_gres("gpu:a100:2(S:0),gpu:a100:2(S:1)"),
            (4, one("a100"))
        );
        assert_eq!(parse_gres("gpu:v100:1,gpu:v100:1"), (2, one("v100")));
        let (_, t) = parse_gres("gpu:a100:4");
        assert_eq!(t.single(), Some("a100"));
        assert_eq!(t.for_gpus(&[2, 3]), ["a100", "a100"]);
        // Two products, or a product beside untyped GPUs: neither.
        assert_eq!(parse_gres("gpu:a100:2,gpu:v100:2"), (4, GresTypes::Other));
        assert_eq!(parse_gres("gpu:a100:2,gpu:2"), (4, GresTypes::Other));
        assert_eq!(parse_gres("gpu:g0:1,gpu:a100:2"), (3, GresTypes::Other));
        assert!(GresTypes::Other.for_gpus(&[0]).is_empty());
    }

    #[test]
    fn node_features() {
        assert_eq!(parse_features("a100,ib"), ["a100", "ib"]);
        assert_eq!(parse_features(" a100 , "), ["a100"]);
        assert!(parse_features("(null)").is_empty());
        assert!(parse_features("").is_empty());
    }

    #[test]
    fn gpu_indices_from_gres_detail() {
        let d = "gpu:g0:1(IDX:0),gpu:g1:1(IDX:1),gpu:g3:0(IDX:),gpu:g4:0(IDX:N/A)";
        assert_eq!(parse_gpu_indices(d), [0, 1]);
        assert_eq!(parse_gpu_indices("gpu:3(IDX:0,4-5)"), [0, 4, 5]);
    }

    #[test]
    fn node_states() {
        assert_eq!(node_health("idle", &[]), Health::Up);
        assert_eq!(node_health("mixed", &[]), Health::Up);
        assert_eq!(node_health("down", &[]), Health::Down);
        assert_eq!(node_health("idle", &["DRAIN".into()]), Health::Draining);
        assert_eq!(node_health("unknown", &[]), Health::Draining);
        assert_eq!(
            node_health("idle", &["NOT_RESPONDING".into()]),
            Health::Draining
        );
    }

    const SQUEUE: &str = r#"{"jobs": [
      {"job_id": 7, "het_job_id": 7, "het_job_offset": 0, "name": "gw-3", "comment": "gangway:3:1",
       "job_state": "RUNNING", "state_reason": "None", "exit_code": 0, "nodes": "n2",
       "gres_detail": ["gpu:g5:1(IDX:5),gpu:g6:1(IDX:6)"],
       "job_resources": {"nodes": "n2", "allocated_nodes": [{"nodename": "n2"}]}},
      {"job_id": 8, "het_job_id": 7, "het_job_offset": 1, "name": "gw-3", "comment": "",
       "job_state": "RUNNING", "state_reason": "None", "exit_code": 0, "nodes": "n3",
       "gres_detail": ["gpu:g0:1(IDX:0),gpu:g3:1(IDX:3)"],
       "job_resources": {"nodes": "n3", "allocated_nodes": [{"nodename": "n3"}]}},
      {"job_id": 10, "het_job_id": 0, "name": "x", "job_state": "RUNNING", "nodes": "n[2-3]",
       "gres_detail": ["gpu:g1:1(IDX:1)", "gpu:g1:1(IDX:1)"]},
      {"job_id": 11, "het_job_id": 0, "name": "y", "job_state": "NODE_FAIL", "nodes": "n[2-3]",
       "state_reason": "NodeDown", "exit_code": 36608, "gres_detail": []}
    ]}"#;

    #[test]
    fn squeue_components_and_gpus() {
        let Parsed::Data(jobs) = parse_squeue(SQUEUE).unwrap() else {
            panic!("no data")
        };
        assert_eq!(jobs.len(), 4);
        assert_eq!(jobs[0].group, 7);
        assert_eq!(jobs[1].group, 7);
        assert_eq!(jobs[1].gpus, vec![("n3".to_string(), vec![0, 3])]);
        assert_eq!(
            jobs[2].gpus,
            vec![("n2".to_string(), vec![1]), ("n3".to_string(), vec![1])]
        );
        assert_eq!(jobs[3].group, 11);
        assert_eq!(jobs[3].state, "NODE_FAIL");
        assert!(jobs[3].gpus.is_empty());
        assert!(parse_squeue("{\"jobs\": 3}").is_err());
    }

    #[test]
    fn an_error_list_is_slurm_not_answering() {
        // What Slurm 22.05's squeue --json prints while slurmctld is down.
        let down = r#"{"meta": {}, "errors": [{"error": "Failed while looking for jobs", "error_number": 1007}], "jobs": []}"#;
        assert_eq!(
            parse_squeue(down).unwrap(),
            Parsed::SlurmErrors("Failed while looking for jobs".into())
        );
        let down = r#"{"errors": [{"error_number": 5}], "nodes": []}"#;
        assert!(matches!(parse_sinfo(down).unwrap(), Parsed::SlurmErrors(m) if m.contains("5")));
        assert!(
            matches!(parse_sinfo(r#"{"nodes": []}"#).unwrap(), Parsed::Data(n) if n.is_empty())
        );
    }

    #[test]
    fn failures_are_told_apart() {
        let e = classify(
            "sbatch x".into(),
            "exit status: 1".into(),
            "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)".into(),
        );
        assert!(matches!(e, SlurmError::Unreachable { .. }), "{e}");
        let e = classify(
            "sbatch x".into(),
            "exit status: 1".into(),
            "sbatch: error: invalid partition specified: nope\nsbatch: error: Batch job submission failed: Invalid partition name specified".into(),
        );
        assert!(matches!(e, SlurmError::Misconfigured { .. }), "{e}");
        let e = classify(
            "sbatch x".into(),
            "exit status: 1".into(),
            "sbatch: error: Batch job submission failed: Invalid node name specified".into(),
        );
        assert!(matches!(e, SlurmError::CommandFailed { .. }), "{e}");
    }

    #[test]
    fn a_command_that_hangs_is_slurm_not_answering() {
        let dir = std::env::temp_dir().join(format!("gw-engine-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let squeue = dir.join("squeue");
        std::fs::write(&squeue, "#!/bin/sh\nsleep 5\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&squeue, std::fs::Permissions::from_mode(0o755)).unwrap();
        let slurm = Slurm::new(Some(dir.clone()), None).with_timeout(Duration::from_millis(200));
        let t = Instant::now();
        let e = slurm.jobs().unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        assert!(matches!(e, SlurmError::Unreachable { .. }), "{e}");
        assert!(e.to_string().contains("no answer within"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn missing_commands_are_named() {
        let slurm = Slurm::new(Some("/nonexistent/bin".into()), None);
        let e = slurm.nodes().unwrap_err();
        assert!(matches!(e, SlurmError::CommandMissing { .. }));
        assert!(e.to_string().contains("sinfo"), "{e}");
    }
}
