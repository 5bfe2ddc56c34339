//! Turning a Gangway start into an `sbatch` call pinned to exactly the
//! chosen nodes and GPU indices.
//!
//! Each GPU index of a node has its own GRES type (`gpu:g5:1` is GPU 5), so
//! asking for those types asks for those GPUs; on a node whose GPUs all
//! carry one GRES type (the product, `gpu:a100:8`) the GPUs are asked for
//! by count of that type (`gpu:a100:4`) and Slurm chooses which, the daemon
//! adopting its choice. A gang whose nodes all ask the same is one job over
//! those nodes (`-N k -w n1,n2`); any other gang (8+4, or 4+4 on different
//! indices) is a heterogeneous job with one component per node, since the
//! GRES of a component is per node and `scontrol update NodeList` does not
//! work on heterogeneous parts.
//!
//! Every launch is tagged (`--comment=gangway:<daemon>:<id>:<launch>`) with
//! the daemon's own identity, so a second daemon on the same cluster
//! neither adopts nor cancels it, and carries a secret only its script
//! holds, which its end record must repeat ([`script`]).

use super::engine::NodeGpus;

/// What to launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchSpec<'a> {
    /// The launching daemon's identity.
    pub daemon: &'a str,
    /// Gangway's job id.
    pub id: u64,
    /// Which launch of the job (1 for the first).
    pub number: u32,
    /// The user's command and arguments.
    pub cmd: &'a [String],
    /// Working directory.
    pub cwd: &'a str,
    /// The user's environment (already sanitized: [`job_environment`]).
    pub env: &'a [(String, String)],
    /// Slurm partition, if any.
    pub partition: Option<&'a str>,
    /// The folder of the user's end records, where the script records how
    /// the job ended (how the daemon learns it after Slurm has forgotten
    /// the job: see `daemon::records`); none when the user has no place
    /// for them (no home), and the script then records nothing.
    pub record_dir: Option<&'a std::path::Path>,
    /// The record's file name there (derived from the secret).
    pub record_name: &'a str,
    /// The launch's secret, which its end record repeats.
    pub token: &'a str,
}

/// Reads an end record's text: the exit status and the secret.
pub fn parse_end_record(text: &str) -> Option<(i64, &str)> {
    let mut words = text.split_whitespace();
    let status = words.next()?.parse().ok()?;
    Some((status, words.next().unwrap_or("")))
}

/// Variables Slurm or Gangway set for a job, never taken from the user's
/// environment (prefixes), and shell bookkeeping that means nothing
/// elsewhere (names).
const NOT_PASSED_PREFIXES: [&str; 4] = ["SLURM_", "SBATCH_", "SALLOC_", "GANGWAY_"];
const NOT_PASSED: [&str; 5] = ["_", "PWD", "OLDPWD", "SHLVL", "SLURM_CONF"];

/// Largest environment passed to a job, in bytes.
pub const MAX_ENV_BYTES: usize = 256 << 10;

/// The user's environment as a job gets it: variables with shell names
/// only (`[A-Za-z_][A-Za-z0-9_]*`), without those Slurm and Gangway set
/// for the job (`SLURM_*`, `SBATCH_*`, `SALLOC_*`, `GANGWAY_*`) and shell
/// bookkeeping (`PWD`, `SHLVL`, ...); an error if it is over
/// [`MAX_ENV_BYTES`].
pub fn job_environment(env: Vec<(String, String)>) -> Result<Vec<(String, String)>, String> {
    let shell_name = |n: &str| {
        let mut chars = n.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let kept: Vec<(String, String)> = env
        .into_iter()
        .filter(|(n, v)| {
            shell_name(n)
                && !v.contains('\0')
                && !NOT_PASSED.contains(&n.as_str())
                && !NOT_PASSED_PREFIXES.iter().any(|p| n.starts_with(p))
        })
        .collect();
    let bytes: usize = kept.iter().map(|(n, v)| n.len() + v.len() + 2).sum();
    if bytes > MAX_ENV_BYTES {
        return Err(format!(
            "the environment is {bytes} bytes, over the {MAX_ENV_BYTES}-byte limit \
             (unset what the job does not need)"
        ));
    }
    Ok(kept)
}

/// One node of a placement: name, GPU indices and their GRES types.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// Slurm node.
    pub node: String,
    /// GPU indices on it (on a node asked for by count, the ones Gangway
    /// chose: Slurm may give others, which the daemon then adopts).
    pub gpus: Vec<u32>,
    /// The GRES type to ask for, for each of those GPUs (the same type
    /// repeated on a node asked for by count).
    pub types: Vec<String>,
}

/// Slurm's GRES request for GPUs of `types` (one per GPU): each type once
/// with its count, in order (`gpu:g0:1,gpu:g5:1`, or `gpu:a100:4` for four
/// GPUs of the one type `a100`).
pub fn gres_request(types: &[String]) -> String {
    let mut counts: Vec<(&str, u32)> = Vec::new();
    for t in types {
        match counts.iter_mut().find(|(name, _)| name == t) {
            Some((_, n)) => *n += 1,
            None => counts.push((t.as_str(), 1)),
        }
    }
    let items: Vec<String> = counts.iter().map(|(t, n)| format!("gpu:{t}:{n}")).collect();
    items.join(",")
}

/// The tag (comment) daemon `daemon` puts on launch `number` of its job
/// `id`: `gangway:<daemon>:<id>:<number>`.
pub fn tag(daemon: &str, id: u64, number: u32) -> String {
    format!("gangway:{daemon}:{id}:{number}")
}

/// Reads a tag written by [`tag`]: (daemon, job, launch). A tag of
/// version 0.1 (`gangway:<id>:<attempt>`) has an empty daemon.
pub fn parse_tag(comment: &str) -> Option<(&str, u64, u32)> {
    let rest = comment.strip_prefix("gangway:")?;
    let parts: Vec<&str> = rest.split(':').collect();
    match parts[..] {
        [daemon, id, n] if !daemon.is_empty() => Some((daemon, id.parse().ok()?, n.parse().ok()?)),
        [id, n] => Some(("", id.parse().ok()?, n.parse().ok()?)),
        _ => None,
    }
}

/// `path` as a Slurm file name pattern that means the path itself: Slurm
/// expands `%` in `--output` (`%j`, `%u`, ...), and `%%` is a `%`.
pub fn slurm_pattern_literal(path: &str) -> String {
    path.replace('%', "%%")
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
    format!("--gres={}", gres_request(&part.types))
}

/// The arguments of `sbatch` (after `--parsable`) for a placement.
pub fn sbatch_args(spec: &LaunchSpec<'_>, parts: &[Part]) -> Vec<String> {
    let mut common = vec![
        format!("--job-name=gw-{}", spec.id),
        format!("--comment={}", tag(spec.daemon, spec.id, spec.number)),
        "--no-requeue".to_string(),
        format!("--chdir={}", spec.cwd),
        format!(
            "--output={}/gangway-{}.out",
            slurm_pattern_literal(spec.cwd),
            spec.id
        ),
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

/// The batch script: sets the user's environment, exports
/// `GANGWAY_JOB_ID`, `GANGWAY_ATTEMPT` (the launch number),
/// `GANGWAY_PLACEMENT` and `GANGWAY_SRUN_ARGS` (`--het-group=0-N` for a
/// heterogeneous gang, so `srun $GANGWAY_SRUN_ARGS ...` reaches every node
/// whatever the placement's shape; empty otherwise), runs the user's
/// command on the first node (multi-node jobs reach the others with
/// `srun`), then records the command's exit status and the launch's secret
/// in the user's record folder, as the job's user ([`record_lines`]). The
/// script exits with the command's status. The secret is a shell variable
/// of the script, not exported: the command never sees it.
pub fn script(spec: &LaunchSpec<'_>, parts: &[Part]) -> String {
    let cmd: Vec<String> = spec.cmd.iter().map(|w| shell_quote(w)).collect();
    let uniform = parts.windows(2).all(|w| w[0].types == w[1].types);
    let srun_args = if uniform {
        String::new()
    } else {
        format!("--het-group=0-{}", parts.len().saturating_sub(1))
    };
    let env: String = spec
        .env
        .iter()
        .map(|(n, v)| format!("{n}={}; export {n}\n", shell_quote(v)))
        .collect();
    format!(
        "#!/bin/sh\n\
         # Gangway job {id}, launch {number}\n\
         {env}\
         GANGWAY_JOB_ID={id}; export GANGWAY_JOB_ID\n\
         GANGWAY_ATTEMPT={number}; export GANGWAY_ATTEMPT\n\
         GANGWAY_PLACEMENT={placement}; export GANGWAY_PLACEMENT\n\
         GANGWAY_SRUN_ARGS={srun_args}; export GANGWAY_SRUN_ARGS\n\
         gw_token={token}\n\
         {cmd}\n\
         status=$?\n\
         {record}\
         exit \"$status\"\n",
        id = spec.id,
        number = spec.number,
        placement = shell_quote(&placement_text(parts)),
        srun_args = shell_quote(&srun_args),
        token = shell_quote(spec.token),
        record = record_lines(spec),
        cmd = cmd.join(" ")
    )
}

/// The script's lines that record how the job ended: over the place the
/// daemon reserved for it (`daemon::records::reserve`), in place, so that
/// it needs no new space on a full filesystem; without a reservation, to a
/// fresh temporary file renamed into place (the folder made first if
/// missing, 0700), so a record is whole and its owner is the job's user. A
/// record that cannot be written is said on stderr and changes nothing
/// else.
fn record_lines(spec: &LaunchSpec<'_>) -> String {
    let Some(record_dir) = spec.record_dir else {
        return "echo \"gangway: the job's user has no home folder: no end record is kept\" >&2\n"
            .into();
    };
    let dir = shell_quote(&record_dir.display().to_string());
    format!(
        "gw_rec={dir}/{record_q}; gw_tmp=\n\
         {{ [ -f \"$gw_rec\" ] && [ ! -h \"$gw_rec\" ] \\\n  \
         && printf '%s %s\\n' \"$status\" \"$gw_token\" 1<>\"$gw_rec\"; }} 2>/dev/null \\\n  \
         || {{ mkdir -p -m 0700 {dir} 2>/dev/null; gw_tmp=$(mktemp {dir}/.record.XXXXXX) \\\n  \
         && printf '%s %s\\n' \"$status\" \"$gw_token\" > \"$gw_tmp\" && mv -f \"$gw_tmp\" \"$gw_rec\"; }} \\\n  \
         || {{ rm -f \"$gw_tmp\"; echo \"gangway: the job's end record could not be written to \"{dir} >&2; }}\n",
        record_q = shell_quote(spec.record_name),
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
        let env = vec![("HOME".to_string(), "/home/a b".to_string())];
        let spec = LaunchSpec {
            daemon: "d1",
            id: 12,
            number: 2,
            cmd: &cmd,
            cwd: "/w",
            env: &env,
            partition: Some("gpu"),
            record_dir: Some(std::path::Path::new("/st/ends/1000")),
            record_name: "abc.exit",
            token: "s3cr3t",
        };
        let even = sbatch_args(&spec, &[part("n1", &[0, 1]), part("n2", &[0, 1])]);
        assert!(even.contains(&"--nodelist=n1,n2".to_string()));
        assert!(even.contains(&"--gres=gpu:g0:1,gpu:g1:1".to_string()));
        assert!(!even.contains(&":".to_string()));
        let uneven = sbatch_args(&spec, &[part("n1", &[0, 1, 2]), part("n2", &[5])]);
        let split = uneven.iter().position(|a| a == ":").unwrap();
        assert!(uneven[..split].contains(&"--nodelist=n1".to_string()));
        assert!(uneven[split..].contains(&"--gres=gpu:g5:1".to_string()));
        assert!(uneven.contains(&"--comment=gangway:d1:12:2".to_string()));
        let s = script(&spec, &[part("n1", &[0, 1])]);
        assert!(s.contains("\n'train' 'it'\\''s'\nstatus=$?\n"), "{s}");
        assert!(s.contains("GANGWAY_PLACEMENT='n1:0,1'"), "{s}");
        assert!(s.contains("GANGWAY_SRUN_ARGS=''"), "{s}");
        assert!(s.contains("\nHOME='/home/a b'; export HOME\n"), "{s}");
        assert!(s.contains("\ngw_token='s3cr3t'\n"), "{s}");
        assert!(!s.contains("export gw_token"), "{s}");
        assert!(
            s.contains("\ngw_rec='/st/ends/1000'/'abc.exit'; gw_tmp=\n"),
            "{s}"
        );
        assert!(s.contains("\"$gw_token\" 1<>\"$gw_rec\""), "{s}");
        assert!(s.contains("mv -f \"$gw_tmp\" \"$gw_rec\""), "{s}");
        let pct = LaunchSpec {
            cwd: "/w/100%_done",
            ..spec.clone()
        };
        let args = sbatch_args(&pct, &[part("n1", &[0])]);
        assert!(
            args.contains(&"--output=/w/100%%_done/gangway-12.out".to_string()),
            "{args:?}"
        );
        let het = script(&spec, &[part("n1", &[0, 1, 2]), part("n2", &[5])]);
        assert!(het.contains("GANGWAY_SRUN_ARGS='--het-group=0-1'"), "{het}");
    }

    #[test]
    fn nodes_of_one_gres_type_are_asked_by_count() {
        let counted = |node: &str, gpus: &[u32]| Part {
            node: node.into(),
            gpus: gpus.to_vec(),
            types: vec!["a100".to_string(); gpus.len()],
        };
        assert_eq!(
            gres_request(&["g0".into(), "g5".into()]),
            "gpu:g0:1,gpu:g5:1"
        );
        assert_eq!(gres_request(&vec!["a100".to_string(); 4]), "gpu:a100:4");
        let cmd = vec!["train".to_string()];
        let spec = LaunchSpec {
            daemon: "d1",
            id: 3,
            number: 1,
            cmd: &cmd,
            cwd: "/w",
            env: &[],
            partition: None,
            record_dir: None,
            record_name: "x",
            token: "t",
        };
        // Two nodes asked for 4 each: one job, whatever indices Gangway chose.
        let even = sbatch_args(
            &spec,
            &[counted("n1", &[0, 1, 2, 3]), counted("n2", &[4, 5, 6, 7])],
        );
        assert!(!even.contains(&":".to_string()), "{even:?}");
        assert!(even.contains(&"--gres=gpu:a100:4".to_string()), "{even:?}");
        assert!(even.contains(&"--nodelist=n1,n2".to_string()), "{even:?}");
        // Beside a node pinned by index: one component each.
        let mixed = sbatch_args(&spec, &[counted("n1", &[0, 1]), part("n3", &[0, 1])]);
        let split = mixed.iter().position(|a| a == ":").unwrap();
        assert!(mixed[..split].contains(&"--gres=gpu:a100:2".to_string()));
        assert!(mixed[split..].contains(&"--gres=gpu:g0:1,gpu:g1:1".to_string()));
    }

    #[test]
    fn tags_round_trip() {
        assert_eq!(parse_tag(&tag("ab12", 5, 3)), Some(("ab12", 5, 3)));
        assert_eq!(parse_tag("gangway:5:3"), Some(("", 5, 3)));
        assert_eq!(parse_tag("gangway:x:1"), None);
        assert_eq!(parse_tag("gangway:d:x:1"), None);
        assert_eq!(parse_tag(""), None);
        assert_eq!(parse_end_record("0 abc\n"), Some((0, "abc")));
        assert_eq!(parse_end_record("7"), Some((7, "")));
        assert_eq!(parse_end_record("x y"), None);
    }

    #[test]
    fn the_environment_keeps_the_users_variables_only() {
        let env = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect::<Vec<_>>()
        };
        let kept = job_environment(env(&[
            ("PATH", "/opt/bin:/usr/bin"),
            ("API_KEY", "it's secret"),
            ("SLURM_JOB_ID", "9"),
            ("GANGWAY_JOB_ID", "9"),
            ("SBATCH_PARTITION", "x"),
            ("BASH_FUNC_f%%", "() { :; }"),
            ("PWD", "/x"),
            ("1X", "y"),
        ]))
        .unwrap();
        assert_eq!(
            kept,
            env(&[("PATH", "/opt/bin:/usr/bin"), ("API_KEY", "it's secret")])
        );
        let big = vec![("X".to_string(), "y".repeat(MAX_ENV_BYTES))];
        assert!(job_environment(big).unwrap_err().contains("limit"));
    }
}
