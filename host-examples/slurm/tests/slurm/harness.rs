//! What every real-Slurm test shares: a loopback cluster
//! (`tests/slurm/cluster.sh`) and its daemons, unprivileged Unix users made
//! by the test, and the client commands run as them.

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use gangway_slurm::client::{self, Daemon};
use gangway_slurm::config::socket_in;
use gangway_slurm::protocol::{JobReport, StatusReport};

pub(crate) const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/slurm/cluster.sh");
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_gangway-slurm");

pub(crate) fn find(bin: &str) -> Option<PathBuf> {
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
pub(crate) static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Whether a real Slurm can run here. Where `GANGWAY_REQUIRE_SLURM` is set
/// (CI) a missing one is a failure, else the test prints `SKIPPED` and
/// passes.
pub(crate) fn slurm_here(test: &str) -> bool {
    let missing: Vec<&str> = [
        "munged",
        "slurmctld",
        "slurmd",
        "sbatch",
        "srun",
        "squeue",
        "sinfo",
        "scontrol",
        "useradd",
        "setpriv",
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
        "needs root (fake GPU devices with mknod, slurmd, test users)".into()
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

/// An unprivileged user made by the tests (`useradd`, once).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct User {
    pub(crate) name: String,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
}

fn id_of(name: &str, flag: &str) -> Option<u32> {
    let out = Command::new("id").args([flag, name]).output().ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// The home folder the system gives user `name` (`getent passwd`).
pub(crate) fn passwd_home(name: &str) -> PathBuf {
    let out = Command::new("getent")
        .args(["passwd", name])
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&out.stdout).into_owned();
    PathBuf::from(line.trim().split(':').nth(5).unwrap_or_default())
}

/// Where the daemon keeps `user`'s end records by default: their home's
/// `.gangway/ends`.
pub(crate) fn records_home(user: &User) -> PathBuf {
    passwd_home(&user.name).join(".gangway/ends")
}

/// The test user `name` (`gangway-t-<name>`), made if missing, with the
/// home folder the system names theirs (theirs, 0700), as on a real
/// cluster: the daemon keeps their end records there.
pub(crate) fn user(name: &str) -> User {
    let user = user_without_home(name);
    let home = passwd_home(&user.name);
    if home.is_absolute() && !home.exists() {
        std::fs::create_dir_all(&home).unwrap();
        std::os::unix::fs::chown(&home, Some(user.uid), Some(user.gid)).unwrap();
        std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    user
}

/// [`user`] without making their home.
fn user_without_home(name: &str) -> User {
    let name = format!("gangway-t-{name}");
    if id_of(&name, "-u").is_none() {
        let made = Command::new("useradd")
            .args(["--no-create-home", "--shell", "/bin/sh", &name])
            .status()
            .unwrap();
        // Two tests may race to make the same user.
        assert!(
            made.success() || id_of(&name, "-u").is_some(),
            "useradd {name}"
        );
    }
    User {
        uid: id_of(&name, "-u").unwrap(),
        gid: id_of(&name, "-g").unwrap(),
        name,
    }
}

/// Stops the daemon and the cluster whatever happens.
pub(crate) struct Cluster {
    pub(crate) dir: PathBuf,
    pub(crate) daemon: Option<Child>,
    pub(crate) starts: u32,
    /// The daemon's config file and its state folder.
    pub(crate) config: PathBuf,
    pub(crate) state_dir: PathBuf,
    /// A tmpfs mounted for the test, unmounted at the end.
    pub(crate) mounted: Option<PathBuf>,
    /// More of them, unmounted (first) at the end.
    pub(crate) more_mounts: Vec<PathBuf>,
    /// Other daemons started by the test.
    pub(crate) others: Vec<Child>,
    /// Set when every check passed: the folder is then removed; after a
    /// failure it is kept (logs, job outputs, state) for a look.
    pub(crate) passed: bool,
}

impl Cluster {
    /// A new cluster for test `name` (with `MIN_JOB_AGE` when given): its
    /// folder under the system's temporary folder, readable by the test
    /// users, the binary copied there for them (the build's own folder
    /// may not be), a `work` folder.
    pub(crate) fn start(name: &str, min_job_age: Option<u32>) -> Cluster {
        Cluster::start_with(name, min_job_age, None)
    }

    /// [`Cluster::start`] with nodes of GPU types given in turn
    /// (`cluster.sh`'s `GPU_TYPES`, e.g. `a100:80,v100:32`).
    pub(crate) fn start_typed(name: &str, gpu_types: &str) -> Cluster {
        Cluster::start_with(name, None, Some(gpu_types))
    }

    /// [`Cluster::start_typed`] with nodes `gres_typed` (`n1,n2`) typed by
    /// their GRES instead of a feature (`cluster.sh`'s `GRES_TYPED`:
    /// gres.conf names the product for all their GPUs, `gpu:a100:8`).
    pub(crate) fn start_gres_typed(name: &str, gpu_types: &str, gres_typed: &str) -> Cluster {
        Cluster::start_env(name, None, Some(gpu_types), Some(gres_typed))
    }

    /// [`Cluster::start`] with `MIN_JOB_AGE` and `GPU_TYPES` when given.
    pub(crate) fn start_with(
        name: &str,
        min_job_age: Option<u32>,
        gpu_types: Option<&str>,
    ) -> Cluster {
        Cluster::start_env(name, min_job_age, gpu_types, None)
    }

    /// [`Cluster::start_with`] with `GRES_TYPED` when given.
    fn start_env(
        name: &str,
        min_job_age: Option<u32>,
        gpu_types: Option<&str>,
        gres_typed: Option<&str>,
    ) -> Cluster {
        let dir = std::env::temp_dir().join(format!("gangway-slurm-{name}-{}", std::process::id()));
        let _ = Command::new("rm").arg("-rf").arg(&dir).status();
        let mut cmd = Command::new("bash");
        cmd.arg(SCRIPT).arg("start").arg(&dir);
        if let Some(age) = min_job_age {
            cmd.env("MIN_JOB_AGE", age.to_string());
        }
        // The nodes' CPUs: tests count on cluster.sh's default.
        cmd.env_remove("CPUS");
        match gpu_types {
            Some(t) => cmd.env("GPU_TYPES", t),
            None => cmd.env_remove("GPU_TYPES"),
        };
        match gres_typed {
            Some(n) => cmd.env("GRES_TYPED", n),
            None => cmd.env_remove("GRES_TYPED"),
        };
        let up = cmd.output().unwrap();
        assert!(
            up.status.success(),
            "cluster.sh start failed: {}{}",
            String::from_utf8_lossy(&up.stdout),
            String::from_utf8_lossy(&up.stderr)
        );
        for sub in ["work", "out", "bin"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        std::fs::copy(BIN, dir.join("bin/gangway-slurm")).unwrap();
        std::fs::set_permissions(
            dir.join("bin/gangway-slurm"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        Cluster {
            config: dir.join("gangway.toml"),
            state_dir: dir.join("gangway"),
            dir,
            daemon: None,
            starts: 0,
            mounted: None,
            more_mounts: Vec::new(),
            others: Vec::new(),
            passed: false,
        }
    }

    pub(crate) fn conf(&self) -> PathBuf {
        self.dir.join("etc/slurm.conf")
    }

    pub(crate) fn state(&self) -> PathBuf {
        self.state_dir.clone()
    }

    pub(crate) fn socket(&self) -> PathBuf {
        socket_in(&self.state_dir)
    }

    /// Runs a Slurm command as root; its stdout (it must succeed).
    pub(crate) fn slurm(&self, args: &[&str]) -> String {
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

    /// Runs a Slurm command as `user`, in their home folder.
    pub(crate) fn slurm_as(&self, user: &User, args: &[&str]) -> Output {
        let mut cmd = Command::new(find(args[0]).unwrap_or_else(|| args[0].into()));
        cmd.args(&args[1..]);
        self.as_user(&mut cmd, user);
        cmd.output().unwrap()
    }

    /// A folder of `user`'s own (mode 0700), their working folder.
    pub(crate) fn home(&self, user: &User) -> PathBuf {
        let home = self.dir.join("home").join(&user.name);
        if !home.exists() {
            std::fs::create_dir_all(&home).unwrap();
            std::os::unix::fs::chown(&home, Some(user.uid), Some(user.gid)).unwrap();
            std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
            std::fs::set_permissions(
                self.dir.join("home"),
                std::fs::Permissions::from_mode(0o755),
            )
            .unwrap();
        }
        home
    }

    /// Makes `cmd` run as `user` (uid, gid), with a user's environment:
    /// `HOME`, `USER`, `PATH`, the cluster's `SLURM_CONF` and the daemon's
    /// state folder.
    pub(crate) fn as_user(&self, cmd: &mut Command, user: &User) {
        let home = self.home(user);
        cmd.env_clear()
            .env("HOME", &home)
            .env("USER", &user.name)
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("SLURM_CONF", self.conf())
            .env("GANGWAY_SLURM_STATE", self.state())
            .current_dir(&home)
            .uid(user.uid)
            .gid(user.gid);
    }

    /// Writes the daemon's configuration `text` (its `state_dir` is this
    /// cluster's) as `name`, and uses it from now on.
    pub(crate) fn configure(&mut self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.join(name);
        std::fs::write(&path, text).unwrap();
        self.config = path.clone();
        path
    }

    /// The cluster's own config (`cluster.sh` writes it) with `extra` lines
    /// at the top, as `name`.
    pub(crate) fn config_with(&self, name: &str, edit: impl Fn(String) -> String) -> PathBuf {
        let text = std::fs::read_to_string(self.dir.join("gangway.toml")).unwrap();
        let path = self.dir.join(name);
        std::fs::write(&path, edit(text)).unwrap();
        path
    }

    /// Starts `gangway-slurm serve` with `config`, stderr to `log`, `env`
    /// added to its environment.
    pub(crate) fn spawn_daemon(&self, config: &Path, log: &str, env: &[(&str, &str)]) -> Child {
        let log = std::fs::File::create(self.dir.join(log)).unwrap();
        let mut cmd = Command::new(BIN);
        cmd.args(["serve", "--config"])
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.spawn().unwrap()
    }

    /// Starts `gangway-slurm serve` with `config` under `prlimit
    /// --nofile=N:N` (a service manager's descriptor limit), stderr to
    /// `log`.
    pub(crate) fn spawn_daemon_limited(&self, config: &Path, log: &str, nofile: u32) -> Child {
        let log = std::fs::File::create(self.dir.join(log)).unwrap();
        let mut cmd = Command::new(find("prlimit").expect("prlimit (util-linux)"));
        cmd.arg(format!("--nofile={nofile}:{nofile}"))
            .arg(BIN)
            .args(["serve", "--config"])
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        cmd.spawn().unwrap()
    }

    /// Starts the daemon of `self.config` and waits until it answers.
    pub(crate) fn start_daemon(&mut self) {
        self.start_daemon_with(&[]);
    }

    /// [`Cluster::start_daemon`] with `env` added to its environment.
    pub(crate) fn start_daemon_with(&mut self, env: &[(&str, &str)]) {
        self.starts += 1;
        let log = format!("daemon-{}.log", self.starts);
        let child = self.spawn_daemon(&self.config, &log, env);
        self.wait_daemon(child, &log);
    }

    /// [`Cluster::start_daemon`] under a descriptor limit of `nofile`.
    pub(crate) fn start_daemon_limited(&mut self, nofile: u32) {
        self.starts += 1;
        let log = format!("daemon-{}.log", self.starts);
        let child = self.spawn_daemon_limited(&self.config, &log, nofile);
        self.wait_daemon(child, &log);
    }

    /// Keeps `child` as the daemon and waits until it answers.
    fn wait_daemon(&mut self, child: Child, log: &str) {
        self.daemon = Some(child);
        let t = Instant::now();
        while client::status(&Daemon::at(&self.socket()), None).is_err() {
            if let Some(child) = self.daemon.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                let log = std::fs::read_to_string(self.dir.join(log)).unwrap_or_default();
                panic!("the daemon stopped ({status}): {log}");
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "daemon did not come up"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub(crate) fn kill_daemon(&mut self) {
        if let Some(mut child) = self.daemon.take() {
            child.kill().unwrap(); // SIGKILL
            child.wait().unwrap();
        }
    }

    /// Sends `signal` (`TERM`, `STOP`, `CONT`, ...) to the daemon.
    pub(crate) fn signal_daemon(&self, signal: &str) {
        let pid = self.daemon.as_ref().unwrap().id().to_string();
        let sent = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{signal} {pid}");
    }

    /// The Slurm job ids of launches tagged with daemon `id`'s identity.
    pub(crate) fn tagged_by(&self, daemon: &str) -> BTreeSet<u64> {
        let v: serde_json::Value =
            serde_json::from_str(&self.slurm(&["squeue", "--json"])).unwrap();
        let prefix = format!("gangway:{daemon}:");
        v["jobs"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|j| {
                        j["comment"]
                            .as_str()
                            .is_some_and(|c| c.starts_with(&prefix))
                    })
                    .filter_map(|j| j["job_id"].as_u64())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Runs `script` with `sh -c` as `user`; its output.
    pub(crate) fn sh_as(&self, user: &User, script: &str) -> Output {
        let mut sh = Command::new("sh");
        sh.args(["-c", script]);
        self.as_user(&mut sh, user);
        sh.output().unwrap()
    }

    /// The status report, as root sees it.
    pub(crate) fn status(&self) -> StatusReport {
        client::status(&Daemon::at(&self.socket()), None).unwrap()
    }

    /// One job's report, as root sees it.
    pub(crate) fn why_report(&self, id: u64) -> JobReport {
        client::why(&Daemon::at(&self.socket()), id).unwrap()
    }

    /// `gangway-slurm ARGS` as root, in the `work` folder.
    pub(crate) fn gangway<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Output {
        Command::new(BIN)
            .args(args)
            .env("GANGWAY_SLURM_STATE", self.state())
            .current_dir(self.dir.join("work"))
            .output()
            .unwrap()
    }

    /// `gangway-slurm ARGS` as `user`, in their home folder (the copy of
    /// the binary in the cluster's folder, which they can reach).
    pub(crate) fn gangway_as<S: AsRef<std::ffi::OsStr>>(&self, user: &User, args: &[S]) -> Output {
        let mut cmd = Command::new(self.dir.join("bin/gangway-slurm"));
        cmd.args(args);
        self.as_user(&mut cmd, user);
        cmd.output().unwrap()
    }

    /// Submits `cmd` as root; its job id.
    pub(crate) fn submit(&self, gpus: u32, vc: &str, cmd: &[&str]) -> u64 {
        submitted(self.gangway(&submit_args(gpus, vc, cmd)))
    }

    /// Submits `cmd` as `user`; its job id.
    pub(crate) fn submit_as(&self, user: &User, gpus: u32, vc: &str, cmd: &[&str]) -> u64 {
        submitted(self.gangway_as(user, &submit_args(gpus, vc, cmd)))
    }

    /// Waits until `done` says so of the status, for at most `secs`.
    pub(crate) fn wait_for(
        &self,
        secs: u64,
        what: &str,
        mut done: impl FnMut(&StatusReport) -> bool,
    ) -> StatusReport {
        let t = Instant::now();
        loop {
            match client::status(&Daemon::at(&self.socket()), None) {
                Ok(s) if done(&s) => return s,
                Ok(s) => assert!(
                    t.elapsed() < Duration::from_secs(secs),
                    "{what} after {secs} s: {}",
                    client::format_status(&s)
                ),
                Err(e) => assert!(
                    t.elapsed() < Duration::from_secs(secs),
                    "{what} after {secs} s: the daemon does not answer: {e}"
                ),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits until job `id` has finished; its report.
    pub(crate) fn finished(&self, secs: u64, id: u64) -> JobReport {
        let s = self.wait_for(secs, &format!("job {id} finished"), |s| {
            s.finished.iter().any(|j| j.id == id)
        });
        s.finished.into_iter().find(|j| j.id == id).unwrap()
    }

    /// `gangway-slurm serve` with `config`, which must refuse to start (in
    /// 30 s at most): its stderr, and how long it took.
    pub(crate) fn refused_start(&self, config: &Path) -> (String, Duration) {
        let t = Instant::now();
        let err = self.dir.join("refused.log");
        let mut child = Command::new(BIN)
            .args(["serve", "--config"])
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if t.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                let _ = child.wait();
                panic!("serve with {config:?} started");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(!status.success(), "serve with {config:?} started");
        (std::fs::read_to_string(&err).unwrap(), t.elapsed())
    }

    /// Slurm job ids in `squeue` (all states).
    pub(crate) fn squeue_ids(&self) -> BTreeSet<u64> {
        let v: serde_json::Value =
            serde_json::from_str(&self.slurm(&["squeue", "--json"])).unwrap();
        v["jobs"]
            .as_array()
            .map(|a| a.iter().filter_map(|j| j["job_id"].as_u64()).collect())
            .unwrap_or_default()
    }

    /// The attempts of job `id` that started (`out/ID.N.start` files).
    pub(crate) fn starts_of(&self, id: u64) -> usize {
        (1..10)
            .filter(|a| self.dir.join(format!("out/{id}.{a}.start")).exists())
            .count()
    }
}

fn submit_args<'a>(gpus: u32, vc: &'a str, cmd: &[&'a str]) -> Vec<String> {
    let mut args: Vec<String> = ["submit", "--gpus", &gpus.to_string(), "--vc", vc, "--"]
        .map(String::from)
        .to_vec();
    args.extend(cmd.iter().map(|s| s.to_string()));
    args
}

/// The job id `submit` printed (it must have succeeded).
fn submitted(out: Output) -> u64 {
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

impl Drop for Cluster {
    fn drop(&mut self) {
        self.kill_daemon();
        for mut other in self.others.drain(..) {
            let _ = other.kill();
            let _ = other.wait();
        }
        for m in self.more_mounts.drain(..) {
            let _ = Command::new("umount").arg(&m).status();
        }
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

pub(crate) fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// The text of a command's output (stdout, then stderr).
pub(crate) fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
