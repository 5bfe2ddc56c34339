//! The `replay` binary on clusters of several GPU types: `--cluster` with
//! typed parts, a machine list's memory column, and Gavel's traces with
//! their throughput table (`$GANGWAY_DATA/gavel`).
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

mod common;
use common::{dir, ok, replay, report};

/// Jobs of 1 to 8 GPUs: an 8-GPU gang fits the `a100` server or both
/// `v100` servers.
const JOBS: &str = "id,submit_s,gpus,vc,user,attempts,status\n\
    j1,0,8,a,alice,3600,passed\n\
    j2,10,4,b,,600,passed\n\
    j3,20,1,b,bob,60,passed\n\
    j4,30,8,a,alice,1200,passed\n\
    j5,40,2,b,bob,300,passed\n";

#[test]
fn a_typed_cluster_replays_and_reports_each_type() {
    let d = dir("typed");
    let trace = d.join("jobs.csv");
    std::fs::write(&trace, JOBS).unwrap();
    let out_dir = d.join("out");
    let args = [
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "csv",
        "--cluster",
        "2x4:v100,1x8:a100@80",
        "--out",
        out_dir.to_str().unwrap(),
        "--native",
        "--no-plots",
    ];
    let stdout = ok(&replay(&args));
    assert!(stdout.contains("replayed"), "{stdout}");
    let r = report(&out_dir);
    let run = &r["runs"][0];
    assert_eq!(run["jobs"]["submitted"], 5);
    assert_eq!(run["jobs"]["never_started"], 0);
    let types = run["gpu_types"]["types"].as_array().unwrap();
    let names: Vec<_> = types.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["v100", "a100"]);
    assert_eq!(types[0]["gpus"], 8);
    assert_eq!(types[1]["gpus"], 8);
    // The first 8-GPU job takes the a100 server (one server beats two);
    // the second, while it runs, both v100 servers.
    assert!(
        types[1]["used_gpu_s"].as_u64().unwrap() >= 8 * 3_600,
        "{run}"
    );
    assert_eq!(run["by_size"]["5-8"]["servers_spanned"]["2"], 1, "{run}");
    let jobs: u64 = types.iter().map(|t| t["jobs"].as_u64().unwrap()).sum();
    assert_eq!(jobs, 5);
    // Same inputs, same bytes.
    let again = d.join("again");
    let mut args2 = args;
    args2[7] = again.to_str().unwrap();
    ok(&replay(&args2));
    assert_eq!(
        std::fs::read(out_dir.join("report.json")).unwrap(),
        std::fs::read(again.join("report.json")).unwrap()
    );
}

#[test]
fn a_cluster_of_one_type_has_no_type_section() {
    let d = dir("untyped");
    let trace = d.join("jobs.csv");
    std::fs::write(&trace, JOBS).unwrap();
    for (name, cluster) in [("plain", "2x8"), ("one-type", "2x8:v100")] {
        let out_dir = d.join(name);
        ok(&replay(&[
            "--trace",
            trace.to_str().unwrap(),
            "--format",
            "csv",
            "--cluster",
            cluster,
            "--out",
            out_dir.to_str().unwrap(),
            "--native",
            "--no-plots",
        ]));
        let r = report(&out_dir);
        assert!(r["runs"][0].get("gpu_types").is_none(), "{name}");
    }
}

#[test]
fn a_gang_no_type_can_hold_is_refused_with_its_name() {
    let d = dir("refused");
    let trace = d.join("jobs.csv");
    // 16 GPUs in all, but 8 of each type: a gang of 12 fits no type.
    std::fs::write(
        &trace,
        "id,submit_s,gpus,vc,user,attempts,status\nbig,0,12,a,,60,passed\n",
    )
    .unwrap();
    let out = replay(&[
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "csv",
        "--cluster",
        "2x4:v100,1x8:a100",
        "--out",
        d.join("out").to_str().unwrap(),
        "--native",
        "--no-plots",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a 12-GPU gang on 8 + 8 GPUs must fail"
    );
    assert!(
        stderr.contains("big") && stderr.contains("12 GPUs of one type do not fit"),
        "{stderr}"
    );
}

fn gavel_data() -> Option<PathBuf> {
    match std::env::var_os("GANGWAY_DATA") {
        Some(d) => Some(PathBuf::from(d).join("gavel")),
        None => {
            eprintln!(
                "SKIPPED Gavel trace: GANGWAY_DATA is not set (CI sets it to ../shared/data)"
            );
            None
        }
    }
}

#[test]
fn a_gavel_trace_runs_at_each_types_speed() {
    let Some(g) = gavel_data() else { return };
    let d = dir("gavel");
    let out_dir = d.join("out");
    let trace = g.join("msr/seed0/0e4a51.trace");
    let table = g.join("simulation_throughputs.json");
    let stdout = ok(&replay(&[
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "gavel",
        "--throughputs",
        table.to_str().unwrap(),
        "--cluster",
        "8x1:k80,8x1:p100,8x1:v100",
        "--jobs",
        "300",
        "--out",
        out_dir.to_str().unwrap(),
        "--native",
        "--no-plots",
    ]));
    assert!(stdout.contains("replayed"), "{stdout}");
    let r = report(&out_dir);
    let run = &r["runs"][0];
    let types = run["gpu_types"]["types"].as_array().unwrap();
    assert_eq!(types.len(), 3);
    // 300 jobs of 1 to 4 GPUs on 24 GPUs: every type is used.
    for t in types {
        assert!(t["used_gpu_s"].as_u64().unwrap() > 0, "{t}");
    }
    let jobs: u64 = types.iter().map(|t| t["jobs"].as_u64().unwrap()).sum();
    assert_eq!(run["jobs"]["submitted"], 300);
    assert!(jobs > 0 && jobs <= 300, "{jobs}");
    // Without the table a Gavel trace is refused, saying why.
    let out = replay(&[
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "gavel",
        "--cluster",
        "30x1:k80",
        "--out",
        d.join("none").to_str().unwrap(),
        "--native",
        "--no-plots",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--throughputs"));
}

/// Contract 2.2 end to end: `het-max-min`, which takes the GPU types, on
/// a Gavel trace with its speeds gives the same report natively and as a
/// Wasm module (the types and its choices cross the sandbox), and its
/// type-blind option runs beside it with `--compare`.
#[test]
fn het_max_min_runs_the_same_natively_and_as_wasm_and_beside_its_blind_option() {
    let Some(g) = gavel_data() else { return };
    let d = dir("het-max-min");
    let trace = g.join("msr/seed0/0e4a51.trace");
    let table = g.join("simulation_throughputs.json");
    let blind = d.join("blind.toml");
    std::fs::write(&blind, "type_blind = true\n").unwrap();
    let run = |out: &str, extra: &[&str]| {
        let out_dir = d.join(out);
        let mut args = vec![
            "--trace",
            trace.to_str().unwrap(),
            "--format",
            "gavel",
            "--throughputs",
            table.to_str().unwrap(),
            "--cluster",
            "8x1:k80,8x1:p100,8x1:v100",
            "--jobs",
            "200",
            "--out",
            out_dir.to_str().unwrap(),
            "--no-plots",
        ];
        args.extend_from_slice(extra);
        ok(&replay(&args));
        let mut r = report(&out_dir);
        for key in ["commit", "timing", "run", "policies"] {
            r.as_object_mut().unwrap().remove(key);
        }
        if let Some(rep) = r.get_mut("reproduce").and_then(|v| v.as_object_mut()) {
            rep.remove("commit");
        }
        r
    };
    let policies = ["--fairness", "het-max-min", "--reclaim", "het-max-min"];
    let native = run("native", &[&policies[..], &["--native"]].concat());
    let wasm = run("wasm", &policies);
    assert_eq!(
        native["runs"], wasm["runs"],
        "native and Wasm reports differ"
    );
    let aware = "philly+fairness=het-max-min+reclaim=het-max-min".to_string();
    let blind_set = format!(
        "philly+fairness=het-max-min@{0}+reclaim=het-max-min@{0}",
        blind.display()
    );
    let both = run(
        "compare",
        &["--native", "--compare", &format!("{aware},{blind_set}")],
    );
    let runs = both["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for r in runs {
        assert_eq!(r["jobs"]["submitted"], 200, "{r}");
    }
}
