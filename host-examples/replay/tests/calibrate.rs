//! `replay calibrate`: a small calibration is deterministic, its best fit is
//! no worse than its start on its worst training window, and it reports
//! the held-out windows and the sensitivity replays; `--fit` adds a fit
//! that could fail to every run.
#![allow(clippy::unwrap_used)]

use gangway_replay::calibrate::command::{self, CalibrateCli};
use gangway_replay::calibrate::search::{
    PHILLY_CALIBRATION, Plan, Spec, calibrate, local_evaluator,
};

fn out(tag: &str) -> String {
    std::env::temp_dir()
        .join(format!(
            "gangway-calibrate-test-{tag}-{}",
            std::process::id()
        ))
        .display()
        .to_string()
}

const SMALL: &str = "candidates = 5\nrefine_share = 0.4\nseed = 3\n\
    [knobs]\ntime_scale = [0.5, 1.0]\nfirst_widen_s = [60, 1800]\ndeadline_spread = [0.0, 1.0]\n\
    lend = [true, false]\n[start]\ntime_scale = 0.8\n";

#[test]
fn a_small_calibration_is_deterministic_and_never_worse_than_its_start() {
    let spec = Spec::parse(SMALL, "test").unwrap();
    let plan = Plan::new(
        ["--jobs", "1200", "--cluster", "4x8x8", "--seed", "5"]
            .map(String::from)
            .to_vec(),
        "philly",
        &spec,
        true,
    )
    .unwrap();
    assert_eq!(plan.train[0].args, ["--jobs", "1200", "--seed", "5"]);
    assert_eq!(plan.holdout[0].args, ["--jobs", "1200", "--seed", "6"]);
    let mut evaluate = local_evaluator(2);
    let a = calibrate(&spec, &plan, &mut evaluate, &mut |_| {}).unwrap();
    let b = calibrate(&spec, &plan, &mut evaluate, &mut |_| {}).unwrap();
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap(),
        "the same calibration twice gives the same record"
    );
    assert_eq!(a.candidates.len(), 5);
    assert_eq!(a.candidates[0].stage, 0);
    assert!(
        a.candidates.iter().all(|c| c.error.is_none()),
        "{:?}",
        a.candidates
    );
    let start = a.candidates[0].score.unwrap();
    assert!(
        a.best.score <= start,
        "best {} vs start {start}",
        a.best.score
    );
    assert_eq!(a.start.score, start);
    assert_eq!(a.start.train[0].fit.score, start, "one window, one load");
    // The candidates differ (the search moved) and the best is reported on
    // the held-out window, with the same items as on the training one.
    let scores: std::collections::BTreeSet<String> = a
        .candidates
        .iter()
        .map(|c| format!("{:?}", c.score))
        .collect();
    assert!(scores.len() > 1, "{scores:?}");
    let held = &a.best.holdout[0].fit;
    assert_eq!(held.items, a.best.train[0].fit.items);
    assert!(a.table().contains("seed 6 held-out"), "{}", a.table());
    assert!(
        a.sensitivity.is_none(),
        "the spec asks for no sensitivity replays"
    );
}

/// Two training windows (the halves of a 600-job log), a held-out one
/// across them, two loads, and a small sensitivity report.
const TWO_WINDOWS: &str = "candidates = 4\nrefine_share = 0.25\nseed = 7\n\
    [knobs]\ntime_scale = [0.4, 1.2]\nfirst_widen_s = [60, 1800]\ndeadline_spread = [0.0, 1.0]\n\
    [start]\ntime_scale = 1.0\nfirst_widen_s = 600\n\
    [windows]\ntrain = [[0, 0.5], [0.5, 1]]\nloads = [0.9, 1.0]\nholdout = [[0.25, 0.75]]\n\
    [sensitivity]\ntime_scale = [1.1, 0.9, 1.0]\nquota_factor = [0.8, 1.2]\nwindow = [0, 1]\n";

#[test]
fn a_calibration_over_two_windows_is_deterministic_and_no_worse_on_the_worst_window() {
    let dir = std::path::PathBuf::from(out("two-windows"));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("log.json");
    std::fs::write(&log, philly_log(600)).unwrap();
    let spec = Spec::parse(TWO_WINDOWS, "test").unwrap();
    let args = [
        "--trace",
        log.to_str().unwrap(),
        "--format",
        "philly",
        "--jobs",
        "600",
    ];
    let mut args: Vec<String> = args.map(String::from).to_vec();
    args.extend(["--cluster", "2x8x8"].map(String::from));
    let plan = Plan::new(args, "philly", &spec, true).unwrap();
    let windows: Vec<(&str, &[String])> = plan
        .train
        .iter()
        .chain(&plan.holdout)
        .map(|w| (w.name.as_str(), w.args.as_slice()))
        .collect();
    let jobs = |skip: &str, n: &str| ["--skip", skip, "--jobs", n].map(String::from);
    assert_eq!(windows[0], ("0..0.5", jobs("0", "300").as_slice()));
    assert_eq!(windows[1], ("0.5..1", jobs("300", "300").as_slice()));
    assert_eq!(windows[2], ("0.25..0.75", jobs("150", "300").as_slice()));
    let mut evaluate = local_evaluator(2);
    let a = calibrate(&spec, &plan, &mut evaluate, &mut |_| {}).unwrap();
    let b = calibrate(&spec, &plan, &mut evaluate, &mut |_| {}).unwrap();
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap(),
        "the same calibration twice gives the same record"
    );
    // Every candidate is scored on both windows at both loads, and its
    // score is the worst of the four.
    for c in &a.candidates {
        assert_eq!(c.scores.len(), 4, "{c:?}");
        let worst = c.scores.iter().copied().fold(f64::MIN, f64::max);
        assert_eq!(c.score, Some(worst), "{c:?}");
    }
    // The best is no worse than the start on its worst window.
    assert!(
        a.best.spread.worst <= a.start.spread.worst,
        "best {:?} vs start {:?}",
        a.best.spread,
        a.start.spread
    );
    assert_eq!(a.best.score, a.best.spread.worst);
    assert!(a.best.spread.best <= a.best.spread.median);
    let loads: Vec<(String, f64)> = a
        .best
        .train
        .iter()
        .map(|w| (w.window.clone(), w.load))
        .collect();
    assert_eq!(loads[1], ("0..0.5".to_string(), 1.0));
    assert_eq!(loads[2], ("0.5..1".to_string(), 0.9));
    // The load moves the time scale the replay ran at.
    let time_scale = |w: &gangway_replay::calibrate::search::WindowFit| {
        let i = w.args.iter().position(|x| x == "--time-scale").unwrap();
        w.args[i + 1].parse::<f64>().unwrap()
    };
    let (low, at_one) = (time_scale(&a.best.train[0]), time_scale(&a.best.train[1]));
    assert!((low - at_one * 0.9).abs() < 0.001, "{low} vs {at_one}");
    // The held-out window, never replayed by the search.
    assert_eq!(a.best.holdout.len(), 1);
    assert_eq!(a.best.holdout[0].args[..4], jobs("150", "300"));
    // The sensitivity report: the time scale's points in increasing
    // factor, then the quota factor's, each with its own fit.
    let s = a.sensitivity.as_ref().unwrap();
    let factors: Vec<(String, f64)> = s
        .points
        .iter()
        .map(|p| (p.knob.as_str().to_string(), p.factor))
        .collect();
    let expect = [
        ("time_scale", 0.9),
        ("time_scale", 1.0),
        ("time_scale", 1.1),
        ("quota_factor", 0.8),
        ("quota_factor", 1.2),
    ];
    assert_eq!(
        factors,
        expect.map(|(k, f)| (k.to_string(), f)).to_vec(),
        "{factors:?}"
    );
    assert!((s.points[1].value - at_one).abs() < 0.001);
    assert!(
        s.points
            .iter()
            .all(|p| p.fit.items == a.best.train[0].fit.items)
    );
    assert!(s.points.iter().all(|p| p.gpu_allocation_mean > 0.0));
    let table = a.table();
    assert!(table.contains("0.25..0.75 (held out)"), "{table}");
    assert!(table.contains("sensitivity on whole"), "{table}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn calibrate_refuses_knob_flags_and_a_trace_without_a_window() {
    let spec = Spec::parse("", "empty").unwrap();
    let e = Plan::new(
        ["--time-scale", "0.5"].map(String::from).to_vec(),
        "philly",
        &spec,
        true,
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("calibrate sets --time-scale itself"),
        "{e}"
    );
    let e = Plan::new(
        ["--trace", "t.csv"].map(String::from).to_vec(),
        "philly",
        &spec,
        true,
    )
    .unwrap_err();
    assert!(e.to_string().contains("--jobs N"), "{e}");
    let cli =
        CalibrateCli::from_args(["--targets", "/nonexistent.toml", "--", "--jobs", "100"]).unwrap();
    let e = command::run_local(&cli).unwrap_err();
    assert!(e.to_string().contains("/nonexistent.toml"), "{e}");
}

#[test]
fn fit_is_in_the_report_and_can_fail() {
    let dir = out("fit");
    let json = gangway_replay::json::replay_json([
        "--jobs",
        "1500",
        "--cluster",
        "4x8x8",
        "--native",
        "--no-plots",
        "--quiet",
        "--fit",
        "philly",
        "--out",
        &dir,
    ])
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let fit = &v["runs"][0]["fit"];
    assert_eq!(fit["targets"], "philly");
    let items = fit["detail"].as_array().unwrap();
    // 3 groups x (4 quantiles + the single-bin share), 3 Table 2 shares,
    // 2 one-server shares, and GPU time by 3 statuses (the generator has them).
    assert_eq!(items.len(), 23, "{items:?}");
    assert_eq!(fit["items"], 23);
    let met = items.iter().filter(|i| i["met"] == true).count();
    assert_eq!(fit["met"], met);
    assert!(
        met < items.len(),
        "a small cluster does not match Philly everywhere"
    );
    for i in items {
        let e = i["error"].as_f64().unwrap();
        assert_eq!(i["met"] == true, e <= 1.0, "{i}");
    }
    // What reproduces it: the arguments that shape results, not --out.
    let args: Vec<&str> = v["reproduce"]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args, ["--cluster=4x8x8", "--jobs=1500", "--fit=philly"]);
    assert_eq!(v["reproduce"]["time_scale"], 0.65);
    let quotas = v["reproduce"]["quotas"].as_str().unwrap();
    assert!(quotas.starts_with("demand: each VC's share"), "{quotas}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--quotas helios`: the Helios artifact's Philly VC sizes (nodes of 8
/// GPUs), said in the report, with the file's hash among the inputs.
#[test]
fn helios_quotas_are_the_cited_vc_sizes() {
    let Some(data) = std::env::var_os("GANGWAY_DATA") else {
        eprintln!("SKIPPED helios quotas: GANGWAY_DATA is not set");
        return;
    };
    let philly = std::path::Path::new(&data).join("philly");
    let p = |f: &str| philly.join(f).display().to_string();
    let dir = out("helios");
    let json = gangway_replay::json::replay_json([
        "--trace",
        &p("rfold_philly_trace.csv"),
        "--format",
        "rfold",
        "--vcs",
        &p("adaptdl_philly.csv"),
        "--skip",
        "20000",
        "--jobs",
        "2000",
        "--quotas",
        "helios",
        "--native",
        "--no-plots",
        "--quiet",
        "--out",
        &dir,
    ])
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let quota = |vc: &str| v["runs"][0]["per_vc"][vc]["quota_gpus"].as_u64();
    // helios_philly_vc.csv: 6214e9 64 nodes, 11cb48 16, ed69ec 8.
    assert_eq!(quota("6214e9"), Some(512));
    assert_eq!(quota("11cb48"), Some(128));
    assert_eq!(quota("ed69ec"), Some(64));
    let said = v["reproduce"]["quotas"].as_str().unwrap();
    assert!(
        said.starts_with("helios: the Helios artifact's Philly VC sizes"),
        "{said}"
    );
    assert!(said.contains("11 VCs, 352 nodes of 8 GPUs"), "{said}");
    let input = v["reproduce"]["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["role"] == "quotas")
        .unwrap();
    assert!(
        input["path"]
            .as_str()
            .unwrap()
            .ends_with("helios_philly_vc.csv")
    );
    assert_eq!(
        input["sha256"],
        "a6873abd7d94a09c646961ad7a0f011faf4069dcdf0c1f7717521613fd6156f7"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_study_window_calibrates_with_the_real_trace() {
    let Some(dir) = std::env::var_os("GANGWAY_DATA") else {
        eprintln!("SKIPPED calibration on the RFold trace: GANGWAY_DATA is not set");
        return;
    };
    let philly = std::path::Path::new(&dir).join("philly");
    let trace = philly.join("rfold_philly_trace.csv").display().to_string();
    let vcs = philly.join("adaptdl_philly.csv").display().to_string();
    let dir = out("study");
    std::fs::create_dir_all(&dir).unwrap();
    // The built-in knobs and ranges on small windows: the halves of 8,000
    // jobs and the 2,000 after them held out, at one load.
    let mut spec: toml::Table = toml::from_str(PHILLY_CALIBRATION).unwrap();
    let windows = "train = [[0, 0.5], [0.5, 1]]\nloads = [1.0]\nholdout = [[1, 1.25]]";
    spec.insert(
        "windows".into(),
        toml::Value::Table(toml::from_str(windows).unwrap()),
    );
    let sensitivity = "time_scale = [0.95, 1.05]\nquota_factor = []\nwindow = [0, 0.5]";
    let sensitivity = toml::Value::Table(toml::from_str(sensitivity).unwrap());
    spec.insert("sensitivity".into(), sensitivity);
    let spec_file = format!("{dir}/spec.toml");
    std::fs::write(&spec_file, toml::to_string(&spec).unwrap()).unwrap();
    let cli = CalibrateCli::from_args([
        "--spec",
        &spec_file,
        "--candidates",
        "4",
        "--quiet",
        "--out",
        &dir,
        "--",
        "--trace",
        &trace,
        "--format",
        "rfold",
        "--vcs",
        &vcs,
        "--skip",
        "10071",
        "--jobs",
        "8000",
    ])
    .unwrap();
    let json = command::run_local(&cli).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["plan"]["train"][1]["args"][1], "14071");
    assert_eq!(v["plan"]["holdout"][0]["args"][1], "18071");
    assert_eq!(v["plan"]["holdout"][0]["args"][3], "2000");
    let start = v["start"]["score"].as_f64().unwrap();
    let best = v["best"]["score"].as_f64().unwrap();
    assert!(best <= start, "{best} vs {start}");
    assert!(v["best"]["holdout"][0]["fit"]["score"].as_f64().is_some());
    assert_eq!(v["sensitivity"]["points"].as_array().unwrap().len(), 2);
    assert_eq!(
        std::fs::read_to_string(format!("{dir}/calibrate.json")).unwrap(),
        json
    );
    let svg = std::fs::read_to_string(format!("{dir}/sensitivity.svg")).unwrap();
    assert!(
        svg.contains("waits (min) vs time_scale"),
        "{}",
        &svg[..200.min(svg.len())]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Philly-format job log of `n` jobs: sizes 1 to 16 GPUs, a job every
/// 90 s, first attempts that waited from seconds to hours (seeded), placed
/// on one server or spread, a few killed or failed.
fn philly_log(n: usize) -> String {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        state >> 33
    };
    let at = |s: u64| {
        let (d, s) = (s / 86_400, s % 86_400);
        format!(
            "2017-10-{:02} {:02}:{:02}:{:02}",
            7 + d,
            s / 3600,
            s / 60 % 60,
            s % 60
        )
    };
    let mut jobs = Vec::new();
    for i in 0..n {
        let r = next();
        let gpus = [1, 1, 1, 1, 2, 4, 4, 8, 8, 16][(r % 10) as usize];
        let servers = if gpus > 8 || (gpus > 1 && next() % 4 == 0) {
            2
        } else {
            1
        };
        let submit = i as u64 * 90;
        // Waits spread over decades: 1 s to about 3 hours.
        let wait = 1 + (next() % 1000).pow(3) / 100_000;
        let run = 300 + next() % 7200;
        let status = ["Pass", "Pass", "Pass", "Pass", "Killed", "Failed"][(next() % 6) as usize];
        let per = gpus / servers;
        let detail: Vec<String> = (0..servers)
            .map(|m| {
                let g: Vec<String> = (0..per).map(|g| format!("\"gpu{g}\"")).collect();
                format!(
                    r#"{{"ip": "m{}", "gpus": [{}]}}"#,
                    (i + m) % 16,
                    g.join(",")
                )
            })
            .collect();
        jobs.push(format!(
            r#"{{"status": "{status}", "vc": "vc{}", "jobid": "application_1_{i}", "user": "u",
              "submitted_time": "{}", "attempts": [{{"start_time": "{}", "end_time": "{}",
              "detail": [{}]}}]}}"#,
            i % 3,
            at(submit),
            at(submit + wait),
            at(submit + wait + run),
            detail.join(",")
        ));
    }
    format!("[{}]", jobs.join(",\n"))
}

/// A user's journey with their own cluster's log: `replay targets` measures
/// it, `replay --fit` compares a replay of the same log with it, and
/// `replay calibrate` fits the model to it.
#[test]
fn targets_measured_in_a_log_are_what_a_replay_of_it_is_fitted_to() {
    use gangway_replay::calibrate::targets::Targets;
    use gangway_replay::calibrate::targets_command::{self, TargetsCli};
    use std::path::PathBuf;

    let dir = PathBuf::from(out("own-log"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("log.json");
    std::fs::write(&log, philly_log(600)).unwrap();
    let file = dir.join("targets.toml");
    let cli = TargetsCli {
        log: log.clone(),
        min_run_s: 0,
        name: "mine".into(),
        out: file.clone(),
    };
    let text = targets_command::run(&cli).unwrap();
    let targets = Targets::named_or_file(file.to_str().unwrap()).unwrap();
    assert_eq!(Targets::parse(&text, "same").unwrap(), targets);
    let buckets: Vec<&str> = targets.first_wait.iter().map(|w| w.name.as_str()).collect();
    assert_eq!(
        buckets,
        ["1", "2-4", "5-8", ">8"],
        "600 jobs fill every bucket"
    );
    assert!(targets.first_wait[0].p99.is_some(), "about 240 1-GPU jobs");
    assert!(targets.first_wait[3].p99.is_none(), "about 60 16-GPU jobs");
    assert_eq!(targets.one_server.len(), 2);
    assert!(targets.gpu_time_by_status.is_some());

    let (log_s, file_s) = (log.to_str().unwrap(), file.to_str().unwrap());
    let report = dir.join("replay");
    let json = gangway_replay::json::replay_json([
        "--trace",
        log_s,
        "--format",
        "philly",
        "--cluster",
        "2x8x8",
        "--native",
        "--no-plots",
        "--quiet",
        "--fit",
        file_s,
        "--out",
        report.to_str().unwrap(),
    ])
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let fit = &v["runs"][0]["fit"];
    assert_eq!(fit["targets"], "mine");
    // 4 buckets x (their quantiles + the single-bin share), 2 one-server
    // shares, GPU time by 3 statuses.
    let quantiles: usize = targets
        .first_wait
        .iter()
        .map(|w| w.quantiles().len() + 1)
        .sum();
    assert_eq!(fit["items"], quantiles + 2 + 3);

    let cal = dir.join("cal");
    let cli = CalibrateCli::from_args([
        "--targets",
        file_s,
        "--candidates",
        "3",
        "--threads",
        "2",
        "--quiet",
        "--out",
        cal.to_str().unwrap(),
        "--",
        "--trace",
        log_s,
        "--format",
        "philly",
        "--jobs",
        "600",
        "--cluster",
        "2x8x8",
        "--native",
    ])
    .unwrap();
    let json = command::run_local(&cli).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["best"]["train"][0]["fit"]["targets"], "mine");
    let score = |w: &str| v[w]["score"].as_f64().unwrap();
    assert!(score("best") <= score("start"));
    assert!(v["best"]["holdout"][0]["fit"]["items"].as_u64().unwrap() > 0);
    // The built-in held-out window after the study window is past this
    // log's end: skipped and said, not a failed calibration.
    assert_eq!(v["best"]["holdout"].as_array().unwrap().len(), 1);
    assert_eq!(v["holdout_skipped"][0]["window"], "1..1.25");
    let reason = v["holdout_skipped"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("no jobs"), "{reason}");
    let _ = std::fs::remove_dir_all(&dir);
}
