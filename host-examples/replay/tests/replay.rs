//! End-to-end tests of the `replay` binary: every input format, malformed
//! inputs, determinism, native-vs-Wasm agreement.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Output;

use serde_json::Value;

mod common;
use common::{dir, ok, replay, report};

fn file(d: &Path, name: &str, text: &str) -> String {
    let p = d.join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

fn failed(out: &Output) -> String {
    assert!(!out.status.success(), "replay should have failed");
    String::from_utf8_lossy(&out.stderr).to_string()
}

const PHILLY_LOG: &str = r#"[
 {"status": "Pass", "vc": "vc1", "jobid": "application_1_1", "user": "u1",
  "submitted_time": "2017-10-07 01:00:00",
  "attempts": [{"start_time": "2017-10-07 01:00:30", "end_time": "2017-10-07 02:00:30",
    "detail": [{"ip": "m1", "gpus": ["gpu0","gpu1","gpu2","gpu3","gpu4","gpu5","gpu6","gpu7"]}]}]},
 {"status": "Failed", "vc": "vc2", "jobid": "application_1_2", "user": "u2",
  "submitted_time": "2017-10-07 01:05:00",
  "attempts": [{"start_time": "2017-10-07 01:05:10", "end_time": "2017-10-07 01:06:10",
                "detail": [{"ip": "m2", "gpus": ["gpu0"]}]},
               {"start_time": "2017-10-07 01:09:10", "end_time": "2017-10-07 01:10:10",
                "detail": [{"ip": "m2", "gpus": ["gpu0"]}]}]},
 {"status": "Killed", "vc": "vc2", "jobid": "application_1_3", "user": "u2",
  "submitted_time": "2017-10-07 01:06:00", "attempts": []}
]"#;

const MACHINES: &str =
    "machineId, number of GPUs, single GPU mem\nm0,8, 24GB\nm1,8, 24GB\nm2,2, 12GB\n";

#[test]
fn every_format_replays() {
    let d = dir("formats");
    let machines = file(&d, "machines.csv", MACHINES);
    let cases = [
        ("philly", file(&d, "log.json", PHILLY_LOG), 2),
        (
            "csv",
            file(
                &d,
                "jobs.csv",
                "id,submit_s,gpus,vc,user,attempts,status\nj1,0,8,a,alice,3600,passed\nj2,10,4,b,,120;600,failed\nj3,20,1,b,bob,60,killed\n",
            ),
            3,
        ),
        (
            "rfold",
            file(
                &d,
                "rfold.csv",
                "#job id,arrival time (sec),topology,shape,size,duration (sec)\n0,0.0,CLOS,1,1,300.0\n1,5.0,CLOS,4+4,8,60.0\n",
            ),
            2,
        ),
        (
            "adaptdl",
            file(
                &d,
                "adaptdl.csv",
                "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,11cb48\n2017-10-09 06:13:03,2951.0,2,5902.0,6214e9\n",
            ),
            2,
        ),
    ];
    for (format, trace, jobs) in cases {
        let out_dir = d.join(format);
        let out = replay(&[
            "--trace",
            &trace,
            "--format",
            format,
            "--machines",
            &machines,
            "--out",
            out_dir.to_str().unwrap(),
            "--native",
        ]);
        let stdout = ok(&out);
        assert!(stdout.contains("replayed"), "{stdout}");
        // The timing line gives the process's CPU time beside wall time.
        #[cfg(unix)]
        assert!(
            stdout
                .lines()
                .any(|l| l.contains(" jobs in ") && l.contains(" s CPU (")),
            "{stdout}"
        );
        let r = report(&out_dir);
        let run = &r["runs"][0];
        assert_eq!(run["jobs"]["submitted"], jobs, "{format}");
        assert_eq!(run["jobs"]["never_started"], 0, "{format}");
        assert_eq!(run["name"], "philly");
        for key in ["1", "2-4", "5-8", ">8"] {
            assert!(run["by_size"][key]["queue_delay_s"]["p99"].is_number());
        }
        assert!(out_dir.join("philly-queue-delay-cdf.svg").exists());
    }
    // The Philly job without attempts is reported, not dropped silently.
    let r = report(&d.join("philly"));
    assert_eq!(
        r["workload"]["skipped"][0]["reason"],
        "no recorded attempt, so no GPU count"
    );
    let run = &r["runs"][0];
    assert_eq!(run["jobs"]["passed"], 1);
    assert_eq!(run["jobs"]["failed"], 1);
    // The failed job's first attempt (1 GPU x 60 s) and its last (60 s) are lost work.
    assert_eq!(run["failed_attempt_gpu_s"], 120);
}

#[test]
fn malformed_inputs_name_file_line_and_problem() {
    let d = dir("malformed");
    let bad_csv = file(
        &d,
        "bad.csv",
        "id,submit_s,gpus,vc,user,attempts,status\nj1,0,8,a,alice,3600,passed\nj2,ten,4,b,,120,passed\n",
    );
    let err = failed(&replay(&[
        "--trace",
        &bad_csv,
        "--format",
        "csv",
        "--out",
        d.to_str().unwrap(),
    ]));
    assert!(
        err.contains(&format!(
            "{bad_csv}:3: submit_s \"ten\" is not a valid number"
        )),
        "{err}"
    );

    let bad_json = file(
        &d,
        "bad.json",
        r#"[{"status": "Pass", "vc": "a", "jobid": "app_7", "submitted_time": "2017-10-07 01:00:00", "attempts": [{"start_time": "2017-10-07 02:00:00", "end_time": "2017-10-07 01:00:00", "detail": [{"ip": "m1", "gpus": ["gpu0"]}]}]}]"#,
    );
    let err = failed(&replay(&[
        "--trace",
        &bad_json,
        "--out",
        d.to_str().unwrap(),
    ]));
    assert!(
        err.contains("job app_7: attempt 0 ends before it starts"),
        "{err}"
    );

    let bad_rfold = file(
        &d,
        "bad-rfold.csv",
        "#job id,arrival time (sec),topology,shape,size,duration (sec)\n0,0.0,CLOS,1,0,5.0\n",
    );
    let err = failed(&replay(&[
        "--trace",
        &bad_rfold,
        "--format",
        "rfold",
        "--out",
        d.to_str().unwrap(),
    ]));
    assert!(err.contains(":2: GPU count must be at least 1"), "{err}");

    let bad_adaptdl = file(
        &d,
        "bad-adaptdl.csv",
        "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-99 07:01:55,66.0,1,66.0,x\n",
    );
    let err = failed(&replay(&[
        "--trace",
        &bad_adaptdl,
        "--format",
        "adaptdl",
        "--out",
        d.to_str().unwrap(),
    ]));
    assert!(
        err.contains(":2: timestamp \"2017-10-99 07:01:55\""),
        "{err}"
    );

    // A job larger than the cluster is an error naming the job.
    let machines = file(&d, "m.csv", MACHINES);
    let big = file(
        &d,
        "big.csv",
        "id,submit_s,gpus,vc,user,attempts,status\nhuge,0,64,a,,10,passed\n",
    );
    let err = failed(&replay(&[
        "--trace",
        &big,
        "--format",
        "csv",
        "--machines",
        &machines,
        "--native",
        "--out",
        d.to_str().unwrap(),
    ]));
    assert!(
        err.contains("trace job huge: job 0 asks for 64 GPUs but the cluster has only 18"),
        "{err}"
    );

    let err = failed(&replay(&[
        "--trace",
        "/no/such/file.json",
        "--out",
        d.to_str().unwrap(),
    ]));
    assert!(err.contains("/no/such/file.json: cannot read"), "{err}");
    let err = failed(&replay(&[
        "--policies",
        "nope",
        "--out",
        d.to_str().unwrap(),
    ]));
    assert!(err.contains("nope"), "{err}");
}

#[test]
fn same_inputs_give_identical_reports_and_wasm_matches_native() {
    let d = dir("determinism");
    let runs = [("a", false), ("b", false), ("native", true)];
    for (name, native) in runs {
        let out = d.join(name);
        let mut args = vec![
            "--jobs",
            "3000",
            "--seed",
            "5",
            "--compare",
            "philly,fifo,locality-first",
            "--no-plots",
            "--out",
            out.to_str().unwrap(),
        ];
        if native {
            args.push("--native");
        }
        ok(&replay(&args));
    }
    let a = std::fs::read(d.join("a/report.json")).unwrap();
    let b = std::fs::read(d.join("b/report.json")).unwrap();
    assert_eq!(a, b, "two runs of the same inputs differ");
    let native = std::fs::read(d.join("native/report.json")).unwrap();
    assert_eq!(a, native, "Wasm and native policies decided differently");
    let r: Value = serde_json::from_slice(&a).unwrap();
    assert_eq!(r["runs"].as_array().unwrap().len(), 3);
    assert_eq!(r["runs"][1]["policies"]["gang"], "fifo-block");
}

// The study's findings on the real RFold-derived trace are tested in
// tests/study.rs.

/// A trace that ran jobs on machines the machine list lacks gets one
/// warning with the counts (on stderr, through the tracing subscriber).
#[test]
fn machines_missing_from_the_list_are_warned_about_once() {
    let d = dir("missing-machines");
    let log = file(&d, "log.json", PHILLY_LOG);
    let only_m0_m2 = file(
        &d,
        "m.csv",
        "machineId, number of GPUs, single GPU mem\nm0,8, 24GB\nm2,2, 12GB\n",
    );
    let out = replay(&[
        "--trace",
        &log,
        "--machines",
        &only_m0_m2,
        "--no-plots",
        "--out",
        d.to_str().unwrap(),
    ]);
    ok(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("machines that"))
        .collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains("the trace ran 1 jobs on 1 machines that")
            && warnings[0].contains("(first: m1)"),
        "{err}"
    );
    // With every machine listed, no warning.
    let all = file(&d, "all.csv", MACHINES);
    let out = replay(&[
        "--trace",
        &log,
        "--machines",
        &all,
        "--no-plots",
        "--out",
        d.to_str().unwrap(),
    ]);
    ok(&out);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("machines that"));
}

/// `--cluster` builds a uniform cluster in one or several racks, and the
/// `topology:` line and the report say how `--machines` grouped machines.
#[test]
fn cluster_shapes_and_rack_grouping_are_reported() {
    let d = dir("cluster");
    let jobs = file(
        &d,
        "jobs.csv",
        "id,submit_s,gpus,vc,user,attempts,status\nj1,0,8,a,alice,3600,passed\nj2,10,4,b,,120,passed\n",
    );
    let run = |name: &str, topo: &[&str]| {
        let out_dir = d.join(name);
        let mut args = vec![
            "--trace",
            &jobs,
            "--format",
            "csv",
            "--native",
            "--no-plots",
            "--out",
            out_dir.to_str().unwrap(),
        ];
        args.extend_from_slice(topo);
        let stdout = ok(&replay(&args));
        (stdout, report(&out_dir)["topology"].clone())
    };

    let (stdout, t) = run("one-rack", &["--cluster", "311x8"]);
    assert!(
        stdout.contains("topology: --cluster 1x311x8: 311 servers in 1 rack, 2488 GPUs\n"),
        "{stdout}"
    );
    assert_eq!(
        (&t["servers"], &t["racks"], &t["gpus"]),
        (&Value::from(311), &Value::from(1), &Value::from(2488))
    );
    assert!(t["grouping"].is_null(), "{t}");

    let (_, t) = run("racks", &["--cluster", "4x8x8"]);
    assert_eq!(
        (&t["servers"], &t["racks"], &t["gpus"]),
        (&Value::from(32), &Value::from(4), &Value::from(256))
    );
    assert_eq!(t["source"], "--cluster 4x8x8");
    assert_eq!(t["shape"], "32 servers in 4 racks, 256 GPUs");

    // Three machines (8, 8 and 2 GPUs) in racks of two.
    let machines = file(&d, "m.csv", MACHINES);
    let (stdout, t) = run(
        "consecutive",
        &[
            "--machines",
            &machines,
            "--rack-grouping",
            "consecutive",
            "--rack-size",
            "2",
        ],
    );
    assert_eq!(t["grouping"], "consecutive, 2 per rack");
    assert_eq!(t["racks"], 2);
    assert!(
        stdout.contains("3 servers in 2 racks, 18 GPUs (consecutive, 2 per rack)"),
        "{stdout}"
    );
    let (_, t) = run("same-sku", &["--machines", &machines, "--rack-size", "2"]);
    assert_eq!(t["grouping"], "same-sku, 2 per rack");
    assert_eq!(t["racks"], 2, "the 8-GPU pair and the 2-GPU machine");

    let out = d.to_str().unwrap();
    let err = failed(&replay(&["--cluster", "4x0x8", "--out", out]));
    assert!(
        err.contains("the number of servers per rack must be at least 1"),
        "{err}"
    );
    let err = failed(&replay(&[
        "--cluster",
        "4x8x8",
        "--machines",
        &machines,
        "--out",
        out,
    ]));
    assert!(err.contains("cannot be used with"), "{err}");
    let err = failed(&replay(&["--rack-grouping", "by-color", "--out", out]));
    assert!(
        err.contains("same-sku") && err.contains("consecutive"),
        "{err}"
    );
}

/// `--jobs` (and `--skip`) read a trace in submit order only as far as the
/// window needs: a malformed line beyond it is never parsed, one within it
/// is still an error naming the file and the line.
#[test]
fn a_window_reads_no_further_than_it_needs() {
    let d = dir("window");
    let mut text = String::from("id,submit_s,gpus,vc,user,attempts,status\n");
    for i in 0..1500 {
        if i + 2 == 1000 {
            text.push_str("broken,not-a-time,1,v,u,60,passed\n");
        } else {
            text.push_str(&format!("j{i},{},1,v,u,60,passed\n", i * 10));
        }
    }
    let trace = file(&d, "jobs.csv", &text);
    let out = d.to_str().unwrap();
    let args = |window: &[&'static str]| {
        let mut a = vec![
            "--trace",
            trace.as_str(),
            "--format",
            "csv",
            "--native",
            "--no-plots",
        ];
        a.extend_from_slice(window);
        a.extend_from_slice(&["--out", out]);
        a
    };
    ok(&replay(&args(&["--jobs", "10"])));
    assert_eq!(report(&d)["workload"]["jobs"], 10);
    let err = failed(&replay(&args(&["--skip", "995", "--jobs", "10"])));
    assert!(
        err.contains(&format!(
            "{trace}:1000: submit_s \"not-a-time\" is not a valid number"
        )),
        "{err}"
    );
    let err = failed(&replay(&args(&[])));
    assert!(err.contains(&format!("{trace}:1000: ")), "{err}");
}

/// The default main job (`replay` with no workload arguments; natively here,
/// the same decisions as the Wasm modules, so the test stays fast) shows
/// what the study is about: both kinds of queueing delay in every size
/// bucket that can have them, fragmentation's share of delay events rising
/// with job size, waits from seconds to hours, quotas that bind (VCs borrow
/// beyond their quota and are reclaimed) and a busy cluster.
#[test]
fn the_default_run_shows_the_studys_contention() {
    let d = dir("default");
    let out = d.to_str().unwrap();
    ok(&replay(&["--native", "--no-plots", "--out", out]));
    let report = report(&d);
    assert!(
        report["workload"]["source"]
            .as_str()
            .unwrap()
            .contains("time scale 0.65 (the study's load"),
        "{}",
        report["workload"]["source"]
    );
    let run = &report["runs"][0];
    let bucket = |b: &str| &run["by_size"][b];
    let events = |b: &str, kind: &str| bucket(b)[format!("{kind}_events")].as_u64().unwrap();
    let share = |b: &str| {
        let f = events(b, "fragmentation") as f64;
        f / (f + events(b, "fair_share") as f64)
    };
    assert!(events("1", "fair_share") > 0, "1-GPU jobs wait for quota");
    for b in ["2-4", "5-8", ">8"] {
        assert!(events(b, "fair_share") > 0, "{b}: fair-share delay");
        assert!(events(b, "fragmentation") > 0, "{b}: fragmentation delay");
    }
    let (s24, s58, s8) = (share("2-4"), share("5-8"), share(">8"));
    assert!(s24 < s58 && s58 < s8, "{s24:.3} {s58:.3} {s8:.3}");
    // Waits spread over minutes to hours (the paper's Figure 3 spans 0.1 to
    // 10^4 minutes): large gangs' p90 is an hour or more, and some wait
    // hours.
    let q = |b: &str, p: &str| bucket(b)["queue_delay_s"][p].as_f64().unwrap();
    assert!(
        q("1", "p50") < 60.0,
        "most 1-GPU jobs start within a minute"
    );
    assert!(q("5-8", "p90") >= 1_800.0 && q(">8", "p90") >= 1_800.0);
    assert!(q("5-8", "p99") >= 4.0 * 3_600.0, "{}", q("5-8", "p99"));
    // Quotas bind: VCs run beyond their quota on idle GPUs and are reclaimed.
    assert!(run["reclaim"]["preemptions"].as_u64().unwrap() > 0);
    let vcs = run["per_vc"].as_object().unwrap();
    let held = |v: &Value| v["mean_gpus_held"].as_f64().unwrap();
    let quota = |v: &Value| v["quota_gpus"].as_f64().unwrap();
    assert!(vcs.values().any(|v| held(v) > quota(v)), "some VC borrows");
    assert!(vcs.values().any(|v| held(v) < quota(v)), "some VC lends");
    assert!(run["gpu_allocation_mean"].as_f64().unwrap() > 0.85);
}

/// A retry policy answering every failure with one action.
struct Always(gangway_plugin_sdk::RetryAction);

impl gangway_plugin_sdk::RetryPolicy for Always {
    fn retry(&self, view: &gangway_plugin_sdk::RetryView) -> gangway_plugin_sdk::RetryDecision {
        gangway_plugin_sdk::RetryDecision {
            actions: vec![self.0; view.failures.len()],
        }
    }
}

#[test]
fn retry_delays_at_or_beyond_the_contracts_limit_cannot_end_a_replay() {
    use gangway_core::policy::{Native, PolicySet};
    use gangway_plugin_sdk::{Retry, RetryAction};
    use gangway_replay::sim::{self, SimConfig};
    use gangway_replay::workload;

    let trace = workload::generate(600, 3);
    let failures = trace.jobs.iter().filter(|j| j.attempts.len() > 1).count();
    assert!(failures > 0, "the workload has failed attempts to retry");
    for (action, refused) in [
        (RetryAction::Retry { after_s: u64::MAX }, true),
        (
            RetryAction::Probe {
                gpus: 1,
                run_s: u64::MAX,
                after_s: 0,
            },
            true,
        ),
        (
            RetryAction::Retry {
                after_s: RetryAction::MAX_DELAY_S,
            },
            false,
        ),
    ] {
        let set =
            PolicySet::fallbacks().with::<Retry>(Box::new(Native::new("always", Always(action))));
        let topo = workload::philly_topology().unwrap();
        let result = sim::run(topo, &trace, set, &SimConfig::default(), |_| {})
            .unwrap_or_else(|e| panic!("{action:?}: the replay ended: {e}"));
        assert_eq!(result.jobs.len(), trace.jobs.len(), "{action:?}");
        assert!(
            result.jobs.iter().all(|j| j.status.is_some()),
            "{action:?}: a job never ended"
        );
        assert_eq!(result.policy_errors > 0, refused, "{action:?}");
    }
}

#[test]
fn frequent_server_failures_end_with_every_job_resumed_from_checkpoints() {
    use gangway_core::policy::PolicySet;
    use gangway_replay::sim::{self, SimConfig};
    use gangway_replay::workload;

    let trace = workload::generate(1500, 5);
    let cfg = SimConfig {
        server_mtbf_s: Some(50 * 3600),
        ..SimConfig::default()
    };
    assert!(cfg.checkpoint_s > 0);
    let run = || {
        let topo = workload::philly_topology().unwrap();
        sim::run(topo, &trace, PolicySet::fallbacks(), &cfg, |_| {}).unwrap()
    };
    let result = run();
    assert!(
        result.jobs.iter().all(|j| j.status.is_some()),
        "a job never ended under server failures"
    );
    let interrupted = result.jobs.iter().filter(|j| j.failed_gpu_s > 0).count();
    assert!(interrupted > 0, "no job was ever interrupted");
    // The same failures, the same outcome.
    let again = run();
    let finish = |r: &sim::RunResult| r.jobs.iter().map(|j| j.finish_s).collect::<Vec<_>>();
    assert_eq!(finish(&result), finish(&again));
}

#[test]
fn each_compared_set_can_have_its_own_configuration() {
    let d = dir("per-entry-config");
    let las = file(
        &d,
        "las.toml",
        "thresholds_gpu_s = [60]\npromote_after_s = 600\n",
    );
    let base = [
        "--jobs",
        "1200",
        "--seed",
        "3",
        "--time-scale",
        "0.3",
        "--native",
        "--no-plots",
    ];
    // The global --config reaches every set, and vc-quota refuses LAS's keys:
    // the error names the set and says how to configure one set alone.
    let mut args = base.to_vec();
    let both = d.join("both");
    let global = format!("fairness={las}");
    args.extend([
        "--compare",
        "philly,philly+fairness=las",
        "--config",
        &global,
        "--out",
        both.to_str().unwrap(),
    ]);
    let err = failed(&replay(&args));
    assert!(err.contains("policy set \"philly\""), "{err}");
    assert!(err.contains("SLOT=POLICY@FILE"), "{err}");

    // Per entry: only the LAS set gets the file, and it decides as the same
    // set run alone with --config.
    let mut args = base.to_vec();
    let entry = format!("philly+fairness=las@{las}");
    let cmp = d.join("cmp");
    let spec = format!("philly,{entry}");
    args.extend(["--compare", &spec, "--out", cmp.to_str().unwrap()]);
    ok(&replay(&args));
    let mut args = base.to_vec();
    let alone = d.join("alone");
    args.extend([
        "--policies",
        "philly+fairness=las",
        "--config",
        &global,
        "--out",
        alone.to_str().unwrap(),
    ]);
    ok(&replay(&args));
    // A run as reported, but for its name (which spells its entry).
    let run = |r: &Value, i: usize| {
        let mut run = r["runs"][i].clone();
        run.as_object_mut().unwrap().remove("name");
        run
    };
    let (cmp, alone) = (report(&cmp), report(&alone));
    assert_eq!(cmp["runs"][1]["policies"]["fairness"], "las");
    assert_eq!(run(&cmp, 1), run(&alone, 0));
    // The default thresholds decide differently from the file's.
    let mut args = base.to_vec();
    let defaults = d.join("defaults");
    args.extend([
        "--policies",
        "philly+fairness=las",
        "--out",
        defaults.to_str().unwrap(),
    ]);
    ok(&replay(&args));
    assert_ne!(run(&report(&defaults), 0), run(&alone, 0));

    // A file that cannot be read is named.
    let mut args = base.to_vec();
    args.extend(["--compare", "philly,philly+fairness=las@no/such.toml"]);
    let err = failed(&replay(&args));
    assert!(err.contains("no/such.toml"), "{err}");
}

/// A module's fuel over the whole run is bounded: past `--policy-fuel` its
/// slot falls back to the built-in policy and the module is quarantined;
/// the replay ends with every job, reports it, and does so identically
/// every time (fuel is deterministic).
#[test]
fn a_module_past_its_fuel_for_the_run_is_quarantined_and_the_replay_ends() {
    let d = dir("policy-fuel");
    let run = |name: &str| {
        let out = d.join(name);
        ok(&replay(&[
            "--jobs",
            "1500",
            "--policy-fuel",
            "30000000",
            "--no-plots",
            "--out",
            out.to_str().unwrap(),
        ]));
        std::fs::read(out.join("report.json")).unwrap()
    };
    let (a, b) = (run("a"), run("b"));
    assert_eq!(a, b, "the same bound quarantines at the same time");
    let r: Value = serde_json::from_slice(&a).unwrap();
    let run = &r["runs"][0];
    let quarantines = run["quarantines"].as_array().unwrap();
    assert_eq!(quarantines.len(), 1, "{quarantines:?}");
    // The hungriest module of the preset on this workload.
    let module = quarantines[0]["module"].as_str().unwrap();
    assert!(module.starts_with("vc-quota@"), "{module}");
    assert!(
        quarantines[0]["error"]
            .as_str()
            .unwrap()
            .contains("used up its fuel for the run or period"),
        "{quarantines:?}"
    );
    let jobs = &run["jobs"];
    assert_eq!(jobs["unfinished"], 0);
    assert_eq!(jobs["never_started"], 0);
    assert_eq!(jobs["submitted"], 1500);
}
