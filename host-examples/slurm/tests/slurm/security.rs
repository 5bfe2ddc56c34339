//! Identity, authorization and trust, with real unprivileged users: a
//! user's job runs as that user with their environment; users cannot act
//! for one another (submit to a VC they are not in, cancel another's job,
//! swap or roll back a policy, read another's command); a forged end
//! record is refused; a module cache others can write is refused.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::Command;
use std::time::{Duration, Instant};

use super::harness::{Cluster, SERIAL, User, records_home, slurm_here, text, user};

/// The cluster's config with the socket open to every local user,
/// `gangway-t-ops` an admin, VC `prod` for `gangway-t-alice` only.
pub(crate) fn shared_config(cluster: &Cluster, extra: &str) -> String {
    let base = std::fs::read_to_string(cluster.dir.join("gangway.toml")).unwrap();
    let base = base.replacen(
        "[[vc]]\nname = \"prod\"\nquota_gpus = 24\n",
        "[[vc]]\nname = \"prod\"\nquota_gpus = 24\nusers = [\"gangway-t-alice\"]\n",
        1,
    );
    let at = base.find("[slurm]").unwrap();
    format!(
        "{}{extra}\n{}\n[access]\nsocket = \"everyone\"\nadmins = [\"gangway-t-ops\"]\n",
        &base[..at],
        &base[at..]
    )
}

/// `shared_config` in native mode, managing Slurm partition `gw`.
pub(crate) fn native_config(cluster: &Cluster) -> String {
    shared_config(cluster, "mode = \"native\"\n").replacen(
        "[slurm]\n",
        "[slurm]\npartition = \"gw\"\n",
        1,
    )
}

/// A cluster whose daemon serves every local user (`shared_config`).
pub(crate) fn shared_cluster(
    name: &str,
    min_job_age: Option<u32>,
    env: &[(&str, &str)],
) -> Cluster {
    let mut cluster = Cluster::start(name, min_job_age);
    let config = shared_config(&cluster, "");
    cluster.configure("shared.toml", &config);
    cluster.start_daemon_with(env);
    cluster
}

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

#[test]
fn a_users_job_runs_as_that_user() {
    if !slurm_here("a user's job runs as that user") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let alice = user("alice");
    // A variable of the daemon's own environment must not reach any job.
    let mut cluster = shared_cluster("as-user", None, &[("GANGWAY_DAEMON_SECRET", "daemon-only")]);
    let home = cluster.home(&alice);
    let mut submit = Command::new(cluster.dir.join("bin/gangway-slurm"));
    submit.args(["submit", "--gpus", "2", "--vc", "prod", "--"]);
    submit.args(["sh", "-c", "id > id.txt; env > env.txt"]);
    cluster.as_user(&mut submit, &alice);
    submit.env("ALICE_SETTING", "it's 42");
    let out = submit.output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let id: u64 = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .nth(2)
        .and_then(|w| w.parse().ok())
        .unwrap();
    let job = cluster.finished(60, id);
    assert_eq!(job.state, "passed", "{:?}", job.events);
    assert_eq!(job.user, alice.name);
    assert_eq!(job.attempts, 1, "{:?}", job.events);
    // The job wrote `id` as alice, in her folder, with her environment.
    let id_txt = std::fs::read_to_string(home.join("id.txt")).unwrap();
    assert!(
        id_txt.starts_with(&format!("uid={}({})", alice.uid, alice.name)),
        "{id_txt}"
    );
    assert_eq!(
        std::fs::metadata(home.join("id.txt")).unwrap().uid(),
        alice.uid
    );
    let out_file = home.join(format!("gangway-{id}.out"));
    assert_eq!(std::fs::metadata(&out_file).unwrap().uid(), alice.uid);
    let env = std::fs::read_to_string(home.join("env.txt")).unwrap();
    assert!(env.contains("ALICE_SETTING=it's 42"), "{env}");
    assert!(env.contains(&format!("USER={}", alice.name)), "{env}");
    assert!(
        !env.contains("GANGWAY_DAEMON_SECRET"),
        "the daemon's environment leaked: {env}"
    );
    // Slurm, too, knows the job as alice's.
    let slurm_job = job.slurm_job.or_else(|| {
        job.events.iter().find_map(|e| {
            e.split("Slurm job ")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
    });
    let shown = cluster.slurm(&["scontrol", "show", "job", &slurm_job.unwrap().to_string()]);
    assert!(
        shown.contains(&format!("UserId={}({})", alice.name, alice.uid)),
        "{shown}"
    );
    println!(
        "security: job {id} ran as {} (uid {}), its environment hers, the daemon's not passed",
        alice.name, alice.uid
    );
    cluster.passed = true;
}

/// Whether `out` failed saying `what`.
fn refused(out: &std::process::Output, what: &str) -> bool {
    !out.status.success() && text(out).contains(what)
}

#[test]
fn a_user_cannot_act_for_another() {
    if !slurm_here("a user cannot act for another") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (alice, mallory, ops) = (user("alice"), user("mallory"), user("ops"));
    let mut cluster = shared_cluster("authz", None, &[]);
    let secret = "API_KEY=s3cr3t-of-alice";
    let cmd = format!("sleep 60 # {secret}");
    let job = cluster.submit_as(&alice, 2, "prod", &["sh", "-c", &cmd]);
    cluster.wait_for(30, "alice's job running", |s| {
        s.running
            .iter()
            .any(|j| j.id == job && j.state == "running")
    });
    // Submitting to a VC mallory is not in.
    let out = cluster.gangway_as(
        &mallory,
        &["submit", "--gpus", "1", "--vc", "prod", "--", "true"],
    );
    assert!(
        refused(&out, "is not a member of virtual cluster \"prod\""),
        "{}",
        text(&out)
    );
    // Reading alice's command, or her folder, through status and why.
    let out = cluster.gangway_as(&mallory, &["status", "--json"]);
    assert!(out.status.success(), "{}", text(&out));
    let shown = text(&out);
    let home = cluster.home(&alice).display().to_string();
    assert!(
        !shown.contains("s3cr3t") && !shown.contains(&home),
        "{shown}"
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let seen = report["running"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"] == job)
        .unwrap();
    assert_eq!(seen["private"], true);
    assert_eq!(seen["cmd"], serde_json::json!([]));
    let why = cluster.gangway_as(&mallory, &["why", &job.to_string()]);
    assert!(
        !text(&why).contains("s3cr3t") && text(&why).contains("another user's job"),
        "{}",
        text(&why)
    );
    let own = cluster.gangway_as(&alice, &["why", &job.to_string()]);
    assert!(
        text(&own).contains(secret),
        "alice sees her own command: {}",
        text(&own)
    );
    // Cancelling alice's job, swapping or rolling back a policy.
    let out = cluster.gangway_as(&mallory, &["cancel", &job.to_string()]);
    assert!(refused(&out, "only its user or an admin"), "{}", text(&out));
    let fifo = cluster.dir.join("fifo.wasm");
    std::fs::write(&fifo, gangway_plugin_artifacts::module("fifo").unwrap()).unwrap();
    std::fs::set_permissions(&fifo, std::fs::Permissions::from_mode(0o644)).unwrap();
    let fifo = fifo.display().to_string();
    let out = cluster.gangway_as(&mallory, &["swap", "--fairness", &fifo]);
    assert!(refused(&out, "swap is for admins"), "{}", text(&out));
    let out = cluster.gangway_as(&mallory, &["swap", "--rollback", "fairness"]);
    assert!(refused(&out, "rollback is for admins"), "{}", text(&out));
    let s = cluster.status();
    assert_eq!(s.policies[0].active, "vc-quota", "{:?}", s.policies[0]);
    assert!(
        s.running
            .iter()
            .any(|j| j.id == job && j.state == "running")
    );
    // Reading the daemon's files.
    check_private_files(&cluster, &mallory);
    // An admin may swap and roll back; alice may cancel her own job.
    let out = cluster.gangway_as(&ops, &["swap", "--fairness", &fifo]);
    assert!(out.status.success(), "{}", text(&out));
    let out = cluster.gangway_as(&ops, &["swap", "--rollback", "fairness"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = cluster.gangway_as(&alice, &["cancel", &job.to_string()]);
    assert!(out.status.success(), "{}", text(&out));
    let j = cluster.finished(30, job);
    assert_eq!(j.state, "killed");
    assert!(
        j.events
            .iter()
            .any(|e| e.contains(&format!("cancelled by {}", alice.name)))
    );
    println!(
        "security: mallory could not submit to prod, read, cancel, swap or roll back; ops and alice could"
    );
    cluster.passed = true;
}

/// The daemon's state is private: mallory can reach the socket, not read
/// the state, the launch log or the journal.
fn check_private_files(cluster: &Cluster, mallory: &User) {
    let state = cluster.state();
    assert_eq!(mode(&state), 0o711);
    assert_eq!(mode(&cluster.socket()), 0o666);
    for f in ["state.bin", "launches.jsonl", "journal.jsonl"] {
        let path = state.join(f);
        assert_eq!(mode(&path), 0o600, "{f}");
        let mut cat = Command::new("cat");
        cat.arg(&path);
        cluster.as_user(&mut cat, mallory);
        let out = cat.output().unwrap();
        assert!(!out.status.success(), "mallory read {f}");
    }
}

/// Waits until Slurm has forgotten every job of `ids` (MinJobAge).
pub(crate) fn forgotten(cluster: &Cluster, ids: &[u64]) {
    let t = Instant::now();
    while ids.iter().any(|g| cluster.squeue_ids().contains(g)) {
        assert!(
            t.elapsed() < Duration::from_secs(150),
            "Slurm never forgot {ids:?}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
fn no_user_can_write_anothers_end_records() {
    if !slurm_here("no user can write another's end records") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (alice, mallory) = (user("alice"), user("mallory"));
    // Slurm forgets an ended job 3 s after it ends.
    let mut cluster = shared_cluster("forged", Some(3), &[]);
    // One job ends normally (its own record); the other is killed before
    // its script can write one.
    let ok = cluster.submit_as(&alice, 1, "prod", &["sh", "-c", "sleep 3"]);
    let killed = cluster.submit_as(&alice, 1, "prod", &["sh", "-c", "sleep 3; kill -9 $PPID"]);
    let s = cluster.wait_for(30, "both running", |s| {
        [ok, killed].iter().all(|id| {
            s.running
                .iter()
                .any(|j| j.id == *id && j.state == "running")
        })
    });
    let slurm_ids: Vec<u64> = s.running.iter().filter_map(|j| j.slurm_job).collect();
    cluster.kill_daemon();
    forgotten(&cluster, &slurm_ids);
    // alice's records are in her home (the default place).
    let hers = records_home(&alice);
    assert_eq!(mode(&hers), 0o700);
    assert_eq!(std::fs::metadata(&hers).unwrap().uid(), alice.uid);
    // mallory can put nothing beside or among alice's records: no folder
    // of hers to fill, no name to take.
    for target in [
        hers.join("0123456789abcdef0123456789abcdef.exit"),
        hers.parent().unwrap().join("x.exit"),
    ] {
        let out = cluster.sh_as(
            &mallory,
            &format!("echo '0 guessed' > '{}'", target.display()),
        );
        assert!(!out.status.success(), "mallory wrote {}", target.display());
    }
    let out = cluster.sh_as(&mallory, &format!("ls '{}'", hers.display()));
    assert!(!out.status.success(), "mallory listed alice's records");
    cluster.start_daemon();
    let j = cluster.finished(30, ok);
    assert_eq!(j.state, "passed", "{:?}", j.events);
    assert!(
        j.events.iter().any(|e| e.contains("from its end record")),
        "{:?}",
        j.events
    );
    let j = cluster.finished(30, killed);
    assert_eq!(j.state, "failed", "{:?}", j.events);
    assert!(
        j.events.iter().any(|e| e.contains("left no end record")),
        "{:?}",
        j.events
    );
    println!(
        "security: {} could neither write nor list alice's end records; hers was believed, \
         and a job that left none was not run again",
        mallory.name
    );
    cluster.passed = true;
}

#[test]
fn a_module_cache_others_can_write_is_refused() {
    if !slurm_here("a module cache others can write is refused") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut cluster = Cluster::start("cache", None);
    let cache = cluster.dir.join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    let env = [("GANGWAY_MODULE_CACHE", cache.to_str().unwrap())];
    cluster.start_daemon_with(&env);
    let fifo = cluster.dir.join("fifo.wasm");
    std::fs::write(&fifo, gangway_plugin_artifacts::module("fifo").unwrap()).unwrap();
    let swap = |cluster: &Cluster| {
        let out = cluster.gangway(&["swap", "--fairness", fifo.to_str().unwrap()]);
        assert!(out.status.success(), "{}", text(&out));
    };
    swap(&cluster);
    let s = cluster.status();
    let warned = s
        .warnings
        .iter()
        .any(|w| w.contains("module cache") && w.contains("can be written by anyone"));
    assert!(warned, "{:?}", s.warnings);
    let log = std::fs::read_to_string(cluster.dir.join("daemon-1.log")).unwrap();
    assert!(
        log.contains("is not used"),
        "the log does not say so: {log}"
    );
    assert_eq!(
        std::fs::read_dir(&cache).unwrap().count(),
        0,
        "code was written there"
    );
    // Private, the same folder is used. The swap acknowledged before the
    // restart is still in force after it.
    cluster.kill_daemon();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();
    cluster.start_daemon_with(&env);
    let s = cluster.wait_for(10, "the swap in force again", |s| {
        s.policies[0].active == fifo.display().to_string()
    });
    assert!(
        s.warnings.iter().all(|w| !w.contains("not in force")),
        "{:?}",
        s.warnings
    );
    swap(&cluster);
    assert!(
        cluster
            .status()
            .warnings
            .iter()
            .all(|w| !w.contains("module cache"))
    );
    assert!(
        std::fs::read_dir(&cache).unwrap().count() > 0,
        "a private cache was not used"
    );
    println!(
        "security: a module cache writable by anyone was refused and said so; private, it was used; an acknowledged swap survived a restart"
    );
    cluster.passed = true;
}

#[test]
fn a_job_gets_its_identity_and_any_folder_name() {
    if !slurm_here("identity from the kernel, a % in the folder") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let alice = user("alice");
    let mut cluster = shared_cluster("identity", None, &[]);
    // A working folder whose name Slurm would expand (%j, %u...).
    let folder = cluster.home(&alice).join("run_100%_%j");
    std::fs::create_dir_all(&folder).unwrap();
    std::os::unix::fs::chown(&folder, Some(alice.uid), Some(alice.gid)).unwrap();
    let mut submit = Command::new(cluster.dir.join("bin/gangway-slurm"));
    submit.args(["submit", "--gpus", "1", "--vc", "prod", "--"]);
    submit.args(["sh", "-c", "echo \"$USER $LOGNAME $HOME\" > who.txt"]);
    cluster.as_user(&mut submit, &alice);
    // What the client claims is not who the job is.
    submit
        .current_dir(&folder)
        .env("USER", "root")
        .env("LOGNAME", "root")
        .env("HOME", "/root");
    let out = submit.output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let id: u64 = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .nth(2)
        .and_then(|w| w.parse().ok())
        .unwrap();
    let job = cluster.finished(60, id);
    assert_eq!(job.state, "passed", "{:?}", job.events);
    let who = std::fs::read_to_string(folder.join("who.txt")).unwrap();
    let home = format!("/home/{}", alice.name);
    assert_eq!(who.trim(), format!("{0} {0} {home}", alice.name), "{who}");
    assert!(
        folder.join(format!("gangway-{id}.out")).exists(),
        "the output is not where the folder's name says: {:?}",
        std::fs::read_dir(&folder).unwrap().collect::<Vec<_>>()
    );
    // A state folder in a folder others may write is refused.
    let open = cluster.dir.join("open");
    std::fs::create_dir_all(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let state = cluster.state().display().to_string();
    let inside = open.join("state").display().to_string();
    let unsafe_cfg = cluster.config_with("open.toml", |t| t.replace(&state, &inside));
    let (err, _) = cluster.refused_start(&unsafe_cfg);
    assert!(err.contains("the folder above the state folder"), "{err}");
    println!(
        "security: USER, LOGNAME and HOME came from the kernel's uid, not the client; a job in {} wrote its output there; a state folder under a folder anyone may write was refused",
        folder.display()
    );
    cluster.passed = true;
}
