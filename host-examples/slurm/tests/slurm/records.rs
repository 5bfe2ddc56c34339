//! End records no user can block, fill or take, with real users: a user's
//! own FIFO, link or oversized file in place of a record blocks nothing
//! (status answers within a second throughout) and fails only that user's
//! jobs; a user who fills the filesystem holding her records (by default
//! her home's) refuses and fails no one else's job, the state being on a
//! small filesystem of its own; a user who fills a shared `ends_dir` on
//! the state's filesystem fails no job that was running.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::{Duration, Instant};

use gangway_slurm::client::{self, Daemon};

use super::harness::{Cluster, SERIAL, User, records_home, slurm_here, text, user};
use super::security::{forgotten, shared_cluster, shared_config};

/// Polls `status` every 100 ms for `secs`: the slowest answer.
fn slowest_status(cluster: &Cluster, secs: u64) -> Duration {
    let socket = cluster.socket();
    let daemon = Daemon {
        socket: &socket,
        timeout: Duration::from_secs(10),
    };
    let t = Instant::now();
    let mut slowest = Duration::ZERO;
    while t.elapsed() < Duration::from_secs(secs) {
        let asked = Instant::now();
        client::status(&daemon, None).unwrap();
        slowest = slowest.max(asked.elapsed());
        std::thread::sleep(Duration::from_millis(100));
    }
    slowest
}

#[test]
fn a_users_fifo_link_or_big_file_blocks_nothing() {
    if !slurm_here("a user's FIFO, link or big file in place of a record") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (alice, mallory) = (user("alice"), user("mallory"));
    // Her records of earlier tests gone: the test counts hers.
    let folder = records_home(&mallory);
    let _ = std::fs::remove_dir_all(&folder);
    let mut cluster = shared_cluster("records-fifo", Some(3), &[]);
    let hers = cluster.submit_as(&alice, 1, "prod", &["sleep", "2"]);
    let theirs: Vec<u64> = (0..3)
        .map(|_| cluster.submit_as(&mallory, 1, "research", &["sleep", "2"]))
        .collect();
    let all: Vec<u64> = theirs.iter().copied().chain([hers]).collect();
    let s = cluster.wait_for(30, "every job running", |s| {
        all.iter().all(|id| {
            s.running
                .iter()
                .any(|j| j.id == *id && j.state == "running")
        })
    });
    let slurm_ids: Vec<u64> = s.running.iter().filter_map(|j| j.slurm_job).collect();
    // The daemon away longer than Slurm remembers the jobs: they end from
    // their records.
    cluster.kill_daemon();
    forgotten(&cluster, &slurm_ids);
    let script = format!(
        "cd '{}' && set -- *.exit && [ $# = 3 ] && rm -f \"$1\" && mkfifo \"$1\" \
         && rm -f \"$2\" && ln -s /etc/passwd \"$2\" \
         && head -c 10000000 /dev/zero > \"$3\"",
        folder.display()
    );
    let out = cluster.sh_as(&mallory, &script);
    assert!(out.status.success(), "{}", text(&out));
    let t = Instant::now();
    cluster.start_daemon();
    let came_up = t.elapsed();
    let slowest = slowest_status(&cluster, 5);
    assert!(slowest < Duration::from_secs(1), "status took {slowest:?}");
    let j = cluster.finished(30, hers);
    assert_eq!(j.state, "passed", "{:?}", j.events);
    let mut refusals = Vec::new();
    for id in &theirs {
        let j = cluster.finished(30, *id);
        assert_eq!(j.state, "failed", "job {id}: {:?}", j.events);
        let why = j
            .events
            .iter()
            .find(|e| e.contains("an end record was refused"))
            .unwrap_or_else(|| panic!("job {id}: {:?}", j.events))
            .clone();
        refusals.push(why);
    }
    for what in [
        "not a regular file",
        "symbolic link",
        "over the 4096-byte limit",
    ] {
        assert!(
            refusals.iter().any(|r| r.contains(what)),
            "{what}: {refusals:?}"
        );
    }
    println!(
        "records: a FIFO, a link and a 10 MB file in place of {}'s records were refused; \
         the daemon answered in {came_up:?}, status at worst in {slowest:?}; alice's job passed",
        mallory.name
    );
    cluster.passed = true;
}

/// The folder holding `user`'s end records, wherever the daemon keeps
/// them: `<state>/ends/<uid>` when the daemon made it (a shared ends
/// folder there), else her home's.
fn records_folder(cluster: &Cluster, user: &User) -> std::path::PathBuf {
    [
        cluster.state().join("ends").join(user.uid.to_string()),
        records_home(user),
    ]
    .into_iter()
    .find(|f| f.is_dir())
    .unwrap_or_else(|| panic!("no records folder of {}", user.name))
}

/// Mounts a tmpfs of `size` at `at`, `user`'s, 0700.
fn mount_tmpfs(at: &std::path::Path, size: &str, owner: Option<&User>) {
    std::fs::create_dir_all(at).unwrap();
    let mut opts = format!("size={size},mode=0711");
    if let Some(u) = owner {
        opts = format!("size={size},uid={},gid={},mode=0700", u.uid, u.gid);
    }
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &opts, "tmpfs"])
        .arg(at)
        .status()
        .unwrap();
    assert!(mounted.success(), "mounting a tmpfs at {}", at.display());
}

#[test]
fn a_full_records_filesystem_refuses_and_fails_no_one_else() {
    if !slurm_here("a user fills the filesystem of her own records") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (alice, mallory) = (user("alice"), user("mallory"));
    let mut cluster = Cluster::start("records-full", Some(3));
    // The state on a small filesystem of its own, as a careful operator
    // puts it; the filesystem of mallory's records is small too (her
    // home's: her quota).
    let small = cluster.dir.join("small-state");
    mount_tmpfs(&small, "4m", None);
    cluster.mounted = Some(small.clone());
    let hers = records_home(&mallory);
    let _ = std::fs::remove_dir_all(hers.parent().unwrap());
    let out = cluster.sh_as(&mallory, &format!("mkdir -p '{}'", hers.display()));
    assert!(out.status.success(), "{}", text(&out));
    mount_tmpfs(&hers, "64k", Some(&mallory));
    cluster.more_mounts.push(hers.clone());
    let state = cluster.state().display().to_string();
    let config = shared_config(&cluster, "").replace(&state, &small.display().to_string());
    cluster.configure("small.toml", &config);
    cluster.state_dir = small.clone();
    cluster.start_daemon();
    // mallory's first job makes her records' folder; alice's runs on.
    let first = cluster.submit_as(&mallory, 1, "research", &["true"]);
    cluster.finished(30, first);
    let folder = records_folder(&cluster, &mallory);
    let running = cluster.submit_as(&alice, 1, "prod", &["sleep", "8"]);
    cluster.wait_for(30, "alice's job running", |s| {
        s.running
            .iter()
            .any(|j| j.id == running && j.state == "running")
    });
    // mallory fills the filesystem holding her records.
    let out = cluster.sh_as(
        &mallory,
        &format!("head -c 100000000 /dev/zero > '{}/fill'", folder.display()),
    );
    assert!(
        !out.status.success(),
        "her records' filesystem did not fill"
    );
    // Her own job now cannot keep a record; alice's submits are answered
    // at once, and her jobs pass, one from its record after an outage.
    let blocked = cluster.submit_as(&mallory, 1, "research", &["sleep", "3"]);
    let t = Instant::now();
    let quick = cluster.gangway_as(
        &alice,
        &["submit", "--gpus", "1", "--vc", "prod", "--", "true"],
    );
    let submit_took = t.elapsed();
    assert!(
        quick.status.success(),
        "alice's submit refused: {}",
        text(&quick)
    );
    assert!(submit_took < Duration::from_secs(1), "{submit_took:?}");
    let away = cluster.submit_as(&alice, 1, "prod", &["sleep", "3"]);
    let s = cluster.wait_for(30, "both running", |s| {
        [away, blocked].iter().all(|id| {
            s.running
                .iter()
                .any(|j| j.id == *id && j.state == "running")
        })
    });
    let slurm_ids: Vec<u64> = s.running.iter().filter_map(|j| j.slurm_job).collect();
    cluster.kill_daemon();
    forgotten(&cluster, &slurm_ids);
    cluster.start_daemon();
    for id in [running, away] {
        let j = cluster.finished(30, id);
        assert_eq!(j.state, "passed", "job {id}: {:?}", j.events);
        assert!(
            j.events.iter().any(|e| e.contains("from its end record")),
            "job {id}: {:?}",
            j.events
        );
    }
    let m = cluster.finished(30, blocked);
    assert_eq!(m.state, "failed", "{:?}", m.events);
    let said = m
        .events
        .iter()
        .any(|e| e.contains("left no end record") && e.contains(&folder.display().to_string()));
    assert!(said, "{:?}", m.events);
    println!(
        "records: with the filesystem of {}'s records ({}) full, alice's submit took          {submit_took:?} and her jobs passed (two from their records after an outage); only          mallory's own job lost its record, said: {:?}",
        mallory.name,
        folder.display(),
        m.events.last()
    );
    cluster.passed = true;
}

#[test]
fn a_full_filesystem_fails_no_running_job() {
    if !slurm_here("a user fills the records' filesystem") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (alice, mallory) = (user("alice"), user("mallory"));
    let mut cluster = Cluster::start("records-disk", Some(3));
    // The state folder, and with it a shared ends folder, on a small
    // filesystem of its own.
    let small = cluster.dir.join("small-state");
    std::fs::create_dir_all(&small).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=2m,mode=0711", "tmpfs"])
        .arg(&small)
        .status()
        .unwrap();
    assert!(mounted.success(), "mounting a tmpfs for the state folder");
    cluster.mounted = Some(small.clone());
    let state = cluster.state().display().to_string();
    // A shared ends folder (as a site may configure it) on the state's
    // filesystem.
    let ends = format!("ends_dir = \"{}/ends\"\n", small.display());
    let config = shared_config(&cluster, &ends).replace(&state, &small.display().to_string());
    std::fs::create_dir_all(small.join("ends")).unwrap();
    std::fs::set_permissions(small.join("ends"), std::fs::Permissions::from_mode(0o711)).unwrap();
    cluster.configure("small.toml", &config);
    cluster.state_dir = small.clone();
    cluster.start_daemon();
    // mallory's first job makes her records folder there.
    let first = cluster.submit_as(&mallory, 1, "research", &["true"]);
    cluster.finished(30, first);
    let hers = cluster.submit_as(&alice, 1, "prod", &["sleep", "8"]);
    let s = cluster.wait_for(30, "alice's job running", |s| {
        s.running
            .iter()
            .any(|j| j.id == hers && j.state == "running")
    });
    let slurm_id = s.running.iter().find(|j| j.id == hers).unwrap().slurm_job;
    // mallory fills the filesystem from her own records folder.
    let fill = small
        .join("ends")
        .join(mallory.uid.to_string())
        .join("fill");
    let out = cluster.sh_as(
        &mallory,
        &format!("head -c 100000000 /dev/zero > '{}'", fill.display()),
    );
    assert!(!out.status.success(), "the filesystem did not fill");
    // alice's job ends while the daemon is away, and Slurm forgets it.
    cluster.kill_daemon();
    forgotten(&cluster, &[slurm_id.unwrap()]);
    assert!(
        std::fs::write(small.join("probe"), "x").is_err(),
        "the filesystem was not full when alice's job ended"
    );
    // The space freed (the daemon cannot start on a full state folder),
    // the daemon learns how her job ended from its record.
    std::fs::remove_file(&fill).unwrap();
    cluster.start_daemon();
    let j = cluster.finished(30, hers);
    assert_eq!(j.state, "passed", "{:?}", j.events);
    assert!(
        j.events.iter().any(|e| e.contains("from its end record")),
        "{:?}",
        j.events
    );
    println!(
        "records: {} filled the state's filesystem while alice's job ran; it ended while the \
         daemon was away and passed from its record, written over its reserved place",
        mallory.name
    );
    cluster.passed = true;
}
