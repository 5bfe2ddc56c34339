//! End to end against real Slurm daemons: `tests/slurm/cluster.sh` starts
//! munged, slurmctld and 4 slurmd nodes of 8 fake GPUs in 2 racks, all on
//! 127.0.0.1; `gangway-slurm serve` places a workload of 1-16 GPU jobs from
//! two virtual clusters with quotas; a node is set DOWN and RESUMEd, the
//! daemon is killed with SIGKILL and started again, a job is started in
//! Slurm directly, one job fails at once (and is retried by the retry slot), bad submissions are refused, a
//! Wasm module is hot-swapped in and rolled back.
//!
//! Every job writes, from its own environment on every node it runs on,
//! `SLURMD_NODENAME`, `CUDA_VISIBLE_DEVICES` and heartbeats; the batch step
//! writes `SLURM_JOB_NODELIST`. The test then checks: every job ended
//! exactly once; every attempt ran on exactly the nodes and GPU indices
//! Gangway chose (its launch log); no GPU index was used by two jobs at
//! once and no job ran twice at once; interrupted gangs were re-queued and
//! finished; wait reasons were reported; every socket of the cluster, the
//! jobs and the daemon is on loopback (`ss -tnp`).
//!
//! A second test puts the daemon through the faults an operator sees: a
//! controller outage, the daemon down longer than Slurm remembers ended
//! jobs, a corrupt state file, a full state disk, a bad setup, and a job
//! held behind its own VC's gang (see `gangway_slurm_faults`).
//!
//! Without Slurm's packages (or not as root, which fake GPU devices and
//! slurmd need) it prints `SKIPPED: ...` and passes, unless
//! `GANGWAY_REQUIRE_SLURM` is set (CI sets it), when it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gangway_slurm::SlurmError;
use gangway_slurm::client;
use gangway_slurm::config::socket_in;
use gangway_slurm::engine::{NodeGpus, Slurm};
use gangway_slurm::hostlist;
use gangway_slurm::protocol::StatusReport;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/slurm/cluster.sh");
const BIN: &str = env!("CARGO_BIN_EXE_gangway-slurm");

/// What a job runs: records where it runs, beats while it sleeps.
const JOB_SH: &str = r#"#!/bin/sh
# job.sh OUTDIR TICKS: one attempt's own view of where it runs.
out="$1/$GANGWAY_JOB_ID.$GANGWAY_ATTEMPT"
env | grep '^SLURM_JOB_NODELIST' > "$out.batch"
if [ -n "$SLURM_HET_SIZE" ]; then set -- "$1" "$2" --het-group=0-$((SLURM_HET_SIZE - 1)); fi
ticks="$2"
shift 2
srun "$@" sh -c '
  f="$0.$SLURMD_NODENAME"
  echo "$SLURMD_NODENAME $CUDA_VISIBLE_DEVICES" > "$f.gpus"
  i=0
  while [ "$i" -lt "$1" ]; do date +%s.%N >> "$f.beat"; sleep 0.2; i=$((i + 1)); done
' "$out" "$ticks" || exit 3
echo done > "$out.done"
"#;

fn find(bin: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
        .map(|d| d.join(bin))
        .find(|p| p.is_file())
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// One cluster test at a time: each starts its own Slurm, and two on two
/// cores would make each other's timings meaningless.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Stops the daemon and the cluster whatever happens.
struct Cluster {
    dir: PathBuf,
    daemon: Option<Child>,
    starts: u32,
    /// The daemon's config file and its state folder.
    config: PathBuf,
    state_dir: PathBuf,
    /// A tmpfs mounted for the test, unmounted at the end.
    mounted: Option<PathBuf>,
    /// Set when every check passed: the folder is then removed; after a
    /// failure it is kept (logs, job outputs, state) for a look.
    passed: bool,
}

impl Cluster {
    fn conf(&self) -> PathBuf {
        self.dir.join("etc/slurm.conf")
    }

    fn state(&self) -> PathBuf {
        self.state_dir.clone()
    }

    fn slurm(&self, args: &[&str]) -> String {
        let out = Command::new(find(args[0]).unwrap_or_else(|| args[0].into()))
            .args(&args[1..])
            .env("SLURM_CONF", self.conf())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn start_daemon(&mut self) {
        self.starts += 1;
        let log =
            std::fs::File::create(self.dir.join(format!("daemon-{}.log", self.starts))).unwrap();
        let child = Command::new(BIN)
            .args(["serve", "--config"])
            .arg(&self.config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.daemon = Some(child);
        let t = Instant::now();
        while client::status(&socket_in(&self.state())).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "daemon did not come up"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn kill_daemon(&mut self) {
        if let Some(mut child) = self.daemon.take() {
            child.kill().unwrap(); // SIGKILL
            child.wait().unwrap();
        }
    }

    fn status(&self) -> StatusReport {
        client::status(&socket_in(&self.state())).unwrap()
    }

    fn gangway(&self, args: &[&str]) -> std::process::Output {
        Command::new(BIN)
            .args(args)
            .env("GANGWAY_SLURM_STATE", self.state())
            .current_dir(self.dir.join("work"))
            .output()
            .unwrap()
    }

    fn submit(&self, gpus: u32, vc: &str, user: &str, cmd: &[&str]) -> u64 {
        let g = gpus.to_string();
        let mut args = vec!["submit", "--gpus", &g, "--vc", vc, "--user", user, "--"];
        args.extend_from_slice(cmd);
        let out = self.gangway(&args);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "submit: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        text.split_whitespace()
            .nth(2)
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("no job id in {text:?}"))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kill_daemon();
        if let Some(m) = self.mounted.take() {
            let _ = Command::new("umount").arg(&m).status();
        }
        let _ = Command::new("bash")
            .arg(SCRIPT)
            .arg("stop")
            .arg(&self.dir)
            .status();
        if self.passed {
            // `rm -rf`: std's remove_dir_all gives up on this folder's Unix
            // sockets under gVisor.
            let _ = Command::new("rm").arg("-rf").arg(&self.dir).status();
        } else {
            eprintln!(
                "kept {} for a look (cluster and daemon logs, job outputs)",
                self.dir.display()
            );
        }
    }
}

/// Every TCP socket (listening or connected) of a process of this test
/// that is not on loopback, from `ss -tanp`.
fn off_loopback(pids: &BTreeSet<u32>) -> Option<Vec<String>> {
    let out = Command::new("ss").args(["-Htanp"]).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut bad = Vec::new();
    for line in text.lines() {
        let ours = pids.iter().any(|p| line.contains(&format!("pid={p},")))
            || [
                "slurmctld",
                "slurmd",
                "slurmstepd",
                "srun",
                "munged",
                "gangway-slurm",
            ]
            .iter()
            .any(|n| line.contains(&format!("((\"{n}\"")));
        if !ours {
            continue;
        }
        let fields: Vec<&str> = line.split_whitespace().collect();
        let local_ok = fields
            .get(3)
            .is_some_and(|a| a.starts_with("127.") || a.starts_with("[::1]"));
        let peer_ok = fields.get(4).is_some_and(|a| {
            a.starts_with("127.")
                || a.starts_with("[::1]")
                || a.starts_with("0.0.0.0:*")
                || a == &"*:*"
        });
        if !(local_ok && peer_ok) {
            bad.push(line.to_string());
        }
    }
    Some(bad)
}

/// An event saying the job lost its nodes and was re-queued: seen either as
/// the node going down or as Slurm ending the job with NODE_FAIL first.
fn interrupted(event: &str) -> bool {
    (event.contains("interrupted: node n2") || event.contains("NODE_FAIL"))
        && (event.contains("re-queued") || event.contains("the retry policy decides"))
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// (node, GPU) to the intervals (start, end, job, attempt) measured by beats.
type Beats = BTreeMap<(String, u32), Vec<(f64, f64, u64, u32)>>;

/// Whether a real Slurm can run here: `Err(why)` when it cannot. Where
/// `GANGWAY_REQUIRE_SLURM` is set (CI) that is a failure, else the test
/// prints `SKIPPED` and passes.
fn slurm_here(test: &str) -> bool {
    let missing: Vec<&str> = [
        "munged",
        "slurmctld",
        "slurmd",
        "sbatch",
        "srun",
        "squeue",
        "sinfo",
        "scontrol",
    ]
    .into_iter()
    .filter(|b| find(b).is_none())
    .collect();
    let why = if !missing.is_empty() {
        format!(
            "Slurm is not installed (missing {}; apt-get install munge slurmctld slurmd slurm-client)",
            missing.join(", ")
        )
    } else if !is_root() {
        "needs root (fake GPU devices with mknod, slurmd)".into()
    } else {
        return true;
    };
    // CI installs Slurm and sets this: there a skip would hide a failure.
    assert!(
        std::env::var_os("GANGWAY_REQUIRE_SLURM").is_none(),
        "GANGWAY_REQUIRE_SLURM is set but the Slurm test cannot run: {why}"
    );
    println!("SKIPPED: {test}: {why}");
    false
}

/// Starts a cluster (`cluster.sh start`, with `MIN_JOB_AGE` when given)
/// under `dir`.
fn start_cluster(dir: &Path, min_job_age: Option<u32>) {
    let mut cmd = Command::new("bash");
    cmd.arg(SCRIPT).arg("start").arg(dir);
    if let Some(age) = min_job_age {
        cmd.env("MIN_JOB_AGE", age.to_string());
    }
    let up = cmd.output().unwrap();
    assert!(
        up.status.success(),
        "cluster.sh start failed: {}{}",
        String::from_utf8_lossy(&up.stdout),
        String::from_utf8_lossy(&up.stderr)
    );
}

#[test]
fn gangway_slurm_end_to_end() {
    if !slurm_here("gangway-slurm end-to-end test") {
        return;
    }
    let t0 = Instant::now();
    let dir = std::env::temp_dir().join(format!("gangway-slurm-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut cluster = Cluster {
        dir: dir.clone(),
        daemon: None,
        starts: 0,
        config: dir.join("gangway.toml"),
        state_dir: dir.join("gangway"),
        mounted: None,
        passed: false,
    };
    start_cluster(&dir, None);
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::create_dir_all(dir.join("work")).unwrap();
    let job_sh = dir.join("job.sh");
    std::fs::write(&job_sh, JOB_SH).unwrap();
    let job_sh = job_sh.display().to_string();
    let out_s = out.display().to_string();
    cluster.start_daemon();

    // Bad input is refused with what and where.
    let bad = cluster.gangway(&["submit", "--gpus", "2", "--vc", "nope", "--", "true"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown virtual cluster \"nope\""));
    let big = cluster.gangway(&["submit", "--gpus", "40", "--vc", "prod", "--", "true"]);
    assert!(
        String::from_utf8_lossy(&big.stderr)
            .contains("asks for 40 GPUs but the cluster has only 32")
    );

    // Slurm refusing a launch is a typed error naming the command and
    // carrying Slurm's own message.
    let engine = Slurm::new(None, Some(cluster.conf()));
    let refused = engine
        .sbatch(
            &["--nodelist=n9".to_string(), "--gres=gpu:g0:1".to_string()],
            "#!/bin/sh\ntrue\n",
        )
        .unwrap_err();
    assert!(
        matches!(refused, SlurmError::CommandFailed { .. }),
        "{refused}"
    );
    assert!(refused.to_string().contains("sbatch"), "{refused}");
    assert!(
        refused.to_string().contains("Invalid node name"),
        "{refused}"
    );

    // Hot swap: a Wasm module into the fairness slot, validated by the host;
    // a file that is not a policy module is refused; rollback restores.
    let fifo = dir.join("fifo.wasm");
    std::fs::write(&fifo, gangway_plugin_artifacts::module("fifo").unwrap()).unwrap();
    let swapped = cluster.gangway(&["swap", "--fairness", fifo.to_str().unwrap()]);
    assert!(
        swapped.status.success(),
        "{}",
        String::from_utf8_lossy(&swapped.stderr)
    );
    assert!(String::from_utf8_lossy(&swapped.stdout).contains("active from the next round"));
    let not_wasm = cluster.gangway(&["swap", "--fairness", &job_sh]);
    assert!(!not_wasm.status.success());
    assert!(String::from_utf8_lossy(&not_wasm.stderr).contains("job.sh"));
    let t = Instant::now();
    while cluster.status().policies[0].active != fifo.display().to_string() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "swap never became active"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let back = cluster.gangway(&["swap", "--rollback", "fairness"]);
    assert!(back.status.success());
    let t = Instant::now();
    while cluster.status().policies[0].active != "vc-quota" {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "rollback never happened"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // The workload: 30 jobs of 1-16 GPUs from two VCs (quotas 20 and 24).
    let sizes = [
        16u32, 8, 4, 12, 1, 2, 8, 16, 3, 6, 1, 4, 12, 2, 8, 5, 1, 16, 4, 2, 8, 1, 12, 6, 2, 4, 16,
        1, 8, 3,
    ];
    let mut submitted: Vec<u64> = Vec::new();
    let mut reasons_seen: BTreeSet<String> = BTreeSet::new();
    let mut foreign_seen = 0u32;
    // A job started in Slurm directly: foreign load whose GPUs count as held.
    cluster.slurm(&[
        "sbatch",
        "-J",
        "foreign",
        "-o",
        "/dev/null",
        "-w",
        "n4",
        "--gres=gpu:2",
        "--wrap",
        "sleep 5",
    ]);
    let t = Instant::now();
    while cluster.status().foreign_gpus != 2 {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the foreign job's GPUs were never counted"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    foreign_seen = foreign_seen.max(2);
    let mut pids: BTreeSet<u32> = BTreeSet::new();
    let mut loopback_checked = false;
    let submit = |cluster: &Cluster, i: usize| -> u64 {
        let vc = if i.is_multiple_of(2) {
            "research"
        } else {
            "prod"
        };
        let user = ["alice", "bob", "carol"][i % 3];
        let ticks = (8 + (i % 3) * 3).to_string();
        cluster.submit(sizes[i], vc, user, &["sh", &job_sh, &out_s, &ticks])
    };
    let observe = |cluster: &Cluster, reasons: &mut BTreeSet<String>, foreign: &mut u32| {
        let s = cluster.status();
        for j in &s.pending {
            if let Some(r) = &j.reason {
                reasons.insert(r.clone());
            }
        }
        *foreign = (*foreign).max(s.foreign_gpus);
        s
    };
    for i in 0..12 {
        submitted.push(submit(&cluster, i));
    }
    // A job that fails at once: the retry slot (the preset's `fixed`)
    // retries it until the daemon's 3 attempts are used, then it fails.
    let failing = cluster.submit(1, "prod", "bob", &["sh", "-c", "exit 7"]);

    // Node failure: wait for a job on n2, set it DOWN, then RESUME it.
    let t = Instant::now();
    let victim = loop {
        let s = observe(&cluster, &mut reasons_seen, &mut foreign_seen);
        let on_n2 = s
            .running
            .iter()
            .filter(|j| j.state == "running" && j.placement.iter().any(|(n, _)| n == "n2"))
            .max_by_key(|j| j.first_running_ms); // the one with the most left to run
        if let Some(j) = on_n2 {
            break j.id;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "no job ever ran on n2"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // At once, before the victim can finish.
    cluster.slurm(&[
        "scontrol",
        "update",
        "NodeName=n2",
        "State=DOWN",
        "Reason=gangway-test",
    ]);
    // While jobs run: every socket is on loopback.
    for name in ["slurmctld", "slurmd", "munged"] {
        if let Ok(o) = Command::new("pgrep").args(["-x", name]).output() {
            pids.extend(
                String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    if let Some(d) = &cluster.daemon {
        pids.insert(d.id());
    }
    if let Some(bad) = off_loopback(&pids) {
        assert!(bad.is_empty(), "sockets off loopback: {bad:#?}");
        loopback_checked = true;
    }
    let t = Instant::now();
    loop {
        let s = observe(&cluster, &mut reasons_seen, &mut foreign_seen);
        let n2_down = s.nodes.iter().any(|n| n.name == "n2" && n.health == "Down");
        let requeued = client::why(&socket_in(&cluster.state()), victim)
            .map(|r| r.events.iter().any(|e| interrupted(e)))
            .unwrap_or(false);
        if n2_down && requeued {
            assert!(
                s.running
                    .iter()
                    .all(|j| j.placement.iter().all(|(n, _)| n != "n2") || j.state != "running")
            );
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "daemon did not see n2 down and re-queue job {victim}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_secs(1));
    cluster.slurm(&["scontrol", "update", "NodeName=n2", "State=RESUME"]);

    for i in 12..20 {
        submitted.push(submit(&cluster, i));
    }
    // Daemon killed mid-run, started again: recovers from its state and Slurm.
    std::thread::sleep(Duration::from_millis(700));
    let before_kill = observe(&cluster, &mut reasons_seen, &mut foreign_seen);
    assert!(!before_kill.running.is_empty() || !before_kill.pending.is_empty());
    cluster.kill_daemon();
    std::thread::sleep(Duration::from_millis(500));
    cluster.start_daemon();
    let after = cluster.status();
    assert!(
        after.stats.recovered,
        "the restarted daemon did not recover its state"
    );
    for i in 20..sizes.len() {
        submitted.push(submit(&cluster, i));
    }

    // Until everything has ended.
    let t = Instant::now();
    let status = loop {
        let s = observe(&cluster, &mut reasons_seen, &mut foreign_seen);
        if s.pending.is_empty() && s.running.is_empty() {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(200),
            "jobs did not finish: pending {:?}, running {:?}",
            s.pending
                .iter()
                .map(|j| (j.id, j.reason.clone()))
                .collect::<Vec<_>>(),
            s.running
                .iter()
                .map(|j| (j.id, j.state.clone()))
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(200));
    };

    // Every job ended exactly once, as it should have.
    let mut ended: BTreeMap<u64, usize> = BTreeMap::new();
    for j in &status.finished {
        *ended.entry(j.id).or_default() += 1;
    }
    for id in submitted.iter().chain([&failing]) {
        assert_eq!(
            ended.get(id),
            Some(&1),
            "job {id} ended {:?} times",
            ended.get(id)
        );
    }
    let by_id: BTreeMap<u64, _> = status.finished.iter().map(|j| (j.id, j)).collect();
    for id in &submitted {
        assert_eq!(
            by_id[id].state, "passed",
            "job {id}: {:?}",
            by_id[id].events
        );
    }
    let f = by_id[&failing];
    assert_eq!(f.state, "failed");
    assert_eq!(f.attempts, 3, "retried up to max_attempts: {:?}", f.events);
    let failures = f
        .events
        .iter()
        .filter(|e| e.contains("exit code 7"))
        .count();
    assert_eq!(failures, 3, "{:?}", f.events);
    assert!(
        f.events.iter().any(|e| e.contains("no attempts left")),
        "{:?}",
        f.events
    );
    assert!(
        by_id[&victim].attempts >= 2,
        "the interrupted job ran again"
    );

    // Gangway's choices (its launch log) against what each attempt wrote.
    let log = std::fs::read_to_string(cluster.state().join("launches.jsonl")).unwrap();
    let mut launches: BTreeMap<(u64, u32), (u64, NodeGpus)> = BTreeMap::new();
    for line in log.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let key = (
            v["job"].as_u64().unwrap(),
            v["attempt"].as_u64().unwrap() as u32,
        );
        let placement: NodeGpus = serde_json::from_value(v["placement"].clone()).unwrap();
        let launch = (v["slurm_job"].as_u64().unwrap(), placement);
        // A launch logged, then confirmed again by a daemon restarted before
        // it saved the answer, is the same line twice; two Slurm jobs for
        // one attempt are not.
        let prev = launches.insert(key, launch.clone());
        assert!(
            prev.is_none_or(|p| p == launch),
            "attempt {key:?} launched twice"
        );
    }
    let mut beats: Beats = BTreeMap::new();
    let mut job_spans: BTreeMap<u64, Vec<(f64, f64)>> = BTreeMap::new();
    let mut verified = 0;
    let mut not_done = Vec::new();
    for ((job, attempt), (_, placement)) in &launches {
        let base = out.join(format!("{job}.{attempt}"));
        let done = Path::new(&format!("{}.done", base.display())).exists();
        let chosen: BTreeMap<&str, &Vec<u32>> =
            placement.iter().map(|(n, g)| (n.as_str(), g)).collect();
        let mut seen_nodes = BTreeSet::new();
        let (mut lo, mut hi) = (f64::MAX, f64::MIN);
        for node in ["n1", "n2", "n3", "n4"] {
            let gpus_file = format!("{}.{node}.gpus", base.display());
            let Ok(text) = std::fs::read_to_string(&gpus_file) else {
                continue;
            };
            let mut words = text.split_whitespace();
            assert_eq!(words.next(), Some(node));
            let cvd: Vec<u32> = words
                .next()
                .unwrap_or("")
                .split(',')
                .filter(|s| !s.is_empty())
                .map(|s| s.parse().unwrap())
                .collect();
            let Some(want) = chosen.get(node) else {
                panic!("job {job} attempt {attempt} ran on {node}, Gangway chose {placement:?}");
            };
            assert_eq!(
                &&cvd, want,
                "job {job} attempt {attempt} on {node}: CUDA_VISIBLE_DEVICES"
            );
            seen_nodes.insert(node);
            let beat_text = std::fs::read_to_string(format!("{}.{node}.beat", base.display()))
                .unwrap_or_default();
            let times: Vec<f64> = beat_text
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect();
            if let (Some(a), Some(b)) = (times.first(), times.last()) {
                for g in &cvd {
                    beats
                        .entry((node.to_string(), *g))
                        .or_default()
                        .push((*a, *b, *job, *attempt));
                }
                lo = lo.min(*a);
                hi = hi.max(*b);
            }
        }
        if lo <= hi {
            job_spans.entry(*job).or_default().push((lo, hi));
        }
        if done {
            let expect: BTreeSet<&str> = chosen.keys().copied().collect();
            assert_eq!(seen_nodes, expect, "job {job} attempt {attempt} nodes");
            let batch = std::fs::read_to_string(format!("{}.batch", base.display())).unwrap();
            let mut listed = BTreeSet::new();
            for line in batch.lines() {
                let (k, v) = line.split_once('=').unwrap();
                if k == "SLURM_JOB_NODELIST" || k.starts_with("SLURM_JOB_NODELIST_HET_GROUP_") {
                    listed.extend(hostlist::expand(v).unwrap());
                }
            }
            let listed: BTreeSet<&str> = listed.iter().map(String::as_str).collect();
            assert_eq!(
                listed, expect,
                "job {job} attempt {attempt}: SLURM_JOB_NODELIST"
            );
            verified += 1;
        } else {
            not_done.push((*job, *attempt));
        }
    }
    assert!(
        verified >= submitted.len(),
        "only {verified} completed attempts wrote their placement; attempts without a .done \
         file: {not_done:?}; jobs as the daemon ended them: {:?}",
        submitted
            .iter()
            .map(|id| (id, &by_id[id].state, by_id[id].attempts, &by_id[id].events))
            .collect::<Vec<_>>()
    );
    // No GPU index held by two attempts at once; no job running twice at once.
    for ((node, gpu), spans) in &mut beats {
        spans.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in spans.windows(2) {
            assert!(
                w[0].1 < w[1].0,
                "{node} GPU {gpu}: job {} attempt {} and job {} attempt {} overlap",
                w[0].2,
                w[0].3,
                w[1].2,
                w[1].3
            );
        }
    }
    for (job, spans) in &mut job_spans {
        spans.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in spans.windows(2) {
            assert!(w[0].1 < w[1].0, "job {job} ran twice at once");
        }
    }
    // Slurm saw exactly the launches in the log, and each job completed once.
    let squeue: serde_json::Value =
        serde_json::from_str(&cluster.slurm(&["squeue", "--json"])).unwrap();
    let mut slurm_attempts: BTreeMap<(u64, u32), BTreeSet<u64>> = BTreeMap::new();
    let mut completed: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
    for j in squeue["jobs"].as_array().unwrap() {
        let comment = j["comment"].as_str().unwrap_or("");
        let Some((id, attempt)) = gangway_slurm::launch::parse_comment(comment) else {
            continue;
        };
        let group = match j["het_job_id"].as_u64() {
            Some(h) if h != 0 => h,
            _ => j["job_id"].as_u64().unwrap(),
        };
        slurm_attempts
            .entry((id, attempt))
            .or_default()
            .insert(group);
        if j["job_state"] == "COMPLETED" && j["het_job_offset"].as_u64().unwrap_or(0) == 0 {
            completed.entry(id).or_default().insert(group);
        }
    }
    for (key, groups) in &slurm_attempts {
        assert_eq!(
            groups.len(),
            1,
            "attempt {key:?} is {} Slurm jobs",
            groups.len()
        );
        let logged = launches.get(key).map(|l| l.0);
        assert_eq!(
            logged,
            groups.first().copied(),
            "Slurm job of attempt {key:?} is not the logged one"
        );
    }
    for id in &submitted {
        assert_eq!(
            completed.get(id).map(BTreeSet::len),
            Some(1),
            "job {id} completed in Slurm {:?}",
            completed.get(id)
        );
    }

    // Wait reasons were reported, and `why` explains one.
    assert!(
        !reasons_seen.is_empty(),
        "no pending job ever had a wait reason"
    );
    let why = cluster.gangway(&["why", &victim.to_string()]);
    let why_text = String::from_utf8_lossy(&why.stdout);
    assert!(why_text.lines().any(interrupted), "{why_text}");
    assert!(
        foreign_seen >= 2,
        "the job started in Slurm directly was not counted ({foreign_seen} GPUs)"
    );
    let status_text = String::from_utf8_lossy(&cluster.gangway(&["status"]).stdout).into_owned();
    assert!(
        status_text.contains("policies: fairness=vc-quota"),
        "{status_text}"
    );

    // The figures the issue asks for.
    let to_running: Vec<u64> = status
        .finished
        .iter()
        .filter(|j| submitted.contains(&j.id))
        .filter_map(|j| j.first_running_ms.map(|r| r.saturating_sub(j.submitted_ms)))
        .collect();
    // Launch (sbatch) to RUNNING, from the daemon's own events.
    let launch_to_running: Vec<u64> = status
        .finished
        .iter()
        .flat_map(|j| j.events.iter())
        .filter_map(|e| {
            let rest = e.split_once(" (")?.1;
            rest.strip_suffix(" ms after launch)")?.parse().ok()
        })
        .collect();
    assert!(!launch_to_running.is_empty());
    println!(
        "gangway-slurm e2e: launch (sbatch) to RUNNING median {} ms over {} launches",
        median(launch_to_running.clone()),
        launch_to_running.len()
    );
    println!(
        "gangway-slurm e2e: {} jobs in {:.1} s; submit to RUNNING median {} ms (max {} ms); wait reasons seen {:?}; \
         daemon {} cycles ({} us each, {} us per round), RSS {} KiB after the run; sockets on loopback checked: {loopback_checked}",
        submitted.len() + 1,
        t0.elapsed().as_secs_f64(),
        median(to_running.clone()),
        to_running.iter().max().unwrap_or(&0),
        reasons_seen,
        status.stats.cycles,
        status
            .stats
            .cycle_us
            .checked_div(status.stats.cycles)
            .unwrap_or(0),
        status
            .stats
            .round_us
            .checked_div(status.stats.rounds)
            .unwrap_or(0),
        status.stats.rss_kib,
    );
    cluster.passed = true;
}

/// What a faults-test job runs: records each attempt's start, sleeps, then
/// records its end (`OUT/ID.ATTEMPT.start`, `.done`).
const SHORT_SH: &str = r#"#!/bin/sh
# short.sh OUTDIR SECONDS [marker]
touch "$1/$GANGWAY_JOB_ID.$GANGWAY_ATTEMPT.start"
sleep "$2"
touch "$1/$GANGWAY_JOB_ID.$GANGWAY_ATTEMPT.done"
"#;

impl Cluster {
    /// Waits until `done` says so of the status, for at most `secs`.
    fn wait_for(
        &self,
        secs: u64,
        what: &str,
        mut done: impl FnMut(&StatusReport) -> bool,
    ) -> StatusReport {
        let t = Instant::now();
        loop {
            if let Ok(s) = client::status(&socket_in(&self.state())) {
                if done(&s) {
                    return s;
                }
                assert!(
                    t.elapsed() < Duration::from_secs(secs),
                    "{what} after {secs} s: {}",
                    client::format_status(&s)
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The attempts of job `id` that started (`OUT/ID.N.start` files).
    fn starts_of(&self, id: u64) -> usize {
        (1..10)
            .filter(|a| self.dir.join(format!("out/{id}.{a}.start")).exists())
            .count()
    }

    /// A copy of the cluster's config with `edit` applied, as `name`.
    fn config_with(&self, name: &str, edit: impl Fn(String) -> String) -> PathBuf {
        let text = std::fs::read_to_string(self.dir.join("gangway.toml")).unwrap();
        let path = self.dir.join(name);
        std::fs::write(&path, edit(text)).unwrap();
        path
    }

    /// `gangway-slurm serve` with `config`, which must refuse to start: its
    /// stderr, and how long it took.
    fn refused_start(&self, config: &Path) -> (String, Duration) {
        let t = Instant::now();
        let out = Command::new(BIN)
            .args(["serve", "--config"])
            .arg(config)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(!out.status.success(), "serve with {config:?} started");
        (
            String::from_utf8_lossy(&out.stderr).into_owned(),
            t.elapsed(),
        )
    }

    /// Slurm job ids in `squeue` (all states).
    fn squeue_ids(&self) -> BTreeSet<u64> {
        let v: serde_json::Value =
            serde_json::from_str(&self.slurm(&["squeue", "--json"])).unwrap();
        v["jobs"]
            .as_array()
            .map(|a| a.iter().filter_map(|j| j["job_id"].as_u64()).collect())
            .unwrap_or_default()
    }
}

#[test]
fn gangway_slurm_faults() {
    if !slurm_here("gangway-slurm faults test") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("gangway-slurm-faults-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut cluster = Cluster {
        dir: dir.clone(),
        daemon: None,
        starts: 0,
        config: dir.join("gangway.toml"),
        state_dir: dir.join("gangway"),
        mounted: None,
        passed: false,
    };
    // Slurm forgets an ended job 3 s after it ends (purged within a minute).
    start_cluster(&dir, Some(3));
    std::fs::create_dir_all(dir.join("out")).unwrap();
    std::fs::create_dir_all(dir.join("work")).unwrap();
    let short = dir.join("short.sh");
    std::fs::write(&short, SHORT_SH).unwrap();
    let (short, out) = (
        short.display().to_string(),
        dir.join("out").display().to_string(),
    );
    let job =
        |secs: &str| -> Vec<String> { vec!["sh".into(), short.clone(), out.clone(), secs.into()] };
    let submit = |cluster: &Cluster, gpus: u32, vc: &str, cmd: &[String]| {
        let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
        cluster.submit(gpus, vc, "ops", &cmd)
    };

    // 1. A broken setup is refused before serving, at once and clearly.
    let bad = cluster.config_with("nope.toml", |t| {
        t.replace("[slurm]\n", "[slurm]\npartition = \"nope\"\n")
    });
    let (err, took) = cluster.refused_start(&bad);
    assert!(err.contains("partition \"nope\""), "{err}");
    assert!(took < Duration::from_secs(15), "{took:?}");
    let noconf = cluster.config_with("noconf.toml", |t| {
        let conf = dir.join("etc/slurm.conf").display().to_string();
        t.replace(&conf, "/nonexistent/slurm.conf")
    });
    let (err, took) = cluster.refused_start(&noconf);
    assert!(
        err.contains("slurm.conf /nonexistent/slurm.conf cannot be read"),
        "{err}"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    println!("faults: bad partition and missing slurm.conf refused at start ({took:?})");

    cluster.start_daemon();

    // 2. A job held behind its own VC's gang, the VC under its quota, is
    // not waiting for fair share. prod fills 24 of 32 GPUs; research (quota
    // 20, holding nothing) asks for 16, then 8, then 1: vc-quota keeps FIFO
    // within research, so the 8 and the 1 wait behind the 16.
    let prod: Vec<u64> = (0..3)
        .map(|_| submit(&cluster, 8, "prod", &job("40")))
        .collect();
    cluster.wait_for(30, "prod's jobs running", |s| {
        prod.iter().all(|id| {
            s.running
                .iter()
                .any(|j| j.id == *id && j.state == "running")
        })
    });
    let gang = submit(&cluster, 16, "research", &job("1"));
    let eight = submit(&cluster, 8, "research", &job("1"));
    let one = submit(&cluster, 1, "research", &job("1"));
    let s = cluster.wait_for(15, "research's jobs given reasons", |s| {
        [gang, eight, one]
            .iter()
            .all(|id| s.pending.iter().any(|j| j.id == *id && j.reason.is_some()))
    });
    let reason = |id: u64| {
        s.pending
            .iter()
            .find(|j| j.id == id)
            .and_then(|j| j.reason.clone())
            .unwrap()
    };
    assert_eq!(reason(one), "queued", "{}", client::format_status(&s));
    assert_eq!(reason(eight), "queued", "{}", client::format_status(&s));
    assert_ne!(reason(gang), "fair-share");
    for id in prod.iter().chain(&[gang, eight, one]) {
        cluster.gangway(&["cancel", &id.to_string()]);
    }
    cluster.wait_for(30, "the cluster empty", |s| {
        s.running.is_empty() && s.pending.is_empty()
    });
    println!(
        "faults: a job behind its VC's gang waits as {:?}, the gang as {:?}",
        reason(one),
        reason(gang)
    );

    // 3. A controller outage longer than the cycle's patience: no job that
    // completed is failed or re-queued, none runs twice, status shows the
    // outage, and clients are answered meanwhile.
    let jobs: Vec<u64> = (0..6)
        .map(|i| submit(&cluster, 2 + (i % 3), "prod", &job("4")))
        .collect();
    cluster.wait_for(30, "the jobs running", |s| {
        jobs.iter().all(|id| {
            s.running
                .iter()
                .any(|j| j.id == *id && j.state == "running")
        })
    });
    let down = Command::new("bash")
        .args([SCRIPT, "ctld-stop"])
        .arg(&dir)
        .status()
        .unwrap();
    assert!(down.success());
    let t = Instant::now();
    let outage = cluster.wait_for(60, "the outage shown", |s| s.slurm_unreachable.is_some());
    let shown_after = t.elapsed();
    let asked = Instant::now();
    let during = submit(&cluster, 1, "prod", &job("1"));
    let submit_took = asked.elapsed();
    let asked = Instant::now();
    let _ = cluster.status();
    let status_took = asked.elapsed();
    assert!(submit_took < Duration::from_secs(3), "{submit_took:?}");
    assert!(status_took < Duration::from_secs(3), "{status_took:?}");
    let text = client::format_status(&outage);
    assert!(text.contains("SLURM UNREACHABLE"), "{text}");
    // Longer than a cycle's patience, and than the jobs run.
    std::thread::sleep(Duration::from_secs(20).saturating_sub(t.elapsed()));
    let mid = cluster.status();
    for id in &jobs {
        let r = client::why(&socket_in(&cluster.state()), *id).unwrap();
        assert!(
            !r.events
                .iter()
                .any(|e| e.contains("re-queued") || e.contains("failed")),
            "job {id} during the outage: {:?}",
            r.events
        );
    }
    assert!(mid.slurm_unreachable.is_some());
    let outage_s = t.elapsed();
    let up = Command::new("bash")
        .args([SCRIPT, "ctld-start"])
        .arg(&dir)
        .status()
        .unwrap();
    assert!(up.success());
    let all: Vec<u64> = jobs.iter().copied().chain([during]).collect();
    let s = cluster.wait_for(90, "every job of the outage ended", |s| {
        s.slurm_unreachable.is_none() && all.iter().all(|id| s.finished.iter().any(|j| j.id == *id))
    });
    for id in &all {
        let j = s.finished.iter().find(|j| j.id == *id).unwrap();
        assert_eq!(j.state, "passed", "job {id}: {:?}", j.events);
        assert_eq!(
            cluster.starts_of(*id),
            1,
            "job {id} ran {} times",
            cluster.starts_of(*id)
        );
        assert_eq!(j.attempts, 1, "job {id}: {:?}", j.events);
    }
    println!(
        "faults: controller down {:.0} s (shown after {:.1} s); submit answered in {submit_took:?}, \
         status in {status_took:?}; {} jobs passed, each ran once",
        outage_s.as_secs_f64(),
        shown_after.as_secs_f64(),
        all.len()
    );

    // 4. The daemon down longer than Slurm remembers ended jobs: none runs
    // twice; their end records say how they ended.
    let late: Vec<u64> = (0..2)
        .map(|_| submit(&cluster, 4, "prod", &job("2")))
        .collect();
    let s = cluster.wait_for(30, "the late jobs running", |s| {
        late.iter().all(|id| {
            s.running
                .iter()
                .any(|j| j.id == *id && j.state == "running")
        })
    });
    let slurm_ids: Vec<u64> = s
        .running
        .iter()
        .filter(|j| late.contains(&j.id))
        .filter_map(|j| j.slurm_job)
        .collect();
    cluster.kill_daemon();
    let t = Instant::now();
    while slurm_ids.iter().any(|g| cluster.squeue_ids().contains(g)) {
        assert!(
            t.elapsed() < Duration::from_secs(150),
            "Slurm never forgot jobs {slurm_ids:?}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    let forgotten_after = t.elapsed();
    cluster.start_daemon();
    let s = cluster.wait_for(30, "the late jobs ended", |s| {
        late.iter().all(|id| s.finished.iter().any(|j| j.id == *id))
    });
    for id in &late {
        let j = s.finished.iter().find(|j| j.id == *id).unwrap();
        assert_eq!(j.state, "passed", "job {id}: {:?}", j.events);
        assert!(
            j.events.iter().any(|e| e.contains("from its end record")),
            "{:?}",
            j.events
        );
        assert_eq!(cluster.starts_of(*id), 1, "job {id} ran again");
    }
    println!(
        "faults: daemon down {:.0} s, Slurm forgot the jobs meanwhile; both ended from their end records, none ran twice",
        forgotten_after.as_secs_f64()
    );

    // 5. One byte flipped inside a job's command in the state file: the
    // previous state is used (and said), the command is never changed.
    let flip = submit(
        &cluster,
        1,
        "prod",
        &["sh".into(), "-c".into(), "echo flipme; sleep 30".into()],
    );
    cluster.wait_for(30, "the flip job running", |s| {
        s.running
            .iter()
            .any(|j| j.id == flip && j.state == "running")
    });
    // Saved since its submission (its launch, its start): the previous
    // state holds it too.
    cluster.kill_daemon();
    let file = cluster.state().join("state.bin");
    let mut bytes = std::fs::read(&file).unwrap();
    let at = bytes
        .windows(6)
        .position(|w| w == b"flipme")
        .expect("the command is in the state");
    bytes[at] ^= 0x01;
    std::fs::write(&file, &bytes).unwrap();
    cluster.start_daemon();
    let s = cluster.status();
    let note = s.state_note.clone().unwrap_or_default();
    assert!(
        note.contains("corrupt") && note.contains("checksum"),
        "{note:?}"
    );
    let r = client::why(&socket_in(&cluster.state()), flip).unwrap();
    assert!(
        r.cmd.iter().any(|w| w.contains("echo flipme")),
        "the command changed: {:?}",
        r.cmd
    );
    assert!(
        client::format_status(&s).contains("state: "),
        "status does not say how the state was recovered"
    );
    cluster.gangway(&["cancel", &flip.to_string()]);
    println!("faults: a flipped byte was caught: {note}");

    // 6. Slurm refusing launches for a reason of its configuration (the
    // partition made INACTIVE): the queue is held and shown, no attempt is
    // used, and the job runs once the partition is back.
    cluster.slurm(&["scontrol", "update", "PartitionName=gpu", "State=INACTIVE"]);
    let held = submit(&cluster, 1, "prod", &job("1"));
    let s = cluster.wait_for(30, "the queue held", |s| s.queue_held.is_some());
    let text = client::format_status(&s);
    assert!(text.contains("QUEUE HELD"), "{text}");
    let r = client::why(&socket_in(&cluster.state()), held).unwrap();
    assert!(
        r.state == "pending"
            && r.events
                .iter()
                .any(|e| e.contains("the queue is held (not counted)"))
            && !r
                .events
                .iter()
                .any(|e| e.contains("Slurm refused the launch")),
        "{r:?}"
    );
    cluster.slurm(&["scontrol", "update", "PartitionName=gpu", "State=UP"]);
    let s = cluster.wait_for(90, "the held job ended", |s| {
        s.finished.iter().any(|j| j.id == held)
    });
    let j = s.finished.iter().find(|j| j.id == held).unwrap();
    assert_eq!(j.state, "passed", "{:?}", j.events);
    println!(
        "faults: launches refused for an inactive partition held the queue; the job passed after it came back ({} launches)",
        j.attempts
    );

    // 7. A full state disk: a submit is refused with the error (not
    // acknowledged and lost), nothing is lost, no id is given twice.
    cluster.kill_daemon();
    let small = dir.join("small-state");
    std::fs::create_dir_all(&small).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=512k", "tmpfs"])
        .arg(&small)
        .status()
        .unwrap();
    assert!(mounted.success(), "mounting a tmpfs for the state folder");
    cluster.mounted = Some(small.clone());
    cluster.config = cluster.config_with("small.toml", |t| {
        let state = dir.join("gangway").display().to_string();
        t.replace(&state, &small.display().to_string())
    });
    cluster.state_dir = small.clone();
    cluster.start_daemon();
    let before = submit(&cluster, 1, "prod", &job("1"));
    // Fill the disk.
    let _ = Command::new("dd")
        .args(["if=/dev/zero", "bs=4k"])
        .arg(format!("of={}", small.join("filler").display()))
        .output();
    let refused = cluster.gangway(&[
        "submit", "--gpus", "1", "--vc", "prod", "--user", "ops", "--", "true",
    ]);
    let err = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert!(
        !refused.status.success(),
        "a submit on a full disk was accepted"
    );
    assert!(
        err.contains("could not be saved") && err.contains("No space left"),
        "{err}"
    );
    assert!(cluster.status().last_error.is_some());
    std::fs::remove_file(small.join("filler")).unwrap();
    let after = submit(&cluster, 1, "prod", &job("1"));
    assert!(after > before, "ids {before} then {after}");
    cluster.kill_daemon();
    cluster.start_daemon();
    let s = cluster.status();
    let known: BTreeSet<u64> = s
        .pending
        .iter()
        .chain(&s.running)
        .chain(&s.finished)
        .map(|j| j.id)
        .collect();
    assert!(
        known.contains(&before) && known.contains(&after),
        "a job was lost: {known:?}"
    );
    let next = submit(&cluster, 1, "prod", &job("1"));
    assert!(next > after, "id {next} given again after {after}");
    println!(
        "faults: on a full disk the submit was refused ({}); jobs {before} and {after} kept, next id {next}",
        err.trim()
    );
    cluster.passed = true;
}
