//! A replay the command line asks for: each policy set's run, its console
//! lines, and the files it writes.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gangway_catalog::resolve as policies;
use gangway_catalog::{PolicyChoice, SlotChoice};
use gangway_core::policy::PolicySet;
use gangway_core::wasm::{LoadLimits, WorkBudget};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::inputs::{Inputs, racks_of, shape_line};
use super::{Cli, Feature, ReplayError, apply_features, say};
use crate::calibrate::fit;
use crate::plots;
use crate::report::{self, Policies, Report, Run, TopologyInfo, Workload};
use crate::sim::{self, RunResult, SimConfig};
use crate::trace::{self, Trace};

/// Runs the replay the command line asks for.
pub fn run(cli: &Cli) -> Result<(), ReplayError> {
    run_observed(cli, &mut |_, _| ControlFlow::Continue(()))
}

/// How far one policy set's replay has got, for a host watching it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Watched<'a> {
    /// The policy set (its name as reported).
    pub set: &'a str,
    /// Jobs in the workload.
    pub jobs: usize,
    /// How far it has got.
    pub progress: sim::Progress,
}

/// [`run`], telling `observer` how far each policy set's replay has got
/// whenever a job arrives or ends, together with the set's index among
/// those compared; a [`ControlFlow::Break`] stops the replay with
/// [`sim::SimError::Interrupted`] (a host's Ctrl-C or cancel button).
pub fn run_observed(
    cli: &Cli,
    observer: &mut dyn FnMut(usize, Watched<'_>) -> ControlFlow<()>,
) -> Result<(), ReplayError> {
    let mut inputs = Inputs::load(cli)?;
    let mut cfg = sim_config(cli, std::mem::take(&mut inputs.quotas.by_vc));
    cfg.throughputs = inputs.throughputs.clone();
    std::fs::create_dir_all(&cli.out).map_err(|source| ReplayError::Write {
        file: cli.out.display().to_string(),
        source,
    })?;
    let mut replays = Replays {
        cli,
        loader: policy_loader(cli)?,
        inputs,
        cfg,
        observer,
        runs: Vec::new(),
        written: Vec::new(),
    };
    for choice in replays.inputs.choices.clone() {
        replays.replay(&choice)?;
    }
    replays.write_report()
}

/// The replays' settings from `cli`, with `quotas`; warns of failures
/// that may keep long gangs from ever finishing.
fn sim_config(cli: &Cli, quotas: BTreeMap<String, u32>) -> SimConfig {
    let cfg = SimConfig {
        round_interval_s: cli.round_interval,
        server_mtbf_s: cli.server_mtbf_hours.map(|h| (h * 3600.0).max(1.0) as u64),
        seed: cli.seed,
        quotas,
        restart_s: cli.restart_s,
        checkpoint_s: cli.checkpoint_s,
        view_window: cli.view_window,
        locality_cost: !cli.without.contains(&Feature::LocalityCost),
        ..SimConfig::default()
    };
    if let (Some(mtbf), 0) = (cfg.server_mtbf_s, cfg.checkpoint_s) {
        tracing::warn!(
            "--checkpoint-s 0 with --server-mtbf-hours: an interrupted job runs again from \
             the start, so a gang longer than its servers' time between failures ({} h per \
             server) may never finish; the progress bar shows whether jobs still end",
            mtbf / 3600
        );
    }
    cfg
}

/// The policy loader `cli` asks for: modules that carry an interpreter get
/// larger limits and a hundred times the default fuel, per call and per
/// run, unless the run's bound was given.
fn policy_loader(cli: &Cli) -> Result<policies::Loader, ReplayError> {
    let limits = if cli.large_policies {
        LoadLimits::for_interpreters()
    } else {
        LoadLimits::default()
    };
    let mut sandbox = match cli.policy_fuel {
        // The default: the work and round budgets, and a bound over the run.
        None => {
            let fuel = if cli.large_policies {
                policies::Loader::INTERPRETER_FUEL_PER_BACKEND
            } else {
                policies::Loader::DEFAULT_FUEL_PER_BACKEND
            };
            policies::Loader::sandbox(Some(fuel), Some(WorkBudget::for_limits(&limits)), limits)
        }
        // An absolute bound over the run instead (0: none).
        Some(fuel) => policies::Loader::sandbox((fuel > 0).then_some(fuel), None, limits),
    };
    // Which calls' twins the host checks follows the run's seed.
    sandbox.seed = cli.seed;
    Ok(policies::Loader::with_sandbox(sandbox)?)
}

/// The replays of one command line, one policy set after another.
struct Replays<'c, 'o> {
    cli: &'c Cli,
    loader: policies::Loader,
    inputs: Inputs,
    /// The settings every set shares (each gets its own placement).
    cfg: SimConfig,
    observer: &'o mut dyn FnMut(usize, Watched<'_>) -> ControlFlow<()>,
    /// Each set's summary so far.
    runs: Vec<Run>,
    /// Files written besides `report.json`.
    written: Vec<PathBuf>,
}

impl Replays<'_, '_> {
    /// Replays the policy set `choice`: builds it, runs it, says how long
    /// it took, and keeps its summary and files.
    fn replay(&mut self, choice: &PolicyChoice) -> Result<(), ReplayError> {
        let choice = self.applied(choice)?;
        let policy_clock = Instant::now();
        let (set, shown) = self.build(&choice)?;
        let policy_time = policy_clock.elapsed();
        let cfg = SimConfig {
            placement: shown.placement,
            ..self.cfg.clone()
        };
        let cpu_start = crate::cpu_time::process_cpu();
        let logs = self.loader.engine().log_counts();
        let result = self.simulate(&shown.name, set, &cfg)?;
        let cpu = crate::cpu_time::since(cpu_start);
        self.say_timing(&shown.name, &result, cpu, policy_time);
        let mut run = report::summarize(&shown.name, Policies::of(&shown), &result);
        let logs = self.loader.engine().log_counts().since(&logs);
        if logs.dropped > 0 {
            run.policy_logs_dropped = Some(report::LogsDropped {
                messages: logs.dropped,
                bytes: logs.dropped_bytes,
                kept: logs.kept,
            });
        }
        if let Some(targets) = &self.inputs.targets {
            let trace = &self.inputs.trace;
            run.fit = Some(fit::fit(
                targets,
                trace,
                &result,
                &run,
                cfg.round_interval_s,
            ));
        }
        self.write_run_files(&shown.name, &run, &result)?;
        self.runs.push(run);
        Ok(())
    }

    /// `choice` with the command line's placement and model features
    /// applied; its modules and configurations go into the `reproduce`
    /// record.
    fn applied(&mut self, choice: &PolicyChoice) -> Result<PolicyChoice, ReplayError> {
        let cli = self.cli;
        let mut choice = choice.clone();
        if let Some(p) = cli.placement {
            // A heartbeat order gets its seed from `apply_features`.
            choice.placement = p;
        }
        apply_features(&mut choice, &cli.without, cli.seed)?;
        let reproduce = &mut self.inputs.reproduce;
        for slot in gangway_core::Slot::ALL {
            let s = choice.slot(slot);
            if s.policy.ends_with(".wasm") {
                let role = format!("module of {slot} in {}", choice.name);
                reproduce
                    .add_file(&role, Path::new(&s.policy))
                    .map_err(|e| ReplayError::Usage(format!("{}: cannot read: {e}", s.policy)))?;
            }
            if !s.config.is_empty() {
                let role = format!("configuration of {slot} in {}", choice.name);
                reproduce.add_bytes(&role, "(as applied)", &s.config);
            }
        }
        Ok(choice)
    }

    /// The policy set of `choice`, the host's overrides in their slots, and
    /// the choice as reported (naming the overrides).
    fn build(&mut self, choice: &PolicyChoice) -> Result<(PolicySet, PolicyChoice), ReplayError> {
        let cli = self.cli;
        let sets = self.inputs.choices.len();
        let mut set = self.loader.build(choice, cli.native).map_err(|source| {
            if sets == 1 {
                return ReplayError::Policy(source);
            }
            let hint = if cli.config.is_empty() {
                ""
            } else {
                " (--config applies to every set; give one set its own configuration with \
                 SLOT=POLICY@FILE or SLOT@FILE)"
            };
            ReplayError::PolicySet {
                set: choice.name.clone(),
                source,
                hint,
            }
        })?;
        let mut shown = choice.clone();
        for o in &cli.policy_overrides {
            set = (o.apply)(set);
            shown.slots.insert(
                o.slot,
                SlotChoice {
                    policy: o.name.clone(),
                    config: Vec::new(),
                },
            );
            shown.name = format!("{}+{}={}", shown.name, o.slot, o.name);
        }
        Ok((set, shown))
    }

    /// Replays the set `name` (`set` under `cfg`), with a progress bar on a
    /// terminal and the observer told as it goes.
    fn simulate(
        &mut self,
        name: &str,
        set: PolicySet,
        cfg: &SimConfig,
    ) -> Result<RunResult, ReplayError> {
        let jobs = self.inputs.trace.jobs.len();
        let bar = progress_bar(jobs, name);
        let mut day = u64::MAX;
        let index = self.runs.len();
        let observer = &mut self.observer;
        let progress = |p: sim::Progress| {
            bar.set_position(p.finished as u64);
            if p.now_s / 86_400 != day {
                day = p.now_s / 86_400;
                bar.set_message(format!("{} arrived, simulated day {day}", p.arrived));
            }
            observer(
                index,
                Watched {
                    set: name,
                    jobs,
                    progress: p,
                },
            )
        };
        let topo = self.inputs.topo.clone();
        let result = sim::run_until(topo, &self.inputs.trace, set, cfg, progress)?;
        bar.finish_and_clear();
        Ok(result)
    }

    /// The set `name`'s timing line: the replay loop, CPU, rounds, and the
    /// time to load the inputs and make the policies ready.
    fn say_timing(
        &self,
        name: &str,
        result: &RunResult,
        cpu: Option<Duration>,
        policy_time: Duration,
    ) {
        say(
            self.cli,
            &format!(
                "{}: replayed {} jobs in {:.2} s{} ({} rounds, {} skipped as no gang could fit, {:.2} s in rounds; inputs loaded in {:.2} s; {} ready in {:.2} s)",
                name,
                self.inputs.trace.jobs.len(),
                result.elapsed.as_secs_f64(),
                crate::cpu_time::describe(cpu),
                result.rounds,
                result.skipped_rounds,
                result.in_rounds.as_secs_f64(),
                self.inputs.load_time.as_secs_f64(),
                if self.cli.native {
                    "native policies"
                } else {
                    "policies as Wasm modules"
                },
                policy_time.as_secs_f64(),
            ),
        );
    }

    /// The set `name`'s own files: its jobs' CSV (`--jobs-csv`) and plots
    /// (unless `--no-plots`).
    fn write_run_files(
        &mut self,
        name: &str,
        run: &Run,
        result: &RunResult,
    ) -> Result<(), ReplayError> {
        let cli = self.cli;
        if cli.jobs_csv {
            let path = cli.out.join(format!("{}-jobs.csv", file_name(name)));
            write(&path, jobs_csv(&self.inputs.trace, result).as_bytes())?;
            self.written.push(path);
        }
        if !cli.no_plots {
            self.written
                .extend(plots::write_all(&cli.out, run, result)?);
        }
        Ok(())
    }

    /// Writes `report.json` and shows the summary tables.
    fn write_report(self) -> Result<(), ReplayError> {
        let cli = self.cli;
        let inputs = self.inputs;
        let topo = &inputs.topo;
        let report = Report {
            reproduce: inputs.reproduce,
            workload: Workload {
                source: inputs.source,
                jobs: inputs.trace.jobs.len(),
                warm: inputs.trace.warm,
                skipped: inputs.trace.skipped.clone(),
            },
            topology: TopologyInfo {
                source: inputs.topo_source,
                servers: topo.servers().len(),
                gpus: topo.total_gpus(),
                racks: racks_of(topo),
                shape: shape_line(topo, inputs.grouping.as_deref()),
                grouping: inputs.grouping,
            },
            runs: self.runs,
        };
        say(cli, "");
        say(cli, report::table(&report.runs).trim_end());
        if inputs.targets.is_some() {
            say(cli, "");
            say(cli, fit::table(&report.runs).trim_end());
        }
        let json = serde_json::to_vec_pretty(&report)
            .map_err(|e| ReplayError::Usage(format!("cannot encode the report: {e}")))?;
        let path = cli.out.join("report.json");
        write(&path, &json)?;
        say(cli, "");
        say(cli, &format!("wrote {}", path.display()));
        for f in self.written {
            say(cli, &format!("wrote {}", f.display()));
        }
        Ok(())
    }
}

/// A progress bar of `jobs` jobs for the set `name`, drawn only on a
/// terminal.
fn progress_bar(jobs: usize, name: &str) -> ProgressBar {
    let bar = if std::io::stderr().is_terminal() {
        ProgressBar::with_draw_target(Some(jobs as u64), ProgressDrawTarget::stderr())
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{prefix:>12} [{bar:40}] {pos}/{len} jobs done, {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_prefix(name.to_string());
    bar
}

/// A run's name as a file name (`+`, `=` and `/` become `_`).
fn file_name(run: &str) -> String {
    run.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// One line per job of a run: `id,vc,gpus,submit_s,first_start_s,end_s,
/// status,attempts,servers,wait_<reason>_s...` (empty cells for what did not
/// happen). Jobs carried into a window warm are left out, as in the report.
///
/// ```
/// use gangway_replay::{cli as replay_cli, sim, workload};
/// let trace = workload::generate(50, 1);
/// let topo = gangway_core::Topology::uniform(1, 4, 8).unwrap();
/// let set = gangway_catalog::preset("fifo").unwrap().build_native().unwrap();
/// let r = sim::run(topo, &trace, set, &sim::SimConfig::default(), |_| {}).unwrap();
/// let csv = replay_cli::jobs_csv(&trace, &r);
/// assert_eq!(csv.lines().count(), 51);
/// assert!(csv.starts_with("id,vc,gpus,submit_s,first_start_s,end_s,status,attempts,servers,wait_fair-share_s"));
/// ```
pub fn jobs_csv(trace: &Trace, result: &RunResult) -> String {
    use gangway_core::WaitReason;
    let mut out = String::from("id,vc,gpus,submit_s,first_start_s,end_s,status,attempts,servers");
    for r in WaitReason::ALL {
        out.push_str(&format!(",wait_{}_s", r.as_str()));
    }
    out.push('\n');
    let opt = |x: Option<u64>| x.map_or(String::new(), |v| v.to_string());
    for (j, tj) in result.jobs.iter().zip(&trace.jobs).skip(result.warm) {
        let status = j.status.map_or("", trace::Outcome::as_str);
        out.push_str(&format!(
            "{},{},{},{},{},{},{},{},{}",
            csv_cell(&tj.name),
            csv_cell(result.vcs.get(j.vc).map_or("", String::as_str)),
            j.gpus,
            j.submit_s,
            opt(j.first_start_s),
            opt(j.finish_s),
            status,
            j.attempts,
            j.first_servers.map_or(String::new(), |s| s.to_string()),
        ));
        for r in WaitReason::ALL {
            out.push_str(&format!(",{}", j.waited(r)));
        }
        out.push('\n');
    }
    out
}

/// A CSV cell: quoted when it holds a comma, quote or line break.
fn csv_cell(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Writes `bytes` to `path`.
fn write(path: &Path, bytes: &[u8]) -> Result<(), ReplayError> {
    std::fs::write(path, bytes).map_err(|source| ReplayError::Write {
        file: path.display().to_string(),
        source,
    })
}
