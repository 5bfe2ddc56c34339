//! The `replay targets` command line: a targets file from a job log.

use std::path::PathBuf;

use clap::Parser;

use super::observed::{MIN_JOBS, ObserveOptions, targets_from_log, to_toml};

/// Measures in a cluster's own job log what `replay calibrate` fits the
/// model to, and writes it as a targets file: first-attempt wait
/// quantiles per size bucket (1, 2-4, 5-8, >8 GPUs; a bucket needs 20
/// jobs, its p99 200), the share of 2-4 and 5-8 GPU jobs whose first
/// attempt ran on one server, and GPU time by final status. The log is
/// Philly's `cluster_job_log` JSON (the format that records when and
/// where each attempt ran); a log records no wait reasons, so the file
/// has no Table 2 shares. Then: `replay calibrate --targets FILE -- --trace
/// LOG --format philly ...`.
#[derive(Debug, Parser)]
#[command(name = "replay targets", version)]
pub struct TargetsCli {
    /// The job log (Philly `cluster_job_log` JSON).
    pub log: PathBuf,
    /// Only jobs that ran at least this many seconds (all attempts) count
    /// for the waits.
    #[arg(long, default_value_t = 0)]
    pub min_run_s: u64,
    /// The targets' name, shown in reports.
    #[arg(long, default_value = "observed")]
    pub name: String,
    /// Where to write the targets file (TOML); `-` for stdout.
    #[arg(long, short, default_value = "targets.toml")]
    pub out: PathBuf,
}

/// Why `replay targets` failed.
#[derive(Debug, thiserror::Error)]
pub enum TargetsCommandError {
    /// The log could not be read.
    #[error(transparent)]
    Log(#[from] crate::trace::TraceError),
    /// The targets could not be written as TOML.
    #[error("cannot write the targets as TOML: {0}")]
    Toml(#[from] toml::ser::Error),
    /// The output file could not be written.
    #[error("{file}: cannot write: {source}")]
    Write {
        /// The file.
        file: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Runs `replay targets`: reads the log, writes the targets file, and
/// returns its text.
pub fn run(cli: &TargetsCli) -> Result<String, TargetsCommandError> {
    let options = ObserveOptions {
        name: cli.name.clone(),
        min_run_s: cli.min_run_s,
    };
    let targets = targets_from_log(&cli.log, &options)?;
    let text = to_toml(&targets)?;
    if cli.out.as_os_str() == "-" {
        print!("{text}");
    } else {
        std::fs::write(&cli.out, &text).map_err(|source| TargetsCommandError::Write {
            file: cli.out.display().to_string(),
            source,
        })?;
        let groups: Vec<&str> = targets.first_wait.iter().map(|w| w.name.as_str()).collect();
        let waits = if groups.is_empty() {
            format!("no first-attempt waits (no size bucket has {MIN_JOBS} jobs)")
        } else {
            format!("first-attempt waits of {} GPU jobs", groups.join(" / "))
        };
        let statuses = if targets.gpu_time_by_status.is_some() {
            "GPU time by status"
        } else {
            "no GPU time by status (every job passed)"
        };
        println!(
            "wrote {}: {waits}, {} one-server shares, {statuses}",
            cli.out.display(),
            targets.one_server.len(),
        );
    }
    Ok(text)
}
