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
        let bad = |message: String| TraceError::Job {
            file: self.file.to_string(),
            job: name.clone(),
            message,
        };
        let final_outcome = match raw.status.as_deref() {
            Some("Pass") => Outcome::Passed,
            Some("Killed") => Outcome::Killed,
            Some("Failed") => Outcome::Failed,
            other => {
                return Err(bad(format!(
                    "status {other:?} is not Pass, Killed or Failed"
                )));
            }
        };
        let submit = time_of(&raw.submitted_time)
            .map_err(|m| bad(format!("submitted_time: {m}")))?
            .ok_or_else(|| bad("no submitted_time".into()))?;
        self.latest = self.latest.max(submit);
        let attempts = raw.attempts.unwrap_or_default();
        let mut runs: Vec<(u64, Option<u64>)> = Vec::new();
        let mut gpus = None;
        for (i, a) in attempts.iter().enumerate() {
            let start =
                time_of(&a.start_time).map_err(|m| bad(format!("attempt {i} start_time: {m}")))?;
            let end =
                time_of(&a.end_time).map_err(|m| bad(format!("attempt {i} end_time: {m}")))?;
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
                    return Err(bad(format!("attempt {i} ends before it starts")));
                }
            }
            runs.push((start, end));
        }
        let at = format!("{} job {name}", self.file);
        let gpus = match gpus {
            None => {
                self.skipped.push(SkippedJob {
                    at,
                    reason: "no recorded attempt, so no GPU count".into(),
                });
                return Ok(());
            }
            Some(0) => {
                self.skipped.push(SkippedJob {
                    at,
                    reason: "first attempt lists no GPUs".into(),
                });
                return Ok(());
            }
            Some(n) => u32::try_from(n).map_err(|_| bad("absurd GPU count".into()))?,
        };
        if runs.is_empty() {
            self.skipped.push(SkippedJob {
                at,
                reason: "no attempt has a start time".into(),
            });
            return Ok(());
        }
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
        // What the log says of the first attempt, as the study's notebook
        // reads it (PHILLY.md 2.1, cell 6): its start (none if it has none)
        // and the servers its `detail` lists GPUs on.
        let first = attempts.first();
        let recorded = Recorded {
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
        };
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
        self.parsed.push(Parsed {
            job: TraceJob {
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
