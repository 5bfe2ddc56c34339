//! Turning a Gangway start into an `sbatch` call pinned to exactly the
//! chosen nodes and GPU indices.
//!
//! Each GPU index of a node has its own GRES type (`gpu:g5:1` is GPU 5), so
//! asking for those types asks for those GPUs. A gang whose nodes all use
//! the same indices is one job over those nodes (`-N k -w n1,n2`); any other
//! gang (8+4, or 4+4 on different indices) is a heterogeneous job with one
//! component per node, since the GRES of a component is per node and
//! `scontrol update NodeList` does not work on heterogeneous parts.

use super::engine::NodeGpus;

/// What to launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchSpec<'a> {
    /// Gangway's job id.
    pub id: u64,
    /// Attempt number (1 for the first launch).
    pub attempt: u32,
    /// The user's command and arguments.
    pub cmd: &'a [String],
    /// Working directory.
    pub cwd: &'a str,
    /// Slurm partition, if any.
    pub partition: Option<&'a str>,
    /// Where the script records how the job ended ([`end_record`]).
    pub ends_dir: &'a std::path::Path,
}

/// The name of the file in which the batch script of job `id`'s `attempt`
/// records its exit status when the command ends: how the daemon learns
/// how a job ended after Slurm has forgotten it.
pub fn end_record(id: u64, attempt: u32) -> String {
    format!("gangway-{id}.{attempt}.exit")
}

/// One node of a placement: name, GPU indices and their GRES types.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// Slurm node.
    pub node: String,
    /// GPU indices on it.
    pub gpus: Vec<u32>,
    /// The GRES type of each of those GPUs.
    pub types: Vec<String>,
}

/// The comment Gangway puts on its Slurm jobs: `gangway:<id>:<attempt>`.
pub fn comment(id: u64, attempt: u32) -> String {
    format!("gangway:{id}:{attempt}")
}

/// Reads a comment written by [`comment`].
pub fn parse_comment(comment: &str) -> Option<(u64, u32)> {
    let rest = comment.strip_prefix("gangway:")?;
    let (id, attempt) = rest.split_once(':')?;
    Some((id.parse().ok()?, attempt.parse().ok()?))
}

/// Single-quotes a word for `sh`.
pub fn shell_quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', "'\\''"))
}

/// The placement as the job sees it: `n2:5,6 n3:0,3`.
pub fn placement_text(parts: &[Part]) -> String {
    parts
        .iter()
        .map(|p| {
            let g: Vec<String> = p.gpus.iter().map(u32::to_string).collect();
            format!("{}:{}", p.node, g.join(","))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Placement parts as node names and GPU lists.
pub fn node_gpus(parts: &[Part]) -> NodeGpus {
    parts
        .iter()
        .map(|p| (p.node.clone(), p.gpus.clone()))
        .collect()
}

fn gres(part: &Part) -> String {
    let g: Vec<String> = part.types.iter().map(|t| format!("gpu:{t}:1")).collect();
    format!("--gres={}", g.join(","))
}

/// The arguments of `sbatch` (after `--parsable`) for a placement.
pub fn sbatch_args(spec: &LaunchSpec<'_>, parts: &[Part]) -> Vec<String> {
    let mut common = vec![
        format!("--job-name=gw-{}", spec.id),
        format!("--comment={}", comment(spec.id, spec.attempt)),
        "--no-requeue".to_string(),
        format!("--chdir={}", spec.cwd),
        format!("--output={}/gangway-{}.out", spec.cwd, spec.id),
        "--open-mode=append".to_string(),
    ];
    if let Some(p) = spec.partition {
        common.push(format!("--partition={p}"));
    }
    let uniform = parts.windows(2).all(|w| w[0].types == w[1].types);
    let mut args = Vec::new();
    if uniform {
        let nodes: Vec<&str> = parts.iter().map(|p| p.node.as_str()).collect();
        args.extend(common);
        args.push(format!("--nodes={}", parts.len()));
        args.push(format!("--ntasks={}", parts.len()));
        args.push("--ntasks-per-node=1".to_string());
        args.push(format!("--nodelist={}", nodes.join(",")));
        if let Some(first) = parts.first() {
            args.push(gres(first));
        }
    } else {
        for (i, part) in parts.iter().enumerate() {
            if i > 0 {
                args.push(":".to_string());
            }
            args.extend(common.iter().cloned());
            args.push("--nodes=1".to_string());
            args.push("--ntasks=1".to_string());
            args.push(format!("--nodelist={}", part.node));
            args.push(gres(part));
        }
    }
    args
}

/// The batch script: exports `GANGWAY_JOB_ID`, `GANGWAY_ATTEMPT`,
/// `GANGWAY_PLACEMENT` and `GANGWAY_SRUN_ARGS` (`--het-group=0-N` for a
/// heterogeneous gang, so `srun $GANGWAY_SRUN_ARGS ...` reaches every node
/// whatever the placement's shape; empty otherwise), runs the user's
/// command on the first node (multi-node jobs reach the others with
/// `srun`), then records the command's exit status in the ends folder
/// (written to a temporary name and renamed, so a record is whole) and
/// exits with it.
pub fn script(spec: &LaunchSpec<'_>, parts: &[Part]) -> String {
    let cmd: Vec<String> = spec.cmd.iter().map(|w| shell_quote(w)).collect();
    let uniform = parts.windows(2).all(|w| w[0].types == w[1].types);
    let srun_args = if uniform {
        String::new()
    } else {
        format!("--het-group=0-{}", parts.len().saturating_sub(1))
    };
    let dir = shell_quote(&spec.ends_dir.display().to_string());
    let record = shell_quote(&end_record(spec.id, spec.attempt));
    format!(
        "#!/bin/sh\n\
         # Gangway job {id}, attempt {attempt}\n\
         GANGWAY_JOB_ID={id}; export GANGWAY_JOB_ID\n\
         GANGWAY_ATTEMPT={attempt}; export GANGWAY_ATTEMPT\n\
         GANGWAY_PLACEMENT={placement}; export GANGWAY_PLACEMENT\n\
         GANGWAY_SRUN_ARGS={srun_args}; export GANGWAY_SRUN_ARGS\n\
         {cmd}\n\
         status=$?\n\
         mkdir -p {dir} 2>/dev/null\n\
         echo \"$status\" > {dir}/{record}.tmp && mv -f {dir}/{record}.tmp {dir}/{record}\n\
         exit \"$status\"\n",
        id = spec.id,
        attempt = spec.attempt,
        placement = shell_quote(&placement_text(parts)),
        srun_args = shell_quote(&srun_args),
        cmd = cmd.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(node: &str, gpus: &[u32]) -> Part {
        Part {
            node: node.into(),
            gpus: gpus.to_vec(),
            types: gpus.iter().map(|g| format!("g{g}")).collect(),
        }
    }

    #[test]
    fn even_gangs_are_one_job_uneven_ones_heterogeneous() {
        let cmd = vec!["train".to_string(), "it's".to_string()];
        let spec = LaunchSpec {
            id: 12,
            attempt: 2,
            cmd: &cmd,
            cwd: "/w",
            partition: Some("gpu"),
            ends_dir: std::path::Path::new("/st/ends"),
        };
        let even = sbatch_args(&spec, &[part("n1", &[0, 1]), part("n2", &[0, 1])]);
        assert!(even.contains(&"--nodelist=n1,n2".to_string()));
        assert!(even.contains(&"--gres=gpu:g0:1,gpu:g1:1".to_string()));
        assert!(!even.contains(&":".to_string()));
        let uneven = sbatch_args(&spec, &[part("n1", &[0, 1, 2]), part("n2", &[5])]);
        let split = uneven.iter().position(|a| a == ":").unwrap();
        assert!(uneven[..split].contains(&"--nodelist=n1".to_string()));
        assert!(uneven[split..].contains(&"--gres=gpu:g5:1".to_string()));
        assert!(uneven.contains(&"--comment=gangway:12:2".to_string()));
        let s = script(&spec, &[part("n1", &[0, 1])]);
        assert!(s.contains("\n'train' 'it'\\''s'\nstatus=$?\n"), "{s}");
        assert!(s.contains("GANGWAY_PLACEMENT='n1:0,1'"), "{s}");
        assert!(s.contains("GANGWAY_SRUN_ARGS=''"), "{s}");
        assert!(
            s.contains("mv -f '/st/ends'/'gangway-12.2.exit'.tmp '/st/ends'/'gangway-12.2.exit'"),
            "{s}"
        );
        let het = script(&spec, &[part("n1", &[0, 1, 2]), part("n2", &[5])]);
        assert!(het.contains("GANGWAY_SRUN_ARGS='--het-group=0-1'"), "{het}");
    }

    #[test]
    fn comments_round_trip() {
        assert_eq!(parse_comment(&comment(5, 3)), Some((5, 3)));
        assert_eq!(parse_comment("gangway:x:1"), None);
        assert_eq!(parse_comment(""), None);
    }
}
