//! CSV job lists: Gangway's own format and the two Philly-derived files.
//!
//! **Gangway CSV** (`--format csv`), one job per row, with this header:
//!
//! ```text
//! id,submit_s,gpus,vc,user,attempts,status
//! j1,0,8,vc-a,alice,3600,passed
//! j2,10,4,vc-b,bob,120;600,failed
//! ```
//!
//! `attempts` lists each attempt's run time in seconds, `;`-separated; every
//! attempt but the last failed (and was retried); the last ends with `status`
//! (`passed`, `failed` or `killed`). `user` may be empty.
//!
//! **RFold** (`--format rfold`): `#job id,arrival time (sec),topology,shape,size,duration (sec)`;
//! one attempt of `duration` seconds (which includes Philly's retry gaps),
//! status unknown and taken as passed. The file has no virtual clusters, so
//! each job gets one drawn deterministically (from its id) from the Philly VC
//! mix of PHILLY.md section 5.3, conditioned on single- or multi-GPU.
//!
//! **AdaptDL** (`--format adaptdl`): `timestamp,duration,num_gpus,gpu_time,cluster`;
//! Pass jobs only; one attempt of `duration` seconds (sum of attempts).

use std::io::Read;

use super::philly_vc_for;
use super::time::parse_timestamp;
use super::{Attempt, Outcome, Trace, TraceError, TraceJob};

fn line_err(file: &str, line: u64, message: impl Into<String>) -> TraceError {
    TraceError::Line {
        file: file.to_string(),
        line,
        message: message.into(),
    }
}

/// A CSV file's header names and its rows.
struct Table<'f> {
    file: &'f str,
    headers: Vec<String>,
    rows: Vec<(u64, csv::StringRecord)>,
}

/// One record, with what an error about it must name.
struct Row<'a> {
    file: &'a str,
    line: u64,
    record: &'a csv::StringRecord,
}

impl<'f> Table<'f> {
    /// Reads every record with its line number, turning CSV errors into
    /// [`TraceError`]. `comment_header` strips a leading `#` from the header.
    fn read(file: &'f str, input: impl Read, comment_header: bool) -> Result<Self, TraceError> {
        let mut reader = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .from_reader(input);
        let headers: Vec<String> = reader
            .headers()
            .map_err(|e| line_err(file, 1, format!("cannot read the header: {e}")))?
            .iter()
            .map(|h| {
                let h = if comment_header {
                    h.trim_start_matches('#')
                } else {
                    h
                };
                h.to_string()
            })
            .collect();
        let mut rows = Vec::new();
        for r in reader.records() {
            let r = r.map_err(|e| {
                let line = e.position().map_or(0, |p| p.line());
                line_err(file, line, e.to_string())
            })?;
            rows.push((r.position().map_or(0, |p| p.line()), r));
        }
        Ok(Table {
            file,
            headers,
            rows,
        })
    }

    /// The index of the column named `want` (case-insensitive).
    fn column(&self, want: &str) -> Result<usize, TraceError> {
        self.headers
            .iter()
            .position(|h| h.eq_ignore_ascii_case(want))
            .ok_or_else(|| {
                line_err(
                    self.file,
                    1,
                    format!("no {want:?} column in the header {:?}", self.headers),
                )
            })
    }

    fn rows(&self) -> impl Iterator<Item = Row<'_>> {
        self.rows.iter().map(|(line, record)| Row {
            file: self.file,
            line: *line,
            record,
        })
    }
}

impl Row<'_> {
    fn err(&self, message: impl Into<String>) -> TraceError {
        line_err(self.file, self.line, message)
    }

    fn text(&self, col: usize, name: &str) -> Result<&str, TraceError> {
        self.record
            .get(col)
            .ok_or_else(|| self.err(format!("missing {name}")))
    }

    fn number<T: std::str::FromStr>(&self, text: &str, name: &str) -> Result<T, TraceError> {
        text.parse()
            .map_err(|_| self.err(format!("{name} {text:?} is not a valid number")))
    }

    /// Seconds from a decimal text, rounded to the nearest second.
    fn seconds_of(&self, text: &str, name: &str) -> Result<u64, TraceError> {
        let v: f64 = self.number(text, name)?;
        if !v.is_finite() || v < 0.0 {
            return Err(self.err(format!("{name} {text:?} must be a non-negative number")));
        }
        Ok(v.round() as u64)
    }

    /// Seconds from column `col`; `name` words the errors.
    fn seconds(&self, col: usize, name: &str) -> Result<u64, TraceError> {
        self.seconds_of(self.text(col, name)?, name)
    }

    /// A gang size of at least 1 from column `col`.
    fn gpus(&self, col: usize) -> Result<u32, TraceError> {
        let g: u32 = self.number(self.text(col, "GPU count")?, "GPU count")?;
        if g == 0 {
            return Err(self.err("GPU count must be at least 1"));
        }
        Ok(g)
    }
}

pub(super) fn read_gangway(file: &str, input: impl Read) -> Result<Trace, TraceError> {
    let t = Table::read(file, input, false)?;
    let [id, submit, g, vc, user, attempts, status] =
        ["id", "submit_s", "gpus", "vc", "user", "attempts", "status"].map(|c| t.column(c));
    let (id, submit, g, vc, user, attempts, status) =
        (id?, submit?, g?, vc?, user?, attempts?, status?);
    let mut jobs = Vec::with_capacity(t.rows.len());
    for row in t.rows() {
        let name = row.text(id, "id")?.to_string();
        let text = row.text(status, "status")?;
        let final_outcome = Outcome::from_name(text).ok_or_else(|| {
            row.err(format!(
                "job {name}: status {:?} is not passed, failed or killed",
                text.to_ascii_lowercase()
            ))
        })?;
        let runs: Vec<&str> = row
            .text(attempts, "attempts")?
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        if runs.is_empty() {
            return Err(row.err(format!("job {name}: no attempts")));
        }
        let last = runs.len() - 1;
        let mut list = Vec::with_capacity(runs.len());
        for (i, run) in runs.into_iter().enumerate() {
            let s = row.seconds_of(run, "attempt run time")?;
            list.push(Attempt::new(
                s,
                if i == last {
                    final_outcome
                } else {
                    Outcome::Failed
                },
            ));
        }
        jobs.push(TraceJob {
            submit_s: row.seconds(submit, "submit_s")?,
            gpus: row.gpus(g)?,
            vc: row.text(vc, "vc")?.to_string(),
            user: row.text(user, "user")?.to_string(),
            attempts: list,
            name,
        });
    }
    Ok(Trace {
        jobs,
        skipped: Vec::new(),
        ..Trace::default()
    })
}

pub(super) fn read_rfold(file: &str, input: impl Read) -> Result<Trace, TraceError> {
    let t = Table::read(file, input, true)?;
    let id = t.column("job id")?;
    let arrival = t.column("arrival time (sec)")?;
    let size = t.column("size")?;
    let duration = t.column("duration (sec)")?;
    let mut jobs = Vec::with_capacity(t.rows.len());
    for row in t.rows() {
        let name = row.text(id, "job id")?.to_string();
        let gpus = row.gpus(size)?;
        jobs.push(TraceJob {
            vc: philly_vc_for(&name, gpus > 1).to_string(),
            user: String::new(),
            gpus,
            submit_s: row.seconds(arrival, "arrival time")?,
            attempts: vec![Attempt::new(
                row.seconds(duration, "duration")?,
                Outcome::Passed,
            )],
            name,
        });
    }
    Ok(Trace {
        jobs,
        skipped: Vec::new(),
        ..Trace::default()
    })
}

pub(super) fn read_adaptdl(file: &str, input: impl Read) -> Result<Trace, TraceError> {
    let t = Table::read(file, input, false)?;
    let ts = t.column("timestamp")?;
    let duration = t.column("duration")?;
    let g = t.column("num_gpus")?;
    let vc = t.column("cluster")?;
    let mut jobs = Vec::with_capacity(t.rows.len());
    for row in t.rows() {
        let text = row.text(ts, "timestamp")?;
        let submit = parse_timestamp(text)
            .ok_or_else(|| row.err(format!("timestamp {text:?} is not YYYY-MM-DD HH:MM:SS")))?;
        jobs.push(TraceJob {
            name: format!("row{}", row.line),
            vc: row.text(vc, "cluster")?.to_string(),
            user: String::new(),
            gpus: row.gpus(g)?,
            submit_s: submit,
            attempts: vec![Attempt::new(
                row.seconds(duration, "duration")?,
                Outcome::Passed,
            )],
        });
    }
    Ok(Trace {
        jobs,
        skipped: Vec::new(),
        ..Trace::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gangway_format() {
        let text = "id,submit_s,gpus,vc,user,attempts,status\nj1,0,8,a,alice,3600,passed\nj2,10,4,b,,120;600,failed\n";
        let t = read_gangway("jobs.csv", text.as_bytes()).unwrap();
        assert_eq!(t.jobs.len(), 2);
        assert_eq!(
            t.jobs[1].attempts,
            vec![
                Attempt::new(120, Outcome::Failed),
                Attempt::new(600, Outcome::Failed)
            ]
        );
        let bad = "id,submit_s,gpus,vc,user,attempts,status\nj1,0,0,a,alice,3600,passed\n";
        let e = read_gangway("jobs.csv", bad.as_bytes())
            .unwrap_err()
            .to_string();
        assert_eq!(e, "jobs.csv:2: GPU count must be at least 1");
        let bad = "id,submit_s,gpus,vc,user,attempts,status\nj1,0,1,a,alice,3600,done\n";
        let e = read_gangway("jobs.csv", bad.as_bytes())
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "jobs.csv:2: job j1: status \"done\" is not passed, failed or killed"
        );
        let e = read_gangway("jobs.csv", "id,gpus\n".as_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("jobs.csv:1: no \"submit_s\" column"), "{e}");
    }

    #[test]
    fn rfold_and_adaptdl() {
        let rfold = "#job id,arrival time (sec),topology,shape,size,duration (sec)\n0,0.0,CLOS,1,1,3613033.0\n1,5.0,CLOS,4+4,8,60.4\n";
        let t = read_rfold("r.csv", rfold.as_bytes()).unwrap();
        assert_eq!(t.jobs[1].gpus, 8);
        assert_eq!(t.jobs[1].attempts, vec![Attempt::new(60, Outcome::Passed)]);
        assert!(!t.jobs[0].vc.is_empty());
        let bad =
            "#job id,arrival time (sec),topology,shape,size,duration (sec)\n0,zero,CLOS,1,1,3.0\n";
        let e = read_rfold("r.csv", bad.as_bytes()).unwrap_err().to_string();
        assert_eq!(e, "r.csv:2: arrival time \"zero\" is not a valid number");
        let adaptdl = "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,11cb48\n";
        let t = read_adaptdl("a.csv", adaptdl.as_bytes()).unwrap();
        assert_eq!(t.jobs[0].vc, "11cb48");
        assert_eq!(t.jobs[0].attempts, vec![Attempt::new(66, Outcome::Passed)]);
    }
}
