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
    if std::env::args_os().nth(1).is_some_and(|a| a == "calibrate") {
        let cli = CalibrateCli::parse_from(std::env::args_os().skip(1));
        return match command::run_local(&cli) {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("replay calibrate: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if std::env::args_os().nth(1).is_some_and(|a| a == "targets") {
        let cli = TargetsCli::parse_from(std::env::args_os().skip(1));
        return match targets_command::run(&cli) {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("replay targets: {e}");
                ExitCode::FAILURE
            }
        };
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
