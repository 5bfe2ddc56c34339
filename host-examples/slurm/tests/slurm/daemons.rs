//! Daemons sharing a cluster, and jobs Gangway did not start: a second
//! daemon on the same partition, or on another partition over the same
//! nodes, refuses to start (naming the first's lock) and touches none of
//! the first's jobs; a daemon gone without a word is taken over once its
//! lock goes stale; jobs started in Slurm directly keep their GPUs under
//! the `philly` preset (reclaim included).

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use gangway_slurm::client::{self, Daemon};
use gangway_slurm::engine::NodeGpus;

use super::harness::{Cluster, SERIAL, slurm_here};

#[test]
fn a_second_daemon_does_not_touch_the_firsts_jobs() {
    if !slurm_here("a second daemon does not touch the first's jobs") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut cluster = Cluster::start("two-daemons", None);
    let stale = cluster.config_with("a.toml", |t| format!("lock_stale_s = 6\n{t}"));
    cluster.config = stale;
    cluster.start_daemon();
    let jobs: Vec<u64> = (0..3)
        .map(|_| cluster.submit(8, "prod", &["sleep", "8"]))
        .collect();
    cluster.wait_for(30, "the first daemon's jobs running", |s| {
        jobs.iter().all(|id| {
            s.running
                .iter()
                .any(|j| j.id == *id && j.state == "running")
        })
    });
    // Another daemon, another state folder, the same partition: refused,
    // naming the first.
    let other_state = cluster.dir.join("other-state");
    let same = cluster.config_with("b.toml", |t| {
        let t = t.replace(
            &cluster.state().display().to_string(),
            &other_state.display().to_string(),
        );
        format!("lock_stale_s = 6\n{t}")
    });
    let (err, _) = cluster.refused_start(&same);
    assert!(
        err.contains("another gangway-slurm serves partition gpu"),
        "{err}"
    );
    assert!(err.contains("lock Slurm job"), "{err}");
    // Every job of the first passes, launched once, never cancelled.
    for id in &jobs {
        let j = cluster.finished(60, *id);
        assert_eq!(j.state, "passed", "{:?}", j.events);
        assert_eq!(j.attempts, 1, "{:?}", j.events);
        assert!(
            j.events.iter().all(|e| !e.contains("cancel")),
            "{:?}",
            j.events
        );
    }
    // The first daemon gone without a word (SIGKILL): the same partition
    // is refused until its lock is stale, then taken over.
    cluster.kill_daemon();
    let (err, _) = cluster.refused_start(&same);
    assert!(err.contains("another gangway-slurm serves"), "{err}");
    std::thread::sleep(Duration::from_secs(7));
    cluster.config = same;
    cluster.state_dir = other_state;
    cluster.start_daemon();
    let s = cluster.status();
    assert!(
        s.warnings
            .iter()
            .any(|w| w.contains("took over partition gpu")),
        "{:?}",
        s.warnings
    );
    println!(
        "daemons: a second daemon on the same partition was refused and touched none of the first's \
         jobs; a stale lock was taken over"
    );
    cluster.passed = true;
}

/// Node and GPU indices a Slurm job holds, from `squeue --json`.
fn held_by(cluster: &Cluster, job: u64) -> BTreeSet<(String, u32)> {
    let v: serde_json::Value = serde_json::from_str(&cluster.slurm(&["squeue", "--json"])).unwrap();
    let jobs = gangway_slurm::engine::parse_squeue(&v.to_string()).unwrap();
    let gangway_slurm::engine::Parsed::Data(jobs) = jobs else {
        panic!("squeue answered with errors")
    };
    jobs.iter()
        .filter(|j| j.job_id == job)
        .flat_map(|j| j.gpus.iter().cloned())
        .flat_map(|(n, g)| g.into_iter().map(move |i| (n.clone(), i)))
        .collect()
}

#[test]
fn jobs_started_in_slurm_directly_keep_their_gpus_under_philly() {
    if !slurm_here("foreign jobs keep their GPUs under philly") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut cluster = Cluster::start("foreign-philly", None);
    cluster.start_daemon();
    assert!(
        cluster
            .status()
            .policies
            .iter()
            .any(|p| p.slot == "reclaim" && p.active == "quota-reclaim")
    );
    // 10 GPUs held by a job started in Slurm directly.
    let out = cluster.slurm(&[
        "sbatch",
        "--parsable",
        "-J",
        "foreign",
        "-o",
        "/dev/null",
        "-N",
        "2",
        "-w",
        "n1,n2",
        "--gres=gpu:5",
        "--wrap",
        "sleep 40",
    ]);
    let foreign: u64 = out.trim().parse().unwrap();
    cluster.wait_for(20, "the foreign GPUs counted", |s| s.foreign_gpus == 10);
    let held = held_by(&cluster, foreign);
    assert_eq!(held.len(), 10);
    // research (quota 20, holding nothing) waits for more than is free:
    // quota-reclaim would take borrowed GPUs back for it, and the foreign
    // job's are not Gangway's to take.
    let jobs: Vec<u64> = [(16, "research"), (4, "research"), (8, "prod"), (8, "prod")]
        .iter()
        .map(|(g, vc)| cluster.submit(*g, vc, &["sleep", "6"]))
        .collect();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(15) {
        let s = cluster.status();
        assert_eq!(s.foreign_gpus, 10, "{}", client::format_status(&s));
        for j in s.running.iter().chain(&s.pending).chain(&s.finished) {
            assert!(
                j.events
                    .iter()
                    .all(|e| !e.contains("preempted") && !e.contains("(Resources)")),
                "job {}: {:?}",
                j.id,
                j.events
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    // No launch went onto the foreign job's GPUs.
    let log = std::fs::read_to_string(cluster.state().join("launches.jsonl")).unwrap_or_default();
    for line in log.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let placement: NodeGpus = serde_json::from_value(v["placement"].clone()).unwrap();
        for (node, gpus) in placement {
            for g in gpus {
                assert!(
                    !held.contains(&(node.clone(), g)),
                    "launched onto {node}:{g}: {line}"
                );
            }
        }
    }
    cluster.slurm(&["scancel", &foreign.to_string()]);
    for id in &jobs {
        let j = cluster.finished(90, *id);
        assert_eq!(j.state, "passed", "{:?}", j.events);
    }
    println!(
        "daemons: a job started in Slurm directly kept its 10 GPUs under philly for 15 s of waiting gangs"
    );
    cluster.passed = true;
}

/// The daemons the pending locks name.
fn lock_holder(cluster: &Cluster) -> Vec<String> {
    let out = cluster.slurm(&[
        "squeue",
        "-h",
        "-t",
        "pending",
        "-n",
        "gangway-lock",
        "-o",
        "%k",
    ]);
    out.lines()
        .filter_map(|l| l.split(':').nth(2).map(str::to_string))
        .collect()
}

#[test]
fn two_daemons_naming_a_partition_differently_cannot_both_run() {
    if !slurm_here("a partition named two ways") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut cluster = Cluster::start("lock-names", None);
    // The first leaves the partition to Slurm's default (gpu).
    cluster.start_daemon();
    let state = cluster.state().display().to_string();
    let other = cluster.dir.join("other-state").display().to_string();
    let named = cluster.config_with("named.toml", |t| {
        t.replace(&state, &other)
            .replacen("[slurm]\n", "[slurm]\npartition = \"gpu\"\n", 1)
    });
    let (err, _) = cluster.refused_start(&named);
    assert!(
        err.contains("another gangway-slurm serves partition gpu"),
        "{err}"
    );
    // And the other way round.
    cluster.signal_daemon("TERM");
    let mut first = cluster.daemon.take().unwrap();
    assert!(first.wait().unwrap().success(), "a clean stop exits 0");
    let mut second = cluster.spawn_daemon(&named, "daemon-named.log", &[]);
    let socket = gangway_slurm::config::socket_in(std::path::Path::new(&other));
    let t = Instant::now();
    while client::status(&Daemon::at(&socket), None).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the named daemon did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let default = cluster.config.clone();
    let (err, _) = cluster.refused_start(&default);
    assert!(
        err.contains("another gangway-slurm serves partition gpu"),
        "{err}"
    );
    let _ = second.kill();
    let _ = second.wait();
    println!(
        "daemons: the default partition and \"gpu\" named explicitly take one lock: the second daemon is refused either way"
    );
    cluster.passed = true;
}

/// The Slurm job of the one pending lock.
fn lock_job(cluster: &Cluster) -> String {
    let out = cluster.slurm(&[
        "squeue",
        "-h",
        "-t",
        "pending",
        "-n",
        "gangway-lock",
        "-o",
        "%A",
    ]);
    let ids: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(ids.len(), 1, "locks: {out}");
    ids[0].to_string()
}

#[test]
fn two_partitions_over_the_same_nodes_cannot_both_have_a_daemon() {
    if !slurm_here("two partitions over the same nodes") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut cluster = Cluster::start("lock-nodes", None);
    // The first serves gpu (the default, Nodes=ALL).
    cluster.start_daemon();
    let first = lock_job(&cluster);
    let state = cluster.state().display().to_string();
    let other = cluster.dir.join("other-state").display().to_string();
    let gpu2 = cluster.config_with("gpu2.toml", |t| {
        t.replace(&state, &other)
            .replacen("[slurm]\n", "[slurm]\npartition = \"gpu2\"\n", 1)
    });
    // gpu2 has the same nodes: refused, naming the first's lock.
    let (err, _) = cluster.refused_start(&gpu2);
    assert!(
        err.contains(
            "another gangway-slurm serves partition gpu, over 4 of partition gpu2's nodes"
        ) && err.contains(&format!("lock Slurm job {first}")),
        "{err}"
    );
    assert_eq!(lock_job(&cluster), first, "the refused daemon left a lock");
    // And the other way round.
    cluster.signal_daemon("TERM");
    let mut stopped = cluster.daemon.take().unwrap();
    assert!(stopped.wait().unwrap().success(), "a clean stop exits 0");
    let mut second = cluster.spawn_daemon(&gpu2, "daemon-gpu2.log", &[]);
    let socket = gangway_slurm::config::socket_in(std::path::Path::new(&other));
    let t = Instant::now();
    while client::status(&Daemon::at(&socket), None).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the gpu2 daemon did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let theirs = lock_job(&cluster);
    let default = cluster.config.clone();
    let (err, _) = cluster.refused_start(&default);
    assert!(
        err.contains(
            "another gangway-slurm serves partition gpu2, over 4 of partition gpu's nodes"
        ) && err.contains(&format!("lock Slurm job {theirs}")),
        "{err}"
    );
    let _ = second.kill();
    let _ = second.wait();
    println!(
        "daemons: partitions gpu and gpu2 over the same nodes take one lock: the second daemon is \
         refused either way, naming the other's lock"
    );
    cluster.passed = true;
}

/// The resumed daemon stops at its first read of Slurm (`check_lock`);
/// the check before every launch, for a lock lost between that read and a
/// launch, is tested on its own: `daemon::launches::tests`.
#[test]
fn a_daemon_whose_lock_was_taken_launches_nothing() {
    if !slurm_here("a daemon whose lock was taken") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut cluster = Cluster::start("lock-fence", None);
    cluster.config = cluster.config_with("a.toml", |t| format!("lock_stale_s = 6\n{t}"));
    cluster.start_daemon();
    let a_id = lock_holder(&cluster).pop().unwrap();
    // The cluster full: the first daemon's jobs wait.
    let foreign = cluster.slurm(&[
        "sbatch",
        "--parsable",
        "-p",
        "gpu",
        "-o",
        "/dev/null",
        "-N",
        "4",
        "--gres=gpu:8",
        "--wrap",
        "sleep 300",
    ]);
    cluster.wait_for(20, "the foreign GPUs counted", |s| s.foreign_gpus == 32);
    let jobs: Vec<u64> = (0..4)
        .map(|_| cluster.submit(8, "prod", &["sleep", "3"]))
        .collect();
    // Stopped past its lock's staleness, a second daemon takes over.
    cluster.signal_daemon("STOP");
    std::thread::sleep(Duration::from_secs(8));
    let b_state = cluster.dir.join("b-state");
    let b_config = cluster.config_with("b.toml", |t| {
        let t = t.replace(
            &cluster.state().display().to_string(),
            &b_state.display().to_string(),
        );
        format!("lock_stale_s = 6\n{t}")
    });
    let mut b = cluster.spawn_daemon(&b_config, "daemon-b.log", &[]);
    let b_socket = gangway_slurm::config::socket_in(&b_state);
    let t = Instant::now();
    while client::status(&Daemon::at(&b_socket), None).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the second daemon did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The GPUs come free, and the first daemon resumes.
    cluster.slurm(&["scancel", foreign.trim()]);
    std::thread::sleep(Duration::from_secs(1));
    cluster.signal_daemon("CONT");
    let t = Instant::now();
    let status = loop {
        if let Some(status) = cluster.daemon.as_mut().unwrap().try_wait().unwrap() {
            break status;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the fenced daemon kept running"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(!status.success());
    cluster.daemon = None;
    let log = std::fs::read_to_string(cluster.dir.join("daemon-1.log")).unwrap();
    assert!(log.contains("this daemon stops"), "{log}");
    assert!(
        cluster.tagged_by(&a_id).is_empty(),
        "the fenced daemon launched {:?}",
        cluster.tagged_by(&a_id)
    );
    // A clean stop gives the lock back at once: the first daemon's state
    // is served again right away, and its jobs run.
    let pid = b.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let t = Instant::now();
    assert!(b.wait().unwrap().success(), "SIGTERM: a clean stop");
    let stopped_in = t.elapsed();
    assert!(lock_holder(&cluster).is_empty(), "the lock was left behind");
    let t = Instant::now();
    cluster.start_daemon();
    let restarted_in = t.elapsed();
    for id in &jobs {
        let j = cluster.finished(60, *id);
        assert_eq!(j.state, "passed", "{:?}", j.events);
        assert_eq!(j.attempts, 1, "{:?}", j.events);
    }
    println!(
        "daemons: a daemon resumed after its lock was taken over exited without launching; the \
         other stopped cleanly in {stopped_in:?}, giving the lock back; the first's state served \
         again in {restarted_in:?}"
    );
    cluster.passed = true;
}

/// A daemon serving partition `half` (the first rack, n1 and n2) sees and
/// places on those nodes only, while a job of another partition on one of
/// them is still counted there.
#[test]
fn a_daemon_places_only_on_its_partitions_nodes() {
    if !slurm_here("a daemon places only on its partition's nodes") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut cluster = Cluster::start("partition-nodes", None);
    cluster.config = cluster.config_with("half.toml", |t| {
        t.replacen("[slurm]\n", "[slurm]\npartition = \"half\"\n", 1)
    });
    cluster.start_daemon();
    let s = cluster.status();
    let names: Vec<&str> = s.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["n1", "n2"], "{}", client::format_status(&s));
    // 4 GPUs of n1 held by a job of partition gpu: counted on n1.
    let foreign = cluster.slurm(&[
        "sbatch",
        "--parsable",
        "-p",
        "gpu",
        "-o",
        "/dev/null",
        "-w",
        "n1",
        "--gres=gpu:4",
        "--wrap",
        "sleep 20",
    ]);
    cluster.wait_for(20, "the foreign GPUs counted", |s| s.foreign_gpus == 4);
    let jobs: Vec<u64> = [8, 4, 4, 8, 2]
        .iter()
        .map(|g| cluster.submit(*g, "prod", &["sleep", "3"]))
        .collect();
    let mut placed = BTreeSet::new();
    for id in &jobs {
        let j = cluster.finished(90, *id);
        assert_eq!(j.state, "passed", "{:?}", j.events);
        placed.extend(j.placement.iter().map(|(n, _)| n.clone()));
    }
    assert!(
        placed.iter().all(|n| n == "n1" || n == "n2"),
        "placed on {placed:?}"
    );
    let s = cluster.status();
    assert_eq!(s.nodes.len(), 2, "{}", client::format_status(&s));
    cluster.slurm(&["scancel", foreign.trim()]);
    println!(
        "daemons: a daemon of partition half (n1, n2) placed its 5 jobs there only, counting a gpu job on n1"
    );
    cluster.passed = true;
}
