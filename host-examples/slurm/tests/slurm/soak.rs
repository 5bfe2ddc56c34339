//! The seeded soak test: random operations and faults against the real
//! slurmctld, slurmd and the daemon, with an invariant checker after every
//! step that reads Slurm's own objects (`squeue --json`) and the daemon's
//! status:
//!
//! * no GPU index held twice (by Slurm's running jobs, or by Gangway's);
//! * none held by a gone job: on every node, the GPUs Gangway counts held
//!   are exactly those Slurm's running jobs hold plus those of Gangway's
//!   launches Slurm has not started yet (checked once the two agree on a
//!   settled moment: the cluster moves between the reads);
//! * every job accounted for: every acknowledged job is in the daemon's
//!   report, no Gangway job runs twice at once in Slurm, and once the
//!   queue drains every job has finished as its script said (a job that
//!   exits 1 never passes; one that exits 0 and was not cancelled passes,
//!   unless its attempts ran out or, in native mode, Slurm forgot it while
//!   the daemon was away);
//! * the daemon answers (`status` within 2 s) whenever it runs, also while
//!   slurmctld is down;
//! * every gang runs on one GPU type, the one it asked for if it did (the
//!   cluster's nodes alternate between two types, and a third of the
//!   submits ask for one; `GANGWAY_SOAK_GPU_TYPES=0`: one type, as a
//!   cluster without types).
//!
//! Operations: submits by several unprivileged users (client `submit`, or
//! their own `sbatch` in native mode), cancels (by the owner; by another
//! user, which must be refused), requeues (`scontrol requeue` by the owner
//! in native mode; an admin's `scancel` in Slurm in submit mode), jobs
//! started in Slurm directly, waits; faults: the daemon killed (SIGKILL)
//! or stopped (SIGTERM) and started again after a pause (longer than Slurm
//! remembers ended jobs, at times), slurmctld restarted, a node set DOWN
//! and resumed.
//!
//! `GANGWAY_SOAK_SEED` (default 53) and `GANGWAY_SOAK_STEPS` (default 40
//! per mode, a few minutes in CI) choose the run; a long run by hand:
//! `GANGWAY_SOAK_SEED=7 GANGWAY_SOAK_STEPS=600 cargo test -p gangway-slurm
//! --test slurm -- soak --nocapture`. A failing seed is a regression test.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

use gangway_slurm::client::{self, Daemon};
use gangway_slurm::engine::{Parsed, SlurmJob, parse_squeue};
use gangway_slurm::protocol::StatusReport;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::harness::{Cluster, SCRIPT, SERIAL, User, slurm_here, text, user};
use super::security::shared_config;

/// What the soak expects of one job.
#[derive(Clone, Debug)]
struct Expect {
    /// Its user (index into the soak's users).
    user: usize,
    /// What its script exits with.
    exit: i32,
    /// Whether the soak cancelled it.
    cancelled: bool,
    /// The GPU type it asked for, if any.
    gpu_type: Option<&'static str>,
}

/// The soak cluster's GPU types: n1 and n3 are a100, n2 and n4 v100.
const GPU_TYPES: &str = "a100:80,v100:32";

/// The GPU type of a node of the soak cluster.
fn node_type(node: &str) -> &'static str {
    match node {
        "n1" | "n3" => "a100",
        _ => "v100",
    }
}

/// Slurm's states of a job holding its nodes.
const ACTIVE: [&str; 4] = ["RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED"];

/// One soak run.
struct Soak {
    cluster: Cluster,
    socket: std::path::PathBuf,
    rng: ChaCha8Rng,
    users: Vec<User>,
    native: bool,
    /// Whether the cluster has two GPU types.
    typed: bool,
    /// Jobs by Gangway id (submit mode) or Slurm id (native mode).
    jobs: BTreeMap<u64, Expect>,
    down_node: Option<String>,
    daemon_up: bool,
    ops: u64,
    faults: u64,
    checks: u64,
    violations: Vec<String>,
    slowest_status: Duration,
    step: u64,
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

impl Soak {
    fn new(native: bool, seed: u64) -> Soak {
        let name = if native { "soak-native" } else { "soak-submit" };
        let typed = std::env::var_os("GANGWAY_SOAK_GPU_TYPES").is_none_or(|v| v != "0");
        let mut cluster = Cluster::start_with(name, Some(5), typed.then_some(GPU_TYPES));
        let mut extra = String::from("lock_stale_s = 20\nreplace_pending_s = 5\n");
        if native {
            extra.push_str("mode = \"native\"\n");
        }
        let mut config = shared_config(&cluster, &extra);
        if native {
            config = config.replacen("[slurm]\n", "[slurm]\npartition = \"gw\"\n", 1);
        }
        cluster.configure("soak.toml", &config);
        cluster.start_daemon();
        Soak {
            socket: cluster.socket(),
            cluster,
            rng: ChaCha8Rng::seed_from_u64(seed),
            users: vec![user("alice"), user("bob"), user("carol")],
            native,
            typed,
            jobs: BTreeMap::new(),
            down_node: None,
            daemon_up: true,
            ops: 0,
            faults: 0,
            checks: 0,
            violations: Vec::new(),
            slowest_status: Duration::ZERO,
            step: 0,
        }
    }

    fn violation(&mut self, what: String) {
        let text = format!("step {}: {what}", self.step);
        eprintln!("VIOLATION {text}");
        self.violations.push(text);
    }

    /// One random operation or fault.
    fn step(&mut self) {
        self.step += 1;
        let roll = self.rng.random_range(0..100u32);
        match roll {
            0..40 => self.submit(),
            40..50 => self.cancel(),
            50..55 => self.requeue(),
            55..60 => self.foreign(),
            60..80 => {
                let ms = self.rng.random_range(300..2500);
                std::thread::sleep(Duration::from_millis(ms));
            }
            80..86 => self.restart_daemon(),
            86..92 => self.restart_controller(),
            _ => self.toggle_node(),
        }
        self.ops += 1;
    }

    fn daemon(&self) -> Daemon<'_> {
        Daemon {
            socket: &self.socket,
            timeout: Duration::from_secs(10),
        }
    }

    fn submit(&mut self) {
        if !self.daemon_up && !self.native {
            return;
        }
        let u = self.rng.random_range(0..self.users.len());
        let gpus = *[1u32, 1, 2, 4, 8, 12, 16]
            .get(self.rng.random_range(0..7))
            .unwrap_or(&1);
        let secs = self.rng.random_range(1..6u32);
        let exit = i32::from(self.rng.random_bool(0.2));
        let script = format!("sleep {secs}; exit {exit}");
        let vc = if u == 0 && self.rng.random_bool(0.5) {
            "prod"
        } else {
            "research"
        };
        let user = self.users[u].clone();
        let gpu_type = if self.typed {
            [None, Some("a100"), Some("v100")][self.rng.random_range(0..3usize)]
        } else {
            None
        };
        let id = if self.native {
            let gres = match gpu_type {
                Some(t) => format!("--gpus={t}:{gpus}"),
                None => format!("--gpus={gpus}"),
            };
            let mut args = vec!["sbatch", "--parsable", "-p", "gw", "-A", vc, &gres];
            args.extend(["--requeue", "-o", "/dev/null", "--wrap", &script]);
            let out = self.cluster.slurm_as(&user, &args);
            if !out.status.success() {
                return; // slurmctld down: not submitted
            }
            String::from_utf8_lossy(&out.stdout).trim().parse().ok()
        } else {
            let args = ["submit", "--gpus", &gpus.to_string(), "--vc", vc];
            let mut all: Vec<&str> = args.to_vec();
            if let Some(t) = gpu_type {
                all.extend(["--gpu-type", t]);
            }
            all.extend(["--", "sh", "-c", &script]);
            let out = self.cluster.gangway_as(&user, &all);
            let said = String::from_utf8_lossy(&out.stdout).to_string();
            out.status
                .success()
                .then(|| said.split_whitespace().nth(2)?.parse().ok())
                .flatten()
        };
        if let Some(id) = id {
            self.jobs.insert(
                id,
                Expect {
                    user: u,
                    exit,
                    cancelled: false,
                    gpu_type,
                },
            );
        }
    }

    /// A live job of the soak's, at random.
    fn some_job(&mut self) -> Option<(u64, Expect)> {
        let live: Vec<(u64, Expect)> = self
            .jobs
            .iter()
            .filter(|(_, e)| !e.cancelled)
            .map(|(id, e)| (*id, e.clone()))
            .collect();
        (!live.is_empty()).then(|| live[self.rng.random_range(0..live.len())].clone())
    }

    fn cancel(&mut self) {
        let Some((id, e)) = self.some_job() else {
            return;
        };
        let owner = self.users[e.user].clone();
        let other = self.users[(e.user + 1) % self.users.len()].clone();
        // Another user is refused, by the daemon (or by Slurm, which
        // quietly accepts a cancel of a job it has forgotten: only a live
        // job cancelled counts).
        let before = self.slurm_state(id);
        let out = self.cancel_as(&other, id);
        let took = !self.native || (before_live(&before) && self.slurm_state(id) == "CANCELLED");
        if out.status.success() && took {
            let said = text(&out);
            self.violation(format!(
                "{} cancelled {}'s job {id}: {said}",
                other.name, owner.name
            ));
        }
        let out = self.cancel_as(&owner, id);
        if out.status.success()
            && let Some(e) = self.jobs.get_mut(&id)
        {
            e.cancelled = true;
        }
    }

    /// Slurm job `id`'s state (empty when Slurm does not list it).
    fn slurm_state(&self, id: u64) -> String {
        let out = Command::new("squeue")
            .args(["-h", "-t", "all", "-j", &id.to_string(), "-o", "%T"])
            .env("SLURM_CONF", self.cluster.conf())
            .output();
        out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    }

    /// `user` cancels job `id`: `scancel` in native mode, else the client.
    fn cancel_as(&self, user: &User, id: u64) -> std::process::Output {
        let id = id.to_string();
        if self.native {
            self.cluster.slurm_as(user, &["scancel", &id])
        } else {
            self.cluster.gangway_as(user, &["cancel", &id])
        }
    }

    /// Native mode: the owner requeues a running job. Submit mode: an
    /// admin cancels a running job's Slurm job behind Gangway's back.
    fn requeue(&mut self) {
        let Some((id, e)) = self.some_job() else {
            return;
        };
        if self.native {
            let owner = self.users[e.user].clone();
            let _ = self
                .cluster
                .slurm_as(&owner, &["scontrol", "requeue", &id.to_string()]);
            return;
        }
        if !self.daemon_up {
            return;
        }
        let Ok(r) = client::why(&self.daemon(), id) else {
            return;
        };
        if let (Some(gid), "running") = (r.slurm_job, r.state.as_str()) {
            let _ = Command::new("scancel")
                .arg(gid.to_string())
                .env("SLURM_CONF", self.cluster.conf())
                .status();
            if let Some(e) = self.jobs.get_mut(&id) {
                e.cancelled = true;
            }
        }
    }

    /// A job started in Slurm directly (foreign load), as root.
    fn foreign(&mut self) {
        let gpus = self.rng.random_range(1..9u32);
        let secs = self.rng.random_range(2..8u32);
        let _ = Command::new("sbatch")
            .args([
                "-p",
                "gpu",
                "-o",
                "/dev/null",
                &format!("--gres=gpu:{gpus}"),
            ])
            .args(["--wrap", &format!("sleep {secs}")])
            .env("SLURM_CONF", self.cluster.conf())
            .output();
    }

    fn restart_daemon(&mut self) {
        self.faults += 1;
        if self.rng.random_bool(0.5) {
            self.cluster.kill_daemon();
        } else {
            self.cluster.signal_daemon("TERM");
            if let Some(mut child) = self.cluster.daemon.take() {
                let status = child.wait().unwrap();
                if !status.success() {
                    self.violation(format!("a clean stop exited {status}"));
                }
            }
        }
        self.daemon_up = false;
        // Away for a while: at times longer than Slurm remembers ended
        // jobs (MinJobAge 5 s), while users keep submitting in native mode.
        let away = self.rng.random_range(0..12u64);
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(away) {
            if self.native && self.rng.random_bool(0.3) {
                self.submit();
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        self.cluster.start_daemon();
        self.daemon_up = true;
    }

    fn restart_controller(&mut self) {
        self.faults += 1;
        let dir = self.cluster.dir.clone();
        let stop = Command::new("bash")
            .args([SCRIPT, "ctld-stop"])
            .arg(&dir)
            .status();
        assert!(stop.unwrap().success(), "ctld-stop");
        let t = Instant::now();
        let down = Duration::from_millis(self.rng.random_range(500..6000));
        while t.elapsed() < down {
            // The daemon must answer while Slurm does not.
            self.check_daemon();
            std::thread::sleep(Duration::from_millis(300));
        }
        let start = Command::new("bash")
            .args([SCRIPT, "ctld-start"])
            .arg(&dir)
            .status();
        assert!(start.unwrap().success(), "ctld-start");
    }

    fn toggle_node(&mut self) {
        self.faults += 1;
        let (node, state) = match self.down_node.take() {
            Some(n) => (n, "RESUME"),
            None => {
                let n = format!("n{}", self.rng.random_range(1..5u32));
                self.down_node = Some(n.clone());
                (n, "DOWN")
            }
        };
        let _ = Command::new("scontrol")
            .args([
                "update",
                &format!("NodeName={node}"),
                &format!("State={state}"),
            ])
            .arg("Reason=soak")
            .env("SLURM_CONF", self.cluster.conf())
            .output();
    }
}

impl Soak {
    /// The daemon's status, timed; `None` (and a violation) when a
    /// running daemon does not answer within 2 s.
    fn check_daemon(&mut self) -> Option<StatusReport> {
        if !self.daemon_up {
            return None;
        }
        let t = Instant::now();
        let got = client::status(&self.daemon(), None);
        let took = t.elapsed();
        self.slowest_status = self.slowest_status.max(took);
        match got {
            Ok(s) if took < Duration::from_secs(2) => Some(s),
            Ok(_) => {
                self.violation(format!("status took {took:?}"));
                None
            }
            Err(e) => {
                self.violation(format!("the daemon does not answer: {e}"));
                None
            }
        }
    }

    /// Slurm's jobs, as root (`None` while slurmctld does not answer).
    fn squeue(&self) -> Option<Vec<SlurmJob>> {
        let out = Command::new("squeue")
            .arg("--json")
            .env("SLURM_CONF", self.cluster.conf())
            .output()
            .ok()?;
        match parse_squeue(&String::from_utf8_lossy(&out.stdout)) {
            Ok(Parsed::Data(jobs)) if out.status.success() => Some(jobs),
            _ => None,
        }
    }

    /// Every invariant, after a step.
    fn check(&mut self) {
        self.checks += 1;
        let status = self.check_daemon();
        let Some(jobs) = self.squeue() else {
            return;
        };
        self.gpus_held_once(&jobs);
        let Some(status) = status else {
            return;
        };
        self.jobs_accounted(&status);
        if self.typed {
            self.types_kept(&status);
        }
        self.settled_books();
    }

    /// Every running gang on one GPU type, the one it asked for if it did.
    fn types_kept(&mut self, s: &StatusReport) {
        for j in s.running.iter().filter(|j| holds(&j.state)) {
            let types: BTreeSet<&str> = j.placement.iter().map(|(n, _)| node_type(n)).collect();
            let id = if self.native { j.slurm_job } else { Some(j.id) };
            let asked = id
                .and_then(|id| self.jobs.get(&id))
                .and_then(|e| e.gpu_type);
            if types.len() > 1 {
                self.violation(format!(
                    "job {} runs on two GPU types: {:?}",
                    j.id, j.placement
                ));
            } else if let (Some(asked), Some(on)) = (asked, types.first())
                && asked != *on
            {
                self.violation(format!("job {} asked for {asked} but runs on {on}", j.id));
            }
        }
    }
}

/// Whether a job in the daemon's report holds GPUs.
fn holds(state: &str) -> bool {
    state == "running" || state == "launching"
}

/// Whether a Slurm state is a live job's.
fn before_live(state: &str) -> bool {
    state == "PENDING" || ACTIVE.contains(&state)
}

/// (node, GPU) pairs of `jobs` that hold their nodes.
fn held(jobs: &[SlurmJob]) -> Vec<((String, u32), u64)> {
    jobs.iter()
        .filter(|j| ACTIVE.contains(&j.state.as_str()))
        .flat_map(|j| {
            j.gpus
                .iter()
                .flat_map(move |(n, g)| g.iter().map(move |i| ((n.clone(), *i), j.job_id)))
        })
        .collect()
}

impl Soak {
    /// No GPU held twice by Slurm's running jobs; no Gangway job running
    /// twice at once.
    fn gpus_held_once(&mut self, jobs: &[SlurmJob]) {
        let mut seen: BTreeMap<(String, u32), u64> = BTreeMap::new();
        for (gpu, job) in held(jobs) {
            if let Some(other) = seen.insert(gpu.clone(), job) {
                self.violation(format!("GPU {gpu:?} held by Slurm jobs {other} and {job}"));
            }
        }
        let mut runs: BTreeMap<u64, u64> = BTreeMap::new();
        for j in jobs.iter().filter(|j| ACTIVE.contains(&j.state.as_str())) {
            if let Some((_, id, _)) = gangway_slurm::launch::parse_tag(&j.comment)
                && let Some(other) = runs.insert(id, j.group)
                && other != j.group
            {
                self.violation(format!(
                    "Gangway job {id} runs twice: Slurm jobs {other} and {}",
                    j.group
                ));
            }
        }
    }

    /// Every acknowledged job is in the report, and Gangway's running
    /// jobs hold no GPU twice.
    fn jobs_accounted(&mut self, s: &StatusReport) {
        let known: BTreeSet<u64> = s
            .pending
            .iter()
            .chain(&s.running)
            .chain(&s.finished)
            .filter_map(|j| if self.native { j.slurm_job } else { Some(j.id) })
            .collect();
        let missing: Vec<u64> = self
            .jobs
            .keys()
            .filter(|id| !known.contains(id))
            .copied()
            .collect();
        // A native job may not be taken in yet (the daemon reads squeue
        // every cycle): only a submit-mode job must be there at once.
        if !self.native && !missing.is_empty() {
            self.violation(format!(
                "acknowledged jobs missing from status: {missing:?}"
            ));
        }
        let mut seen: BTreeMap<(String, u32), u64> = BTreeMap::new();
        for j in s.running.iter().filter(|j| holds(&j.state)) {
            for (node, gpus) in &j.placement {
                for g in gpus {
                    if let Some(other) = seen.insert((node.clone(), *g), j.id) {
                        self.violation(format!(
                            "Gangway holds {node}:{g} for jobs {other} and {}",
                            j.id
                        ));
                    }
                }
            }
        }
    }
}

impl Soak {
    /// What Gangway holds on each node against what Slurm runs there, at
    /// a moment both agree is settled (two equal `squeue` reads around one
    /// status): Gangway's held GPUs are Slurm's running ones plus its own
    /// launches Slurm has not started, and no more.
    fn settled_books(&mut self) {
        let t = Instant::now();
        let mut last = String::new();
        while t.elapsed() < Duration::from_secs(30) {
            let (Some(a), Some(s), Some(b)) = (self.squeue(), self.check_daemon(), self.squeue())
            else {
                return;
            };
            let (ha, hb) = (held(&a), held(&b));
            if ha != hb || s.running.iter().any(|j| !holds(&j.state)) {
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
            match books_differ(&s, &ha) {
                None => return,
                Some(diff) => last = diff,
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        self.violation(format!(
            "Gangway's books never matched Slurm's in 30 s: {last}"
        ));
    }
}

/// How Gangway's GPUs held per node differ from Slurm's running jobs'
/// plus Gangway's launches not yet running, if they do.
fn books_differ(s: &StatusReport, slurm: &[((String, u32), u64)]) -> Option<String> {
    let mut expected: BTreeMap<String, u32> = BTreeMap::new();
    for ((node, _), _) in slurm {
        *expected.entry(node.clone()).or_insert(0) += 1;
    }
    for j in s.running.iter().filter(|j| j.state == "launching") {
        for (node, gpus) in &j.placement {
            *expected.entry(node.clone()).or_insert(0) += u32::try_from(gpus.len()).unwrap_or(0);
        }
    }
    let diffs: Vec<String> = s
        .nodes
        .iter()
        .filter(|n| n.health == "Up")
        .filter_map(|n| {
            let gangway = n.gpus - n.free;
            let slurm = expected.get(&n.name).copied().unwrap_or(0);
            (gangway != slurm)
                .then(|| format!("{}: Gangway holds {gangway}, Slurm {slurm}", n.name))
        })
        .collect();
    (!diffs.is_empty()).then(|| diffs.join("; "))
}

impl Soak {
    /// The end: faults healed, the queue drained; every job finished as
    /// its script said.
    fn drain(&mut self) {
        if let Some(node) = self.down_node.take() {
            let _ = Command::new("scontrol")
                .args(["update", &format!("NodeName={node}"), "State=RESUME"])
                .env("SLURM_CONF", self.cluster.conf())
                .output();
        }
        let t = Instant::now();
        let s = loop {
            let s = self.cluster.status();
            if s.pending.is_empty() && s.running.is_empty() {
                break s;
            }
            if t.elapsed() > Duration::from_secs(240) {
                self.violation(format!(
                    "the queue never drained: {}",
                    client::format_status(&s)
                ));
                return;
            }
            std::thread::sleep(Duration::from_millis(500));
        };
        self.settled_books();
        let all = client::status_all(&self.daemon()).unwrap_or(s);
        let ends: BTreeMap<u64, (String, Vec<String>)> = all
            .finished
            .iter()
            .filter_map(|j| {
                let key = if self.native { j.slurm_job? } else { j.id };
                Some((key, (j.state.clone(), j.events.clone())))
            })
            .collect();
        for (id, e) in self.jobs.clone() {
            self.ended_as_expected(id, &e, ends.get(&id));
        }
    }

    fn ended_as_expected(&mut self, id: u64, e: &Expect, end: Option<&(String, Vec<String>)>) {
        let Some((state, events)) = end else {
            if !self.native || !e.cancelled {
                self.violation(format!("job {id} never finished"));
            }
            return;
        };
        let ran_out = events.iter().any(|w| {
            w.contains("no attempts left")
                || w.contains("no launches left")
                || w.contains("how it ended is unknown")
        });
        let ok = match (e.exit, e.cancelled) {
            (_, true) => true,
            (0, false) => state == "passed" || (state == "failed" && ran_out),
            _ => state != "passed",
        };
        if !ok {
            self.violation(format!(
                "job {id} (exit {}, cancelled {}) ended {state}: {events:?}",
                e.exit, e.cancelled
            ));
        }
    }
}

fn soak(native: bool) {
    let mode = if native { "native" } else { "submit" };
    if !slurm_here(&format!("soak ({mode} mode)")) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let seed = env_u64("GANGWAY_SOAK_SEED", 53);
    let steps = env_u64("GANGWAY_SOAK_STEPS", 40);
    println!("soak ({mode} mode): GANGWAY_SOAK_SEED={seed} GANGWAY_SOAK_STEPS={steps}");
    let t = Instant::now();
    let mut soak = Soak::new(native, seed);
    for _ in 0..steps {
        soak.step();
        soak.check();
    }
    soak.drain();
    let secs = t.elapsed().as_secs();
    println!(
        "soak ({mode} mode): seed {seed}, {} operations, {} faults, {} jobs, {} checks, {secs} s, \
         slowest status {:?}, {} violations",
        soak.ops,
        soak.faults,
        soak.jobs.len(),
        soak.checks,
        soak.slowest_status,
        soak.violations.len()
    );
    assert!(
        soak.violations.is_empty(),
        "GANGWAY_SOAK_SEED={seed} GANGWAY_SOAK_STEPS={steps}: {:#?}",
        soak.violations
    );
    soak.cluster.passed = true;
}

#[test]
fn soak_submit_mode() {
    soak(false);
}

#[test]
fn soak_native_mode() {
    soak(true);
}
