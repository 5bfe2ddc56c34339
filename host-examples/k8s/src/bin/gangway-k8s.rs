//! `gangway-k8s`: the scheduler (`run`), and the operator's commands
//! (`swap` a policy module, `why` a gang waits).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use gangway_k8s::K8sError;
use gangway_k8s::config::Config;
use gangway_k8s::podgroup::PodGroup;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};

#[derive(Parser)]
#[command(
    name = "gangway-k8s",
    about = "Gangway, the gang scheduler for GPU pods, on Kubernetes"
)]
struct Cli {
    /// The configuration file (TOML; every key optional).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// A kubeconfig file (default: in-cluster, then $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true)]
    kubeconfig: Option<PathBuf>,
    /// More logging: -v info, -vv debug (else RUST_LOG, else warnings).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the scheduler.
    Run {
        /// Serve /metrics, /healthz, /readyz here (overrides the config).
        #[arg(long)]
        metrics_addr: Option<String>,
        /// This replica's identity in the Lease (overrides the config).
        #[arg(long)]
        identity: Option<String>,
        /// Do not elect a leader: this replica always binds.
        #[arg(long)]
        no_leader_elect: bool,
    },
    /// Stages a Wasm policy module in a slot (or the preset's policy again),
    /// by writing the policies ConfigMap the scheduler watches.
    Swap {
        /// The slot: fairness, locality, gang, reclaim, retry or defragment.
        slot: String,
        /// The module (a component of the gangway:policy contract).
        module: Option<PathBuf>,
        /// The module's configuration (TOML).
        #[arg(long)]
        policy_config: Option<PathBuf>,
        /// Remove the slot's module: the preset's policy again.
        #[arg(long, conflicts_with = "module")]
        builtin: bool,
    },
    /// Why a gang waits: its PodGroup's Scheduled condition.
    Why {
        /// NAMESPACE/PODGROUP.
        gang: String,
    },
}

fn load(path: Option<&PathBuf>) -> Result<Config, K8sError> {
    match path {
        Some(p) => Config::load(p),
        None => Ok(Config::default()),
    }
}

fn read(path: &PathBuf) -> Result<Vec<u8>, K8sError> {
    std::fs::read(path).map_err(|e| K8sError::io(format!("reading {}", path.display()), e))
}

async fn swap(
    cfg: &Config,
    client: kube::Client,
    slot: &str,
    module: Option<&PathBuf>,
    conf: Option<&PathBuf>,
) -> Result<String, K8sError> {
    let slot = gangway_k8s::policies::slot_named(slot)?;
    let api: Api<ConfigMap> = Api::namespaced(client, &cfg.namespace);
    if let Some(m) = module {
        // Checked here too, so a bad file is refused before the cluster sees it.
        let (_, _, policies) = gangway_k8s::policies::build("philly")?;
        let conf = conf.map(read).transpose()?.unwrap_or_default();
        policies.swap(slot, &m.display().to_string(), &read(m)?, &conf)?;
    }
    let (wasm, toml) = match module {
        Some(m) => (
            serde_json::to_value(ByteString(read(m)?)).unwrap_or_default(),
            match conf {
                Some(c) => {
                    serde_json::Value::String(String::from_utf8_lossy(&read(c)?).into_owned())
                }
                None => serde_json::Value::Null,
            },
        ),
        None => (serde_json::Value::Null, serde_json::Value::Null),
    };
    let patch = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": cfg.policies_configmap, "namespace": cfg.namespace},
        "binaryData": {format!("{slot}.wasm"): wasm},
        "data": {format!("{slot}.toml"): toml},
    });
    let what = format!(
        "patching ConfigMap {}/{}",
        cfg.namespace, cfg.policies_configmap
    );
    match api
        .patch(
            &cfg.policies_configmap,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {
            // A merge patch's nulls delete keys; a new object has none.
            let mut body = patch;
            for key in ["binaryData", "data"] {
                if let Some(map) = body[key].as_object_mut() {
                    map.retain(|_, v| !v.is_null());
                }
            }
            let cm: ConfigMap =
                serde_json::from_value(body).map_err(|e| K8sError::Policy(e.to_string()))?;
            api.create(&kube::api::PostParams::default(), &cm)
                .await
                .map_err(|e| K8sError::api(what.clone(), e))?;
        }
        Err(e) => return Err(K8sError::api(what, e)),
    }
    Ok(match module {
        Some(m) => format!(
            "{} written to the {slot} slot of {}/{}; the scheduler stages it at its next cycle",
            m.display(),
            cfg.namespace,
            cfg.policies_configmap
        ),
        None => format!(
            "the {slot} slot's module removed; the preset's policy is staged at the next cycle"
        ),
    })
}

async fn why(client: kube::Client, gang: &str) -> Result<String, K8sError> {
    let (ns, name) = gang.split_once('/').ok_or_else(|| K8sError::Config {
        file: "command line".into(),
        message: format!("{gang:?}: expected NAMESPACE/PODGROUP"),
    })?;
    let api: Api<PodGroup> = Api::namespaced(client, ns);
    let pg = api
        .get(name)
        .await
        .map_err(|e| K8sError::api(format!("reading podgroup {gang}"), e))?;
    let status = pg.status.unwrap_or_default();
    let cond = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Scheduled");
    Ok(match cond {
        Some(c) if c.status == "True" => format!("{gang}: scheduled: {}", c.message),
        Some(c) => format!("{gang}: pending ({}): {}", c.reason, c.message),
        None => format!(
            "{gang}: no decision yet (phase {})",
            status.phase.unwrap_or_default()
        ),
    })
}

async fn main_async(cli: Cli) -> Result<(), K8sError> {
    let mut cfg = load(cli.config.as_ref())?;
    let client = gangway_k8s::run::client(cli.kubeconfig.as_deref()).await?;
    match cli.command {
        Command::Run {
            metrics_addr,
            identity,
            no_leader_elect,
        } => {
            if let Some(a) = metrics_addr {
                cfg.metrics_addr = a;
            }
            if let Some(i) = identity {
                cfg.identity = i;
            }
            if no_leader_elect {
                cfg.leader_elect = false;
            }
            cfg.check()?;
            gangway_k8s::run::run(cfg, client).await
        }
        Command::Swap {
            slot,
            module,
            policy_config,
            builtin,
        } => {
            let module = if builtin { None } else { module };
            if module.is_none() && !builtin {
                return Err(K8sError::Config {
                    file: "command line".into(),
                    message: "swap needs a MODULE or --builtin".into(),
                });
            }
            println!(
                "{}",
                swap(&cfg, client, &slot, module.as_ref(), policy_config.as_ref()).await?
            );
            Ok(())
        }
        Command::Why { gang } => {
            println!("{}", why(client, &gang).await?);
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    gangway_catalog::logging::init(cli.verbose);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("gangway-k8s: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(main_async(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gangway-k8s: {e}");
            ExitCode::FAILURE
        }
    }
}
