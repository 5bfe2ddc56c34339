//! What a replay reads before it runs: the topology, the workload, the
//! quotas, the policy sets and the `reproduce` record.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gangway_catalog::PolicyChoice;
use gangway_core::{RackGrouping, Topology};

use super::quotas::{Quotas, quotas};
use super::{Cli, Feature, ReplayError, choices, say};
use crate::calibrate::targets::Targets;
use crate::reproduce::{Reproduce, result_args};
use crate::throughputs::Throughputs;
use crate::trace::{self, Format, Trace};
use crate::workload;

/// The inputs of a replay, loaded and checked.
pub(super) struct Inputs {
    /// The cluster.
    pub(super) topo: Topology,
    /// Where the topology came from.
    pub(super) topo_source: String,
    /// How machines were grouped into racks (for `--machines`).
    pub(super) grouping: Option<String>,
    /// The workload.
    pub(super) trace: Trace,
    /// Where the workload came from (the `workload:` line).
    pub(super) source: String,
    /// The VCs' quotas and which model gave them.
    pub(super) quotas: Quotas,
    /// The policy sets, in order.
    pub(super) choices: Vec<PolicyChoice>,
    /// The targets to fit to (`--fit`).
    pub(super) targets: Option<Targets>,
    /// Speeds per GPU type of the trace's job classes (`--throughputs`).
    pub(super) throughputs: Option<std::sync::Arc<Throughputs>>,
    /// The `reproduce` record.
    pub(super) reproduce: Reproduce,
    /// How long loading took.
    pub(super) load_time: Duration,
}

impl Inputs {
    /// Loads what `cli` names, saying where the workload and the topology
    /// came from (unless quiet) and warning of what the replay cannot
    /// follow.
    pub(super) fn load(cli: &Cli) -> Result<Self, ReplayError> {
        let load_clock = Instant::now();
        let (topo, topo_source, grouping) = topology(cli)?;
        if let Some(scale) = cli.time_scale
            && !(scale > 0.0 && scale.is_finite())
        {
            return Err(ReplayError::Usage(format!(
                "--time-scale {scale} must be a positive number"
            )));
        }
        let throughputs = throughputs_for(cli, &topo)?;
        let (trace, source) = workload_of(cli, topo.total_gpus(), throughputs.as_deref())?;
        if trace.jobs.is_empty() {
            return Err(ReplayError::Usage("the workload has no jobs".into()));
        }
        say(cli, &format!("workload: {source}"));
        say(
            cli,
            &format!(
                "topology: {topo_source}: {}",
                shape_line(&topo, grouping.as_deref())
            ),
        );
        warn_of_differences(&trace, &topo, &topo_source);
        let quotas = quotas(&cli.quotas, &trace, topo.total_gpus())?;
        say(cli, &format!("quotas: {}", quotas.description));
        let choices: Vec<PolicyChoice> = choices(cli)?;
        let targets = match &cli.fit {
            Some(spec) => Some(Targets::named_or_file(spec)?),
            None => None,
        };
        let reproduce = reproduce_of(cli, &quotas)?;
        Ok(Inputs {
            topo,
            topo_source,
            grouping,
            trace,
            source,
            quotas,
            choices,
            targets,
            throughputs,
            reproduce,
            load_time: load_clock.elapsed(),
        })
    }
}

/// Tells of the trace's jobs that cannot be replayed, and of machines the
/// trace ran jobs on that the topology lacks.
fn warn_of_differences(trace: &Trace, topo: &Topology, topo_source: &str) {
    for s in &trace.skipped {
        eprintln!("replay: not replayable: {}: {}", s.at, s.reason);
    }
    let (unknown, on_unknown) = trace.unknown_machines(|m| topo.server_by_name(m).is_some());
    if let Some(first) = unknown.first() {
        tracing::warn!(
            "the trace ran {on_unknown} jobs on {} machines that {topo_source} lacks (first: {first}); \
             replay places every job itself, so this only says the trace and the cluster differ",
            unknown.len()
        );
    }
}

/// The topology the command line asks for, where it came from, and (for
/// `--machines`) how its machines were grouped into racks.
fn topology(cli: &Cli) -> Result<(Topology, String, Option<String>), ReplayError> {
    if let Some(path) = &cli.topology {
        return Ok((Topology::from_file(path)?, path.display().to_string(), None));
    }
    if let Some(shape) = &cli.cluster {
        return Ok((shape.topology()?, format!("--cluster {shape}"), None));
    }
    if let Some(path) = &cli.machines {
        let grouping = RackGrouping::named(&cli.rack_grouping, cli.rack_size).ok_or_else(|| {
            ReplayError::Usage(format!(
                "--rack-grouping {:?}: expected one of {:?}",
                cli.rack_grouping,
                RackGrouping::NAMES
            ))
        })?;
        return Ok((
            Topology::from_machine_list(path, grouping)?,
            path.display().to_string(),
            Some(grouping.to_string()),
        ));
    }
    Ok((
        workload::philly_topology()?,
        "built-in Philly machine mix (revised list: 264x8 + 271x4 + 1x3 + 3x2 GPUs)".into(),
        Some(RackGrouping::default().to_string()),
    ))
}

/// Racks of a topology: domains one level below the cluster.
pub(super) fn racks_of(topo: &Topology) -> usize {
    topo.domains_at(gangway_core::Level(1)).len()
}

/// The topology in one line: `552 servers in 21 racks, 3205 GPUs
/// (same-sku, 32 per rack)`, the grouping only where machines were grouped.
pub(super) fn shape_line(topo: &Topology, grouping: Option<&str>) -> String {
    let plural = |n: usize, one: &str| {
        if n == 1 {
            format!("{n} {one}")
        } else {
            format!("{n} {one}s")
        }
    };
    let mut line = format!(
        "{} in {}, {} GPUs",
        plural(topo.servers().len(), "server"),
        plural(racks_of(topo), "rack"),
        topo.total_gpus()
    );
    if let Some(g) = grouping {
        line.push_str(&format!(" ({g})"));
    }
    line
}

/// The end of the `workload:` line: warm jobs left out as beyond the
/// cluster's GPUs ([`Trace::limit_warm`]) and the time scale, where they
/// apply.
fn push_left_out_and_scale(source: &mut String, over: usize, time_scale: f64) {
    if over > 0 {
        source.push_str(&format!(
            ", {over} more left out as beyond the cluster's GPUs"
        ));
    }
    if time_scale != 1.0 {
        source.push_str(&format!(", time scale {time_scale}"));
    }
}

/// The workload the command line asks for, and where it came from (the
/// `workload:` line).
fn workload_of(
    cli: &Cli,
    cluster_gpus: u32,
    throughputs: Option<&Throughputs>,
) -> Result<(Trace, String), ReplayError> {
    match &cli.trace {
        Some(path) => traced_workload(cli, path, cluster_gpus, throughputs),
        None => Ok(generated_workload(cli, cluster_gpus)),
    }
}

/// The throughput table `--throughputs` names, checked against `topo`'s
/// GPU types (each must be in it); a Gavel trace needs one.
fn throughputs_for(
    cli: &Cli,
    topo: &Topology,
) -> Result<Option<std::sync::Arc<Throughputs>>, ReplayError> {
    let Some(path) = &cli.throughputs else {
        if cli.format == Format::Gavel && cli.trace.is_some() {
            return Err(ReplayError::Usage(
                "--format gavel needs --throughputs (Gavel's simulation_throughputs.json)".into(),
            ));
        }
        return Ok(None);
    };
    let table =
        Throughputs::load(path).map_err(|e| ReplayError::Usage(format!("--throughputs: {e}")))?;
    let known = table.gpu_types();
    if let Some(t) = topo
        .gpu_types()
        .iter()
        .find(|t| !known.contains(&t.name.as_str()))
    {
        return Err(ReplayError::Usage(format!(
            "the cluster's GPU type {:?} is not in {} (it has {}); name the cluster's types \
             as the table does, e.g. --cluster 300x1:k80,300x1:p100,300x1:v100",
            t.name,
            path.display(),
            known.join(", ")
        )));
    }
    Ok(Some(std::sync::Arc::new(table)))
}

/// The workload of the trace at `path`: its window, VC labels and time
/// scale as `cli` asks.
fn traced_workload(
    cli: &Cli,
    path: &Path,
    cluster_gpus: u32,
    throughputs: Option<&Throughputs>,
) -> Result<(Trace, String), ReplayError> {
    // A window needs only its jobs and those before it (the warm start's):
    // readers of files in submit order stop there.
    let needed = cli.jobs.map(|jobs| cli.skip.saturating_add(jobs));
    let mut t = match (cli.format, throughputs) {
        (Format::Gavel, Some(table)) => trace::load_gavel(path, table)?,
        _ => trace::load_first(path, cli.format, needed)?,
    };
    let labels = match &cli.vcs {
        Some(file) => {
            if cli.format != Format::Rfold {
                return Err(ReplayError::Usage(
                    "--vcs labels an RFold trace (--format rfold)".into(),
                ));
            }
            Some((file, trace::label_vcs(&mut t, file)?))
        }
        None => None,
    };
    let warm = !cli.without.contains(&Feature::WarmStart);
    let time_scale = cli.time_scale.unwrap_or(1.0);
    t.window_warm_scaled(cli.skip, cli.jobs.unwrap_or(usize::MAX), warm, time_scale);
    let over = t.limit_warm(cluster_gpus);
    t.scale_time(time_scale);
    let mut source = format!("{} ({})", path.display(), cli.format);
    if let Some((file, n)) = labels {
        source.push_str(&format!(
            ", VCs from {}: {} jobs matched, {} with a VC drawn from the per-VC mix",
            file.display(),
            n.matched,
            n.fallback
        ));
    }
    if cli.skip > 0 || cli.jobs.is_some() {
        let own = t.jobs.len() - t.warm;
        source.push_str(&format!(", jobs {}..{}", cli.skip, cli.skip + own));
        if t.warm > 0 {
            source.push_str(&format!(
                ", warm start: {} earlier jobs still running at the window's start",
                t.warm
            ));
        }
    }
    push_left_out_and_scale(&mut source, over, time_scale);
    Ok((t, source))
}

/// The built-in generator's workload, as `cli` asks.
fn generated_workload(cli: &Cli, cluster_gpus: u32) -> (Trace, String) {
    let n = cli.jobs.unwrap_or(DEFAULT_GENERATED_JOBS);
    let status_runtimes = !cli.without.contains(&Feature::StatusRuntimes);
    // Started warm: a lead-in of `WARM_LEAD_DAYS` days is generated first,
    // and what still runs of it at the start is loaded.
    let warm = !cli.without.contains(&Feature::WarmStart);
    let lead = if warm {
        (workload::JOBS_PER_DAY * WARM_LEAD_DAYS) as usize
    } else {
        0
    };
    let mut t = workload::generate_with(n + lead, cli.seed, status_runtimes);
    t.window_warm(lead, n, warm);
    let over = t.limit_warm(cluster_gpus);
    let time_scale = cli.time_scale.unwrap_or(DEFAULT_GENERATED_TIME_SCALE);
    t.scale_time(time_scale);
    let mut source = format!(
        "built-in Philly-calibrated generator, {n} jobs, seed {}",
        cli.seed
    );
    if t.warm > 0 {
        source.push_str(&format!(
            ", started warm: {} jobs of a {WARM_LEAD_DAYS}-day lead-in still running",
            t.warm
        ));
    }
    push_left_out_and_scale(&mut source, over, time_scale);
    if cli.time_scale.is_none() {
        source.push_str(" (the study's load; `--time-scale 1` for the public trace's)");
    }
    (t, source)
}

/// Jobs the built-in generator makes when `--jobs` is not given: about 7
/// days of the public trace's arrivals (4.7 days at
/// [`DEFAULT_GENERATED_TIME_SCALE`]), so the default run, contended as it
/// is, stays under 10 s on a 2-core machine with Wasm policies (`docs/performance.md`).
pub const DEFAULT_GENERATED_JOBS: usize = 12_000;

/// The time scale of a generated workload when `--time-scale` is not given:
/// arrivals 1/0.65 = 1.54x as dense as the public trace's. The public trace
/// is a sanitized subset that loads Philly's 3,205 GPUs to about 44 %
/// (PHILLY.md section 6b) and the generator's rate (to about 74 %), while
/// the study's cluster ran 1,500-2,150 GPUs with up to 1,000 more pending
/// (PHILLY.md section 4): at 0.65 the GPUs are about 90 % allocated, both
/// kinds of queueing delay occur, quotas bind and waits reach hours.
pub const DEFAULT_GENERATED_TIME_SCALE: f64 = 0.65;

/// Days of generated lead-in whose still-running jobs a generated workload
/// starts with (feature `warm-start`), so the cluster is not empty at first.
pub const WARM_LEAD_DAYS: f64 = 10.0;

/// Adds each file of trace directory `dir` (name order) to `r`.
fn add_dir(r: &mut Reproduce, dir: &Path) -> Result<(), ReplayError> {
    let cannot =
        |e: std::io::Error| ReplayError::Usage(format!("{}: cannot read: {e}", dir.display()));
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(cannot)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    for f in files {
        r.add_file("trace", &f).map_err(cannot)?;
    }
    Ok(())
}

/// The `reproduce` record of `cli`: its arguments, seed, time scale and
/// the input files it names.
fn reproduce_of(cli: &Cli, quotas: &Quotas) -> Result<Reproduce, ReplayError> {
    let time_scale = cli.time_scale.unwrap_or(if cli.trace.is_some() {
        1.0
    } else {
        DEFAULT_GENERATED_TIME_SCALE
    });
    let mut r = Reproduce::new(
        result_args(
            <Cli as clap::CommandFactory>::command(),
            cli.argv.iter().cloned(),
        ),
        cli.seed,
        time_scale,
    );
    r.quotas.clone_from(&quotas.description);
    let quota_file = quotas.file.clone();
    let fit_file = cli
        .fit
        .as_ref()
        .filter(|f| Targets::builtin(f).is_none())
        .map(PathBuf::from);
    if let Some(dir) = cli.trace.as_ref().filter(|p| p.is_dir()) {
        add_dir(&mut r, dir)?;
    }
    let trace_file = cli.trace.clone().filter(|p| !p.is_dir());
    for (role, path) in [
        ("trace", &trace_file),
        ("throughputs", &cli.throughputs),
        ("vcs", &cli.vcs),
        ("machines", &cli.machines),
        ("topology", &cli.topology),
        ("quotas", &quota_file),
        ("fit targets", &fit_file),
    ] {
        if let Some(p) = path {
            r.add_file(role, p)
                .map_err(|e| ReplayError::Usage(format!("{}: cannot read: {e}", p.display())))?;
        }
    }
    Ok(r)
}
