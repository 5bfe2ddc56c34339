//! The faults an operator sees: a broken setup, a controller outage, the
//! daemon down longer than Slurm remembers ended jobs, a corrupt state
//! file, a configuration refusal, a full state disk (submit and cancel
//! refused, not lost; attempts counting only real launches), a stopped
//! daemon (clients time out), every finished job listed page by page.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use gangway_slurm::client::{self, Daemon};

use super::harness::{Cluster, SCRIPT, SERIAL, slurm_here};

/// What a faults-test job runs: records each attempt's start, sleeps, then
/// records its end (`OUT/ID.ATTEMPT.start`, `.done`).
const SHORT_SH: &str = r#"#!/bin/sh
# short.sh OUTDIR SECONDS [marker]
touch "$1/$GANGWAY_JOB_ID.$GANGWAY_ATTEMPT.start"
sleep "$2"
touch "$1/$GANGWAY_JOB_ID.$GANGWAY_ATTEMPT.done"
"#;

#[test]
fn gangway_slurm_faults() {
    if !slurm_here("gangway-slurm faults test") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Slurm forgets an ended job 3 s after it ends (purged within a minute).
    let mut cluster = Cluster::start("faults", Some(3));
    let dir = cluster.dir.clone();
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
        cluster.submit(gpus, vc, &cmd)
    };

    // 1. A broken setup is refused before serving, at once and clearly.
    let bad = cluster.config_with("nope.toml", |t| {
        t.replace("[slurm]\n", "[slurm]\npartition = \"nope\"\n")
    });
    let (err, took) = cluster.refused_start(&bad);
    assert!(err.contains("partition \"nope\""), "{err}");
    // Slurm's own reason, which scontrol prints on stdout.
    assert!(err.contains("Partition nope not found"), "{err}");
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
        let r = client::why(&Daemon::at(&cluster.socket()), *id).unwrap();
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
    // state holds it too. A job submitted just before the daemon dies,
    // which cannot start (flip holds a GPU), is in the newest state only.
    let lost = submit(&cluster, 32, "prod", &job("1"));
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
    // The fall-back says which acknowledged job it lost, and how to find it.
    assert!(
        note.contains("LOST 1 acknowledged change")
            && note.contains(&format!("submit job {lost} by root"))
            && note.contains("journal.jsonl"),
        "{note:?}"
    );
    assert!(client::why(&Daemon::at(&cluster.socket()), lost).is_err());
    let r = client::why(&Daemon::at(&cluster.socket()), flip).unwrap();
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
    let r = client::why(&Daemon::at(&cluster.socket()), held).unwrap();
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
        .args(["-t", "tmpfs", "-o", "size=512k,mode=0711", "tmpfs"])
        .arg(&small)
        .status()
        .unwrap();
    assert!(mounted.success(), "mounting a tmpfs for the state folder");
    cluster.mounted = Some(small.clone());
    // A new state folder is a new daemon: the old one's lock, fresh, would
    // keep it from starting; the operator removes it, as its error says.
    cluster.slurm(&["scancel", "--name=gangway-lock"]);
    cluster.config = cluster.config_with("small.toml", |t| {
        let state = dir.join("gangway").display().to_string();
        t.replace(&state, &small.display().to_string())
    });
    cluster.state_dir = small.clone();
    cluster.start_daemon();
    let before = submit(&cluster, 1, "prod", &job("1"));
    // A job that runs, and one that waits for GPUs held by a job started
    // in Slurm directly.
    let running = submit(&cluster, 1, "prod", &job("60"));
    cluster.wait_for(30, "a job running", |s| {
        s.running
            .iter()
            .any(|j| j.id == running && j.state == "running")
    });
    let placed_on = cluster
        .status()
        .running
        .iter()
        .find(|j| j.id == running)
        .unwrap()
        .placement[0]
        .0
        .clone();
    let others: Vec<&str> = ["n1", "n2", "n3", "n4"]
        .into_iter()
        .filter(|n| *n != placed_on)
        .collect();
    let foreign = cluster.slurm(&[
        "sbatch",
        "--parsable",
        "-o",
        "/dev/null",
        "-N",
        "3",
        "-w",
        &others.join(","),
        "--gres=gpu:8",
        "--wrap",
        "sleep 120",
    ]);
    cluster.wait_for(30, "the foreign job's GPUs counted", |s| {
        s.foreign_gpus == 24
    });
    let waiting = submit(&cluster, 8, "prod", &job("1"));
    cluster.wait_for(30, "the 8-GPU job waiting", |s| {
        s.pending
            .iter()
            .any(|j| j.id == waiting && j.reason.is_some())
    });
    // Fill the disk.
    let _ = Command::new("dd")
        .args(["if=/dev/zero", "bs=4k"])
        .arg(format!("of={}", small.join("filler").display()))
        .output();
    let refused = cluster.gangway(&["submit", "--gpus", "1", "--vc", "prod", "--", "true"]);
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
    // A cancel that cannot be saved is refused, not acknowledged and lost.
    let out = cluster.gangway(&["cancel", &running.to_string()]);
    let said = super::harness::text(&out);
    assert!(
        !out.status.success() && said.contains("was not cancelled"),
        "{said}"
    );
    assert!(
        cluster
            .status()
            .running
            .iter()
            .any(|j| j.id == running && j.state == "running")
    );
    // The GPUs come free, but no launch can be saved first: the job is
    // not launched, and no attempt is counted.
    cluster.slurm(&["scancel", foreign.trim()]);
    std::thread::sleep(Duration::from_secs(4));
    let w = cluster.why_report(waiting);
    assert_eq!(w.attempts, 0, "{:?}", w.events);
    assert!(
        w.events
            .iter()
            .any(|e| e.contains("could not be saved first")),
        "{:?}",
        w.events
    );
    std::fs::remove_file(small.join("filler")).unwrap();
    let out = cluster.gangway(&["cancel", &running.to_string()]);
    assert!(out.status.success(), "{}", super::harness::text(&out));
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
    // The acknowledged cancel held over the restart; the waiting job ran
    // once, with one attempt counted.
    let r = cluster.finished(30, running);
    assert_eq!(r.state, "killed", "{:?}", r.events);
    assert_eq!(cluster.starts_of(running), 1, "the cancelled job ran again");
    let w = cluster.finished(60, waiting);
    assert_eq!(
        (w.state.as_str(), w.attempts),
        ("passed", 1),
        "{:?}",
        w.events
    );
    println!(
        "faults: on a full disk the submit and the cancel were refused ({}); the cancel, made again, \
         held over a restart; a job whose launch could not be saved counted 0 attempts, then 1; \
         jobs {before} and {after} kept, next id {next}",
        err.trim()
    );

    // 8. A stopped daemon: a client times out, saying so.
    let pid = cluster.daemon.as_ref().unwrap().id().to_string();
    Command::new("kill").args(["-STOP", &pid]).status().unwrap();
    let t = Instant::now();
    let out = cluster.gangway(&["status", "--timeout", "2"]);
    let took = t.elapsed();
    Command::new("kill").args(["-CONT", &pid]).status().unwrap();
    let said = super::harness::text(&out);
    assert!(
        !out.status.success() && said.contains("did not answer within 2 s"),
        "{said}"
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    println!(
        "faults: a client of a stopped daemon gave up after {took:?}: {}",
        said.trim()
    );

    // 9. Every finished job, page by page.
    let socket = cluster.socket();
    let daemon = Daemon::at(&socket);
    let page = client::status(
        &daemon,
        Some(gangway_slurm::protocol::FinishedPage {
            offset: 1,
            count: 2,
        }),
    )
    .unwrap();
    assert_eq!((page.finished.len(), page.finished_offset), (2, 1));
    let all = client::status_all(&daemon).unwrap();
    assert_eq!(all.finished.len() as u32, all.finished_total);
    let ids: BTreeSet<u64> = all.finished.iter().map(|j| j.id).collect();
    assert_eq!(ids.len(), all.finished.len(), "a job listed twice");
    assert_eq!(page.finished[0].id, all.finished[1].id);
    let out = cluster.gangway(&["status", "--json", "--all-finished"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["finished"].as_array().unwrap().len() as u32,
        all.finished_total
    );
    println!(
        "faults: status --all-finished listed all {} finished jobs",
        all.finished_total
    );
    cluster.passed = true;
}
