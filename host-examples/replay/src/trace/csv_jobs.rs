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
//! (`passed`, `failed` or `killed`). `user` may be empty. Rows in `submit_s`
//! order let `--skip`/`--jobs` stop reading after the window's jobs (see
//! [`StopAfter`]); rows out of order are read to the end and sorted.
//!
//! **RFold** (`--format rfold`): `#job id,arrival time (sec),topology,shape,size,duration (sec)`;
//! one attempt of `duration` seconds (which includes Philly's retry gaps),
//! status unknown and taken as passed. The file has no virtual clusters, so
//! each job gets one drawn deterministically (from its id) from the Philly VC
//! mix of PHILLY.md section 5.3, conditioned on single- or multi-GPU.
//!
//! **AdaptDL** (`--format adaptdl`): `timestamp,duration,num_gpus,gpu_time,cluster`;
//! Pass jobs only; one attempt of `duration` seconds (sum of attempts).
//! Always read whole: its rows are not in timestamp order (in the published
//! file 44,878 of 82,246 neighbouring rows are out of order), so the first
//! jobs by submit time can be anywhere in the file.
//!
//! The readers take the file a record at a time (never the whole file in
//! memory as rows), and an error names the file and the line.

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

/// A CSV file's header names, and its records read one at a time.
struct Table<'f, R: Read> {
    file: &'f str,
    headers: Vec<String>,
    records: csv::StringRecordsIntoIter<R>,
}

/// One record, with what an error about it must name.
struct Row<'a> {
    file: &'a str,
    line: u64,
    record: csv::StringRecord,
}

impl<'f, R: Read> Table<'f, R> {
    /// Reads the header, turning CSV errors into [`TraceError`];
    /// `comment_header` strips a leading `#` from it. The records are read
    /// by [`Table::next_row`].
    fn read(file: &'f str, input: R, comment_header: bool) -> Result<Self, TraceError> {
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
        Ok(Table {
            file,
            headers,
            records: reader.into_records(),
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

    /// The next record with its line number, `None` at the end of the file.
    fn next_row(&mut self) -> Result<Option<Row<'f>>, TraceError> {
        match self.records.next() {
            None => Ok(None),
            Some(Err(e)) => {
                let line = e.position().map_or(0, |p| p.line());
                Err(line_err(self.file, line, e.to_string()))
            }
            Some(Ok(record)) => Ok(Some(Row {
                file: self.file,
                line: record.position().map_or(0, |p| p.line()),
                record,
            })),
        }
    }
}

/// When a reader of a file whose rows are in submit order may stop: once it
/// has `max` jobs, provided every job so far came in submit order. The first
/// `max` jobs of such a file are the first `max` by submit time, which is all
/// a `--skip`/`--jobs` window (and its warm start) needs. A job out of order
/// shows the file is not sorted: the reader then reads to the end, and
/// [`read`](super::read) sorts as for a whole read. (A file in order up to
/// the `max`-th job and out of order after it is taken as in order.)
pub(super) struct StopAfter {
    max: Option<usize>,
    last_submit_s: u64,
    in_order: bool,
}

impl StopAfter {
    /// Stops after `max` jobs (`None`: reads every job).
    pub(super) fn new(max: Option<usize>) -> StopAfter {
        StopAfter {
            max,
            last_submit_s: 0,
            in_order: true,
        }
    }

    /// Counts a job submitted at `submit_s`, the `jobs`-th read; true when
    /// the reader has enough.
    fn enough(&mut self, submit_s: u64, jobs: usize) -> bool {
        self.in_order &= submit_s >= self.last_submit_s;
        self.last_submit_s = submit_s;
        self.in_order && self.max.is_some_and(|max| jobs >= max)
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

impl<R: Read> Table<'_, R> {
    /// Turns every row into a job with `job_of`, in file order, stopping as
    /// `stop` says.
    fn jobs(
        mut self,
        mut stop: StopAfter,
        mut job_of: impl FnMut(&Row<'_>) -> Result<TraceJob, TraceError>,
    ) -> Result<Trace, TraceError> {
        let mut jobs = Vec::new();
        while let Some(row) = self.next_row()? {
            let job = job_of(&row)?;
            let submit_s = job.submit_s;
            jobs.push(job);
            if stop.enough(submit_s, jobs.len()) {
                break;
            }
        }
        Ok(Trace {
            jobs,
            ..Trace::default()
        })
    }
}

/// Reads a Gangway CSV job list, stopping as `stop` says.
pub(super) fn read_gangway(
    file: &str,
    input: impl Read,
    stop: StopAfter,
) -> Result<Trace, TraceError> {
    let t = Table::read(file, input, false)?;
    let [id, submit, g, vc, user, attempts, status] =
        ["id", "submit_s", "gpus", "vc", "user", "attempts", "status"].map(|c| t.column(c));
    let (id, submit, g, vc, user, attempts, status) =
        (id?, submit?, g?, vc?, user?, attempts?, status?);
    t.jobs(stop, |row| {
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
        Ok(TraceJob {
            work: None,
            submit_s: row.seconds(submit, "submit_s")?,
            gpus: row.gpus(g)?,
            vc: row.text(vc, "vc")?.to_string(),
            user: row.text(user, "user")?.to_string(),
            attempts: list,
            name,
        })
    })
}

/// Reads an RFold trace, stopping as `stop` says (the published file lists
/// jobs in arrival order).
pub(super) fn read_rfold(
    file: &str,
    input: impl Read,
    stop: StopAfter,
) -> Result<Trace, TraceError> {
    let t = Table::read(file, input, true)?;
    let id = t.column("job id")?;
    let arrival = t.column("arrival time (sec)")?;
    let size = t.column("size")?;
    let duration = t.column("duration (sec)")?;
    t.jobs(stop, |row| {
        let name = row.text(id, "job id")?.to_string();
        let gpus = row.gpus(size)?;
        Ok(TraceJob {
            work: None,
            vc: philly_vc_for(&name, gpus > 1).to_string(),
            user: String::new(),
            gpus,
            submit_s: row.seconds(arrival, "arrival time")?,
            attempts: vec![Attempt::new(
                row.seconds(duration, "duration")?,
                Outcome::Passed,
            )],
            name,
        })
    })
}

/// Reads an AdaptDL trace, always to the end (its rows are not in
/// timestamp order; see the module documentation).
pub(super) fn read_adaptdl(file: &str, input: impl Read) -> Result<Trace, TraceError> {
    let t = Table::read(file, input, false)?;
    let ts = t.column("timestamp")?;
    let duration = t.column("duration")?;
    let g = t.column("num_gpus")?;
    let vc = t.column("cluster")?;
    t.jobs(StopAfter::new(None), |row| {
        let text = row.text(ts, "timestamp")?;
        let submit = parse_timestamp(text)
            .ok_or_else(|| row.err(format!("timestamp {text:?} is not YYYY-MM-DD HH:MM:SS")))?;
        Ok(TraceJob {
            work: None,
            name: format!("row{}", row.line),
            vc: row.text(vc, "cluster")?.to_string(),
            user: String::new(),
            gpus: row.gpus(g)?,
            submit_s: submit,
            attempts: vec![Attempt::new(
                row.seconds(duration, "duration")?,
                Outcome::Passed,
            )],
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gangway_format() {
        let text = "id,submit_s,gpus,vc,user,attempts,status\nj1,0,8,a,alice,3600,passed\nj2,10,4,b,,120;600,failed\n";
        let t = read_gangway("jobs.csv", text.as_bytes(), StopAfter::new(None)).unwrap();
        assert_eq!(t.jobs.len(), 2);
        assert_eq!(
            t.jobs[1].attempts,
            vec![
                Attempt::new(120, Outcome::Failed),
                Attempt::new(600, Outcome::Failed)
            ]
        );
        let bad = "id,submit_s,gpus,vc,user,attempts,status\nj1,0,0,a,alice,3600,passed\n";
        let e = read_gangway("jobs.csv", bad.as_bytes(), StopAfter::new(None))
            .unwrap_err()
            .to_string();
        assert_eq!(e, "jobs.csv:2: GPU count must be at least 1");
        let bad = "id,submit_s,gpus,vc,user,attempts,status\nj1,0,1,a,alice,3600,done\n";
        let e = read_gangway("jobs.csv", bad.as_bytes(), StopAfter::new(None))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "jobs.csv:2: job j1: status \"done\" is not passed, failed or killed"
        );
        let e = read_gangway("jobs.csv", "id,gpus\n".as_bytes(), StopAfter::new(None))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("jobs.csv:1: no \"submit_s\" column"), "{e}");
    }

    #[test]
    fn rfold_and_adaptdl() {
        let rfold = "#job id,arrival time (sec),topology,shape,size,duration (sec)\n0,0.0,CLOS,1,1,3613033.0\n1,5.0,CLOS,4+4,8,60.4\n";
        let t = read_rfold("r.csv", rfold.as_bytes(), StopAfter::new(None)).unwrap();
        assert_eq!(t.jobs[1].gpus, 8);
        assert_eq!(t.jobs[1].attempts, vec![Attempt::new(60, Outcome::Passed)]);
        assert!(!t.jobs[0].vc.is_empty());
        let bad =
            "#job id,arrival time (sec),topology,shape,size,duration (sec)\n0,zero,CLOS,1,1,3.0\n";
        let e = read_rfold("r.csv", bad.as_bytes(), StopAfter::new(None))
            .unwrap_err()
            .to_string();
        assert_eq!(e, "r.csv:2: arrival time \"zero\" is not a valid number");
        let adaptdl = "timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,11cb48\n";
        let t = read_adaptdl("a.csv", adaptdl.as_bytes()).unwrap();
        assert_eq!(t.jobs[0].vc, "11cb48");
        assert_eq!(t.jobs[0].attempts, vec![Attempt::new(66, Outcome::Passed)]);
    }
}
