//! `gangway-slurm`: Gangway as the placement brain of a Slurm cluster.
//!
//! ```text
//! gangway-slurm serve --config gangway.toml          # the daemon
//! gangway-slurm submit --gpus 8 --vc research -- python train.py
//! gangway-slurm status                               # queue with wait reasons
//! gangway-slurm why 12                               # one job
//! gangway-slurm swap --fairness my_policy.wasm       # hot swap a slot
//! ```
//!
//! Clients find the daemon through its state folder: `--state-dir`, or
//! `GANGWAY_SLURM_STATE`, or the `state_dir` of `--config`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use gangway_catalog::slot_flags::{ModuleFile, SlotFlags};
use gangway_slurm::config::{Config, socket_in};
use gangway_slurm::{SlurmError, client, daemon};

#[derive(Parser)]
#[command(
    name = "gangway-slurm",
    about = "Gangway as the placement brain of a Slurm cluster"
)]
struct Cli {
    /// The daemon's state folder (for client commands; default:
    /// $GANGWAY_SLURM_STATE).
    #[arg(long, global = true)]
    state_dir: Option<PathBuf>,
    /// The daemon's configuration (client commands take its state_dir).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon (needs --config).
    Serve,
    /// Queue a job: gangway-slurm submit --gpus N --vc NAME [--user U] -- CMD...
    Submit {
        /// GPUs of the gang.
        #[arg(long)]
        gpus: u32,
        /// Virtual cluster.
        #[arg(long)]
        vc: String,
        /// User name (default: $USER).
        #[arg(long)]
        user: Option<String>,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
    /// The queue with each pending job's wait reason, running jobs, nodes.
    Status {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Explain one job.
    Why {
        /// The job id.
        job: u64,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Cancel a pending or running job.
    Cancel {
        /// The job id.
        job: u64,
    },
    /// Hot-swap a Wasm policy module into a slot, or roll a slot back.
    Swap {
        /// One flag per slot (`--fairness FILE`, ... `--defragment FILE`).
        #[command(flatten)]
        modules: SlotFlags<ModuleFile>,
        /// The module's configuration file (TOML).
        #[arg(long = "module-config")]
        module_config: Option<PathBuf>,
        /// Roll this slot back to its previous policy instead.
        #[arg(long)]
        rollback: Option<String>,
    },
}

fn run(cli: Cli) -> Result<(), SlurmError> {
    let config = cli.config.as_deref().map(Config::load).transpose()?;
    let state_dir = cli
        .state_dir
        .clone()
        .or_else(|| std::env::var_os("GANGWAY_SLURM_STATE").map(PathBuf::from));
    let socket = || -> Result<PathBuf, SlurmError> {
        match (&state_dir, &config) {
            (Some(d), _) => Ok(socket_in(d)),
            (None, Some(c)) => Ok(c.socket()),
            (None, None) => Err(SlurmError::Refused(
                "where is the daemon? give --state-dir DIR, set GANGWAY_SLURM_STATE, or --config FILE"
                    .into(),
            )),
        }
    };
    match cli.command {
        Command::Serve => {
            let Some(config) = config else {
                return Err(SlurmError::Refused("serve needs --config FILE".into()));
            };
            daemon::serve(config)
        }
        Command::Submit {
            gpus,
            vc,
            user,
            cmd,
        } => {
            let user = user.unwrap_or_else(current_user);
            let cwd = std::env::current_dir()
                .map_err(|e| SlurmError::io("reading the current folder", e))?;
            let id = client::submit(&socket()?, gpus, &vc, &user, cmd, &cwd)?;
            println!(
                "submitted job {id} ({gpus} GPUs, vc {vc}); `gangway-slurm why {id}` tells where it is"
            );
            Ok(())
        }
        Command::Status { json } => {
            let report = client::status(&socket()?)?;
            print_report(&report, json, client::format_status)
        }
        Command::Why { job, json } => {
            let report = client::why(&socket()?, job)?;
            print_report(&report, json, client::format_job)
        }
        Command::Cancel { job } => {
            println!("{}", client::cancel(&socket()?, job)?);
            Ok(())
        }
        Command::Swap {
            modules,
            module_config,
            rollback,
        } => {
            let socket = socket()?;
            if let Some(slot) = rollback {
                println!("{}", client::rollback(&socket, &slot)?);
                return Ok(());
            }
            let chosen: Vec<(&str, PathBuf)> = modules
                .chosen()
                .map(|(slot, path)| (slot.as_str(), PathBuf::from(path)))
                .collect();
            if chosen.is_empty() {
                return Err(SlurmError::Refused(
                    "swap needs --SLOT FILE.wasm (fairness, locality, gang, reclaim, retry, defragment), or --rollback SLOT"
                        .into(),
                ));
            }
            for (slot, path) in chosen {
                println!(
                    "{}",
                    client::swap(&socket, slot, &path, module_config.as_deref())?
                );
            }
            Ok(())
        }
    }
}

/// `$USER`, else `$LOGNAME`, else `uid-N` from /proc.
fn current_user() -> String {
    std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|u| !u.is_empty())
        .or_else(|| {
            let status = std::fs::read_to_string("/proc/self/status").ok()?;
            let uid = status
                .lines()
                .find(|l| l.starts_with("Uid:"))?
                .split_whitespace()
                .nth(1)?
                .to_string();
            Some(format!("uid-{uid}"))
        })
        .unwrap_or_else(|| "unknown".into())
}

fn main() -> ExitCode {
    tracing_subscriber_init();
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gangway-slurm: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Prints `report` as pretty JSON, or as the text `format` makes of it.
fn print_report<T: serde::Serialize>(
    report: &T,
    json: bool,
    format: impl Fn(&T) -> String,
) -> Result<(), SlurmError> {
    if json {
        let text = serde_json::to_string_pretty(report)
            .map_err(|e| SlurmError::Protocol(e.to_string()))?;
        println!("{text}");
    } else {
        print!("{}", format(report));
    }
    Ok(())
}

/// Logs go to stderr at info (the daemon's job events are also in `status`
/// and `why`); `RUST_LOG` does not lower it.
fn tracing_subscriber_init() {
    gangway_catalog::logging::init(1);
}
