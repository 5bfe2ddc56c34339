//! Real virtual clusters for a trace without them: the RFold trace has no VC
//! column, the AdaptDL trace has the VC of its 82,247 Pass jobs (PHILLY.md
//! §6, ranks 1 and 2). A row of each is the same job when both have the same
//! submit second and GPU count; several AdaptDL rows with the same key are
//! taken in file order.

use std::collections::{HashMap, VecDeque};
use std::path::Path;

use super::{Trace, TraceError, csv_jobs, parse_timestamp};

/// The RFold trace's time origin: its arrival seconds count from the first
/// job of the Philly log, 2017-08-14 23:27:00 (PHILLY.md §0, QH).
pub const RFOLD_ORIGIN: &str = "2017-08-14 23:27:00";

/// How many jobs of a trace took a real VC label.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VcLabels {
    /// Jobs whose VC came from the labels file.
    pub matched: usize,
    /// Jobs with no match, which keep the reader's fallback VC (for RFold a
    /// VC drawn from the study's per-VC mix by job id, section 5.3).
    pub fallback: usize,
}

/// Gives the jobs of `trace` (read from an RFold file, not yet windowed) the
/// VCs of the AdaptDL file `labels`: a job takes the VC of the first unused
/// AdaptDL row with its submit time (`RFOLD_ORIGIN` + its arrival seconds)
/// and GPU count.
///
/// ```no_run
/// use gangway_host_examples::trace::{self, Format};
/// use std::path::Path;
/// let mut t = trace::load(Path::new("rfold_philly_trace.csv"), Format::Rfold).unwrap();
/// let n = trace::label_vcs(&mut t, Path::new("adaptdl_philly.csv")).unwrap();
/// println!("{} of {} jobs have their real VC", n.matched, n.matched + n.fallback);
/// ```
pub fn label_vcs(trace: &mut Trace, labels: &Path) -> Result<VcLabels, TraceError> {
    let file = labels.display().to_string();
    let input = std::fs::File::open(labels).map_err(|source| TraceError::Io {
        file: file.clone(),
        source,
    })?;
    label_vcs_from(trace, &file, input)
}

/// [`label_vcs`] from any reader, naming it `file` in errors.
///
/// ```
/// use gangway_host_examples::trace::{label_vcs_from, read, Format};
/// let rfold = "#job id,arrival time (sec),topology,shape,size,duration (sec)\n\
///              0,0.0,CLOS,1,1,60.0\n1,60.0,CLOS,4,4,60.0\n";
/// let mut t = read("r.csv", Format::Rfold, rfold.as_bytes()).unwrap();
/// let labels = "timestamp,duration,num_gpus,gpu_time,cluster\n2017-08-14 23:28:00,60.0,4,240.0,ee9e8c\n";
/// let n = label_vcs_from(&mut t, "a.csv", labels.as_bytes()).unwrap();
/// assert_eq!((n.matched, n.fallback), (1, 1));
/// assert_eq!(t.jobs[1].vc, "ee9e8c");
/// ```
pub fn label_vcs_from(
    trace: &mut Trace,
    file: &str,
    input: impl std::io::Read,
) -> Result<VcLabels, TraceError> {
    let origin = parse_timestamp(RFOLD_ORIGIN).unwrap_or(0);
    let rows = csv_jobs::read_adaptdl(file, input)?;
    let mut by_key: HashMap<(u64, u32), VecDeque<String>> = HashMap::new();
    for j in rows.jobs {
        by_key
            .entry((j.submit_s, j.gpus))
            .or_default()
            .push_back(j.vc);
    }
    let mut n = VcLabels::default();
    for j in &mut trace.jobs {
        let key = (origin + j.submit_s, j.gpus);
        match by_key.get_mut(&key).and_then(VecDeque::pop_front) {
            Some(vc) => {
                j.vc = vc;
                n.matched += 1;
            }
            None => n.fallback += 1,
        }
    }
    Ok(n)
}
