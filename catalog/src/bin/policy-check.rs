//! `policy-check MODULE.wasm [--config FILE]`: loads a policy module under the
//! sandbox, reports its slots and contract version, runs it against many
//! generated views with the checks every decision must pass, and exits 0 only
//! if it is well-behaved. Otherwise it prints one line saying why and exits 1
//! (2 for a usage or file error).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use gangway_catalog::policy_check::{CheckError, CheckOptions, check_module};
use gangway_core::conformance;
use gangway_core::wasm::{Budget, CallPath, SandboxConfig};

/// Check a Gangway policy module (a gangway:policy@2.x Wasm component).
#[derive(Parser, Debug)]
#[command(name = "policy-check", version)]
struct Args {
    /// The module to check.
    module: PathBuf,
    /// Configuration passed to every slot's `init` (empty if absent).
    #[arg(long)]
    config: Option<PathBuf>,
    /// How many generated views to run per slot.
    #[arg(long, default_value_t = 300)]
    views: u32,
    /// How many scheduler scenarios to run per slot.
    #[arg(long, default_value_t = 8)]
    scenarios: u32,
    /// Seed of the view generator.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Fuel budget per call.
    #[arg(long, default_value_t = Budget::DEFAULT_FUEL)]
    fuel: u64,
    /// Memory cap per instance, in MiB.
    #[arg(long, default_value_t = 64)]
    memory_mib: u64,
    /// Fail if the whole check takes longer than this many seconds.
    #[arg(long, default_value_t = 30)]
    time_limit_s: u64,
    /// Show the module's log and the host's on stderr: `-v` info, `-vv`
    /// debug (default: warnings, or `RUST_LOG`).
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
}

fn main() -> ExitCode {
    let args = Args::parse();
    gangway_catalog::logging::init(args.verbose);
    let name = args
        .module
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| args.module.display().to_string());
    let bytes = match std::fs::read(&args.module) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("policy-check: cannot read {}: {e}", args.module.display());
            return ExitCode::from(2);
        }
    };
    let config = match &args.config {
        Some(path) => match std::fs::read(path) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("policy-check: cannot read {}: {e}", path.display());
                return ExitCode::from(2);
            }
        },
        None => Vec::new(),
    };
    let options = CheckOptions {
        views: args.views,
        scenarios: args.scenarios,
        seed: args.seed,
        sandbox: SandboxConfig {
            budget: Budget::Fuel(args.fuel.max(1)),
            memory_bytes: args.memory_mib.max(1) << 20,
            ..SandboxConfig::default()
        },
        time_limit: Duration::from_secs(args.time_limit_s),
    };
    match check_module(&name, &bytes, &config, &options) {
        Ok(r) => {
            let slots: Vec<&str> = r.slots.iter().map(|s| s.as_str()).collect();
            let entered = match r.call_path {
                CallPath::Direct => "entered directly (standard component shape)",
                CallPath::Component => "entered through the component runtime",
            };
            println!(
                "module {}: slots {}; contract gangway:policy@{}; {entered}",
                r.module,
                slots.join(", "),
                r.contract_version
            );
            println!(
                "ok: {} views per slot (up to {} jobs), {} calls, every decision valid and deterministic; {} scheduler scenarios; slowest call {} us",
                r.views, r.max_jobs, r.calls, r.scenarios, r.slowest_us
            );
            ExitCode::SUCCESS
        }
        Err(CheckError::Rule(finding)) => {
            // The regression test loads the module and its configuration
            // from the paths given here.
            let config = match &args.config {
                Some(path) => format!("&std::fs::read({:?}).unwrap()", path.display().to_string()),
                None => "&[]".to_string(),
            };
            let module = args.module.display().to_string();
            let slot = finding.slot;
            let finding = finding.with_maker(conformance::module_maker(&module, slot, &config));
            println!("FAIL: {finding}");
            ExitCode::from(1)
        }
        Err(e) => {
            println!("FAIL: {}", e.headline());
            ExitCode::from(1)
        }
    }
}
