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
//! list and, per node, the GRES types of the chosen GPU indices) and
//! releases it (`scontrol release`). The wait reason of a job Gangway holds
//! is its admin comment (`squeue -O JobID,admin_comment`, `scontrol show
//! job`). `scancel` works as always, and Slurm keeps identity and
//! accounting.
//!
//! What it cannot do: Slurm's GRES request of a job is per node, so a gang
//! whose nodes use different GPU index sets (8+4, or 4+4 on other indices)
//! cannot be pinned to exact indices; the daemon then pins its nodes and
//! its GPU count (`TresPerJob`), Slurm picks the indices on those nodes,
//! and the daemon adopts what Slurm chose (said in the job's events).
//! Heterogeneous jobs and job arrays are not placed (they stay held, the
//! admin comment says why). A preempted or retried job is put back with
//! `scontrol requeuehold` and starts again from its script.

use super::engine::SlurmJob;
use super::launch::Part;

/// The start of every admin comment Gangway (or its job_submit.lua) writes.
pub const COMMENT_PREFIX: &str = "gangway: ";

/// Reads a GPU count from a TRES spec (`gres:gpu:2`, `gres/gpu:2`, also in
/// a list); a typed request (`gres:gpu:a100:2`) is an error.
fn gpu_count(spec: &str) -> Result<Option<u32>, String> {
    for item in spec.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let fields: Vec<&str> = item.split([':', '/']).collect();
        match fields[..] {
            ["gres", "gpu", n] => {
                return n
                    .parse()
                    .map(Some)
                    .map_err(|_| format!("cannot read the GPU count of {item:?}"));
            }
            ["gres", "gpu", ty, _] => {
                return Err(format!(
                    "a typed GPU request ({ty}) cannot be placed by Gangway: ask for a count"
                ));
            }
            _ => {}
        }
    }
    Ok(None)
}

/// What a held job asks for, from the request job_submit.lua recorded in
/// its admin comment: its GPUs in all, or why it cannot be placed.
pub fn requested_gpus(admin_comment: &str) -> Result<u32, String> {
    let request = request_of(admin_comment)
        .ok_or("its GPU request was not recorded at submission (is job_submit.lua installed?)")?;
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
    let per_job = gpu_count(field("tres_per_job"))?;
    let per_node = gpu_count(field("tres_per_node"))?;
    match (per_job, per_node) {
        (Some(n), _) if n > 0 => Ok(n),
        (_, Some(n)) if n > 0 => Ok(n.saturating_mul(nodes.max(1))),
        _ => Err("it asks for no GPUs (ask with --gpus=N or --gres=gpu:N)".into()),
    }
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
/// the admin comment `text`): exact GPU indices when every node uses the
/// same ones (one GRES type per index), else the nodes and the GPU count,
/// Slurm choosing the indices on them. Returns the fields and whether the
/// indices are exact.
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
            let g: Vec<String> = first.types.iter().map(|t| format!("gpu:{t}:1")).collect();
            fields.push(format!("Gres={}", g.join(",")));
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

    #[test]
    fn requests_are_read_from_the_recorded_comment() {
        let held = |r: &str| format!("gangway: held until Gangway places it [request {r}]");
        assert_eq!(
            requested_gpus(&held("tres_per_node=gres:gpu:2 tres_per_job= nodes=2")),
            Ok(4)
        );
        assert_eq!(
            requested_gpus(&held("tres_per_node= tres_per_job=gres:gpu:12 nodes=")),
            Ok(12)
        );
        assert_eq!(
            requested_gpus(&held("tres_per_node=gres/gpu:8 tres_per_job= nodes=1")),
            Ok(8)
        );
        let e = requested_gpus(&held("tres_per_node=gres:gpu:a100:2 tres_per_job= nodes=1"));
        assert!(e.unwrap_err().contains("typed"));
        assert!(requested_gpus(&held("tres_per_node= tres_per_job= nodes=1")).is_err());
        assert!(requested_gpus("").unwrap_err().contains("job_submit.lua"));
        let again = comment(
            "pending (fair-share)",
            &held("tres_per_node=gres:gpu:2 tres_per_job= nodes=2"),
        );
        assert_eq!(requested_gpus(&again), Ok(4));
        assert!(
            again.starts_with("gangway: pending (fair-share) [request "),
            "{again}"
        );
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
        let (fields, exact) = pin_fields(&[part("n1", &[0, 1, 2]), part("n2", &[7])], "x");
        assert!(!exact);
        assert!(
            fields.contains(&"TresPerJob=gres:gpu:4".to_string()),
            "{fields:?}"
        );
    }
}
