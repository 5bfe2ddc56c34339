//! Native mode with real users: a plain `sbatch` into the partition Gangway
//! manages is held at submission, placed by Gangway on the nodes and GPU
//! indices it chose, and run as its user; a job that waits says why in
//! `squeue`; `scancel` works for its owner and Slurm refuses it to anyone
//! else; a user cannot release their own held job.

use std::process::Output;
use std::time::{Duration, Instant};

use super::harness::{Cluster, SERIAL, User, median, slurm_here, text, user};

/// `sbatch --parsable ARGS` as `user`; the Slurm job id.
pub(super) fn sbatch(cluster: &Cluster, user: &User, args: &[&str]) -> u64 {
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
pub(super) fn squeue_field(cluster: &Cluster, job: u64, field: &str) -> String {
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
    let mut cluster = native_cluster("native");
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
    let mut cluster = native_cluster("native-uneven");
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

/// A cluster whose daemon serves every local user in native mode
/// (partition `gw`).
fn native_cluster(name: &str) -> Cluster {
    let mut cluster = Cluster::start(name, None);
    cluster.configure("native.toml", &super::security::native_config(&cluster));
    cluster.start_daemon();
    cluster
}

/// The words of `v` as `&str`s.
fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Waits until `path` exists, for at most `secs`.
fn appears(path: &std::path::Path, secs: u64) -> Duration {
    let t = Instant::now();
    while !path.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(secs),
            "{} did not appear in {secs} s",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    t.elapsed()
}

#[test]
fn native_requeued_jobs_run_again() {
    if !slurm_here("native mode: requeued jobs run again") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let alice = user("alice");
    let mut cluster = native_cluster("native-requeue");
    let home = cluster.home(&alice);
    let first_run = "[ \"${SLURM_RESTART_COUNT:-0}\" = 0 ]";
    // One the user requeues while it runs; one that exits 1 on its first
    // run (the retry policy runs it again through Slurm's requeue).
    let long = format!("if {first_run}; then sleep 300; fi; echo again > again.$SLURM_JOB_ID");
    let fails = format!("if {first_run}; then exit 1; fi; echo again > again.$SLURM_JOB_ID");
    let args = |script: &str| {
        vec![
            "-p".to_string(),
            "gw".into(),
            "-A".into(),
            "research".into(),
            "--gres=gpu:1".into(),
            "--requeue".into(),
            "-o".into(),
            "/dev/null".into(),
            "--wrap".into(),
            script.to_string(),
        ]
    };
    let requeued = sbatch(&cluster, &alice, &refs(&args(&long)));
    cluster.wait_for(30, "the long job running", |s| {
        s.running
            .iter()
            .any(|j| j.slurm_job == Some(requeued) && j.state == "running")
    });
    let t = Instant::now();
    let out = cluster.slurm_as(&alice, &["scontrol", "requeue", &requeued.to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    let failing = sbatch(&cluster, &alice, &refs(&args(&fails)));
    // Slurm alone would hold each about 120 s (BeginTime); Gangway places
    // them again at once, and never gives up on them for taking long.
    let a = appears(&home.join(format!("again.{requeued}")), 100);
    let b = appears(&home.join(format!("again.{failing}")), 100);
    let took = t.elapsed();
    assert!(took < Duration::from_secs(60), "ran again after {took:?}");
    for gid in [requeued, failing] {
        let s = cluster.wait_for(30, "the requeued job finished", |s| {
            s.finished.iter().any(|j| j.slurm_job == Some(gid))
        });
        let j = s
            .finished
            .iter()
            .find(|j| j.slurm_job == Some(gid))
            .unwrap();
        assert_eq!(j.state, "passed", "{:?}", j.events);
        assert!(
            j.events.iter().all(|e| !e.contains("cancel")),
            "{:?}",
            j.events
        );
    }
    println!(
        "native: a job its user requeued ran again after {a:?}, one that exited 1 under \
         --requeue after {b:?} (Slurm's own requeue delay is about 120 s); both passed"
    );
    cluster.passed = true;
}

/// `squeue` as root: (state, nodes) of Slurm job `gid`.
fn where_runs(cluster: &Cluster, gid: u64) -> (String, String) {
    let out = cluster.slurm(&[
        "squeue",
        "-h",
        "-t",
        "all",
        "-j",
        &gid.to_string(),
        "-o",
        "%T|%N",
    ]);
    let (state, nodes) = out.trim().split_once('|').unwrap_or(("", ""));
    (state.to_string(), nodes.to_string())
}

/// Waits until every Slurm job of `gids` runs; their nodes.
fn all_running(cluster: &Cluster, gids: &[u64]) -> Vec<String> {
    let t = Instant::now();
    loop {
        let at: Vec<(String, String)> = gids.iter().map(|g| where_runs(cluster, *g)).collect();
        if at.iter().all(|(state, _)| state == "RUNNING") {
            return at.into_iter().map(|(_, n)| n).collect();
        }
        assert!(t.elapsed() < Duration::from_secs(40), "{at:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn native_jobs_are_counted_in_cpus_and_whole_nodes() {
    if !slurm_here("native mode: CPUs and --exclusive") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (alice, bob) = (user("alice"), user("bob"));
    let mut cluster = native_cluster("native-cpus");
    let foreign = |nodes: &str| {
        let n = nodes.split(',').count().to_string();
        let out = cluster.slurm(&[
            "sbatch",
            "--parsable",
            "-p",
            "gpu",
            "-o",
            "/dev/null",
            "-N",
            &n,
            "-w",
            nodes,
            "--gres=gpu:8",
            "--wrap",
            "sleep 300",
        ]);
        out.trim().to_string()
    };
    // Three of the four nodes full (jobs started in Slurm directly).
    let full = foreign("n2,n3,n4");
    cluster.wait_for(20, "the foreign GPUs counted", |s| s.foreign_gpus == 24);
    let job = |user: &User, extra: &[&str]| {
        let mut args = vec!["-p", "gw", "-A", "research", "-o", "/dev/null"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--wrap", "sleep 60"]);
        sbatch(&cluster, user, &args)
    };
    // -c 16 with one GPU on a node of 64 CPUs and 8 GPUs holds 16 CPUs and
    // one GPU: seven 1-GPU jobs run beside it on n1.
    let cpu_heavy = job(&alice, &["--gres=gpu:1", "-c", "16"]);
    let singles: Vec<u64> = (0..7).map(|_| job(&bob, &["--gres=gpu:1"])).collect();
    let mut all = singles.clone();
    all.push(cpu_heavy);
    assert!(all_running(&cluster, &all).iter().all(|n| n == "n1"));
    let s = cluster.status();
    let n1 = s.nodes.iter().find(|n| n.name == "n1").unwrap();
    assert_eq!(n1.free, 0, "{n1:?}");
    // n1 and n2 free, n3 and n4 full: two 1-GPU jobs with -c 40 (80 CPUs
    // together, a node has 64) go to two nodes, never together.
    for gid in &all {
        cluster.slurm(&["scancel", &gid.to_string()]);
    }
    cluster.slurm(&["scancel", &full]);
    cluster.wait_for(20, "n1 and n2 free", |s| {
        s.foreign_gpus == 0 && s.nodes.iter().all(|n| n.free == 8)
    });
    let full = foreign("n3,n4");
    cluster.wait_for(20, "the foreign GPUs counted", |s| s.foreign_gpus == 16);
    // Both submitted at once, so that one cycle takes both and one round
    // may start both (each fits n1 alone).
    let one =
        "sbatch --parsable -p gw -A research -o /dev/null --gres=gpu:1 -c 40 --wrap 'sleep 60'";
    let out = cluster.sh_as(&alice, &format!("{one} & {one} & wait"));
    let forty: Vec<u64> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|w| w.split(';').next()?.parse().ok())
        .collect();
    assert_eq!(forty.len(), 2, "{}", text(&out));
    let nodes = all_running(&cluster, &forty);
    assert_ne!(nodes[0], nodes[1], "both -c 40 jobs on one node");
    // A third waits in Gangway (held, saying it waits for CPUs), not
    // pinned where Slurm cannot start it.
    let waits = job(&bob, &["--gres=gpu:1", "-c", "40"]);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(where_runs(&cluster, waits).0, "PENDING");
    let comment = squeue_field(&cluster, waits, "admin_comment");
    assert!(comment.contains("40 CPUs per node fit now on"), "{comment}");
    // A job asking more CPUs than any node has is refused, saying why.
    let never = job(&bob, &["--gres=gpu:1", "-c", "65"]);
    std::thread::sleep(Duration::from_secs(2));
    let comment = squeue_field(&cluster, never, "admin_comment");
    assert!(
        comment.contains("it asks 65 CPUs per node but the largest node has 64"),
        "{comment}"
    );
    // --exclusive: placed on a whole free node, not killed; the node is
    // then full.
    for gid in forty.iter().chain([&waits, &never]) {
        cluster.slurm(&["scancel", &gid.to_string()]);
    }
    let whole = job(&bob, &["--gres=gpu:1", "--exclusive"]);
    let node = all_running(&cluster, &[whole]).remove(0);
    let s = cluster.wait_for(10, "the whole node counted", |s| {
        s.nodes.iter().any(|n| n.name == node && n.free == 0)
    });
    let j = s
        .running
        .iter()
        .find(|j| j.slurm_job == Some(whole))
        .unwrap();
    assert!(
        j.events.iter().any(|e| e.contains("the whole node")),
        "{:?}",
        j.events
    );
    cluster.slurm(&["scancel", &full, &whole.to_string()]);
    println!(
        "native: a 1-GPU -c 16 job and seven 1-GPU jobs ran side by side on n1; two -c 40 jobs ran \
         on two nodes, a third waited for CPUs, -c 65 was refused; an --exclusive job ran on a \
         whole node"
    );
    cluster.passed = true;
}

/// `scontrol show job -d`'s GPUs of a job: how many it holds or asks for.
fn job_gres(cluster: &Cluster, gid: u64) -> String {
    let shown = cluster.slurm(&["scontrol", "show", "job", "-d", &gid.to_string()]);
    shown
        .split_whitespace()
        .find_map(|w| w.strip_prefix("JOB_GRES="))
        .unwrap_or("")
        .to_string()
}

#[test]
fn a_job_pinned_again_gets_its_new_gpus_only() {
    if !slurm_here("native mode: a job pinned twice") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    use gangway_slurm::daemon::{LaunchOrder, LaunchOutcome, LaunchWork, run_launches};
    use gangway_slurm::engine::Slurm;
    use gangway_slurm::launch::Part;
    let alice = user("alice");
    let mut cluster = Cluster::start("native-repin", None);
    // No daemon: the test pins as the daemon would (the long soak found
    // Slurm 22.05 adding a re-pinned job's new GPUs to its old ones).
    let gid = sbatch(
        &cluster,
        &alice,
        &[
            "-p",
            "gw",
            "-A",
            "research",
            "--gpus=1",
            "-o",
            "/dev/null",
            "--wrap",
            "sleep 30",
        ],
    );
    let slurm = Slurm::new(None, Some(cluster.conf()));
    let pin = |node: &str, gpu: u32| {
        let part = Part {
            node: node.into(),
            gpus: vec![gpu],
            types: vec![format!("g{gpu}")],
        };
        let (fields, _) = gangway_slurm::native::pin_fields(std::slice::from_ref(&part), "test");
        let order = LaunchOrder {
            id: 1,
            number: 1,
            work: LaunchWork::Pin {
                slurm_id: gid,
                fields,
                requeue: false,
            },
            parts: vec![part],
        };
        let done = run_launches(&slurm, vec![order], None);
        assert_eq!(done[0].1, LaunchOutcome::Launched(gid), "{done:?}");
    };
    // Pinned to n2's g4, which a job started in Slurm directly holds, and
    // released; held again (as a launch taken back); pinned to n3's g0.
    // (Slurm 22.05 keeps a zero count of the old type, so the old index
    // must be free where the job is pinned again: on another node here.)
    let other = cluster.slurm(&[
        "sbatch",
        "--parsable",
        "-p",
        "gpu",
        "-w",
        "n2",
        "--gres=gpu:g4:1",
        "-o",
        "/dev/null",
        "--wrap",
        "sleep 60",
    ]);
    pin("n2", 4);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(where_runs(&cluster, gid).0, "PENDING");
    cluster.slurm(&["scontrol", "hold", &gid.to_string()]);
    pin("n3", 0);
    let t = Instant::now();
    while where_runs(&cluster, gid).0 != "RUNNING" {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{:?}",
            where_runs(&cluster, gid)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let gres = job_gres(&cluster, gid);
    let held: u32 = gres
        .split(',')
        .filter_map(|g| g.rsplit(':').next()?.split('(').next()?.parse::<u32>().ok())
        .sum();
    assert_eq!(held, 1, "the job holds {gres}");
    assert!(gres.contains("gpu:g0:1"), "{gres}");
    cluster.slurm(&["scancel", &gid.to_string(), other.trim()]);
    println!("native: a job pinned to n2's g4, held and pinned to n3's g0 holds {gres}");
    cluster.passed = true;
}
