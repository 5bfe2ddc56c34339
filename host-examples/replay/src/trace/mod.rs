//! Job traces: what the replay feeds the scheduler, and the readers for each
//! supported format.
//!
//! Every reader produces the same [`Trace`]: jobs with a submit time, a
//! virtual cluster, a user, a gang size, and the recorded attempts (each with
//! its length and how it ended). The scheduler decides *when and where* each
//! attempt runs; the trace decides how long it runs and how it ends.

mod csv_jobs;
mod gavel;
mod philly;
mod time;
mod vcs;

use std::path::Path;

use gangway_core::FailureClass;
use serde::{Deserialize, Serialize};

pub use gavel::{load as load_gavel, read_into as read_gavel};
pub use time::parse_timestamp;
pub use vcs::{RFOLD_ORIGIN, VcLabels, label_vcs, label_vcs_from, philly_vc_for};
pub(crate) use vcs::{pick, vc_weights};

/// How one recorded attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// The job completed.
    Passed,
    /// The attempt failed (a later attempt retries it, if any).
    Failed,
    /// The job was killed.
    Killed,
}

impl Outcome {
    /// Every outcome.
    pub const ALL: [Outcome; 3] = [Outcome::Passed, Outcome::Failed, Outcome::Killed];

    /// Its name in reports, per-job CSVs and Gangway CSV traces (`passed`,
    /// `failed`, `killed`; serde writes the same).
    ///
    /// ```
    /// use gangway_replay::trace::Outcome;
    /// assert_eq!(Outcome::Killed.as_str(), "killed");
    /// ```
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Failed => "failed",
            Outcome::Killed => "killed",
        }
    }

    /// The outcome named `name` ([`Outcome::as_str`], or the short `pass` /
    /// `fail` of Philly's logs), any case.
    ///
    /// ```
    /// use gangway_replay::trace::Outcome;
    /// assert_eq!(Outcome::from_name("Pass"), Some(Outcome::Passed));
    /// assert_eq!(Outcome::from_name("done"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<Outcome> {
        const SHORT: [(&str, Outcome); 2] = [("pass", Outcome::Passed), ("fail", Outcome::Failed)];
        let name = name.to_ascii_lowercase();
        Outcome::ALL
            .into_iter()
            .find(|o| o.as_str() == name)
            .or_else(|| SHORT.iter().find(|(s, _)| *s == name).map(|(_, o)| *o))
    }
}

impl From<gangway_core::FinalStatus> for Outcome {
    /// How the scheduler says a job ended, as a trace outcome.
    fn from(status: gangway_core::FinalStatus) -> Outcome {
        match status {
            gangway_core::FinalStatus::Passed => Outcome::Passed,
            gangway_core::FinalStatus::Failed => Outcome::Failed,
            gangway_core::FinalStatus::Killed => Outcome::Killed,
        }
    }
}

/// One recorded attempt: how long it ran and how it ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// Seconds it ran.
    pub run_s: u64,
    /// How it ended.
    pub outcome: Outcome,
    /// Why it failed, where the trace says ([`FailureClass::Unknown`] otherwise,
    /// and for attempts that did not fail).
    pub class: FailureClass,
}

impl Attempt {
    /// An attempt of `run_s` seconds that ended with `outcome`, of unknown class.
    pub fn new(run_s: u64, outcome: Outcome) -> Attempt {
        Attempt {
            run_s,
            outcome,
            class: FailureClass::Unknown,
        }
    }
}

/// One job of a trace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceJob {
    /// The job's id in the source (YARN application id, row id, ...).
    pub name: String,
    /// Virtual cluster name.
    pub vc: String,
    /// User name (may be empty).
    pub user: String,
    /// GPUs of the gang.
    pub gpus: u32,
    /// Submit time, seconds from the trace's origin.
    pub submit_s: u64,
    /// Recorded attempts, in order. All but the last are failures that
    /// Philly retried; the last one's outcome is the job's final status.
    /// Never empty.
    pub attempts: Vec<Attempt>,
    /// Its work, where the trace measures it in steps of a job class (Gavel's
    /// traces): then its run time depends on the GPU type it runs on, and
    /// its attempt's `run_s` is its time on the fastest type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work: Option<Work>,
}

/// A job's work as steps of a job class whose speed per GPU type is
/// measured ([`crate::throughputs::Throughputs`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Work {
    /// The job class (a model and batch size, as Gavel names it:
    /// `ResNet-18 (batch size 16)`).
    pub class: String,
    /// Steps to run.
    pub steps: u64,
}

impl TraceJob {
    /// Seconds its recorded attempts ran in all.
    ///
    /// ```
    /// use gangway_replay::trace::{read, Format};
    /// let csv = "id,submit_s,gpus,vc,user,attempts,status\n1,0,8,a,u,60;600,Pass\n";
    /// let t = read("jobs.csv", Format::Csv, csv.as_bytes()).unwrap();
    /// assert_eq!(t.jobs[0].run_s(), 660);
    /// ```
    pub fn run_s(&self) -> u64 {
        self.attempts.iter().map(|a| a.run_s).sum()
    }
}

/// What a log recorded of a job's first attempt (Philly's
/// `cluster_job_log`; other formats record no starts or placements).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recorded {
    /// Seconds from submission to the first attempt's start; `None` when
    /// the first attempt has no start.
    pub first_wait_s: Option<u64>,
    /// Servers the first attempt held GPUs on; `None` when the log names
    /// none.
    pub first_servers: Option<u32>,
}

/// A job the reader could not turn into a [`TraceJob`], and why. Such jobs are
/// reported (in the replay's summary and report), never silently dropped.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkippedJob {
    /// Where: `file:line` or `file job <id>`.
    pub at: String,
    /// Why it cannot be replayed.
    pub reason: String,
}

/// A loaded trace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trace {
    /// Jobs, sorted by (submit time, source order).
    pub jobs: Vec<TraceJob>,
    /// Jobs that are valid in the source schema but cannot be replayed (for
    /// example a Philly job with no recorded attempt has no GPU count).
    pub skipped: Vec<SkippedJob>,
    /// The machines the source recorded jobs running on (Philly's `detail[].ip`),
    /// with how many jobs ran on each; empty for formats without placements.
    /// The replay places jobs itself; it uses this only to warn when the
    /// machine list lacks machines the trace ran on.
    #[serde(default)]
    pub recorded_machines: std::collections::BTreeMap<String, u32>,
    /// The first `warm` jobs are not the window's own: they were submitted
    /// before it and still ran at its start ([`Trace::window_warm`]), so
    /// they start at 0 with what was left of their run; reports leave them
    /// out of the statistics.
    #[serde(default)]
    pub warm: usize,
}

impl Trace {
    /// The recorded machines `known` does not know, and how many jobs ran on
    /// them (a job on several is counted once per machine).
    ///
    /// ```
    /// use gangway_replay::trace::Trace;
    /// let mut t = Trace::default();
    /// t.recorded_machines.insert("m1".into(), 3);
    /// t.recorded_machines.insert("m9".into(), 2);
    /// assert_eq!(t.unknown_machines(|m| m == "m1"), (vec!["m9"], 2));
    /// ```
    pub fn unknown_machines(&self, known: impl Fn(&str) -> bool) -> (Vec<&str>, u64) {
        let mut names = Vec::new();
        let mut jobs = 0;
        for (name, n) in &self.recorded_machines {
            if !known(name) {
                names.push(name.as_str());
                jobs += u64::from(*n);
            }
        }
        (names, jobs)
    }

    /// Sorts jobs by submit time (stable) and shifts times so the first
    /// submit is at 0.
    pub fn normalize(&mut self) {
        self.jobs.sort_by_key(|j| j.submit_s);
        if let Some(t0) = self.jobs.first().map(|j| j.submit_s) {
            for j in &mut self.jobs {
                j.submit_s -= t0;
            }
        }
    }

    /// Keeps `len` jobs starting at the `skip`-th (by submit time), shifting
    /// times so the window starts at 0.
    pub fn window(&mut self, skip: usize, len: usize) {
        self.jobs.drain(..skip.min(self.jobs.len()));
        self.jobs.truncate(len);
        self.normalize();
    }

    /// [`Trace::window`], starting warm when `warm` is set: the jobs
    /// submitted before the window that would still be running at its start
    /// (had they started when submitted) come first, submitted at 0 with
    /// their remaining attempts (the running one cut to what was left), so
    /// the window does not begin on an empty cluster. Counted in
    /// [`Trace::warm`].
    ///
    /// ```
    /// use gangway_replay::trace::{Attempt, Outcome, Trace, TraceJob};
    /// let job = |name: &str, submit_s, run_s| TraceJob {
    ///     name: name.into(), vc: "a".into(), user: String::new(), gpus: 1, submit_s,
    ///     attempts: vec![Attempt::new(run_s, Outcome::Passed)], work: None,
    /// };
    /// let mut t = Trace { jobs: vec![job("long", 0, 1_000), job("short", 10, 5), job("w", 100, 60)], ..Trace::default() };
    /// t.window_warm(2, 10, true);
    /// assert_eq!(t.warm, 1);
    /// assert_eq!(t.jobs[0].name, "long");
    /// assert_eq!(t.jobs[0].attempts[0].run_s, 900);
    /// assert_eq!((t.jobs[1].name.as_str(), t.jobs[1].submit_s), ("w", 0));
    /// ```
    pub fn window_warm(&mut self, skip: usize, len: usize, warm: bool) {
        self.window_warm_scaled(skip, len, warm, 1.0);
    }

    /// [`Trace::window_warm`] for a replay whose submit times will be
    /// multiplied by `time_scale` ([`Trace::scale_time`]): a job submitted
    /// `d` seconds before the window is taken to have started `d *
    /// time_scale` seconds before it, as it would in a replay of the whole
    /// trace at that scale, so a compressed window starts with the work a
    /// compressed run carries into it.
    ///
    /// ```
    /// use gangway_replay::trace::{Attempt, Outcome, Trace, TraceJob};
    /// let job = |name: &str, submit_s, run_s| TraceJob {
    ///     name: name.into(), vc: "a".into(), user: String::new(), gpus: 1, submit_s,
    ///     attempts: vec![Attempt::new(run_s, Outcome::Passed)], work: None,
    /// };
    /// let jobs = vec![job("a", 0, 700), job("w", 1_000, 60)];
    /// let mut t = Trace { jobs: jobs.clone(), ..Trace::default() };
    /// t.window_warm_scaled(1, 10, true, 1.0);
    /// assert_eq!(t.warm, 0, "at scale 1, a ended 300 s before the window");
    /// let mut t = Trace { jobs, ..Trace::default() };
    /// t.window_warm_scaled(1, 10, true, 0.5);
    /// assert_eq!((t.warm, t.jobs[0].attempts[0].run_s), (1, 200));
    /// ```
    pub fn window_warm_scaled(&mut self, skip: usize, len: usize, warm: bool, time_scale: f64) {
        let skip = skip.min(self.jobs.len());
        let start = self.jobs.get(skip).map(|j| j.submit_s);
        let mut carried = Vec::new();
        if let (true, Some(start)) = (warm, start) {
            for j in &self.jobs[..skip] {
                let gap = start.saturating_sub(j.submit_s) as f64 * time_scale;
                // Seconds the job's next attempt started before the window.
                let mut before = gap.round() as u64;
                let mut left = Vec::new();
                for a in &j.attempts {
                    if a.run_s > before {
                        let mut a = *a;
                        a.run_s -= before;
                        left.push(a);
                    }
                    before = before.saturating_sub(a.run_s);
                }
                if !left.is_empty() {
                    carried.push(TraceJob {
                        submit_s: start,
                        attempts: left,
                        ..j.clone()
                    });
                }
            }
        }
        self.jobs.drain(..skip);
        self.jobs.truncate(len);
        self.warm = carried.len();
        if !carried.is_empty() {
            carried.append(&mut self.jobs);
            self.jobs = carried;
        }
        self.normalize();
    }

    /// Keeps, of the jobs carried into a window warm, those that fit in
    /// `gpus` together (in order; one that would not fit is dropped), so a
    /// warm start never begins with more work running than the cluster
    /// holds (a lead-in counts jobs as running from their submit, without
    /// queueing). Returns how many were dropped.
    ///
    /// ```
    /// use gangway_replay::trace::{Attempt, Outcome, Trace, TraceJob};
    /// let job = |gpus| TraceJob {
    ///     name: String::new(), vc: "a".into(), user: String::new(), gpus, submit_s: 0,
    ///     attempts: vec![Attempt::new(100, Outcome::Passed)], work: None,
    /// };
    /// let mut t = Trace { jobs: vec![job(8), job(8), job(1), job(4)], warm: 3, ..Trace::default() };
    /// assert_eq!(t.limit_warm(9), 1);
    /// assert_eq!((t.warm, t.jobs.len()), (2, 3));
    /// ```
    pub fn limit_warm(&mut self, gpus: u32) -> usize {
        let rest = self.jobs.split_off(self.warm.min(self.jobs.len()));
        let mut used = 0u64;
        let mut kept = Vec::with_capacity(self.jobs.len() + rest.len());
        let mut dropped = 0;
        for j in self.jobs.drain(..) {
            if used + u64::from(j.gpus) <= u64::from(gpus) {
                used += u64::from(j.gpus);
                kept.push(j);
            } else {
                dropped += 1;
            }
        }
        self.warm = kept.len();
        kept.extend(rest);
        self.jobs = kept;
        dropped
    }

    /// Multiplies every submit time by `factor` (attempt lengths unchanged).
    pub fn scale_time(&mut self, factor: f64) {
        if factor != 1.0 {
            for j in &mut self.jobs {
                j.submit_s = (j.submit_s as f64 * factor).round() as u64;
            }
        }
    }
}

/// The trace formats the replay reads. Their names (`philly`, `csv`,
/// `rfold`, `adaptdl`) come from this one definition: `--format`, serde and
/// [`Display`](std::fmt::Display) all use the kebab-case variant name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// Philly's own `cluster_job_log` (JSON).
    Philly,
    /// Gangway's CSV job list (see [`csv_jobs`](self) docs in the crate README).
    Csv,
    /// The RFold-derived Philly trace (`rfold_philly_trace.csv`).
    Rfold,
    /// The AdaptDL-derived Philly trace (`adaptdl_philly.csv`).
    Adaptdl,
    /// Gavel's Philly-derived traces (a `.trace` file or a directory of
    /// them, one per VC), with `--throughputs`.
    Gavel,
}

impl std::fmt::Display for Format {
    /// The name `--format` takes.
    ///
    /// ```
    /// use gangway_replay::trace::Format;
    /// assert_eq!(Format::Adaptdl.to_string(), "adaptdl");
    /// ```
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use clap::ValueEnum;
        match self.to_possible_value() {
            Some(v) => f.write_str(v.get_name()),
            None => write!(f, "{self:?}"),
        }
    }
}

/// A trace that could not be read: names the file, the line or job, and the problem.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// The file could not be opened or read.
    #[error("{file}: cannot read: {source}")]
    Io {
        /// The file.
        file: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A line or record is malformed.
    #[error("{file}:{line}: {message}")]
    Line {
        /// The file.
        file: String,
        /// 1-based line.
        line: u64,
        /// What is wrong.
        message: String,
    },
    /// A job is malformed.
    #[error("{file}: job {job}: {message}")]
    Job {
        /// The file.
        file: String,
        /// The job's id.
        job: String,
        /// What is wrong.
        message: String,
    },
    /// The trace has no replayable jobs.
    #[error("{file}: no replayable jobs")]
    Empty {
        /// The file.
        file: String,
    },
}

/// Reads a Philly `cluster_job_log` with what it recorded of each job's
/// first attempt: the jobs (in the log's order, not sorted) each beside its
/// [`Recorded`] start and servers.
///
/// ```
/// let log = r#"[{"status": "Pass", "vc": "a", "jobid": "j1", "submitted_time": "2017-10-07 01:00:00",
///   "attempts": [{"start_time": "2017-10-07 01:02:00", "end_time": "2017-10-07 02:00:00",
///                 "detail": [{"ip": "m1", "gpus": ["gpu0", "gpu1"]}]}]}]"#;
/// let (trace, recorded) = gangway_replay::trace::read_philly_recorded("log.json", log.as_bytes()).unwrap();
/// assert_eq!(trace.jobs[0].gpus, 2);
/// assert_eq!(recorded[0].first_wait_s, Some(120));
/// assert_eq!(recorded[0].first_servers, Some(1));
/// ```
pub fn read_philly_recorded(
    file: &str,
    input: impl std::io::Read,
) -> Result<(Trace, Vec<Recorded>), TraceError> {
    let (trace, recorded) = philly::read_recorded(file, std::io::BufReader::new(input))?;
    if trace.jobs.is_empty() {
        return Err(TraceError::Empty {
            file: file.to_string(),
        });
    }
    Ok((trace, recorded))
}

/// Reads a trace file of the given format.
pub fn load(path: &Path, format: Format) -> Result<Trace, TraceError> {
    load_first(path, format, None)
}

/// Reads a trace file of the given format, as far as its first `max_jobs`
/// jobs by submit time need ([`read_first`]); `None` reads it all.
pub fn load_first(
    path: &Path,
    format: Format,
    max_jobs: Option<usize>,
) -> Result<Trace, TraceError> {
    let (file, input) = open(path)?;
    read_first(&file, format, input, max_jobs)
}

/// The file at `path`, opened, with its name for errors.
pub(crate) fn open(path: &Path) -> Result<(String, std::fs::File), TraceError> {
    let file = path.display().to_string();
    let input = std::fs::File::open(path).map_err(|source| TraceError::Io {
        file: file.clone(),
        source,
    })?;
    Ok((file, input))
}

/// Reads a trace of the given format from `input`, naming it `file` in
/// errors.
///
/// ```
/// use gangway_replay::trace::{read, Format};
/// let csv = "id,submit_s,gpus,vc,user,attempts,status\n1,0,8,a,u,600,Pass\n";
/// let trace = read("jobs.csv", Format::Csv, csv.as_bytes()).unwrap();
/// assert_eq!(trace.jobs.len(), 1);
/// assert!(read("bad.csv", Format::Csv, "id\n1,x\n".as_bytes()).is_err());
/// ```
pub fn read(file: &str, format: Format, input: impl std::io::Read) -> Result<Trace, TraceError> {
    read_first(file, format, input, None)
}

/// [`read`], but where the format lists jobs in submit order the reader
/// stops once it has `max_jobs` jobs (a `--skip`/`--jobs` window needs no
/// more), so a window at the start of a large file neither reads nor checks
/// the rest. The result holds at least the first `max_jobs` jobs by submit
/// time (more where the whole file was read), exactly as a whole read sorts
/// them.
///
/// - `csv` and `rfold` stop early when their rows are in submit order (the
///   published RFold file is); a row out of order before the `max_jobs`-th
///   makes the reader read on to the end and sort, as [`read`] does.
/// - `adaptdl` is always read whole: its rows are not in timestamp order.
/// - `philly` is always read whole: its jobs are not in submit order, and an
///   attempt still open at snapshot time runs until the latest time of the
///   whole log.
///
/// ```
/// use gangway_replay::trace::{read_first, Format};
/// let csv = "id,submit_s,gpus,vc,user,attempts,status\n\
///            a,0,1,v,u,60,passed\nb,5,1,v,u,60,passed\nc,oops,1,v,u,60,passed\n";
/// let t = read_first("jobs.csv", Format::Csv, csv.as_bytes(), Some(2)).unwrap();
/// assert_eq!(t.jobs.len(), 2, "the bad third row was never read");
/// assert!(read_first("jobs.csv", Format::Csv, csv.as_bytes(), Some(3)).is_err());
/// ```
pub fn read_first(
    file: &str,
    format: Format,
    input: impl std::io::Read,
    max_jobs: Option<usize>,
) -> Result<Trace, TraceError> {
    let stop = csv_jobs::StopAfter::new(max_jobs);
    let mut trace = match format {
        Format::Philly => philly::read(file, std::io::BufReader::new(input))?,
        Format::Csv => csv_jobs::read_gangway(file, input, stop)?,
        Format::Rfold => csv_jobs::read_rfold(file, input, stop)?,
        Format::Adaptdl => csv_jobs::read_adaptdl(file, input)?,
        Format::Gavel => {
            return Err(TraceError::Line {
                file: file.to_string(),
                line: 1,
                message: "a Gavel trace is read with its throughput table (load_gavel)".into(),
            });
        }
    };
    if trace.jobs.is_empty() {
        return Err(TraceError::Empty {
            file: file.to_string(),
        });
    }
    trace.normalize();
    Ok(trace)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_round_trips_through_its_name() {
        for o in Outcome::ALL {
            assert_eq!(Outcome::from_name(o.as_str()), Some(o));
            assert_eq!(Outcome::from_name(&o.as_str().to_uppercase()), Some(o));
            let json = serde_json::to_string(&o).unwrap();
            assert_eq!(
                json,
                format!("\"{}\"", o.as_str()),
                "serde writes the same name"
            );
            assert_eq!(serde_json::from_str::<Outcome>(&json).unwrap(), o);
        }
        assert_eq!(Outcome::from_name("fail"), Some(Outcome::Failed));
        assert_eq!(Outcome::from_name("kill"), None);
    }

    /// A Gangway CSV (or RFold, with `rfold`) file of `n` jobs a second
    /// apart whose line `bad` (1-based, the header being line 1) is malformed.
    fn trace_with_bad_line(format: Format, n: usize, bad: u64) -> String {
        let mut text = match format {
            Format::Rfold => "#job id,arrival time (sec),topology,shape,size,duration (sec)\n",
            _ => "id,submit_s,gpus,vc,user,attempts,status\n",
        }
        .to_string();
        for i in 0..n {
            let line = i as u64 + 2;
            let submit = if line == bad {
                "soon".to_string()
            } else {
                i.to_string()
            };
            text.push_str(&match format {
                Format::Rfold => format!("{i},{submit},CLOS,1,1,60.0\n"),
                _ => format!("j{i},{submit},1,v,u,60,passed\n"),
            });
        }
        text
    }

    #[test]
    fn a_window_at_the_start_stops_before_a_bad_line_beyond_it() {
        for format in [Format::Csv, Format::Rfold] {
            let text = trace_with_bad_line(format, 1500, 1000);
            // --jobs 10: line 1000 is never read.
            let t = read_first("t.csv", format, text.as_bytes(), Some(10)).unwrap();
            assert_eq!(t.jobs.len(), 10, "{format}");
            assert_eq!(t.jobs[9].submit_s, 9);
            // --skip 990 --jobs 20 reaches line 1000: the error names it.
            let e = read_first("t.csv", format, text.as_bytes(), Some(1010))
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("t.csv:1000: "), "{format}: {e}");
            assert!(e.contains("\"soon\" is not a valid number"), "{e}");
            // A whole read finds it too.
            let e = read("t.csv", format, text.as_bytes())
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("t.csv:1000: "), "{e}");
        }
    }

    #[test]
    fn a_file_out_of_order_is_read_whole_and_sorted() {
        let text = "id,submit_s,gpus,vc,user,attempts,status\n\
                    a,50,1,v,u,60,passed\nb,10,1,v,u,60,passed\nc,0,1,v,u,60,passed\n";
        let first = read_first("t.csv", Format::Csv, text.as_bytes(), Some(2)).unwrap();
        let whole = read("t.csv", Format::Csv, text.as_bytes()).unwrap();
        assert_eq!(first, whole);
        let names: Vec<&str> = first.jobs.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["c", "b", "a"], "the earliest jobs come first");
        // AdaptDL files are never cut short: the earliest row is the last.
        let adaptdl = "timestamp,duration,num_gpus,gpu_time,cluster\n\
                       2017-10-09 07:01:55,66.0,1,66.0,x\n2017-10-09 06:13:03,10.0,1,10.0,y\n";
        let t = read_first("a.csv", Format::Adaptdl, adaptdl.as_bytes(), Some(1)).unwrap();
        assert_eq!((t.jobs.len(), t.jobs[0].vc.as_str()), (2, "y"));
    }

    #[test]
    fn every_format_round_trips_through_its_name() {
        use clap::ValueEnum;
        for f in Format::value_variants() {
            let name = f.to_string();
            assert_eq!(Format::from_str(&name, false).unwrap(), *f);
            let json = serde_json::to_string(f).unwrap();
            assert_eq!(
                json,
                format!("\"{name}\""),
                "serde writes the --format name"
            );
            assert_eq!(serde_json::from_str::<Format>(&json).unwrap(), *f);
        }
        assert_eq!(Format::Rfold.to_string(), "rfold");
    }
}
