//! `replay`: the trace-driven simulator. Replays a GPU-cluster job trace (or a
//! built-in Philly-calibrated workload) through Gangway's scheduler and
//! policies, and reports the study's metrics.
//!
//! With no arguments it generates a Philly-like workload on a Philly-sized
//! cluster and runs the `philly` preset. See `replay --help`; `replay
//! calibrate --help` fits the model to observed targets; `replay targets
//! --help` measures them in a job log.

use std::process::ExitCode;

use clap::Parser;
use gangway_replay::calibrate::command::{self, CalibrateCli};
use gangway_replay::calibrate::targets_command::{self, TargetsCli};
use gangway_replay::cli::{self as replay_cli, Cli};

fn main() -> ExitCode {
    if let Some(code) = subcommand::<CalibrateCli, _, _>("calibrate", command::run_local) {
        return code;
    }
    if let Some(code) = subcommand::<TargetsCli, _, _>("targets", targets_command::run) {
        return code;
    }
    let mut cli = Cli::parse();
    cli.argv = std::env::args_os()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    gangway_catalog::logging::init(cli.verbose);
    match replay_cli::run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("replay: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `replay NAME ...`: when the first argument is `name`, parses the rest
/// as `C` and runs it; `None` for the replay itself.
fn subcommand<C: Parser, T, E: std::fmt::Display>(
    name: &str,
    run: impl FnOnce(&C) -> Result<T, E>,
) -> Option<ExitCode> {
    if std::env::args_os().nth(1).is_none_or(|a| a != name) {
        return None;
    }
    let cli = C::parse_from(std::env::args_os().skip(1));
    Some(match run(&cli) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("replay {name}: {e}");
            ExitCode::FAILURE
        }
    })
}
