//! Real virtual clusters for a trace without them: the RFold trace has no VC
//! column, the AdaptDL trace has the VC of its 82,247 Pass jobs (PHILLY.md
//! §6, ranks 1 and 2). A row of each is the same job when both have the same
//! submit second and GPU count; several AdaptDL rows with the same key are
//! taken in file order. Jobs of files without VCs get one drawn from the
//! study's per-VC mix ([`philly_vc_for`]), which the built-in generator
//! uses too.

use std::collections::{HashMap, VecDeque};
use std::path::Path;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

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
/// use gangway_replay::trace::{self, Format};
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
/// use gangway_replay::trace::{label_vcs_from, read, Format};
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

/// Virtual clusters: (name, % of jobs, % of them multi-GPU) (PHILLY.md section 5.3).
const VC_MIX: [(&str, f64, f64); 11] = [
    ("6214e9", 50.1, 0.9),
    ("11cb48", 19.6, 9.2),
    ("6c71a0", 12.1, 9.0),
    ("b436b2", 9.0, 2.5),
    ("103959", 2.4, 18.8),
    ("ee9e8c", 1.8, 60.5),
    ("0e4a51", 1.7, 24.0),
    ("ed69ec", 1.4, 0.0),
    ("7f04ca", 0.9, 71.8),
    ("2869ce", 0.5, 84.8),
    ("e13805", 0.5, 42.5),
];

/// A weighted pick, shared with the generator (one rule, so VC draws stay
/// stable across releases).
pub(crate) fn pick<T: Copy>(rng: &mut impl Rng, items: &[(T, f64)]) -> T {
    let total: f64 = items.iter().map(|i| i.1).sum();
    let mut x = rng.random::<f64>() * total;
    for &(item, w) in items {
        if x < w {
            return item;
        }
        x -= w;
    }
    items[items.len() - 1].0
}

/// Weights of the Philly VCs for a single- or multi-GPU job.
pub(crate) fn vc_weights(multi: bool) -> Vec<(&'static str, f64)> {
    VC_MIX
        .iter()
        .map(|&(name, jobs, multi_pct)| {
            let share = if multi { multi_pct } else { 100.0 - multi_pct };
            (name, jobs * share / 100.0)
        })
        .collect()
}

/// A Philly VC for a job of a file without VCs, drawn deterministically from
/// the job's id (a hash), conditioned on single- or multi-GPU (section 5.3).
pub fn philly_vc_for(job_id: &str, multi: bool) -> &'static str {
    // FNV-1a then splitmix64: stable across platforms and releases.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in job_id.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(h);
    pick(&mut rng, &vc_weights(multi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vc_assignment_is_stable_and_conditioned() {
        assert_eq!(philly_vc_for("42", true), philly_vc_for("42", true));
        let multi: Vec<&str> = (0..2000)
            .map(|i| philly_vc_for(&i.to_string(), true))
            .collect();
        assert!(!multi.contains(&"ed69ec"), "ed69ec runs no multi-GPU jobs");
    }
}
