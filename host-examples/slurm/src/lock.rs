//! One daemon per cluster and partition: a lock Slurm itself holds.
//!
//! The lock is a batch job that never runs: held at submission
//! (`sbatch --hold`), named [`LOCK_NAME`], in the partition the daemon
//! serves, submitted by the daemon's user, its comment naming the
//! partition, the daemon (its identity), host and pid, a heartbeat the
//! daemon renews (`scontrol update Comment=...`; every quarter of
//! `lock_stale_s`, at most every 10 s) and the partition's nodes.
//!
//! The lock names what it protects as Slurm resolves it, not as the
//! configuration spells it: the partition by its name even when the
//! configuration leaves it to Slurm's default ([`resolve_partition`]), so
//! a daemon of the default partition and one naming it take the same lock;
//! and the partition's nodes, expanded ([`node_set`]): a live lock of
//! another partition over any of the same nodes is the same lock
//! ([`locks`]), so two daemons of partitions over the same nodes (`gpu`
//! and `gpu2`, both `Nodes=ALL`) cannot both run and launch onto the same
//! GPUs. Daemons of partitions over other nodes may.
//! Its Slurm job id is its epoch: a daemon whose lock was taken over finds
//! its job cancelled, and every launch checks that the lock is still its
//! own just before it runs ([`still_ours`]), so a daemon that lost its lock
//! (stopped, then resumed after another took over) launches nothing more.
//! A clean stop (SIGTERM, SIGINT) cancels the lock ([`release`]).
//! Slurm orders job ids, so of two daemons starting at once
//! the one with the lower lock id keeps it; the other cancels its own and
//! refuses to start, saying who serves the partition (or its nodes). A
//! lock whose heartbeat is older than `lock_stale_s` belongs to a daemon
//! that is gone: it is cancelled and taken over (said in the log and
//! `status`). Locks are only believed from root or the daemon's own user,
//! so a user cannot forge one to keep the daemon from starting. Operators
//! see the lock with `squeue -n gangway-lock`.

use std::collections::BTreeSet;

use super::SlurmError;
use super::engine::{Slurm, SlurmJob};

/// The lock job's name.
pub const LOCK_NAME: &str = "gangway-lock";

/// How often the daemon renews its lock's heartbeat when a lock without
/// one for `stale_s` counts as abandoned: four times within it, at most
/// every 10 s.
pub fn heartbeat_every(stale_s: u64) -> std::time::Duration {
    std::time::Duration::from_secs((stale_s / 4).clamp(1, 10))
}

/// A lock as its comment says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lock {
    /// Its Slurm job.
    pub job: u64,
    /// The partition it locks (`(default)` for Slurm's default one).
    pub partition: String,
    /// The daemon holding it.
    pub daemon: String,
    /// Where that daemon runs.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// Unix seconds of its last heartbeat.
    pub beat_s: u64,
    /// The partition's nodes when it was taken (a Slurm host list): what
    /// the lock protects, with the partition.
    pub nodes: String,
}

impl Lock {
    /// The comment that says it.
    pub fn comment(&self) -> String {
        format!(
            "gangway-lock:{}:{}:{}:{}:{}:{}",
            self.partition, self.daemon, self.host, self.pid, self.beat_s, self.nodes
        )
    }

    /// Reads a comment written by [`Lock::comment`].
    pub fn parse(job: u64, comment: &str) -> Option<Lock> {
        let rest = comment.strip_prefix("gangway-lock:")?;
        let f: Vec<&str> = rest.split(':').collect();
        let (partition, daemon, host, pid, beat, nodes) = match f[..] {
            [partition, daemon, host, pid, beat] => (partition, daemon, host, pid, beat, ""),
            [partition, daemon, host, pid, beat, nodes] => {
                (partition, daemon, host, pid, beat, nodes)
            }
            _ => return None,
        };
        Some(Lock {
            job,
            partition: partition.into(),
            daemon: daemon.into(),
            host: host.into(),
            pid: pid.parse().ok()?,
            beat_s: beat.parse().ok()?,
            nodes: nodes.into(),
        })
    }

    /// A sentence naming the daemon and its lock.
    pub fn describe(&self, now_s: u64) -> String {
        format!(
            "daemon {} on {} (pid {}), lock Slurm job {}, last heartbeat {} s ago",
            self.daemon,
            self.host,
            self.pid,
            self.job,
            now_s.saturating_sub(self.beat_s)
        )
    }
}

/// What a daemon serves, as Slurm resolves it: the partition's name (the
/// default partition's when the configuration names none), whether it is
/// Slurm's default, and its nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolved {
    /// The partition's name.
    pub partition: String,
    /// Whether it is Slurm's default partition.
    pub default: bool,
    /// Its nodes (a Slurm host list).
    pub nodes: String,
}

/// The partitions `scontrol show partition -o` lists: name, default, nodes.
pub fn parse_partitions(text: &str) -> Vec<Resolved> {
    text.lines()
        .filter_map(|line| {
            let field = |key: &str| {
                line.split_whitespace()
                    .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
            };
            Some(Resolved {
                partition: field("PartitionName")?.to_string(),
                default: field("Default") == Some("YES"),
                nodes: field("Nodes").unwrap_or("").to_string(),
            })
        })
        .collect()
}

/// Resolves the partition a daemon serves: `configured`, or Slurm's
/// default partition; an error when Slurm knows no such partition.
pub fn resolve_partition(slurm: &Slurm, configured: Option<&str>) -> Result<Resolved, SlurmError> {
    let all = parse_partitions(&slurm.partitions()?);
    let found = match configured {
        Some(name) => all.into_iter().find(|p| p.partition == name),
        None => all.into_iter().find(|p| p.default),
    };
    found.ok_or_else(|| {
        SlurmError::Refused(match configured {
            Some(name) => format!("Slurm knows no partition {name:?}"),
            None => "Slurm has no default partition: name one in slurm.partition".into(),
        })
    })
}

/// The node names of a Slurm host list (`n[1-4],gpu7`), sorted; none for
/// an empty list (or Slurm's `(null)`). A list that does not read as one
/// stands for itself, so that it still matches the same list.
pub fn node_set(list: &str) -> BTreeSet<String> {
    let list = list.trim();
    if list.is_empty() || list == "(null)" {
        return BTreeSet::new();
    }
    match crate::hostlist::expand(list) {
        Ok(names) => names.into_iter().collect(),
        Err(_) => BTreeSet::from([list.to_string()]),
    }
}

/// Whether a lock's partition is `target`'s: its name, or `(default)` (a
/// lock of an older daemon of the default partition) when `target` is the
/// default.
fn locks_partition(lock: &Lock, target: &Resolved) -> bool {
    lock.partition == target.partition || (lock.partition == "(default)" && target.default)
}

/// The nodes of `target` that `lock` also protects, sorted.
fn shared_nodes(lock: &Lock, target: &Resolved) -> Vec<String> {
    let theirs = node_set(&lock.nodes);
    node_set(&target.nodes)
        .into_iter()
        .filter(|n| theirs.contains(n))
        .collect()
}

/// Whether `lock` protects what a daemon of `target` would: the same
/// partition, or any of its nodes.
fn protects(lock: &Lock, target: &Resolved) -> bool {
    locks_partition(lock, target) || !shared_nodes(lock, target).is_empty()
}

/// What `lock` holds of `target`, in words: `partition gpu`, or for a
/// lock of another partition over the same nodes `partition gpu2, over 4
/// of partition gpu's nodes (n1, n2, n3, n4)`.
pub fn holds(lock: &Lock, target: &Resolved) -> String {
    if locks_partition(lock, target) {
        return format!("partition {}", target.partition);
    }
    let shared = shared_nodes(lock, target);
    let mut named = shared
        .iter()
        .take(4)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if shared.len() > 4 {
        named.push_str(", ...");
    }
    format!(
        "partition {}, over {} of partition {}'s nodes ({named})",
        lock.partition,
        shared.len(),
        target.partition
    )
}

/// The pending locks among `jobs` submitted by one of `trusted` (uids)
/// that protect what a daemon of `target` would ([`protects`]: its
/// partition, or any of its nodes), oldest first.
pub fn locks(jobs: &[SlurmJob], target: &Resolved, trusted: &[u32]) -> Vec<Lock> {
    let mut found: Vec<Lock> = jobs
        .iter()
        .filter(|j| j.name == LOCK_NAME && j.state == "PENDING" && trusted.contains(&j.user_id))
        .filter_map(|j| Lock::parse(j.job_id, &j.comment))
        .filter(|l| protects(l, target))
        .collect();
    found.sort_by_key(|l| l.job);
    found
}

/// Whether `lock` is still in Slurm as this daemon's: its job pending,
/// its comment naming this daemon and partition. Run just before every
/// launch: a daemon whose lock another took over (cancelling its job)
/// launches nothing more. An error when Slurm does not answer.
pub fn still_ours(slurm: &Slurm, lock: &Lock) -> Result<bool, SlurmError> {
    let prefix = format!("gangway-lock:{}:{}:", lock.partition, lock.daemon);
    match slurm.job_state_and_comment(lock.job) {
        Ok(Some((state, comment))) => Ok(state == "PENDING" && comment.starts_with(&prefix)),
        Ok(None) => Ok(false),
        Err(e @ SlurmError::Unreachable { .. }) => Err(e),
        // "Invalid job id": purged, so not ours.
        Err(_) => Ok(false),
    }
}

/// Gives the lock back on a clean stop: its job cancelled, so another
/// daemon may start at once.
pub fn release(slurm: &Slurm, lock: &Lock) -> Result<(), SlurmError> {
    slurm.scancel(lock.job)
}

/// What taking the lock found: our lock's job, and what an operator
/// should know (a stale lock taken over).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Taken {
    /// Our lock.
    pub lock: Lock,
    /// Sentences for the log and `status`.
    pub notes: Vec<String>,
}

/// This machine's name, for locks.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().replace(':', "-"))
        .unwrap_or_else(|_| "unknown".into())
}

/// Takes the lock of `target` (its partition and nodes) for daemon
/// `daemon`, or refuses, naming the daemon and the lock that hold it (of
/// the partition, or of another over any of its nodes). `trusted`: uids
/// whose locks are believed.
pub fn take(
    slurm: &Slurm,
    target: &Resolved,
    daemon: &str,
    stale_s: u64,
    now_s: u64,
    trusted: &[u32],
) -> Result<Taken, SlurmError> {
    let mut notes = Vec::new();
    let held = locks(&slurm.jobs()?, target, trusted);
    let mut ours = None;
    for lock in held {
        if lock.daemon == daemon {
            ours = Some(lock);
        } else if now_s.saturating_sub(lock.beat_s) < stale_s {
            return Err(refusal(target, &lock, now_s, stale_s));
        } else {
            let note = format!(
                "took over {} from {} (no heartbeat for over {stale_s} s)",
                holds(&lock, target),
                lock.describe(now_s)
            );
            tracing::warn!("{note}");
            notes.push(note);
            slurm.scancel(lock.job)?;
        }
    }
    let mut lock = Lock {
        job: 0,
        partition: target.partition.clone(),
        daemon: daemon.to_string(),
        host: hostname(),
        pid: std::process::id(),
        beat_s: now_s,
        nodes: target.nodes.clone(),
    };
    match ours {
        Some(old) => {
            lock.job = old.job;
            slurm.update_job(lock.job, &[format!("Comment={}", lock.comment())])?;
        }
        None => lock.job = submit(slurm, &target.partition, &lock)?,
    }
    // Two daemons that started at once: the older lock wins.
    let held = locks(&slurm.jobs()?, target, trusted);
    if let Some(first) = held.iter().find(|l| {
        l.daemon != daemon && l.job < lock.job && now_s.saturating_sub(l.beat_s) < stale_s
    }) {
        let _ = slurm.scancel(lock.job);
        return Err(refusal(target, first, now_s, stale_s));
    }
    Ok(Taken { lock, notes })
}

/// Submits a lock job (held, never run).
fn submit(slurm: &Slurm, partition: &str, lock: &Lock) -> Result<u64, SlurmError> {
    let args = vec![
        "--hold".to_string(),
        format!("--job-name={LOCK_NAME}"),
        format!("--comment={}", lock.comment()),
        "--output=/dev/null".to_string(),
        "--chdir=/".to_string(),
        "--ntasks=1".to_string(),
        format!("--partition={partition}"),
    ];
    slurm.sbatch(
        &args,
        "#!/bin/sh\n# gangway-slurm's lock on its partition: never runs\ntrue\n",
    )
}

/// The error of a daemon of `target` that finds `lock` held by another.
fn refusal(target: &Resolved, lock: &Lock, now_s: u64, stale_s: u64) -> SlurmError {
    let why = if locks_partition(lock, target) {
        ""
    } else {
        " (two daemons over the same nodes would launch onto the same GPUs)"
    };
    SlurmError::Refused(format!(
        "another gangway-slurm serves {}: {}{why}; stop it first (if it is gone, its lock is \
         taken over {stale_s} s after its last heartbeat, or `scancel {}`)",
        holds(lock, target),
        lock.describe(now_s),
        lock.job
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: u64, name: &str, comment: &str, uid: u32, state: &str) -> SlurmJob {
        SlurmJob {
            job_id: id,
            group: id,
            name: name.into(),
            comment: comment.into(),
            user_id: uid,
            state: state.into(),
            ..SlurmJob::default()
        }
    }

    #[test]
    fn locks_are_read_from_trusted_pending_jobs_only() {
        let l = Lock {
            job: 7,
            partition: "gpu".into(),
            daemon: "d1".into(),
            host: "h".into(),
            pid: 42,
            beat_s: 100,
            nodes: "n[1-4]".into(),
        };
        assert_eq!(Lock::parse(7, &l.comment()), Some(l.clone()));
        let old = Lock::parse(5, "gangway-lock:(default):d0:h:1:2").unwrap();
        assert_eq!(
            (old.partition.as_str(), old.nodes.as_str()),
            ("(default)", "")
        );
        assert_eq!(Lock::parse(7, "gangway-lock:gpu:d1"), None);
        let forged = Lock {
            daemon: "evil".into(),
            ..l.clone()
        };
        let jobs = vec![
            job(9, LOCK_NAME, &forged.comment(), 1001, "PENDING"),
            job(7, LOCK_NAME, &l.comment(), 0, "PENDING"),
            job(8, LOCK_NAME, &l.comment(), 0, "CANCELLED"),
            job(6, "other", &l.comment(), 0, "PENDING"),
            job(
                4,
                LOCK_NAME,
                "gangway-lock:(default):d0:h:1:2",
                0,
                "PENDING",
            ),
        ];
        let gpu = |default| Resolved {
            partition: "gpu".into(),
            default,
            nodes: "n[1-4]".into(),
        };
        assert_eq!(locks(&jobs, &gpu(false), &[0]), vec![l.clone()]);
        // An older daemon's "(default)" lock is the default partition's.
        assert_eq!(locks(&jobs, &gpu(true), &[0]).len(), 2);
        // Another partition over other nodes (over the same: see below).
        let gpu2 = Resolved {
            partition: "gpu2".into(),
            default: false,
            nodes: "m[1-4]".into(),
        };
        assert!(locks(&jobs, &gpu2, &[0]).is_empty());
        assert!(l.describe(130).contains("last heartbeat 30 s ago"));
    }

    #[test]
    fn a_lock_protects_its_partitions_nodes() {
        let lock = |job: u64, partition: &str, nodes: &str| Lock {
            job,
            partition: partition.into(),
            daemon: format!("d{job}"),
            host: "h".into(),
            pid: 1,
            beat_s: 100,
            nodes: nodes.into(),
        };
        let jobs: Vec<SlurmJob> = [
            lock(3, "gpu", "n[1-4]"),
            lock(4, "left", "n[1-2]"),
            lock(5, "right", "n[3-4]"),
            lock(6, "other", "m[1-4]"),
        ]
        .iter()
        .map(|l| job(l.job, LOCK_NAME, &l.comment(), 0, "PENDING"))
        .collect();
        let target = |partition: &str, nodes: &str| Resolved {
            partition: partition.into(),
            default: false,
            nodes: nodes.into(),
        };
        let ids = |t: &Resolved| {
            locks(&jobs, t, &[0])
                .iter()
                .map(|l| l.job)
                .collect::<Vec<_>>()
        };
        // gpu2 over the same nodes as gpu: gpu's lock is its own.
        assert_eq!(ids(&target("gpu2", "n[1-4]")), [3, 4, 5]);
        assert_eq!(ids(&target("mid", "n2,n3")), [3, 4, 5]);
        assert_eq!(ids(&target("tail", "n4")), [3, 5]);
        assert!(ids(&target("new", "m5,x1")).is_empty());
        assert_eq!(ids(&target("other", "")), [6]);
        let gpu2 = target("gpu2", "n[1-4]");
        let said = refusal(&gpu2, &lock(3, "gpu", "n[1-4]"), 130, 60).to_string();
        assert!(
            said.contains(
                "another gangway-slurm serves partition gpu, over 4 of partition gpu2's \
                           nodes (n1, n2, n3, n4): daemon d3"
            ) && said.contains("lock Slurm job 3")
                && said.contains("the same GPUs"),
            "{said}"
        );
        let same = refusal(&target("gpu", "n[1-4]"), &lock(3, "gpu", "n[1-4]"), 130, 60);
        assert!(
            same.to_string().contains("serves partition gpu: daemon d3"),
            "{same}"
        );
        assert_eq!(node_set("(null)"), BTreeSet::new());
        assert_eq!(node_set("n[1-"), BTreeSet::from(["n[1-".to_string()]));
        let wide = holds(&lock(3, "gpu", "n[1-9]"), &target("g", "n[1-9]"));
        assert!(
            wide.ends_with("over 9 of partition g's nodes (n1, n2, n3, n4, ...)"),
            "{wide}"
        );
    }

    #[test]
    fn partitions_resolve_by_name_or_default() {
        let text = "PartitionName=gpu AllowGroups=ALL Default=YES Nodes=n[1-4] State=UP\n\
                    PartitionName=gw Default=NO Nodes=n[1-2] State=UP\n";
        let all = parse_partitions(text);
        assert_eq!(all.len(), 2);
        assert_eq!(
            all[0],
            Resolved {
                partition: "gpu".into(),
                default: true,
                nodes: "n[1-4]".into()
            }
        );
        assert!(!all[1].default);
    }
}
