//! Native mode with real users: a plain `sbatch` into the partition Gangway
//! manages is held at submission, placed by Gangway on the nodes and GPU
//! indices it chose, and run as its user; a job that waits says why in
//! `squeue`; `scancel` works for its owner and Slurm refuses it to anyone
//! else; a user cannot release their own held job.

use std::process::Output;
use std::time::{Duration, Instant};

use super::harness::{Cluster, SERIAL, User, median, slurm_here, text, user};

/// `sbatch --parsable ARGS` as `user`; the Slurm job id.
fn sbatch(cluster: &Cluster, user: &User, args: &[&str]) -> u64 {
    let mut all = vec!["sbatch", "--parsable"];
    all.extend_from_slice(args);
    let out = cluster.slurm_as(user, &all);
    assert!(out.status.success(), "sbatch: {}", text(&out));
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .split(';')
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no job id: {}", text(&out)))
}

/// `squeue -h -j JOB -O FIELD` (as root).
fn squeue_field(cluster: &Cluster, job: u64, field: &str) -> String {
    let out = cluster.slurm(&[
        "squeue",
        "-h",
        "-j",
        &job.to_string(),
        "-O",
        &format!("{field}:300"),
    ]);
    out.trim().to_string()
}

fn failed_with(out: &Output, what: &str) -> bool {
    !out.status.success() && text(out).contains(what)
}

#[test]
fn native_sbatch_is_placed_by_gangway() {
    if !slurm_here("native mode: users' own sbatch") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (alice, mallory) = (user("alice"), user("mallory"));
    let mut cluster = Cluster::start("native", None);
    let config = super::security::shared_config(&cluster, "mode = \"native\"\n").replacen(
        "[slurm]\n",
        "[slurm]\npartition = \"gw\"\n",
        1,
    );
    cluster.configure("native.toml", &config);
    cluster.start_daemon();
    let home = cluster.home(&alice).display().to_string();
    // A plain sbatch, as alice, into the managed partition.
    let script = "echo $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES > where.$SLURM_JOB_ID; id > id.$SLURM_JOB_ID; sleep 8";
    let t = Instant::now();
    let first = sbatch(
        &cluster,
        &alice,
        &[
            "-p",
            "gw",
            "-A",
            "research",
            "-N",
            "1",
            "--gres=gpu:2",
            "-o",
            "/dev/null",
            "--wrap",
            script,
        ],
    );
    let s = cluster.wait_for(30, "alice's sbatch running", |s| {
        s.running
            .iter()
            .any(|j| j.slurm_job == Some(first) && j.state == "running")
    });
    let submit_to_running = t.elapsed();
    let placed = s
        .running
        .iter()
        .find(|j| j.slurm_job == Some(first))
        .unwrap()
        .clone();
    assert_eq!(placed.user, alice.name);
    assert_eq!((placed.vc.as_str(), placed.gpus), ("research", 2));
    // A second one cannot start while a third holds the cluster: it waits,
    // and says why where users look.
    let big = sbatch(
        &cluster,
        &alice,
        &[
            "-p",
            "gw",
            "-A",
            "research",
            "--gpus=32",
            "-o",
            "/dev/null",
            "--wrap",
            "sleep 1",
        ],
    );
    let t = Instant::now();
    let comment = loop {
        let c = squeue_field(&cluster, big, "admin_comment");
        if c.contains("pending in Gangway") {
            break c;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no wait reason in squeue: {c:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(squeue_field(&cluster, big, "Reason").starts_with("JobHeld"));
    // Its user cannot release it past Gangway; another user cannot cancel
    // it (Slurm's own refusal); its user can.
    let out = cluster.slurm_as(&alice, &["scontrol", "release", &big.to_string()]);
    assert!(failed_with(&out, "denied"), "{}", text(&out));
    let out = cluster.slurm_as(&mallory, &["scancel", &big.to_string()]);
    assert!(
        failed_with(&out, "Access/permission denied"),
        "{}",
        text(&out)
    );
    assert!(squeue_field(&cluster, big, "State").contains("PENDING"));
    let out = cluster.slurm_as(&alice, &["scancel", &big.to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    let gone = cluster.wait_for(20, "the cancelled job out of Gangway's queue", |s| {
        s.finished.iter().any(|j| j.slurm_job == Some(big))
    });
    let gone = gone
        .finished
        .iter()
        .find(|j| j.slurm_job == Some(big))
        .unwrap();
    assert_eq!(gone.state, "killed", "{:?}", gone.events);
    // The first ran where Gangway chose, as alice.
    let done = cluster.wait_for(60, "alice's first job finished", |s| {
        s.finished.iter().any(|j| j.slurm_job == Some(first))
    });
    let done = done
        .finished
        .iter()
        .find(|j| j.slurm_job == Some(first))
        .unwrap();
    assert_eq!(done.state, "passed", "{:?}", done.events);
    let where_ = std::fs::read_to_string(format!("{home}/where.{first}")).unwrap();
    let (node, gpus) = &placed.placement[0];
    let chosen = format!(
        "{node} {}",
        gpus.iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    );
    assert_eq!(
        where_.trim(),
        chosen,
        "Gangway chose {:?}",
        placed.placement
    );
    let id = std::fs::read_to_string(format!("{home}/id.{first}")).unwrap();
    assert!(id.starts_with(&format!("uid={}(", alice.uid)), "{id}");
    // mallory charging a VC she is not in is told why, and not placed.
    let theirs = sbatch(
        &cluster,
        &mallory,
        &[
            "-p",
            "gw",
            "-A",
            "prod",
            "--gpus=1",
            "-o",
            "/dev/null",
            "--wrap",
            "true",
        ],
    );
    let t = Instant::now();
    while !squeue_field(&cluster, theirs, "admin_comment").contains("not a member") {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{}",
            squeue_field(&cluster, theirs, "admin_comment")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let released_after: Vec<u64> = done
        .events
        .iter()
        .filter_map(|e| {
            e.split_once(" (")?
                .1
                .strip_suffix(" ms after launch)")?
                .parse()
                .ok()
        })
        .collect();
    println!(
        "native: sbatch by {} placed on {chosen} as Gangway chose; submit to RUNNING {:?}, \
         pinned and released to RUNNING {} ms; waiting job's squeue admin comment {comment:?}; \
         scancel by its owner worked, by {} refused by Slurm",
        alice.name,
        submit_to_running,
        median(released_after),
        mallory.name
    );
    cluster.slurm(&["scancel", &theirs.to_string()]);
    cluster.passed = true;
}

#[test]
fn native_uneven_gangs_are_pinned_to_their_nodes() {
    if !slurm_here("native mode: an uneven gang") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let alice = user("alice");
    let mut cluster = Cluster::start("native-uneven", None);
    let config = super::security::shared_config(&cluster, "mode = \"native\"\n").replacen(
        "[slurm]\n",
        "[slurm]\npartition = \"gw\"\n",
        1,
    );
    cluster.configure("native.toml", &config);
    cluster.start_daemon();
    // 12 GPUs on 8-GPU nodes: 8 + 4, which one Slurm job cannot ask by
    // index; its nodes are pinned, Slurm picks the indices there.
    let home = cluster.home(&alice).display().to_string();
    let script = "srun -N2 -n2 sh -c 'echo $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES' > where.$SLURM_JOB_ID; sleep 4";
    let job = sbatch(
        &cluster,
        &alice,
        &[
            "-p",
            "gw",
            "-A",
            "research",
            "--gpus=12",
            "-o",
            "/dev/null",
            "--wrap",
            script,
        ],
    );
    let s = cluster.wait_for(30, "the uneven gang running", |s| {
        s.running
            .iter()
            .any(|j| j.slurm_job == Some(job) && j.state == "running")
    });
    let placed = s
        .running
        .iter()
        .find(|j| j.slurm_job == Some(job))
        .unwrap()
        .clone();
    let done = cluster.wait_for(60, "the uneven gang finished", |s| {
        s.finished.iter().any(|j| j.slurm_job == Some(job))
    });
    let done = done
        .finished
        .iter()
        .find(|j| j.slurm_job == Some(job))
        .unwrap();
    assert_eq!(done.state, "passed", "{:?}", done.events);
    let nodes: Vec<&str> = placed.placement.iter().map(|(n, _)| n.as_str()).collect();
    let seen = std::fs::read_to_string(format!("{home}/where.{job}")).unwrap();
    let seen_nodes: std::collections::BTreeSet<&str> = seen
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(seen_nodes, nodes.iter().copied().collect(), "{seen}");
    let gpus: usize = seen
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(|g| g.split(',').count())
        .sum();
    assert_eq!(gpus, 12, "{seen}");
    println!(
        "native: a 12-GPU gang ran on the nodes Gangway chose ({nodes:?}), Slurm picking the indices: {seen:?}"
    );
    cluster.passed = true;
}
