//! `replay`: the trace-driven simulator. Replays a GPU-cluster job trace (or a
//! built-in Philly-calibrated workload) through Gangway's scheduler and
//! policies, and reports the study's metrics.
//!
//! With no arguments it generates a Philly-like workload on a Philly-sized
//! cluster and runs the `philly` preset. See `replay --help`.

use std::process::ExitCode;

use clap::Parser;
use gangway_replay::cli::{self as replay_cli, Cli};

fn main() -> ExitCode {
    let cli = Cli::parse();
    gangway_catalog::logging::init(cli.verbose);
    match replay_cli::run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("replay: {e}");
            ExitCode::FAILURE
        }
    }
}
