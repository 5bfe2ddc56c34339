//! `gangway-slurm`: Gangway as the placement brain of a Slurm cluster.
//!
//! ```text
//! gangway-slurm serve --config gangway.toml          # the daemon
//! gangway-slurm submit --gpus 8 --vc research -- python train.py
//! gangway-slurm submit --gpus 16 --gpu-type a100,h100 --vc research -- python train.py
//! gangway-slurm status                               # queue with wait reasons
//! gangway-slurm why 12                               # one job
//! gangway-slurm swap --fairness my_policy.wasm       # hot swap a slot
//! ```
//!
//! Clients find the daemon through its state folder: `--state-dir`, or
//! `GANGWAY_SLURM_STATE`, or the `state_dir` of `--config`. The daemon
//! knows who runs a client from the kernel: there is no `--user`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use gangway_catalog::slot_flags::{ModuleFile, SlotFlags};
use gangway_core::GpuRequest;
use gangway_slurm::config::{Config, slot_names, socket_in};
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
    /// Seconds a client command waits for the daemon's answer (default:
    /// $GANGWAY_SLURM_TIMEOUT, else 30).
    #[arg(long, global = true)]
    timeout: Option<f64>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon (needs --config).
    Serve,
    /// Queue a job, to run as you in this folder with your environment:
    /// gangway-slurm submit --gpus N --vc NAME -- CMD...
    Submit {
        /// GPUs of the gang.
        #[arg(long)]
        gpus: u32,
        /// Virtual cluster.
        #[arg(long)]
        vc: String,
        /// GPU types the job accepts, most preferred first (`a100,h100`;
        /// the config's [gpu_types]); the whole gang runs on one of them.
        /// Default: any type.
        #[arg(long, value_delimiter = ',')]
        gpu_type: Vec<String>,
        /// The least memory per GPU in GB, of the types' memory in the
        /// config's [gpu_types] (Slurm's GRES has none). Default: none.
        #[arg(long, default_value_t = 0)]
        min_gpu_memory: u32,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
    /// The queue with each pending job's wait reason, running jobs, nodes.
    Status {
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// List every finished job the daemon keeps (`history`), not only
        /// the newest 200 (read page by page).
        #[arg(long)]
        all_finished: bool,
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
    let socket = match (&state_dir, &config) {
        (Some(d), _) => Some(socket_in(d)),
        (None, Some(c)) => Some(c.socket()),
        (None, None) => None,
    };
    let timeout = cli
        .timeout
        .or_else(|| std::env::var("GANGWAY_SLURM_TIMEOUT").ok()?.parse().ok())
        .filter(|t: &f64| t.is_finite() && *t > 0.0)
        .map_or(
            gangway_slurm::protocol::CLIENT_TIMEOUT,
            Duration::from_secs_f64,
        );
    if let Command::Serve = cli.command {
        let Some(config) = config else {
            return Err(SlurmError::Refused("serve needs --config FILE".into()));
        };
        return daemon::serve(config);
    }
    let Some(socket) = socket else {
        return Err(SlurmError::Refused(
            "where is the daemon? give --state-dir DIR, set GANGWAY_SLURM_STATE, or --config FILE"
                .into(),
        ));
    };
    let daemon = client::Daemon {
        socket: &socket,
        timeout,
    };
    run_client(cli.command, &daemon)
}

/// A client command.
fn run_client(command: Command, daemon: &client::Daemon<'_>) -> Result<(), SlurmError> {
    match command {
        Command::Serve => Ok(()),
        Command::Submit {
            gpus,
            vc,
            gpu_type,
            min_gpu_memory,
            cmd,
        } => {
            let cwd = std::env::current_dir()
                .map_err(|e| SlurmError::io("reading the current folder", e))?;
            let request = GpuRequest::types(gpu_type).with_min_memory_gb(min_gpu_memory);
            let env = client::environment();
            let id = client::submit(daemon, gpus, &request, &vc, cmd, &cwd, env)?;
            let of = if request.is_any() {
                String::new()
            } else {
                format!(", {request}")
            };
            println!(
                "submitted job {id} ({gpus} GPUs{of}, vc {vc}); `gangway-slurm why {id}` tells where it is"
            );
            Ok(())
        }
        Command::Status { json, all_finished } => {
            let report = if all_finished {
                client::status_all(daemon)?
            } else {
                client::status(daemon, None)?
            };
            print_report(&report, json, client::format_status)
        }
        Command::Why { job, json } => {
            let report = client::why(daemon, job)?;
            print_report(&report, json, client::format_job)
        }
        Command::Cancel { job } => {
            println!("{}", client::cancel(daemon, job)?);
            Ok(())
        }
        Command::Swap {
            modules,
            module_config,
            rollback,
        } => swap(daemon, &modules, module_config, rollback),
    }
}

/// `swap`: each slot given, or a rollback.
fn swap(
    daemon: &client::Daemon<'_>,
    modules: &SlotFlags<ModuleFile>,
    module_config: Option<PathBuf>,
    rollback: Option<String>,
) -> Result<(), SlurmError> {
    if let Some(slot) = rollback {
        println!("{}", client::rollback(daemon, &slot)?);
        return Ok(());
    }
    let chosen: Vec<(&str, PathBuf)> = modules
        .chosen()
        .map(|(slot, path)| (slot.as_str(), PathBuf::from(path)))
        .collect();
    if chosen.is_empty() {
        return Err(SlurmError::Refused(format!(
            "swap needs --SLOT FILE.wasm ({}), or --rollback SLOT",
            slot_names()
        )));
    }
    for (slot, path) in chosen {
        println!(
            "{}",
            client::swap(daemon, slot, &path, module_config.as_deref())?
        );
    }
    Ok(())
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
