//! `policy-check MODULE.wasm [--config FILE]`: loads a policy module under the
//! sandbox (a component, or a core module built with the SDK), reports its
//! slots and contract version, runs it against many generated views with the
//! checks every decision must pass, and exits 0 only if it is well-behaved.
//! Otherwise it says why (for a broken rule, with the smallest failing view
//! as a regression test to paste) and exits 1 (2 for a usage or file error).
//!
//! `policy-check new NAME [--dir DIR]`: makes a policy crate of its own
//! (see `gangway_catalog::new_policy`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use gangway_catalog::new_policy;
use gangway_catalog::policy_check::{CheckError, CheckOptions, CheckReport, check_module};
use gangway_catalog::resolve::large_policy_hint;
use gangway_core::conformance;
use gangway_core::wasm::{Budget, CallPath, LoadLimits, SandboxConfig, WorkBudget};

/// Check a Gangway policy module (a gangway:policy@2.x Wasm component, or a
/// core module built with the SDK), or make a new policy crate.
#[derive(Parser, Debug)]
#[command(
    name = "policy-check",
    version,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// The module to check.
    #[arg(required = true)]
    module: Option<PathBuf>,
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
    /// Load a module that carries an interpreter (a Python policy built
    /// with `python -m gangway.componentize`): the larger load limits of
    /// `LoadLimits::for_interpreters` (64 MiB, 50,000 functions, 128 core
    /// instances; compiling takes seconds) and, unless `--fuel` is given,
    /// `Budget::INTERPRETER_FUEL` per call.
    #[arg(long)]
    large_policies: bool,
    /// Fail if the whole check takes longer than this many seconds.
    #[arg(long, default_value_t = 30)]
    time_limit_s: u64,
    /// Show the module's log and the host's on stderr: `-v` info, `-vv`
    /// debug (default: warnings, or `RUST_LOG`).
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Make a policy crate NAME of its own (a fairness policy, its
    /// conformance test, the toolchain and target it builds with).
    New {
        /// The crate's name (lowercase, digits and '-').
        name: String,
        /// Where to make it (the crate is DIR/NAME).
        #[arg(long, default_value = ".")]
        dir: PathBuf,
        /// The Gangway clone to depend on (default: the one this binary was
        /// built from).
        #[arg(long)]
        gangway: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let args = Args::parse();
    gangway_catalog::logging::init(args.verbose);
    if let Some(Command::New { name, dir, gangway }) = &args.command {
        return new(name, dir, gangway.as_ref());
    }
    let Some(module_path) = args.module.clone() else {
        eprintln!("policy-check: give a module to check, or `new NAME`");
        return ExitCode::from(2);
    };
    let name = module_path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| module_path.display().to_string());
    let bytes = match std::fs::read(&module_path) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("policy-check: cannot read {}: {e}", module_path.display());
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
    let options = check_options(&args);
    match check_module(&name, &bytes, &config, &options) {
        Ok(r) => {
            print_report(&r);
            ExitCode::SUCCESS
        }
        Err(CheckError::Rule(finding)) => {
            // The regression test loads the module and its configuration
            // from the paths given here.
            let config = match &args.config {
                Some(path) => format!("&std::fs::read({:?}).unwrap()", path.display().to_string()),
                None => "&[]".to_string(),
            };
            let module = module_path.display().to_string();
            let slot = finding.slot;
            let finding = finding.with_maker(conformance::module_maker(&module, slot, &config));
            println!("FAIL: {finding}");
            ExitCode::from(1)
        }
        Err(e) => {
            println!("FAIL: {}", e.headline());
            if let CheckError::Load(w) = &e {
                let limits = &options.sandbox.limits;
                if let Some(hint) = large_policy_hint(w, limits, "--large-policies") {
                    eprintln!("policy-check: {hint}");
                }
            }
            ExitCode::from(1)
        }
    }
}

/// `policy-check new NAME`: makes a policy crate `name` in `dir`,
/// depending on the Gangway clone `gangway` (default: the one this binary
/// was built from), and says what to do next.
fn new(name: &str, dir: &Path, gangway: Option<&PathBuf>) -> ExitCode {
    let gangway = gangway.cloned().unwrap_or_else(new_policy::built_from);
    match new_policy::create(dir, name, &gangway) {
        Ok(root) => {
            let ident = name.replace('-', "_");
            println!("made {}", root.display());
            match new_policy::ensure_wasm_target() {
                Ok(done) => println!("{done}"),
                Err(why) => eprintln!("policy-check new: note: {why}"),
            }
            println!("  cd {} && cargo test", root.display());
            println!("  cargo build --release --target wasm32-unknown-unknown");
            println!("  policy-check target/wasm32-unknown-unknown/release/{ident}.wasm");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("policy-check new: {e}");
            ExitCode::from(2)
        }
    }
}

/// The check's options from the command line.
fn check_options(args: &Args) -> CheckOptions {
    let limits = if args.large_policies {
        LoadLimits::for_interpreters()
    } else {
        LoadLimits::default()
    };
    CheckOptions {
        views: args.views,
        scenarios: args.scenarios,
        seed: args.seed,
        sandbox: SandboxConfig {
            // A module that carries an interpreter gets the larger default.
            budget: if args.large_policies && args.fuel == Budget::DEFAULT_FUEL {
                Budget::Fuel(Budget::INTERPRETER_FUEL)
            } else {
                Budget::Fuel(args.fuel.max(1))
            },
            memory_bytes: args.memory_mib.max(1) << 20,
            limits,
            // Held to the work budget the hosts hold it to: a module
            // certified here is not quarantined there for its cost.
            work_budget: Some(WorkBudget::for_limits(&limits)),
            ..SandboxConfig::default()
        },
        time_limit: Duration::from_secs(args.time_limit_s),
    }
}

/// Prints a passed check: the module's slots, contract and call path, and
/// what was checked.
fn print_report(r: &CheckReport) {
    let slots: Vec<&str> = r.slots.iter().map(|s| s.as_str()).collect();
    let entered = match r.call_path {
        CallPath::Direct if r.buffered_slots.len() == r.slots.len() => {
            "entered directly, once per call (standard component shape, contract 2.1)"
        }
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
        "ok: {} views per slot (up to {} jobs), {} calls ({} of them asking views again after a long history), every decision valid and deterministic; {} scheduler scenarios; slowest call {} us",
        r.views, r.max_jobs, r.calls, r.history, r.scenarios, r.slowest_us
    );
    if r.logs.dropped > 0 {
        println!(
            "note: {} of the module's log messages ({} bytes) were dropped past the log limits (per call and per slot: plugin-sdk/CONTRACT.md, Limits)",
            r.logs.dropped, r.logs.dropped_bytes
        );
    }
}
