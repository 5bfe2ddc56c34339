//! Slurm through its command line: `sinfo --json`, `squeue --json`,
//! `sbatch`, `scancel`. Both JSON commands exist in Slurm 22.05
//! (`scontrol ... --json` does not). Parsing is separate from running, so it
//! is tested on recorded output.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use gangway_core::Health;
use serde::Deserialize;

use super::SlurmError;
use super::hostlist;

/// How to run Slurm's commands.
#[derive(Clone, Debug, Default)]
pub struct Slurm {
    bin_dir: Option<PathBuf>,
    conf: Option<PathBuf>,
}

/// A node as `sinfo` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeInfo {
    /// Node name.
    pub name: String,
    /// GRES type of each GPU, by index (`None` when the node's GPUs are not
    /// typed one per index, so they cannot be pinned).
    pub gpu_types: Option<Vec<String>>,
    /// GPUs the node has.
    pub gpus: u32,
    /// Its health for Gangway: down and failed nodes are down; drained,
    /// draining, not responding or not yet registered nodes take no new work.
    pub health: Health,
    /// Slurm's state words, for reports (`idle`, `down+DRAIN`, ...).
    pub state: String,
}

/// Where a Slurm job runs: per node, its GPU indices.
pub type NodeGpus = Vec<(String, Vec<u32>)>;

/// One job record of `squeue` (a component, for heterogeneous jobs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlurmJob {
    /// Its own job id.
    pub job_id: u64,
    /// The heterogeneous job it belongs to (its own id when it is not a
    /// component).
    pub group: u64,
    /// Job name.
    pub name: String,
    /// Comment (Gangway writes `gangway:<id>:<attempt>`).
    pub comment: String,
    /// State word (`RUNNING`, `COMPLETED`, `NODE_FAIL`, ...).
    pub state: String,
    /// Slurm's reason (`None`, `Resources`, `NodeDown`, ...).
    pub reason: String,
    /// Exit code, as Slurm reports it.
    pub exit_code: i64,
    /// Nodes and GPU indices it holds (while running).
    pub gpus: NodeGpus,
}

#[derive(Deserialize)]
struct SinfoOut {
    #[serde(default)]
    nodes: Vec<RawNode>,
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
}

#[derive(Deserialize)]
struct SqueueOut {
    #[serde(default)]
    jobs: Vec<RawJob>,
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

/// Parses a node's GRES string (`gpu:g0:1,gpu:g1:1(S:0)`): the GPU count,
/// and each GPU's type by index when every GPU entry is typed with count 1.
pub fn parse_gres(gres: &str) -> (u32, Option<Vec<String>>) {
    let mut count = 0u32;
    let mut types = Some(Vec::new());
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
        count += n;
        match (ty, n, types.as_mut()) {
            (Some(ty), 1, Some(t)) => t.push(ty.to_string()),
            (_, 0, _) => {}
            _ => types = None,
        }
    }
    if count == 0 {
        types = None;
    }
    (count, types)
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

/// Parses `sinfo --json`.
pub fn parse_sinfo(json: &str) -> Result<Vec<NodeInfo>, String> {
    let out: SinfoOut = serde_json::from_str(json).map_err(|e| e.to_string())?;
    let mut nodes: Vec<NodeInfo> = Vec::with_capacity(out.nodes.len());
    for n in out.nodes {
        if nodes.iter().any(|m| m.name == n.name) {
            continue;
        }
        let (gpus, gpu_types) = parse_gres(&n.gres);
        let mut state = n.state.clone();
        for f in &n.state_flags {
            state.push('+');
            state.push_str(f);
        }
        nodes.push(NodeInfo {
            health: node_health(&n.state, &n.state_flags),
            name: n.name,
            gpu_types,
            gpus,
            state,
        });
    }
    Ok(nodes)
}

/// Parses `squeue --json`.
pub fn parse_squeue(json: &str) -> Result<Vec<SlurmJob>, String> {
    let out: SqueueOut = serde_json::from_str(json).map_err(|e| e.to_string())?;
    let mut jobs = Vec::with_capacity(out.jobs.len());
    for j in out.jobs {
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
            state: j.job_state,
            reason: j.state_reason,
            exit_code: j.exit_code.unwrap_or(0),
            gpus,
        });
    }
    Ok(jobs)
}

impl Slurm {
    /// Slurm commands from `bin_dir` (else `PATH`), with `SLURM_CONF=conf`
    /// when given.
    pub fn new(bin_dir: Option<PathBuf>, conf: Option<PathBuf>) -> Slurm {
        Slurm { bin_dir, conf }
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

    /// Runs `name args`, feeding `stdin`; returns stdout.
    fn run(&self, name: &str, args: &[String], stdin: Option<&str>) -> Result<String, SlurmError> {
        let line = format!("{name} {}", args.join(" "));
        let mut cmd = self.command(name);
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
        let out = child
            .wait_with_output()
            .map_err(|e| SlurmError::io(format!("waiting for `{name}`"), e))?;
        if !out.status.success() {
            return Err(SlurmError::CommandFailed {
                command: line,
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        String::from_utf8(out.stdout).map_err(|e| SlurmError::Output {
            command: name.to_string(),
            message: e.to_string(),
        })
    }

    /// Every node, from `sinfo --json`.
    pub fn nodes(&self) -> Result<Vec<NodeInfo>, SlurmError> {
        let out = self.run("sinfo", &["--json".into()], None)?;
        parse_sinfo(&out).map_err(|message| SlurmError::Output {
            command: "sinfo --json".into(),
            message,
        })
    }

    /// Every job Slurm remembers (pending, running, recently ended), from
    /// `squeue --json`.
    pub fn jobs(&self) -> Result<Vec<SlurmJob>, SlurmError> {
        let out = self.run("squeue", &["--json".into()], None)?;
        parse_squeue(&out).map_err(|message| SlurmError::Output {
            command: "squeue --json".into(),
            message,
        })
    }

    /// Submits a batch job (`sbatch --parsable ARGS`, script on stdin) and
    /// returns its job id.
    pub fn sbatch(&self, args: &[String], script: &str) -> Result<u64, SlurmError> {
        let mut all = vec!["--parsable".to_string()];
        all.extend_from_slice(args);
        let out = self.run("sbatch", &all, Some(script))?;
        let id = out.trim().split(';').next().unwrap_or("");
        id.parse().map_err(|_| SlurmError::Output {
            command: "sbatch --parsable".into(),
            message: format!("expected a job id, got {:?}", out.trim()),
        })
    }

    /// Cancels a job (all its components).
    pub fn scancel(&self, job: u64) -> Result<(), SlurmError> {
        self.run("scancel", &[job.to_string()], None).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gres_types_by_index() {
        let (n, t) = parse_gres("gpu:g0:1,gpu:g1:1(S:0),mps:100");
        assert_eq!(n, 2);
        assert_eq!(t.unwrap(), ["g0", "g1"]);
        assert_eq!(parse_gres("gpu:8"), (8, None));
        assert_eq!(parse_gres("gpu:tesla:2"), (2, None));
        assert_eq!(parse_gres("(null)"), (0, None));
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
        let jobs = parse_squeue(SQUEUE).unwrap();
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
    fn missing_commands_are_named() {
        let slurm = Slurm::new(Some("/nonexistent/bin".into()), None);
        let e = slurm.nodes().unwrap_err();
        assert!(matches!(e, SlurmError::CommandMissing { .. }));
        assert!(e.to_string().contains("sinfo"), "{e}");
    }
}
