//! A replay's VC quotas (`--quotas`): from the workload's demand, from the
//! Helios artifact's Philly VC sizes, from a file of yours, or none; and
//! the line that says which a run used.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::ReplayError;
use crate::trace::Trace;

/// The Helios artifact's Philly VC sizes under `$GANGWAY_DATA`
/// (`vc,node num`; PHILLY.md sections 1.1 and 6, rank 6), which
/// `--quotas helios` reads.
pub const HELIOS_VC_FILE: &str = "philly/helios_philly_vc.csv";

/// GPUs of one node of a Helios `vc,node num` file: the Helios simulator
/// builds every VC of nodes of this many GPUs (its `--num_gpus_per_node`
/// default; HeliosArtifact `framework/QSSF Service/simulator.py`).
pub const HELIOS_GPUS_PER_NODE: u32 = 8;

/// The quotas of a replay and which model gave them.
#[derive(Clone, Debug, PartialEq)]
pub struct Quotas {
    /// GPU quota per VC name; a VC not in it has no quota.
    pub by_vc: BTreeMap<String, u32>,
    /// Which model, as `--quotas` names it (`demand:0.711`, `helios`,
    /// `none`, a file's path).
    pub model: String,
    /// What the quotas are, in one line (the console's `quotas:` line and
    /// `report.json`'s `reproduce.quotas`).
    pub description: String,
    /// The file read, if any.
    pub file: Option<PathBuf>,
}

/// The quotas `spec` (`--quotas`) names for `trace` on `cluster_gpus` GPUs:
/// `none`; `demand` or `demand:F` (each VC's share of the workload's GPU
/// time of F times the cluster, [`demand_quotas`]); `helios` or `helios:F`
/// (F times the Helios artifact's Philly VC sizes, read from
/// `$GANGWAY_DATA/philly/helios_philly_vc.csv`); or a CSV file, `vc,gpus`,
/// or `vc,node num` as Helios writes it (nodes of
/// [`HELIOS_GPUS_PER_NODE`] GPUs). Demand and Helios quotas are at least
/// each VC's largest job, so every job fits its quota.
///
/// ```
/// use gangway_replay::cli::{self, quotas};
/// use gangway_replay::workload;
/// let trace = workload::generate(200, 1);
/// let q = quotas("demand:0.5", &trace, 1000).unwrap();
/// let whole = quotas("demand", &trace, 1000).unwrap();
/// let sum = |q: &cli::Quotas| q.by_vc.values().sum::<u32>();
/// assert!(sum(&q) < sum(&whole), "{:?} {:?}", q.by_vc, whole.by_vc);
/// assert!(q.description.starts_with("demand:0.5: "), "{}", q.description);
/// assert!(quotas("demand:x", &trace, 1000).is_err());
/// assert!(quotas("none", &trace, 1000).unwrap().by_vc.is_empty());
/// ```
pub fn quotas(spec: &str, trace: &Trace, cluster_gpus: u32) -> Result<Quotas, ReplayError> {
    let (name, factor) = match spec.split_once(':') {
        Some((name @ ("demand" | "helios"), f)) => (name, Some(factor_of(spec, f)?)),
        _ => (spec, None),
    };
    match name {
        "none" => Ok(Quotas {
            by_vc: BTreeMap::new(),
            model: spec.into(),
            description: "none: no VC has a quota".into(),
            file: None,
        }),
        "demand" => Ok(demand(spec, factor.unwrap_or(1.0), trace, cluster_gpus)),
        "helios" => {
            let file = helios_file()?;
            let text = read(&file)?;
            let sizes = parse_file(&text, &file)?;
            Ok(helios(spec, &file, &sizes, factor.unwrap_or(1.0), trace))
        }
        path => {
            let file = PathBuf::from(path);
            let text = read(&file)?;
            let sizes = parse_file(&text, &file)?;
            if sizes.nodes {
                return Ok(helios(spec, &file, &sizes, 1.0, trace));
            }
            let description = format!(
                "{path}: {} VCs, {} GPUs{}",
                sizes.by_vc.len(),
                sizes.by_vc.values().sum::<u32>(),
                unlisted(&sizes.by_vc, trace)
            );
            Ok(Quotas {
                by_vc: sizes.by_vc,
                model: spec.into(),
                description,
                file: Some(file),
            })
        }
    }
}

/// The factor `f` of `spec` (`demand:F`, `helios:F`).
fn factor_of(spec: &str, f: &str) -> Result<f64, ReplayError> {
    f.parse()
        .ok()
        .filter(|f: &f64| *f > 0.0 && f.is_finite())
        .ok_or_else(|| {
            ReplayError::Usage(format!(
                "--quotas {spec}: expected demand:F or helios:F with a factor F > 0"
            ))
        })
}

/// `demand:F`: the shares of F times the cluster.
fn demand(spec: &str, factor: f64, trace: &Trace, cluster_gpus: u32) -> Quotas {
    let gpus = ((f64::from(cluster_gpus) * factor).round() as u32).max(1);
    let by_vc: BTreeMap<String, u32> = demand_quotas(trace, gpus)
        .into_iter()
        .map(|(vc, q)| (vc, q.min(cluster_gpus)))
        .collect();
    let description = format!(
        "{spec}: each VC's share of the workload's GPU time of {gpus} GPUs, at least its \
         largest job ({} VCs, {} GPUs in all, of {cluster_gpus})",
        by_vc.len(),
        by_vc.values().sum::<u32>()
    );
    Quotas {
        by_vc,
        model: spec.into(),
        description,
        file: None,
    }
}

/// F times the node counts of a Helios file, in GPUs, each at least the
/// VC's largest job in `trace`.
fn helios(spec: &str, file: &Path, sizes: &FileSizes, factor: f64, trace: &Trace) -> Quotas {
    let largest = largest_jobs(trace);
    let mut raised = 0;
    let by_vc: BTreeMap<String, u32> = sizes
        .by_vc
        .iter()
        .map(|(vc, gpus)| {
            let q = (f64::from(*gpus) * factor).round() as u32;
            let least = largest.get(vc.as_str()).copied().unwrap_or(0);
            raised += usize::from(q < least);
            (vc.clone(), q.max(least).max(1))
        })
        .collect();
    let nodes: u32 = sizes.by_vc.values().sum::<u32>() / HELIOS_GPUS_PER_NODE;
    let mut description = format!(
        "{spec}: the Helios artifact's Philly VC sizes ({}): {} VCs, {nodes} nodes of \
         {HELIOS_GPUS_PER_NODE} GPUs{}, {} GPUs in all{}",
        file.display(),
        by_vc.len(),
        if factor == 1.0 {
            String::new()
        } else {
            format!(" times {factor}")
        },
        by_vc.values().sum::<u32>(),
        unlisted(&by_vc, trace)
    );
    if raised > 0 {
        description.push_str(&format!("; {raised} raised to their VC's largest job"));
    }
    Quotas {
        by_vc,
        model: spec.into(),
        description,
        file: Some(file.to_path_buf()),
    }
}

/// `; N VCs of the workload unlisted (no quota): a, b` when some are.
fn unlisted(by_vc: &BTreeMap<String, u32>, trace: &Trace) -> String {
    let mut missing: Vec<&str> = trace
        .jobs
        .iter()
        .map(|j| j.vc.as_str())
        .filter(|vc| !by_vc.contains_key(*vc))
        .collect();
    missing.sort_unstable();
    missing.dedup();
    if missing.is_empty() {
        return String::new();
    }
    let jobs = trace
        .jobs
        .iter()
        .filter(|j| !by_vc.contains_key(&j.vc))
        .count();
    format!(
        "; {} VCs of the workload unlisted, no quota ({jobs} jobs): {}",
        missing.len(),
        missing.join(", ")
    )
}

/// The largest job of each VC of `trace`, in GPUs.
fn largest_jobs(trace: &Trace) -> BTreeMap<&str, u32> {
    let mut out: BTreeMap<&str, u32> = BTreeMap::new();
    for j in &trace.jobs {
        let e = out.entry(j.vc.as_str()).or_default();
        *e = (*e).max(j.gpus);
    }
    out
}

/// Each VC's share of the trace's GPU-time demand times the cluster's GPUs
/// (the quotas add up to the cluster), and at least the VC's largest job so
/// every job fits its quota.
pub fn demand_quotas(trace: &Trace, cluster_gpus: u32) -> BTreeMap<String, u32> {
    let mut demand: BTreeMap<&str, (f64, u32)> = BTreeMap::new();
    for j in &trace.jobs {
        let run = j.run_s();
        let e = demand.entry(j.vc.as_str()).or_default();
        e.0 += f64::from(j.gpus) * run as f64;
        e.1 = e.1.max(j.gpus);
    }
    let total: f64 = demand.values().map(|d| d.0).sum::<f64>().max(1.0);
    demand
        .into_iter()
        .map(|(vc, (gpu_s, largest))| {
            let share = (gpu_s / total * f64::from(cluster_gpus)).round() as u32;
            (vc.to_string(), share.max(largest).min(cluster_gpus))
        })
        .collect()
}

/// `$GANGWAY_DATA/philly/helios_philly_vc.csv`.
fn helios_file() -> Result<PathBuf, ReplayError> {
    let dir = std::env::var_os("GANGWAY_DATA").ok_or_else(|| {
        ReplayError::Usage(format!(
            "--quotas helios reads $GANGWAY_DATA/{HELIOS_VC_FILE} (the Helios artifact's Philly \
             VC sizes): set GANGWAY_DATA to the folder holding philly/, or give the file itself: \
             --quotas PATH/helios_philly_vc.csv"
        ))
    })?;
    Ok(Path::new(&dir).join(HELIOS_VC_FILE))
}

fn read(file: &Path) -> Result<String, ReplayError> {
    std::fs::read_to_string(file)
        .map_err(|e| ReplayError::Usage(format!("{}: cannot read quotas: {e}", file.display())))
}

/// A quota file's sizes in GPUs, and whether it counted nodes.
struct FileSizes {
    by_vc: BTreeMap<String, u32>,
    nodes: bool,
}

/// Parses a quota file: `vc,gpus` lines (a first line starting `vc` is a
/// header), or Helios's `vc,node num` (nodes of [`HELIOS_GPUS_PER_NODE`]
/// GPUs, told by that header).
fn parse_file(text: &str, file: &Path) -> Result<FileSizes, ReplayError> {
    let at = |i: usize| format!("{}:{}", file.display(), i + 1);
    let mut sizes = FileSizes {
        by_vc: BTreeMap::new(),
        nodes: false,
    };
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if i == 0 && line.starts_with("vc") {
            sizes.nodes = line
                .split(',')
                .nth(1)
                .is_some_and(|h| h.trim() == "node num");
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (vc, n) = line
            .split_once(',')
            .ok_or_else(|| ReplayError::Usage(format!("{}: expected `vc,gpus`", at(i))))?;
        let n: u32 = n
            .trim()
            .parse()
            .map_err(|_| ReplayError::Usage(format!("{}: {:?} is not a count", at(i), n.trim())))?;
        let per = if sizes.nodes { HELIOS_GPUS_PER_NODE } else { 1 };
        sizes
            .by_vc
            .insert(vc.trim().to_string(), n.saturating_mul(per));
    }
    Ok(sizes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload;

    #[test]
    fn a_helios_file_counts_nodes_of_eight_gpus_and_lists_the_unlisted() {
        let dir = std::env::temp_dir().join(format!("gangway-quotas-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("helios.csv");
        std::fs::write(&file, "vc,node num\n6214e9,64\nb436b2,2\n").unwrap();
        let trace = workload::generate(500, 1);
        let q = quotas(file.to_str().unwrap(), &trace, 3205).unwrap();
        assert_eq!(q.by_vc["6214e9"], 512);
        assert!(q.by_vc["b436b2"] >= 16, "{:?}", q.by_vc);
        assert!(
            q.description.contains("2 VCs, 66 nodes of 8 GPUs"),
            "{}",
            q.description
        );
        assert!(
            q.description.contains("unlisted, no quota"),
            "{}",
            q.description
        );
        // A plain file is GPUs, as written.
        std::fs::write(&file, "vc,gpus\n6214e9,64\n").unwrap();
        let q = quotas(file.to_str().unwrap(), &trace, 3205).unwrap();
        assert_eq!(q.by_vc["6214e9"], 64);
        std::fs::write(&file, "6214e9;64\n").unwrap();
        let e = quotas(file.to_str().unwrap(), &trace, 3205).unwrap_err();
        assert!(e.to_string().contains("helios.csv:1: expected"), "{e}");
        assert!(quotas("helios:0", &trace, 3205).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
