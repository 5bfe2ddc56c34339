//! Native mode: users keep `sbatch`, `squeue` and `scancel`; Gangway places.
//!
//! Users submit with their own `sbatch` into the partition Gangway manages
//! (`slurm.partition`), authenticated by munge and charged to their own
//! account. The project's `job_submit.lua` (`host-examples/slurm/job_submit.lua`)
//! holds every job there at submission (priority 0), records its GPU
//! request in the job's admin comment (`[request tres_per_node=...
//! tres_per_job=... nodes=...]`) and clears it, and refuses any change to a
//! job there by anyone but root and the daemon's user (so a user cannot
//! release their own job). The daemon reads the held jobs from
//! `squeue --json` (user, account as the VC, the recorded request), places
//! them with its policies, pins each start with `scontrol update` (the node
//! list and, per node, the GRES types of the chosen GPU indices, or a count
//! of the one GRES type of a node whose GPUs all carry it) and releases it
//! (`scontrol release`). The wait reason of a job Gangway holds
//! is its admin comment (`squeue -O JobID,admin_comment`, `scontrol show
//! job`). `scancel` works as always, and Slurm keeps identity and
//! accounting.
//!
//! What it cannot do: Slurm's GRES request of a job is per node, so a gang
//! whose nodes use different GPU index sets (8+4, or 4+4 on other indices)
//! cannot be pinned to exact indices; the daemon then pins its nodes and
//! its GPU count (`TresPerJob`), Slurm picks the indices on those nodes,
//! and the daemon adopts what Slurm chose (said in the job's events).
//! GPU types: a job asks for one with Slurm's own typed requests
//! (`--gres=gpu:a100:4`, `--gpus=a100:8`, `--gpus-per-node=a100:4`) or
//! for one or several by `--constraint=a100|h100`, the types being the
//! names of the config's `[gpu_types]`, given to nodes by their features or
//! by their GPUs' GRES type (gres.conf `Type=a100`); the whole gang runs on
//! one type ([`requested`]).
//!
//! Heterogeneous jobs and job arrays are not placed (they stay held, the
//! admin comment says why). A preempted or retried job is put back with
//! `scontrol requeuehold` and starts again from its script.

use super::engine::SlurmJob;
use super::launch::Part;

/// The start of every admin comment Gangway (or its job_submit.lua) writes.
pub const COMMENT_PREFIX: &str = "gangway: ";

/// What a held job asks for: GPUs in all, and the GPU types it accepts
/// (empty: any), from `--gres=gpu:a100:4`, `--gpus=a100:8`,
/// `--gpus-per-node=a100:4` or `--constraint=a100|h100`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NativeRequest {
    /// GPUs of the gang.
    pub gpus: u32,
    /// Acceptable GPU types, most preferred first (empty: any type).
    pub types: Vec<String>,
}

/// Why a held job's recorded request cannot be placed. Each message says
/// what to submit instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// job_submit.lua recorded no request.
    #[error("its GPU request was not recorded at submission (is job_submit.lua installed?)")]
    NotRecorded,
    /// It asks for no GPUs.
    #[error(
        "it asks for no GPUs (ask with --gpus=N or --gres=gpu:N, or a type: --gres=gpu:a100:N)"
    )]
    NoGpus,
    /// A GPU count that is not a number.
    #[error("cannot read the GPU count of {item:?} (ask with --gres=gpu:N or --gres=gpu:TYPE:N)")]
    BadCount {
        /// The request item.
        item: String,
    },
    /// Several GPU items in one request (`gpu:a100:2,gpu:v100:2`).
    #[error(
        "{spec:?} asks for GPUs twice: a gang runs on one GPU type (name several acceptable \
             types with --constraint=a100|h100)"
    )]
    Several {
        /// The request.
        spec: String,
    },
    /// The GRES type and the constraint name different types.
    #[error("it asks for GPU type {gres} in its GPU request but {constraint} in --constraint")]
    Disagree {
        /// The GRES type.
        gres: String,
        /// The constraint.
        constraint: String,
    },
    /// A constraint that names GPU types other than as `a|b|c`.
    #[error(
        "--constraint={constraint:?} names GPU types ({types}) in a form Gangway cannot \
             place: name one type (--constraint=a100) or alternatives (--constraint=a100|h100)"
    )]
    Constraint {
        /// The constraint.
        constraint: String,
        /// The types it names.
        types: String,
    },
}

/// The GPU item of a TRES spec (`gres:gpu:2`, `gres/gpu:a100:2`, also in a
/// list): its count and type, `None` without one.
fn gpu_item(spec: &str) -> Result<Option<(u32, Option<String>)>, RequestError> {
    let mut found = None;
    for item in spec.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let fields: Vec<&str> = item.split([':', '/']).collect();
        let fields = fields.strip_prefix(&["gres"]).unwrap_or(&fields);
        let (ty, n) = match fields {
            ["gpu", n] => (None, *n),
            ["gpu", ty, n] => (Some((*ty).to_string()), *n),
            ["gpu", ..] => return Err(RequestError::BadCount { item: item.into() }),
            _ => continue,
        };
        let n: u32 = n
            .parse()
            .map_err(|_| RequestError::BadCount { item: item.into() })?;
        if found.replace((n, ty)).is_some() {
            return Err(RequestError::Several { spec: spec.into() });
        }
    }
    Ok(found)
}

/// The GPU types a constraint (`--constraint`, Slurm's features) accepts
/// among `known`: `a100` or `a100|h100` (most preferred first); empty when
/// it names none (Slurm enforces it on the nodes Gangway pins).
fn constraint_types(constraint: &str, known: &[&str]) -> Result<Vec<String>, RequestError> {
    let name = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    let named: Vec<&str> = constraint
        .split(|c: char| !name(c))
        .filter(|w| known.contains(w))
        .collect();
    if named.is_empty() {
        return Ok(Vec::new());
    }
    let words: Vec<&str> = constraint.split('|').collect();
    if words.iter().all(|w| known.contains(w)) {
        let mut types: Vec<String> = Vec::new();
        for w in words {
            if !types.iter().any(|t| t == w) {
                types.push(w.to_string());
            }
        }
        return Ok(types);
    }
    Err(RequestError::Constraint {
        constraint: constraint.into(),
        types: named.join(", "),
    })
}

/// What a held job asks for, from the request job_submit.lua recorded in
/// its admin comment; `known` are the cluster's GPU type names (what a
/// `--constraint` may name).
pub fn requested(admin_comment: &str, known: &[&str]) -> Result<NativeRequest, RequestError> {
    let request = request_of(admin_comment).ok_or(RequestError::NotRecorded)?;
    let field = |name: &str| {
        request
            .split_whitespace()
            .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
            .unwrap_or("")
    };
    let nodes: u32 = field("nodes")
        .parse()
        .ok()
        .filter(|n| *n < 1 << 16)
        .unwrap_or(1);
    let per_job = gpu_item(field("tres_per_job"))?.filter(|(n, _)| *n > 0);
    let per_node = gpu_item(field("tres_per_node"))?.filter(|(n, _)| *n > 0);
    let (gpus, gres_type) = match (per_job, per_node) {
        (Some((n, t)), _) => (n, t),
        (_, Some((n, t))) => (n.saturating_mul(nodes.max(1)), t),
        _ => return Err(RequestError::NoGpus),
    };
    let constraint = field("features");
    let allowed = constraint_types(constraint, known)?;
    let types = match gres_type {
        Some(t) if !allowed.is_empty() && !allowed.contains(&t) => {
            return Err(RequestError::Disagree {
                gres: t,
                constraint: constraint.into(),
            });
        }
        Some(t) => vec![t],
        None => allowed,
    };
    Ok(NativeRequest { gpus, types })
}

/// The `[request ...]` part of an admin comment.
fn request_of(admin_comment: &str) -> Option<&str> {
    let at = admin_comment.rfind("[request ")?;
    let rest = &admin_comment[at + "[request ".len()..];
    Some(rest.strip_suffix(']').unwrap_or(rest))
}

/// The admin comment saying `text`, keeping the recorded request of
/// `old` (the comment it replaces).
pub fn comment(text: &str, old: &str) -> String {
    match request_of(old) {
        Some(request) => format!("{COMMENT_PREFIX}{text} [request {request}]"),
        None => format!("{COMMENT_PREFIX}{text}"),
    }
}

/// Whether `job` is one job_submit.lua held for Gangway (its admin comment
/// carries a request).
pub fn held_for_gangway(job: &SlurmJob) -> bool {
    job.admin_comment.starts_with(COMMENT_PREFIX) && request_of(&job.admin_comment).is_some()
}

/// Why a job in the managed partition cannot be placed, whatever it asks:
/// heterogeneous jobs and job arrays.
pub fn unplaceable(comps: &[&SlurmJob]) -> Option<&'static str> {
    if comps.len() > 1 || comps.iter().any(|j| j.het_offset > 0) {
        return Some("heterogeneous jobs are not placed by Gangway; scancel it and submit one job");
    }
    if comps.iter().any(|j| j.array) {
        return Some("job arrays are not placed by Gangway; scancel it and submit single jobs");
    }
    None
}

/// The `scontrol update` fields that pin a held job to `parts` (and keep
/// the admin comment `text`): the same GRES request on every node when
/// every node asks the same (exact GPU indices, one GRES type per index;
/// or a count of a node's one GRES type, Slurm choosing the GPUs), else
/// the nodes and the GPU count, Slurm choosing the indices on them.
/// Returns the fields and whether every node asks the same.
pub fn pin_fields(parts: &[Part], text: &str) -> (Vec<String>, bool) {
    let nodes: Vec<&str> = parts.iter().map(|p| p.node.as_str()).collect();
    let k = parts.len();
    let mut fields = vec![
        format!("ReqNodeList={}", nodes.join(",")),
        format!("NumNodes={k}-{k}"),
    ];
    let exact = parts.windows(2).all(|w| w[0].types == w[1].types);
    match parts.first() {
        Some(first) if exact => {
            fields.push(format!(
                "Gres={}",
                super::launch::gres_request(&first.types)
            ));
        }
        _ => {
            let gpus: usize = parts.iter().map(|p| p.gpus.len()).sum();
            fields.push(format!("TresPerJob=gres:gpu:{gpus}"));
        }
    }
    fields.push(format!("AdminComment={text}"));
    (fields, exact)
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

    fn held(r: &str) -> String {
        format!("gangway: held until Gangway places it [request {r}]")
    }

    fn gpus(r: &str) -> Result<u32, RequestError> {
        requested(&held(r), &[]).map(|r| r.gpus)
    }

    #[test]
    fn requests_are_read_from_the_recorded_comment() {
        assert_eq!(
            gpus("tres_per_node=gres:gpu:2 tres_per_job= nodes=2"),
            Ok(4)
        );
        assert_eq!(
            gpus("tres_per_node= tres_per_job=gres:gpu:12 nodes="),
            Ok(12)
        );
        assert_eq!(
            gpus("tres_per_node=gres/gpu:8 tres_per_job= nodes=1"),
            Ok(8)
        );
        assert_eq!(
            gpus("tres_per_node= tres_per_job= nodes=1"),
            Err(RequestError::NoGpus)
        );
        assert_eq!(requested("", &[]), Err(RequestError::NotRecorded));
        let again = comment(
            "pending (fair-share)",
            &held("tres_per_node=gres:gpu:2 tres_per_job= nodes=2"),
        );
        assert_eq!(requested(&again, &[]).map(|r| r.gpus), Ok(4));
        assert!(
            again.starts_with("gangway: pending (fair-share) [request "),
            "{again}"
        );
    }

    #[test]
    fn typed_requests_name_their_type() {
        let known = ["a100", "v100"];
        let ask = |r: &str| requested(&held(r), &known);
        let typed = |gpus, types: &[&str]| NativeRequest {
            gpus,
            types: types.iter().map(|t| t.to_string()).collect(),
        };
        // --gres=gpu:a100:4 -N 2, --gpus=a100:8, --gpus-per-node=v100:2
        assert_eq!(
            ask("tres_per_node=gres:gpu:a100:4 tres_per_job= nodes=2"),
            Ok(typed(8, &["a100"]))
        );
        assert_eq!(
            ask("tres_per_node= tres_per_job=gres/gpu:a100:8 nodes=1"),
            Ok(typed(8, &["a100"]))
        );
        assert_eq!(
            ask("tres_per_node=gres:gpu:v100:2,gres:mps:10 tres_per_job= nodes=1"),
            Ok(typed(2, &["v100"]))
        );
        // A type the cluster lacks is read as asked: the scheduler refuses it.
        assert_eq!(
            ask("tres_per_node=gres:gpu:h100:1 tres_per_job= nodes=1"),
            Ok(typed(1, &["h100"]))
        );
        // --constraint: one type, alternatives in order, or no type at all.
        let c = |f: &str| {
            ask(&format!(
                "tres_per_node=gres:gpu:2 tres_per_job= nodes=1 features={f}"
            ))
        };
        assert_eq!(c("v100"), Ok(typed(2, &["v100"])));
        assert_eq!(c("v100|a100"), Ok(typed(2, &["v100", "a100"])));
        assert_eq!(c("ib"), Ok(typed(2, &[])));
        assert!(matches!(c("a100&ib"), Err(RequestError::Constraint { .. })));
        assert!(matches!(
            c("[a100|v100]"),
            Err(RequestError::Constraint { .. })
        ));
        let both = "tres_per_node=gres:gpu:a100:2 tres_per_job= nodes=1 features=v100";
        assert!(matches!(ask(both), Err(RequestError::Disagree { .. })));
        let both = "tres_per_node=gres:gpu:a100:2 tres_per_job= nodes=1 features=v100|a100";
        assert_eq!(ask(both), Ok(typed(2, &["a100"])));
    }

    #[test]
    fn bad_requests_are_typed_errors() {
        let bad = |r: &str| requested(&held(r), &["a100"]).unwrap_err();
        assert!(matches!(
            bad("tres_per_node=gres:gpu:a100:x tres_per_job= nodes=1"),
            RequestError::BadCount { .. }
        ));
        assert!(matches!(
            bad("tres_per_node=gres:gpu:a:b:c tres_per_job= nodes=1"),
            RequestError::BadCount { .. }
        ));
        assert!(matches!(
            bad("tres_per_node=gres:gpu:99999999999 tres_per_job= nodes=1"),
            RequestError::BadCount { .. }
        ));
        let e = bad("tres_per_node=gres:gpu:a100:2,gres:gpu:v100:2 tres_per_job= nodes=1");
        assert!(matches!(e, RequestError::Several { .. }));
        assert!(e.to_string().contains("one GPU type"), "{e}");
        // Whatever the text, never a panic.
        for junk in [
            "[request",
            "[request ]",
            "[request tres_per_node=:::: nodes=-1]",
            "[request gpu:",
        ] {
            let _ = requested(junk, &["a100"]);
        }
    }

    #[test]
    fn pins_are_exact_when_every_node_uses_the_same_indices() {
        let (fields, exact) = pin_fields(&[part("n1", &[2, 5]), part("n3", &[2, 5])], "placed");
        assert!(exact);
        assert_eq!(
            fields,
            [
                "ReqNodeList=n1,n3",
                "NumNodes=2-2",
                "Gres=gpu:g2:1,gpu:g5:1",
                "AdminComment=placed"
            ]
        );
        // Nodes whose GPUs carry one GRES type: a count of it.
        let counted = |node: &str, gpus: &[u32]| Part {
            types: vec!["a100".to_string(); gpus.len()],
            ..part(node, gpus)
        };
        let (fields, exact) = pin_fields(&[counted("n1", &[0, 1]), counted("n2", &[4, 6])], "x");
        assert!(exact);
        assert!(
            fields.contains(&"Gres=gpu:a100:2".to_string()),
            "{fields:?}"
        );
        let (fields, exact) = pin_fields(&[part("n1", &[0, 1, 2]), part("n2", &[7])], "x");
        assert!(!exact);
        assert!(
            fields.contains(&"TresPerJob=gres:gpu:4".to_string()),
            "{fields:?}"
        );
    }
}
