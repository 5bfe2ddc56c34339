//! Philly's `cluster_job_log`: a JSON list of jobs, read as a stream (the real
//! log is hundreds of megabytes).
//!
//! Schema (msr-fiddle/philly-traces README): `status` in {Pass, Killed,
//! Failed}; `vc`; `jobid`; `submitted_time`; `user`; `attempts[]` each with
//! `start_time`, `end_time` and `detail[]` of `{ip, gpus[]}`. Times are
//! `%Y-%m-%d %H:%M:%S`; a missing time is `null` or the string `"None"`. A job
//! may have no attempts; an attempt may lack a start or an end; a missing end
//! on the last attempt means the job was still running at snapshot time.
//!
//! How the replay reads it: the GPU count is the first attempt's (as the
//! study's notebook does); attempts without a start are left out; an open last
//! attempt runs until the latest time seen in the log; all attempts but the
//! last failed; the last one ends with the job's status.

use std::io::Read;

use serde::Deserialize;
use serde::de::{SeqAccess, Visitor};

use super::time::parse_timestamp;
use super::{Attempt, Outcome, Recorded, SkippedJob, Trace, TraceError, TraceJob};

#[derive(Deserialize)]
struct RawJob {
    status: Option<String>,
    vc: Option<String>,
    jobid: Option<String>,
    submitted_time: Option<String>,
    user: Option<String>,
    #[serde(default)]
    attempts: Option<Vec<RawAttempt>>,
}

#[derive(Deserialize)]
struct RawAttempt {
    start_time: Option<String>,
    end_time: Option<String>,
    #[serde(default)]
    detail: Option<Vec<RawDetail>>,
}

#[derive(Deserialize)]
struct RawDetail {
    #[serde(default)]
    ip: Option<String>,
    #[serde(default)]
    gpus: Option<Vec<String>>,
}

/// A job whose last attempt was still open, fixed up once the log's last
/// timestamp is known.
struct Parsed {
    job: TraceJob,
    open_start: Option<u64>,
    recorded: Recorded,
}

fn time_of(v: &Option<String>) -> Result<Option<u64>, String> {
    match v.as_deref().map(str::trim) {
        None | Some("") | Some("None") | Some("null") => Ok(None),
        Some(s) => parse_timestamp(s)
            .map(Some)
            .ok_or_else(|| format!("malformed time {s:?} (want YYYY-MM-DD HH:MM:SS)")),
    }
}

struct Reader<'a> {
    file: &'a str,
    parsed: Vec<Parsed>,
    skipped: Vec<SkippedJob>,
    machines: std::collections::BTreeMap<String, u32>,
    latest: u64,
    failure: Option<TraceError>,
}

impl Reader<'_> {
    fn job(&mut self, raw: RawJob, index: usize) -> Result<(), TraceError> {
        let name = raw.jobid.clone().unwrap_or_else(|| format!("#{index}"));
        let file = self.file;
        let bad = |message: String| TraceError::Job {
            file: file.to_string(),
            job: name.clone(),
            message,
        };
        let final_outcome = final_outcome(raw.status.as_deref()).map_err(bad)?;
        let submit = time_of(&raw.submitted_time)
            .map_err(|m| bad(format!("submitted_time: {m}")))?
            .ok_or_else(|| bad("no submitted_time".into()))?;
        self.latest = self.latest.max(submit);
        let attempts = raw.attempts.unwrap_or_default();
        let (runs, gpus) = self.runs(&attempts).map_err(bad)?;
        let at = format!("{file} job {name}");
        let gpus = match gpus {
            None => return self.skip(at, "no recorded attempt, so no GPU count"),
            Some(0) => return self.skip(at, "first attempt lists no GPUs"),
            Some(n) => u32::try_from(n).map_err(|_| bad("absurd GPU count".into()))?,
        };
        if runs.is_empty() {
            return self.skip(at, "no attempt has a start time");
        }
        let (out, open_start) = attempts_of(runs, final_outcome);
        let recorded = recorded_of(attempts.first(), submit);
        self.count_machines(&attempts);
        self.parsed.push(Parsed {
            job: TraceJob {
                work: None,
                name,
                vc: raw.vc.unwrap_or_default(),
                user: raw.user.unwrap_or_default(),
                gpus,
                submit_s: submit,
                attempts: out,
            },
            open_start,
            recorded,
        });
        Ok(())
    }

    /// Leaves out the job at `at`, saying why (not an error).
    fn skip(&mut self, at: String, reason: &str) -> Result<(), TraceError> {
        self.skipped.push(SkippedJob {
            at,
            reason: reason.into(),
        });
        Ok(())
    }

    /// The (start, end) of each of `attempts` that has a start, and the
    /// first attempt's GPU count (none without attempts); the latest time
    /// seen moves on.
    #[allow(clippy::type_complexity)]
    fn runs(
        &mut self,
        attempts: &[RawAttempt],
    ) -> Result<(Vec<(u64, Option<u64>)>, Option<usize>), String> {
        let mut runs: Vec<(u64, Option<u64>)> = Vec::new();
        let mut gpus = None;
        for (i, a) in attempts.iter().enumerate() {
            let start =
                time_of(&a.start_time).map_err(|m| format!("attempt {i} start_time: {m}"))?;
            let end = time_of(&a.end_time).map_err(|m| format!("attempt {i} end_time: {m}"))?;
            if gpus.is_none() {
                let n: usize = a
                    .detail
                    .iter()
                    .flatten()
                    .map(|d| d.gpus.as_ref().map_or(0, Vec::len))
                    .sum();
                gpus = Some(n);
            }
            let Some(start) = start else { continue };
            self.latest = self.latest.max(start);
            if let Some(e) = end {
                self.latest = self.latest.max(e);
                if e < start {
                    return Err(format!("attempt {i} ends before it starts"));
                }
            }
            runs.push((start, end));
        }
        Ok((runs, gpus))
    }

    /// Counts each machine `attempts` ran on, once per job.
    fn count_machines(&mut self, attempts: &[RawAttempt]) {
        let mut ips: Vec<&str> = attempts
            .iter()
            .flat_map(|a| a.detail.iter().flatten())
            .filter_map(|d| d.ip.as_deref())
            .collect();
        ips.sort_unstable();
        ips.dedup();
        for ip in ips {
            *self.machines.entry(ip.to_string()).or_default() += 1;
        }
    }
}

/// A job's final outcome from its `status`.
fn final_outcome(status: Option<&str>) -> Result<Outcome, String> {
    match status {
        Some("Pass") => Ok(Outcome::Passed),
        Some("Killed") => Ok(Outcome::Killed),
        Some("Failed") => Ok(Outcome::Failed),
        other => Err(format!("status {other:?} is not Pass, Killed or Failed")),
    }
}

/// The attempts of a job's `runs` (all failed but the last, which ends
/// with `final_outcome`), and the start of the last one if it is still
/// open.
fn attempts_of(
    runs: Vec<(u64, Option<u64>)>,
    final_outcome: Outcome,
) -> (Vec<Attempt>, Option<u64>) {
    let last = runs.len() - 1;
    let mut open_start = None;
    let mut out = Vec::with_capacity(runs.len());
    for (i, (start, end)) in runs.into_iter().enumerate() {
        let outcome = if i == last {
            final_outcome
        } else {
            Outcome::Failed
        };
        match end {
            Some(e) => out.push(Attempt::new(e - start, outcome)),
            None if i == last => {
                open_start = Some(start);
                out.push(Attempt::new(0, outcome));
            }
            // An earlier attempt without an end: it ended when the next began.
            None => out.push(Attempt::new(0, Outcome::Failed)),
        }
    }
    (out, open_start)
}

/// What the log says of the `first` attempt of a job submitted at
/// `submit`, as the study's notebook reads it (PHILLY.md 2.1, cell 6): its
/// start (none if it has none) and the servers its `detail` lists GPUs on.
fn recorded_of(first: Option<&RawAttempt>, submit: u64) -> Recorded {
    Recorded {
        first_wait_s: first
            .and_then(|a| time_of(&a.start_time).ok().flatten())
            .map(|start| start.saturating_sub(submit)),
        first_servers: first.and_then(|a| {
            let mut on: Vec<&str> = a
                .detail
                .iter()
                .flatten()
                .filter(|d| d.gpus.as_ref().is_some_and(|g| !g.is_empty()))
                .filter_map(|d| d.ip.as_deref())
                .collect();
            on.sort_unstable();
            on.dedup();
            u32::try_from(on.len()).ok().filter(|n| *n > 0)
        }),
    }
}

struct JobsVisitor<'r, 'a>(&'r mut Reader<'a>);

impl<'de> Visitor<'de> for JobsVisitor<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON list of Philly jobs")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0usize;
        while let Some(raw) = seq.next_element::<RawJob>()? {
            if let Err(e) = self.0.job(raw, index) {
                let msg = e.to_string();
                self.0.failure = Some(e);
                return Err(serde::de::Error::custom(msg));
            }
            index += 1;
        }
        Ok(())
    }
}

/// Reads a `cluster_job_log` stream.
pub(super) fn read(file: &str, input: impl Read) -> Result<Trace, TraceError> {
    read_recorded(file, input).map(|(trace, _)| trace)
}

/// [`read`], with what the log recorded of each job's first attempt, in
/// the order of the trace's jobs (as read, before any sorting).
pub(super) fn read_recorded(
    file: &str,
    input: impl Read,
) -> Result<(Trace, Vec<Recorded>), TraceError> {
    let mut reader = Reader {
        file,
        parsed: Vec::new(),
        skipped: Vec::new(),
        machines: std::collections::BTreeMap::new(),
        latest: 0,
        failure: None,
    };
    let mut de = serde_json::Deserializer::from_reader(input);
    let result = serde::Deserializer::deserialize_seq(&mut de, JobsVisitor(&mut reader));
    if let Some(e) = reader.failure.take() {
        return Err(e);
    }
    result
        .and_then(|()| de.end())
        .map_err(|e| TraceError::Line {
            file: file.to_string(),
            line: e.line() as u64,
            message: e.to_string(),
        })?;
    let latest = reader.latest;
    let (jobs, recorded) = reader
        .parsed
        .into_iter()
        .map(|mut p| {
            if let (Some(start), Some(last)) = (p.open_start, p.job.attempts.last_mut()) {
                last.run_s = latest.saturating_sub(start);
            }
            (p.job, p.recorded)
        })
        .unzip();
    let trace = Trace {
        jobs,
        skipped: reader.skipped,
        recorded_machines: reader.machines,
        warm: 0,
    };
    Ok((trace, recorded))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = r#"[
 {"status": "Pass", "vc": "11cb48", "jobid": "application_1_1", "user": "u1",
  "submitted_time": "2017-10-07 01:11:39",
  "attempts": [
   {"start_time": "2017-10-07 01:12:09", "end_time": "2017-10-07 01:13:23",
    "detail": [{"ip": "m1", "gpus": ["gpu0","gpu1","gpu2","gpu3"]}, {"ip": "m2", "gpus": ["gpu0","gpu1","gpu2","gpu3"]}]},
   {"start_time": "2017-10-07 01:13:30", "end_time": "2017-10-07 02:13:30",
    "detail": [{"ip": "m1", "gpus": ["gpu0"]}]}]},
 {"status": "Killed", "vc": "6214e9", "jobid": "application_1_2", "user": "u2",
  "submitted_time": "2017-10-07 01:00:00", "attempts": []},
 {"status": "Failed", "vc": "6214e9", "jobid": "application_1_3", "user": "u2",
  "submitted_time": "2017-10-07 01:00:00",
  "attempts": [{"start_time": "2017-10-07 01:00:10", "end_time": "None",
    "detail": [{"ip": "m3", "gpus": ["gpu0"]}]}]}
]"#;

    #[test]
    fn reads_jobs_attempts_and_reports_unreplayable_ones() {
        let t = read("log.json", LOG.as_bytes()).unwrap();
        assert_eq!(t.jobs.len(), 2);
        let a = &t.jobs[0];
        assert_eq!(a.gpus, 8, "first attempt's GPUs");
        assert_eq!(
            a.attempts,
            vec![
                Attempt::new(74, Outcome::Failed),
                Attempt::new(3600, Outcome::Passed)
            ]
        );
        let c = &t.jobs[1];
        // Open attempt runs to the latest time in the log (02:13:30).
        assert_eq!(c.attempts, vec![Attempt::new(4400, Outcome::Failed)]);
        assert_eq!(t.skipped.len(), 1);
        assert!(t.skipped[0].at.ends_with("job application_1_2"));
    }

    #[test]
    fn errors_name_the_job_or_line() {
        let bad = r#"[{"status": "Pass", "vc": "a", "jobid": "app_9", "submitted_time": "yesterday", "attempts": []}]"#;
        let e = read("log.json", bad.as_bytes()).unwrap_err().to_string();
        assert_eq!(
            e,
            "log.json: job app_9: submitted_time: malformed time \"yesterday\" (want YYYY-MM-DD HH:MM:SS)"
        );
        let bad = "[{\"status\": \"Pass\",\n \"vc\": 3}]";
        let e = read("log.json", bad.as_bytes()).unwrap_err().to_string();
        assert!(e.starts_with("log.json:2: invalid type"), "{e}");
        let e = read(
            "log.json",
            r#"[{"status": "Done", "jobid": "x"}]"#.as_bytes(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("job x: status Some(\"Done\")"), "{e}");
    }
}
