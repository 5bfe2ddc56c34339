//! Gavel's Philly-derived traces (`scheduler/traces/msr/seed=0/<vc>.trace`
//! in stanford-futuredata/gavel): one tab-separated line per job, one file
//! per virtual cluster (its name is the file's stem). The files have seven
//! columns:
//!
//! `job class \t command \t steps flag \t needs a data dir (0/1) \t total steps \t arrival (s) \t scale factor (GPUs)`
//!
//! (read off the data: the fourth column is 0 exactly for the A3C jobs,
//! which read no data set, and the last holds the gang sizes Philly has, 1
//! to 64). A job's work is its steps; its run time on a GPU type is the
//! steps over its class's throughput there ([`Throughputs`]). No line
//! records a GPU type or a memory demand: a job may run on every type whose
//! throughput for it is not 0.
//!
//! A file's last line cut short (fewer columns and no line end: the
//! published `ee9e8c.trace` ends so) is reported as a skipped job; a
//! malformed line anywhere else is an error naming its file and line.

use std::path::Path;

use super::{Attempt, Outcome, SkippedJob, Trace, TraceError, TraceJob, Work};
use crate::throughputs::Throughputs;

/// Columns of a line.
const COLUMNS: usize = 7;

/// Reads a Gavel trace: one `.trace` file, or a directory of them (in name
/// order); each file's jobs belong to the VC its stem names.
pub fn load(path: &Path, throughputs: &Throughputs) -> Result<Trace, TraceError> {
    let files = if path.is_dir() {
        let mut files: Vec<_> = std::fs::read_dir(path)
            .map_err(|source| TraceError::Io {
                file: path.display().to_string(),
                source,
            })?
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "trace"))
            .collect();
        files.sort();
        files
    } else {
        vec![path.to_path_buf()]
    };
    let mut trace = Trace::default();
    for f in &files {
        let file = f.display().to_string();
        let text = std::fs::read_to_string(f).map_err(|source| TraceError::Io {
            file: file.clone(),
            source,
        })?;
        let vc = f.file_stem().map_or_else(
            || "default".to_string(),
            |s| s.to_string_lossy().into_owned(),
        );
        read_into(&mut trace, &file, &vc, &text, throughputs)?;
    }
    if trace.jobs.is_empty() {
        return Err(TraceError::Empty {
            file: path.display().to_string(),
        });
    }
    trace.normalize();
    Ok(trace)
}

/// Reads the lines of one file of VC `vc` into `trace`.
///
/// ```
/// use gangway_replay::throughputs::Throughputs;
/// use gangway_replay::trace::{Trace, read_gavel};
/// let t = Throughputs::parse("t.json", r#"{"k80": {"('A3C', 1)": {"null": 0.5}}, "v100": {"('A3C', 1)": {"null": 2.0}}}"#).unwrap();
/// let text = "A3C\tpython3 main.py\t--max-steps\t0\t1000\t30.000000\t2\n";
/// let mut trace = Trace::default();
/// read_gavel(&mut trace, "a.trace", "a", text, &t).unwrap();
/// let job = &trace.jobs[0];
/// assert_eq!((job.gpus, job.submit_s, job.vc.as_str()), (2, 30, "a"));
/// assert_eq!(job.work.as_ref().unwrap().steps, 1000);
/// // On the fastest type, 2 GPUs: 4 steps/s.
/// assert_eq!(job.attempts[0].run_s, 250);
/// ```
pub fn read_into(
    trace: &mut Trace,
    file: &str,
    vc: &str,
    text: &str,
    throughputs: &Throughputs,
) -> Result<(), TraceError> {
    let lines: Vec<&str> = text.split('\n').collect();
    for (i, raw) in lines.iter().enumerate() {
        let line = raw.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let at = i + 1;
        let cols: Vec<&str> = line.split('\t').collect();
        let unterminated = i + 1 == lines.len();
        if cols.len() < COLUMNS && unterminated {
            trace.skipped.push(SkippedJob {
                at: format!("{file}:{at}"),
                reason: format!(
                    "the file's last line is cut short ({} of {COLUMNS} columns, no line end)",
                    cols.len()
                ),
            });
            continue;
        }
        let job = parse_line(file, at, vc, &cols, throughputs)?;
        match job {
            Ok(job) => trace.jobs.push(job),
            Err(reason) => trace.skipped.push(SkippedJob {
                at: format!("{file}:{at}"),
                reason,
            }),
        }
    }
    Ok(())
}

/// One line's job; `Ok(Err(reason))` for a well-formed job that cannot
/// run on any measured type.
fn parse_line(
    file: &str,
    line: usize,
    vc: &str,
    cols: &[&str],
    throughputs: &Throughputs,
) -> Result<Result<TraceJob, String>, TraceError> {
    let bad = |message: String| TraceError::Line {
        file: file.to_string(),
        line: line as u64,
        message,
    };
    if cols.len() != COLUMNS {
        return Err(bad(format!(
            "{} tab-separated columns; a Gavel trace line has {COLUMNS}",
            cols.len()
        )));
    }
    let number = |i: usize, what: &str| {
        cols[i]
            .trim()
            .parse::<u64>()
            .map_err(|_| bad(format!("{what} {:?} is not a whole number", cols[i])))
    };
    let steps = number(4, "total steps")?;
    let gpus = u32::try_from(number(6, "scale factor")?)
        .map_err(|_| bad(format!("scale factor {:?} is too large", cols[6])))?;
    if gpus == 0 {
        return Err(bad("scale factor 0: a job needs at least one GPU".into()));
    }
    let arrival: f64 = cols[5]
        .trim()
        .parse()
        .ok()
        .filter(|a: &f64| a.is_finite() && *a >= 0.0)
        .ok_or_else(|| {
            bad(format!(
                "arrival time {:?} is not a time in seconds",
                cols[5]
            ))
        })?;
    let class = cols[0].trim().to_string();
    let fastest = throughputs
        .gpu_types()
        .iter()
        .filter_map(|t| throughputs.steps_per_s(t, &class, gpus, true))
        .fold(0.0f64, f64::max);
    if fastest <= 0.0 {
        return Ok(Err(format!(
            "no GPU type of the throughput table runs {class} on {gpus} GPUs"
        )));
    }
    let run_s = ((steps as f64 / fastest).ceil() as u64).max(1);
    Ok(Ok(TraceJob {
        name: format!("{vc}:{line}"),
        vc: vc.to_string(),
        user: String::new(),
        gpus,
        submit_s: arrival.round() as u64,
        attempts: vec![Attempt::new(run_s, Outcome::Passed)],
        work: Some(Work { class, steps }),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Throughputs {
        Throughputs::parse(
            "t.json",
            r#"{"k80": {"('A', 1)": {"null": 1.0}, "('Big', 1)": {"null": 0.0}},
                "v100": {"('A', 1)": {"null": 4.0}, "('Big', 1)": {"null": 0.0}}}"#,
        )
        .unwrap()
    }

    #[test]
    fn a_cut_last_line_is_skipped_and_a_bad_line_is_an_error() {
        let mut t = Trace::default();
        let text = "A\tc\t-n\t1\t40\t0.0\t1\nA\tc\t-n\t1\t40\t5";
        read_into(&mut t, "v.trace", "v", text, &table()).unwrap();
        assert_eq!(t.jobs.len(), 1);
        assert_eq!(t.skipped[0].at, "v.trace:2");
        assert!(t.skipped[0].reason.contains("cut short (6 of 7 columns"));
        let e = read_into(&mut t, "v.trace", "v", "A\tc\n\n", &table())
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "v.trace:1: 2 tab-separated columns; a Gavel trace line has 7"
        );
        let e = read_into(
            &mut t,
            "v.trace",
            "v",
            "A\tc\t-n\t1\tmany\t0\t1\n",
            &table(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("total steps \"many\" is not a whole number"),
            "{e}"
        );
        let e = read_into(&mut t, "v.trace", "v", "A\tc\t-n\t1\t4\t0\t0\n", &table())
            .unwrap_err()
            .to_string();
        assert!(e.contains("scale factor 0"), "{e}");
    }

    #[test]
    fn a_job_no_type_runs_is_skipped() {
        let mut t = Trace::default();
        read_into(
            &mut t,
            "v.trace",
            "v",
            "Big\tc\t-n\t1\t40\t0.0\t1\n",
            &table(),
        )
        .unwrap();
        assert!(t.jobs.is_empty());
        assert!(t.skipped[0].reason.contains("no GPU type"));
    }
}
