//! GPU types on a real Slurm with nodes of two types (`cluster.sh` with
//! `GPU_TYPES=a100:80,v100:32`: n1 and n3 are a100, n2 and n4 v100, each
//! rack has one of each). A typed `sbatch` in native mode runs on its type;
//! a gang never spans two types, even where a rack would be more local; a
//! type the cluster lacks is refused with the types it has; the daemon's
//! own `submit --gpu-type` and `--min-gpu-memory` do the same. With
//! `GRES_TYPED=n1,n2`, n1 and n2 have no type feature: their gres.conf
//! names the product for all their GPUs (`gpu:a100:8`, `gpu:v100:8`), as
//! many sites do, and they are of that type all the same, asked for by
//! count of it.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use super::harness::{Cluster, SERIAL, User, slurm_here, text, user};
use super::native::{sbatch, squeue_field};

const TYPES: &str = "a100:80,v100:32";
const A100: [&str; 2] = ["n1", "n3"];
const V100: [&str; 2] = ["n2", "n4"];

/// The nodes Gangway placed Slurm job `job` on, once it runs.
fn placed_nodes(cluster: &Cluster, job: u64) -> BTreeSet<String> {
    let s = cluster.wait_for(40, &format!("Slurm job {job} running"), |s| {
        s.running
            .iter()
            .any(|j| j.slurm_job == Some(job) && j.state == "running")
    });
    let j = s.running.iter().find(|j| j.slurm_job == Some(job)).unwrap();
    j.placement.iter().map(|(n, _)| n.clone()).collect()
}

/// Waits until Slurm job `job`'s admin comment contains `what`; the comment.
fn comment_says(cluster: &Cluster, job: u64, what: &str) -> String {
    let t = Instant::now();
    loop {
        let c = squeue_field(cluster, job, "admin_comment");
        if c.contains(what) {
            return c;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "Slurm job {job}: no {what:?} in its admin comment {c:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `sbatch -p gw -A research -o /dev/null ARGS --wrap SCRIPT` as `user`.
fn native_job(cluster: &Cluster, user: &User, args: &[&str], script: &str) -> u64 {
    let mut all = vec!["-p", "gw", "-A", "research", "-o", "/dev/null"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--wrap", script]);
    sbatch(cluster, user, &all)
}

fn set(nodes: &[&str]) -> BTreeSet<String> {
    nodes.iter().map(|n| n.to_string()).collect()
}

#[test]
fn native_typed_sbatch_runs_on_its_type() {
    if !slurm_here("GPU types: native typed sbatch") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let alice = user("alice");
    let mut cluster = Cluster::start_typed("types-native", TYPES);
    cluster.configure("native.toml", &super::security::native_config(&cluster));
    cluster.start_daemon();
    let home = cluster.home(&alice).display().to_string();
    let script = "echo $SLURMD_NODENAME > where.$SLURM_JOB_ID; sleep 4";
    // Slurm's own typed requests: per node, per job, and a constraint.
    let v100 = native_job(&cluster, &alice, &["-N", "1", "--gres=gpu:v100:4"], script);
    let a100 = native_job(&cluster, &alice, &["--gpus=a100:16"], script);
    let by_feature = native_job(
        &cluster,
        &alice,
        &["-N", "1", "--gres=gpu:2", "--constraint=v100"],
        script,
    );
    let on_v100 = placed_nodes(&cluster, v100);
    assert!(
        on_v100.len() == 1 && on_v100.is_subset(&set(&V100)),
        "{on_v100:?}"
    );
    // 16 a100 GPUs: both a100 nodes, across the racks (a rack has 16 GPUs
    // of two types, more local, but not one type).
    assert_eq!(placed_nodes(&cluster, a100), set(&A100));
    let on_feature = placed_nodes(&cluster, by_feature);
    assert!(on_feature.is_subset(&set(&V100)), "{on_feature:?}");
    // More a100 GPUs than are free: it waits, saying for which type, in
    // squeue and in status, while v100 GPUs stay free.
    let waiting = native_job(&cluster, &alice, &["--gpus=a100:8"], script);
    let c = comment_says(&cluster, waiting, "pending in Gangway");
    assert!(c.contains("GPU type a100"), "{c}");
    let s = cluster.wait_for(10, "the waiting job in status", |s| {
        s.pending.iter().any(|j| j.slurm_job == Some(waiting))
    });
    let j = s
        .pending
        .iter()
        .find(|j| j.slurm_job == Some(waiting))
        .unwrap();
    assert_eq!(j.gpu_types, ["a100"]);
    let why = gangway_slurm::client::format_job(j);
    assert!(why.contains("GPU types: a100"), "{why}");
    // What Slurm ran where: the job's own view agrees.
    let ran_on = [
        (v100, &V100),
        (a100, &A100),
        (by_feature, &V100),
        (waiting, &A100),
    ];
    for (job, nodes) in ran_on {
        cluster.wait_for(60, &format!("Slurm job {job} finished"), |s| {
            s.finished.iter().any(|j| j.slurm_job == Some(job))
        });
        let ran = std::fs::read_to_string(format!("{home}/where.{job}")).unwrap();
        assert!(nodes.contains(&ran.trim()), "Slurm job {job} ran on {ran}");
    }
    // Untyped gangs of 16 on an idle cluster: each on one type, never a
    // rack's two nodes of two types.
    for _ in 0..2 {
        let any = native_job(&cluster, &alice, &["--gpus=16"], "sleep 1");
        let nodes = placed_nodes(&cluster, any);
        assert!(nodes == set(&A100) || nodes == set(&V100), "{nodes:?}");
        cluster.wait_for(60, "the untyped gang finished", |s| {
            s.finished.iter().any(|j| j.slurm_job == Some(any))
        });
    }
    // A type the cluster lacks, and more of a type than it has: refused,
    // held, and told why where users look.
    let h100 = native_job(&cluster, &alice, &["--gres=gpu:h100:1"], "true");
    let c = comment_says(&cluster, h100, "not placed");
    assert!(
        c.contains("no GPU type \"h100\" in the cluster (it has a100, v100)"),
        "{c}"
    );
    let big = native_job(&cluster, &alice, &["--gpus=a100:24"], "true");
    let c = comment_says(&cluster, big, "not placed");
    assert!(c.contains("at most 16 GPUs"), "{c}");
    let two = native_job(&cluster, &alice, &["--gres=gpu:a100:1,gpu:v100:1"], "true");
    let c = comment_says(&cluster, two, "not placed");
    assert!(c.contains("one GPU type"), "{c}");
    assert!(squeue_field(&cluster, h100, "State").contains("PENDING"));
    cluster.passed = true;
}

#[test]
fn submit_asks_for_types_and_memory() {
    if !slurm_here("GPU types: gangway-slurm submit --gpu-type") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let alice = user("alice");
    let mut cluster = Cluster::start_typed("types-submit", TYPES);
    let config = super::security::shared_config(&cluster, "");
    cluster.configure("shared.toml", &config);
    cluster.start_daemon();
    let home = cluster.home(&alice).display().to_string();
    let submit = |args: &[&str]| {
        let mut all = vec!["submit", "--vc", "research"];
        all.extend_from_slice(args);
        all.extend_from_slice(&[
            "--",
            "sh",
            "-c",
            "echo $SLURMD_NODENAME > where.$GANGWAY_JOB_ID",
        ]);
        cluster.gangway_as(&alice, &all)
    };
    let id = |out: std::process::Output| -> u64 {
        assert!(out.status.success(), "{}", text(&out));
        let t = String::from_utf8_lossy(&out.stdout).into_owned();
        t.split_whitespace().nth(2).unwrap().parse().unwrap()
    };
    let v100 = id(submit(&["--gpus", "12", "--gpu-type", "v100,a100"]));
    let big_memory = id(submit(&["--gpus", "4", "--min-gpu-memory", "40"]));
    for (job, nodes) in [(v100, &V100), (big_memory, &A100)] {
        let done = cluster.finished(60, job);
        assert_eq!(done.state, "passed", "{:?}", done.events);
        let placed: BTreeSet<String> = done.placement.iter().map(|(n, _)| n.clone()).collect();
        assert!(
            placed.iter().all(|n| nodes.contains(&n.as_str())),
            "{placed:?}"
        );
        let ran = std::fs::read_to_string(format!("{home}/where.{job}")).unwrap();
        assert!(nodes.contains(&ran.trim()), "job {job} ran on {ran}");
    }
    let out = submit(&["--gpus", "1", "--gpu-type", "h100"]);
    assert!(!out.status.success());
    assert!(
        text(&out).contains("no GPU type \"h100\" in the cluster (it has a100, v100)"),
        "{}",
        text(&out)
    );
    let out = submit(&["--gpus", "1", "--min-gpu-memory", "100"]);
    assert!(!out.status.success());
    assert!(text(&out).contains("100 GB"), "{}", text(&out));
    cluster.passed = true;
}

/// A VC with a quota per GPU type (`gpu_quota.a100 = { nominal = 8,
/// borrowing_limit = 0 }`): its gangs run only on a100 nodes and never on
/// more than 8 a100 GPUs at once; one beyond waits with the reason
/// `type-quota` (in `why` and status) while a100 GPUs are free, and runs
/// when the VC's gang ends. Another VC is not bound by it.
#[test]
fn a_vcs_quota_per_gpu_type_caps_what_it_runs() {
    if !slurm_here("GPU types: quotas per type") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let alice = user("alice");
    let mut cluster = Cluster::start_typed("types-quota", TYPES);
    let config = format!(
        "{}[[vc]]\nname = \"capped\"\ngpu_quota.a100 = {{ nominal = 8, borrowing_limit = 0 }}\n",
        super::security::shared_config(&cluster, "")
    );
    cluster.configure("shared.toml", &config);
    cluster.start_daemon();
    let submit = |vc: &str, script: &str| -> u64 {
        let out = cluster.gangway_as(
            &alice,
            &[
                "submit", "--vc", vc, "--gpus", "8", "--", "sh", "-c", script,
            ],
        );
        assert!(out.status.success(), "{}", text(&out));
        let t = String::from_utf8_lossy(&out.stdout).into_owned();
        t.split_whitespace().nth(2).unwrap().parse().unwrap()
    };
    let first = submit("capped", "sleep 30");
    let s = cluster.wait_for(40, "the capped VC's first gang running", |s| {
        s.running
            .iter()
            .any(|j| j.id == first && j.state == "running")
    });
    let j = s.running.iter().find(|j| j.id == first).unwrap();
    assert!(
        j.placement.iter().all(|(n, _)| A100.contains(&n.as_str())),
        "{:?}",
        j.placement
    );
    // Within the cluster's free a100 GPUs, beyond the VC's cap.
    let second = submit("capped", "true");
    let s = cluster.wait_for(20, "the second gang waiting for its quota", |s| {
        s.pending
            .iter()
            .any(|j| j.id == second && j.reason.as_deref() == Some("type-quota"))
    });
    let j = s.pending.iter().find(|j| j.id == second).unwrap();
    let why = gangway_slurm::client::format_job(j);
    assert!(
        why.contains("quota of every GPU type it may use is full"),
        "{why}"
    );
    // Status shows each node's type and the VC's use of each type against
    // its quota (a type its quotas do not name: none).
    for n in &s.nodes {
        let want = if A100.contains(&n.name.as_str()) {
            "a100"
        } else {
            "v100"
        };
        assert_eq!(n.gpu_type, want, "{:?}", n);
    }
    let used = |vc: &str, t: &str| {
        s.type_use
            .iter()
            .find(|u| u.vc == vc && u.gpu_type == t)
            .map(|u| (u.held, u.nominal, u.borrowing_limit))
    };
    assert_eq!(
        used("capped", "a100"),
        Some((8, Some(8), Some(0))),
        "{:?}",
        s.type_use
    );
    assert_eq!(
        used("capped", "v100"),
        Some((0, Some(0), Some(0))),
        "{:?}",
        s.type_use
    );
    assert_eq!(
        used("research", "a100").map(|u| u.1),
        Some(None),
        "{:?}",
        s.type_use
    );
    let text = gangway_slurm::client::format_status(&s);
    assert!(
        text.contains("capped     a100 8 of 8+0; v100 0 of 0+0;"),
        "{text}"
    );
    // Another VC runs on the free a100s beside it.
    let other = submit("research", "true");
    let done = cluster.finished(60, other);
    assert_eq!(done.state, "passed", "{:?}", done.events);
    assert!(cluster.status().pending.iter().any(|j| j.id == second));
    // The capped VC's gang ends: the waiting one runs, on a100.
    cluster.gangway(&["cancel", &first.to_string()]);
    let done = cluster.finished(60, second);
    assert_eq!(done.state, "passed", "{:?}", done.events);
    assert!(
        done.placement
            .iter()
            .all(|(n, _)| A100.contains(&n.as_str())),
        "{:?}",
        done.placement
    );
    cluster.passed = true;
}

/// The nodes typed by their GRES (`cluster.sh`'s `GRES_TYPED`): n1 is
/// `gpu:a100:8`, n2 `gpu:v100:8`, neither with a feature; n3 and n4 keep
/// their per-index types and their type feature.
const GRES_TYPED: &str = "n1,n2";

/// Waits until `status` lists every node with its type: a100 for n1 and
/// n3, v100 for n2 and n4, whether the type comes from a feature or from
/// the GRES.
fn nodes_have_their_types(cluster: &Cluster) {
    let s = cluster.status();
    assert_eq!(s.nodes.len(), 4, "{:?}", s.nodes);
    for n in &s.nodes {
        let want = if A100.contains(&n.name.as_str()) {
            "a100"
        } else {
            "v100"
        };
        assert_eq!(n.gpu_type, want, "{n:?}");
    }
}

/// The node a job of `home` recorded it ran on (`where.<id>`).
fn ran_on(home: &str, id: u64) -> String {
    let ran = std::fs::read_to_string(format!("{home}/where.{id}")).unwrap();
    ran.trim().to_string()
}

/// Nodes whose gres.conf names the product (`Type=a100 File=gpu[0-7]`,
/// sinfo `gpu:a100:8`) and no type feature are of that type: `status`
/// says so, and `submit --gpu-type` runs only on nodes of the type, by
/// count on those nodes and by index beside them (a gang of 12 over a
/// GRES-typed and a feature-typed node).
#[test]
fn gres_typed_nodes_take_submit_jobs_of_their_type() {
    if !slurm_here("GPU types from GRES: submit --gpu-type") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let alice = user("alice");
    let mut cluster = Cluster::start_gres_typed("types-gres-submit", TYPES, GRES_TYPED);
    let config = super::security::shared_config(&cluster, "");
    cluster.configure("shared.toml", &config);
    cluster.start_daemon();
    nodes_have_their_types(&cluster);
    let home = cluster.home(&alice).display().to_string();
    let submit = |gpus: &str, ty: &str, pause: &str| {
        let script = format!("echo $SLURMD_NODENAME > where.$GANGWAY_JOB_ID; sleep {pause}");
        let args = [
            "submit",
            "--vc",
            "research",
            "--gpus",
            gpus,
            "--gpu-type",
            ty,
            "--",
            "sh",
            "-c",
            &script,
        ];
        let out = cluster.gangway_as(&alice, &args);
        assert!(out.status.success(), "{}", text(&out));
        let t = String::from_utf8_lossy(&out.stdout).into_owned();
        t.split_whitespace().nth(2).unwrap().parse::<u64>().unwrap()
    };
    // Both a100 nodes' GPUs at once: one gang on each.
    let a = [submit("8", "a100", "6"), submit("8", "a100", "6")];
    let v100 = submit("12", "v100", "1");
    let mut a100_nodes = BTreeSet::new();
    for job in a {
        let done = cluster.finished(60, job);
        assert_eq!(done.state, "passed", "{:?}", done.events);
        let placed: BTreeSet<String> = done.placement.iter().map(|(n, _)| n.clone()).collect();
        assert!(placed.is_subset(&set(&A100)), "{placed:?}");
        a100_nodes.insert(ran_on(&home, job));
    }
    assert_eq!(a100_nodes, set(&A100));
    let done = cluster.finished(60, v100);
    assert_eq!(done.state, "passed", "{:?}", done.events);
    let placed: BTreeSet<String> = done.placement.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(placed, set(&V100), "{:?}", done.events);
    assert!(V100.contains(&ran_on(&home, v100).as_str()));
    cluster.passed = true;
}

/// In native mode, Slurm's own typed requests (`--gres=gpu:a100:8`,
/// `--gpus=a100:8`) resolve to nodes typed by their GRES as to those
/// typed by a feature: two a100 gangs of 8 run at once, one on each a100
/// node, and a v100 one on a v100 node.
#[test]
fn gres_typed_nodes_take_native_typed_sbatch() {
    if !slurm_here("GPU types from GRES: native typed sbatch") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let alice = user("alice");
    let mut cluster = Cluster::start_gres_typed("types-gres-native", TYPES, GRES_TYPED);
    cluster.configure("native.toml", &super::security::native_config(&cluster));
    cluster.start_daemon();
    nodes_have_their_types(&cluster);
    let home = cluster.home(&alice).display().to_string();
    let script = "echo $SLURMD_NODENAME > where.$SLURM_JOB_ID; sleep 6";
    let by_gres = native_job(&cluster, &alice, &["-N", "1", "--gres=gpu:a100:8"], script);
    let by_gpus = native_job(&cluster, &alice, &["--gpus=a100:8"], script);
    let v100 = native_job(&cluster, &alice, &["-N", "1", "--gres=gpu:v100:4"], script);
    let both: BTreeSet<String> = [by_gres, by_gpus]
        .iter()
        .flat_map(|j| placed_nodes(&cluster, *j))
        .collect();
    assert_eq!(both, set(&A100));
    let on = placed_nodes(&cluster, v100);
    assert!(on.len() == 1 && on.is_subset(&set(&V100)), "{on:?}");
    let mut ran = BTreeSet::new();
    for job in [by_gres, by_gpus, v100] {
        cluster.wait_for(60, &format!("Slurm job {job} finished"), |s| {
            s.finished.iter().any(|j| j.slurm_job == Some(job))
        });
        ran.insert(ran_on(&home, job));
    }
    assert!(ran.is_superset(&set(&A100)), "{ran:?}");
    assert!(
        ran.iter().filter(|n| V100.contains(&n.as_str())).count() == 1,
        "{ran:?}"
    );
    cluster.passed = true;
}
