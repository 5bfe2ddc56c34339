//! The daemon's configuration file (TOML).
//!
//! ```toml
//! state_dir = "/var/lib/gangway-slurm"   # snapshot, socket, launch log
//! preset = "philly"                      # policies: a catalog preset ...
//! # fairness = "my_fairness.wasm"        # ... with any slot replaced by a Wasm module
//! poll_interval_ms = 500                 # how often Slurm is read and a round runs
//! launch_timeout_s = 60                  # a launched job Slurm keeps pending longer is re-queued
//! replace_pending_s = 15                 # ... or this long when it waits for resources (foreign load): placed again, not counted
//! max_attempts = 3                       # launches that fail (the program, a refusal, a node failure) before a job fails
//! # ends_dir = "/shared/gangway-ends"    # one shared folder where job scripts record how they ended (default: none, each user's ~/.gangway/ends; must be writable from the nodes; not the state's filesystem, or user quotas)
//! history = 1000                         # finished jobs kept for `status`
//! policy_fuel_per_day = 10000000000000   # fuel a Wasm module may use in a slot per day (about 10 min of guest CPU); past it the module is quarantined; 0 = no bound
//! mode = "submit"                        # "submit": users run `gangway-slurm submit`; "native": users run their own sbatch into slurm.partition (job_submit.lua holds it)
//! lock_stale_s = 60                      # another daemon's lock older than this (no heartbeat) is taken over
//!
//! [limits]                               # what one user may take of the daemon (see LimitsConfig)
//! connections = 1024                     # client connections open at once, in all
//! connections_per_user = 64              # ... and per uid
//! request_timeout_s = 10                 # a whole request must arrive within this (not per byte)
//! request_bytes = 1048576                # largest request from a user who is not an admin (admins: 64 MiB, for modules)
//! queued_jobs_per_user = 1000            # live jobs (pending, launching, running) per user
//! job_bytes = 65536                      # a job's command, environment and working folder together
//! queued_bytes_per_user = 8388608        # ... and of all of one user's live jobs
//!
//! [access]
//! socket = "owner"                       # who may connect: "owner" (the daemon's user), "group" (socket_group), "everyone"
//! socket_group = "gpu-users"
//! admins = ["ops"]                       # may swap, roll back and cancel others' jobs (root and the daemon's user always may)
//! admin_groups = ["gangway-admins"]
//! vc_membership = "config"               # "config": [[vc]] users and groups; "slurm": the VC is a Slurm account the user has an association with
//!
//! [slurm]
//! bin_dir = "/usr/bin"                   # where sinfo, squeue, sbatch, scancel are (default: PATH)
//! conf = "/etc/slurm/slurm.conf"         # exported as SLURM_CONF (default: Slurm's own)
//! partition = "gpu"                      # passed to sbatch -p (default: Slurm's default); checked at start
//! timeout_s = 20                         # a Slurm command that takes longer means Slurm is unreachable
//! topology_conf = "/etc/slurm/topology.conf"   # racks = leaf switches
//!
//! [racks]                                # or racks by hand (one of the two; default: one rack)
//! rack1 = "n[1-2]"
//! rack2 = "n[3-4]"
//!
//! [gpu_types]                           # GPU types, by the node feature or GRES type naming them (default: one type)
//! a100 = 80                              # a node with Features=a100, or GRES gpu:a100:N, has GPUs of type a100, 80 GB each (0: not known)
//! v100 = 32
//!
//! [[vc]]
//! name = "research"
//! quota_gpus = 16                        # optional
//! weight = 1                             # optional
//! users = ["alice", "bob"]               # who may submit to it (with vc_membership = "config");
//! groups = ["ml"]                        # neither list: every user who can reach the socket
//!
//! [[vc]]
//! name = "vision"                        # quotas per GPU type instead of quota_gpus (types of [gpu_types]):
//! gpu_quota.a100 = { nominal = 8, borrowing_limit = 4 }   # 8 a100s, and 4 more borrowed at most
//! gpu_quota.v100 = { nominal = 16 }                       # no borrowing_limit: no limit; types not named: none
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gangway_core::Slot;
use serde::Deserialize;

use super::SlurmError;

/// One virtual cluster users may submit to.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VcConfig {
    /// Its name (`--vc NAME`).
    pub name: String,
    /// Its GPU quota, if any.
    #[serde(default)]
    pub quota_gpus: Option<u32>,
    /// Its weight for weighted fair shares.
    #[serde(default = "one")]
    pub weight: u32,
    /// Users who may submit to it (with `vc_membership = "config"`).
    #[serde(default)]
    pub users: Option<Vec<String>>,
    /// Unix groups whose members may submit to it.
    #[serde(default)]
    pub groups: Option<Vec<String>>,
    /// Its quotas per GPU type, by type name (instead of `quota_gpus`):
    /// its jobs run only on the types named, each within its nominal
    /// quota plus its borrowing limit.
    #[serde(default)]
    pub gpu_quota: BTreeMap<String, TypeQuotaConfig>,
}

/// A virtual cluster's quota of one GPU type (`[[vc]] gpu_quota.TYPE`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TypeQuotaConfig {
    /// GPUs of the type the VC is entitled to.
    pub nominal: u32,
    /// GPUs of the type it may hold beyond `nominal`; absent: no limit.
    #[serde(default)]
    pub borrowing_limit: Option<u32>,
}

impl VcConfig {
    /// Whether the VC lists its members (else every user may submit).
    pub fn restricted(&self) -> bool {
        self.users.is_some() || self.groups.is_some()
    }
}

/// Who may connect to the daemon's socket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SocketAccess {
    /// The daemon's own user (mode 0600).
    #[default]
    Owner,
    /// Members of `socket_group` (mode 0660, that group).
    Group,
    /// Every local user (mode 0666); each request is still authorized by
    /// the caller's uid.
    Everyone,
}

/// Where VC membership comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Membership {
    /// `[[vc]]` `users` and `groups`.
    #[default]
    Config,
    /// Slurm's associations: the VC is a Slurm account, and a user may use
    /// it if `sacctmgr` lists an association of theirs with it (needs
    /// accounting, slurmdbd).
    Slurm,
}

/// Who may do what ([access]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessConfig {
    /// Who may connect.
    #[serde(default)]
    pub socket: SocketAccess,
    /// The group of `socket = "group"`.
    #[serde(default)]
    pub socket_group: Option<String>,
    /// Users who may swap and roll back policies and cancel others' jobs
    /// (root and the daemon's own user always may).
    #[serde(default)]
    pub admins: Vec<String>,
    /// Groups whose members are admins.
    #[serde(default)]
    pub admin_groups: Vec<String>,
    /// Where VC membership comes from.
    #[serde(default)]
    pub vc_membership: Membership,
}

/// What one user may take of the daemon ([limits]): its socket, its queue
/// and its state file are shared by every user, so each is bounded per
/// user, as slurmctld bounds its RPC threads and message sizes. Every
/// refusal names the limit and its key.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Client connections open at once, in all (the daemon also keeps it
    /// below its descriptor limit, less a reserve for Slurm's commands).
    pub connections: usize,
    /// Client connections open at once per uid.
    pub connections_per_user: usize,
    /// Seconds in which a whole request must arrive (a deadline from the
    /// connection's acceptance, not a timeout per read).
    pub request_timeout_s: u64,
    /// Largest request, in bytes, from a caller who is not an admin
    /// (admins may send up to [`crate::protocol::MAX_MESSAGE`]: modules).
    pub request_bytes: usize,
    /// Live jobs (pending, launching, running) one user may have.
    pub queued_jobs_per_user: usize,
    /// Bytes of one job's command, environment and working folder
    /// together (they are kept in the state file, rewritten on changes).
    pub job_bytes: usize,
    /// Bytes of the commands, environments and folders of one user's live
    /// jobs together (what one user adds to the state file).
    pub queued_bytes_per_user: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            connections: 1024,
            connections_per_user: 64,
            request_timeout_s: 10,
            request_bytes: 1 << 20,
            queued_jobs_per_user: 1000,
            job_bytes: 64 << 10,
            queued_bytes_per_user: 8 << 20,
        }
    }
}

/// How users submit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// With `gangway-slurm submit`; the daemon launches with sbatch as the
    /// submitter.
    #[default]
    Submit,
    /// With their own `sbatch` into `slurm.partition`, where
    /// `job_submit.lua` holds every job; the daemon pins and releases them.
    Native,
}

fn one() -> u32 {
    1
}

/// Where the Slurm commands are and how to call them.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmConfig {
    /// Folder of `sinfo`, `squeue`, `sbatch`, `scancel` (default: `PATH`).
    #[serde(default)]
    pub bin_dir: Option<PathBuf>,
    /// `slurm.conf` to use (exported as `SLURM_CONF`).
    #[serde(default)]
    pub conf: Option<PathBuf>,
    /// Partition for `sbatch -p`.
    #[serde(default)]
    pub partition: Option<String>,
    /// A Slurm `topology.conf` whose leaf switches are the racks.
    #[serde(default)]
    pub topology_conf: Option<PathBuf>,
    /// Seconds a Slurm command may take before Slurm counts as unreachable.
    #[serde(default = "default_timeout")]
    pub timeout_s: u64,
}

fn default_timeout() -> u64 {
    20
}

impl Default for SlurmConfig {
    fn default() -> Self {
        SlurmConfig {
            bin_dir: None,
            conf: None,
            partition: None,
            topology_conf: None,
            timeout_s: default_timeout(),
        }
    }
}

/// The whole configuration.
///
/// Unknown keys are refused: the slot keys are collected by a flattened map
/// (which serde cannot combine with `deny_unknown_fields`), and
/// [`slot_modules`] refuses any key that names no slot.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Config {
    /// The state folder: snapshot, Unix socket, launch log.
    pub state_dir: PathBuf,
    /// The catalog preset for the six slots.
    #[serde(default = "default_preset")]
    pub preset: String,
    /// Wasm modules replacing the preset's policies, by slot: a top-level
    /// key naming a slot of the contract's registry (`fairness = "f.wasm"`,
    /// ... `defragment = ...`). Any other unknown key is refused.
    #[serde(flatten, deserialize_with = "slot_modules")]
    pub modules: BTreeMap<Slot, PathBuf>,
    /// Milliseconds between cycles (read Slurm, round, launch).
    #[serde(default = "default_poll")]
    pub poll_interval_ms: u64,
    /// The fuel a Wasm module may use in one slot per day of the daemon's
    /// running time, calls and instantiations included; past it the
    /// module's calls fail, the slot's fallback decides and the module is
    /// quarantined until it is swapped. 0: no bound.
    #[serde(default = "default_policy_fuel_per_day")]
    pub policy_fuel_per_day: u64,
    /// Load modules that carry an interpreter (a Python policy built with
    /// `python -m gangway.componentize`) under `LoadLimits::for_interpreters`,
    /// each call with `Budget::INTERPRETER_FUEL`; `policy_fuel_per_day`
    /// still bounds a slot's day.
    #[serde(default)]
    pub large_policies: bool,
    /// Seconds Slurm may keep a launched job pending before it is cancelled
    /// and re-queued (a launch that counts against `max_attempts`).
    #[serde(default = "default_launch_timeout")]
    pub launch_timeout_s: u64,
    /// Seconds Slurm may keep a launched job pending for resources or
    /// priority (load Gangway does not see) before it is cancelled and
    /// placed again; such a launch does not count against `max_attempts`.
    #[serde(default = "default_replace_pending")]
    pub replace_pending_s: u64,
    /// Launches that may fail (the program failing, Slurm refusing it, a
    /// node failure) before the job fails for good.
    #[serde(default = "default_attempts")]
    pub max_attempts: u32,
    /// A shared folder where each job's batch script records how the job
    /// ended (in `<uid>/`, see `daemon::records`), so a job that ends and
    /// leaves Slurm's memory while the daemon is away is not run again.
    /// Default: none, each user's records go to their own home,
    /// `~/.gangway/ends/` (a user who fills it hurts only herself). When
    /// set: a folder the nodes can write (a shared filesystem), the daemon's
    /// user's, 0711, not on the state's filesystem (a user who fills it
    /// would stop every change from being saved) or with user quotas.
    #[serde(default)]
    pub ends_dir: Option<PathBuf>,
    /// Finished jobs kept for `status` (older ones are forgotten).
    #[serde(default = "default_history")]
    pub history: usize,
    /// How users submit.
    #[serde(default)]
    pub mode: Mode,
    /// Seconds without a heartbeat after which another daemon's lock on the
    /// partition counts as abandoned and is taken over.
    #[serde(default = "default_lock_stale")]
    pub lock_stale_s: u64,
    /// Who may do what.
    #[serde(default)]
    pub access: AccessConfig,
    /// What one user may take of the daemon.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// How to call Slurm.
    #[serde(default)]
    pub slurm: SlurmConfig,
    /// Racks by hand: rack name to a Slurm host list.
    #[serde(default)]
    pub racks: BTreeMap<String, String>,
    /// GPU types: a type's name to the memory of one of its GPUs in GB (0:
    /// not known). A node whose Slurm features (`Features=a100`) name a
    /// type, or whose GPUs all carry that GRES type (gres.conf
    /// `Type=a100`), has GPUs of that type; other nodes have the default
    /// type.
    /// Jobs ask for types by these names.
    #[serde(default)]
    pub gpu_types: BTreeMap<String, u32>,
    /// The virtual clusters.
    #[serde(default)]
    pub vc: Vec<VcConfig>,
    /// The file it was read from (for error messages).
    #[serde(skip)]
    pub file: String,
}

/// [`Config::policy_fuel_per_day`] by default: about ten minutes of guest
/// CPU a day, far above what the built-in policies use (the heaviest replay
/// measured, `las` reclaiming over 20,000 jobs, used 44 G units in all).
pub const POLICY_FUEL_PER_DAY: u64 = 10_000_000_000_000;

fn default_preset() -> String {
    "philly".into()
}
fn default_poll() -> u64 {
    500
}
fn default_policy_fuel_per_day() -> u64 {
    POLICY_FUEL_PER_DAY
}
fn default_launch_timeout() -> u64 {
    60
}
fn default_replace_pending() -> u64 {
    15
}
fn default_attempts() -> u32 {
    3
}
fn default_history() -> usize {
    1000
}
fn default_lock_stale() -> u64 {
    60
}

/// The name of the virtual cluster that holds jobs started in Slurm
/// directly (foreign load); users cannot submit to it.
pub const FOREIGN_VC: &str = "(foreign)";

impl Config {
    /// Reads and checks a configuration file. Relative paths in it are
    /// taken relative to the file's folder.
    pub fn load(path: &Path) -> Result<Config, SlurmError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| SlurmError::Config {
            file: file.clone(),
            message: format!("cannot read: {e}"),
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        Config::parse(&text, &file, base)
    }

    /// Parses configuration text; `file` names it in errors and `base`
    /// resolves relative paths.
    pub fn parse(text: &str, file: &str, base: &Path) -> Result<Config, SlurmError> {
        let err = |message: String| SlurmError::Config {
            file: file.to_string(),
            message,
        };
        let mut cfg: Config = toml::from_str(text).map_err(|e| err(e.to_string()))?;
        cfg.file = file.to_string();
        cfg.resolve_paths(base);
        if cfg.vc.is_empty() {
            return Err(err(
                "no [[vc]]: users need at least one virtual cluster".into()
            ));
        }
        for (i, v) in cfg.vc.iter().enumerate() {
            if v.name.is_empty() || v.name == FOREIGN_VC || v.name.contains(char::is_whitespace) {
                return Err(err(format!(
                    "[[vc]] {}: name {:?} is empty, reserved or has spaces",
                    i + 1,
                    v.name
                )));
            }
            if cfg.vc[..i].iter().any(|w| w.name == v.name) {
                return Err(err(format!("[[vc]] {:?} is defined twice", v.name)));
            }
        }
        if !cfg.racks.is_empty() && cfg.slurm.topology_conf.is_some() {
            return Err(err(
                "give racks either in [racks] or by slurm.topology_conf, not both".into(),
            ));
        }
        if cfg.max_attempts == 0 {
            return Err(err("max_attempts must be at least 1".into()));
        }
        if cfg.lock_stale_s < 4 {
            return Err(err(
                "lock_stale_s must be at least 4 (the lock's heartbeat comes every quarter of it)"
                    .into(),
            ));
        }
        let l = &cfg.limits;
        if l.connections == 0
            || l.connections_per_user == 0
            || l.request_timeout_s == 0
            || l.queued_jobs_per_user == 0
        {
            return Err(err(
                "[limits] connections, connections_per_user, request_timeout_s and \
                 queued_jobs_per_user must be at least 1"
                    .into(),
            ));
        }
        if l.request_bytes < 4096 || l.job_bytes < 1024 || l.queued_bytes_per_user < l.job_bytes {
            return Err(err(
                "[limits] request_bytes must be at least 4096, job_bytes at least 1024, and \
                 queued_bytes_per_user at least job_bytes"
                    .into(),
            ));
        }
        check_gpu_types(&cfg.gpu_types).map_err(err)?;
        check_type_quotas(&cfg.vc, &cfg.gpu_types).map_err(err)?;
        if cfg.mode == Mode::Native && cfg.slurm.partition.is_none() {
            return Err(err(
                "mode = \"native\" needs slurm.partition: the partition Gangway manages".into(),
            ));
        }
        if (cfg.access.socket == SocketAccess::Group) != cfg.access.socket_group.is_some() {
            return Err(err(
                "access.socket = \"group\" and access.socket_group go together".into(),
            ));
        }
        Ok(cfg)
    }

    /// Takes every relative path relative to `base`.
    fn resolve_paths(&mut self, base: &Path) {
        let abs = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        abs(&mut self.state_dir);
        for p in [
            &mut self.ends_dir,
            &mut self.slurm.bin_dir,
            &mut self.slurm.conf,
            &mut self.slurm.topology_conf,
        ]
        .into_iter()
        .flatten()
        .chain(self.modules.values_mut())
        {
            abs(p);
        }
    }

    /// The daemon's Unix socket.
    pub fn socket(&self) -> PathBuf {
        socket_in(&self.state_dir)
    }
}

/// Why the `[gpu_types]` names cannot be used, if they cannot: each must be
/// a Slurm feature name (letters, digits, `_`, `-`, `.`) and not the
/// default type's name.
fn check_gpu_types(types: &BTreeMap<String, u32>) -> Result<(), String> {
    for name in types.keys() {
        let ok = name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if name.is_empty() || !ok || name == gangway_core::DEFAULT_GPU_TYPE {
            return Err(format!(
                "[gpu_types] {name:?}: a type is named like a Slurm feature (letters, digits, \
                 _ - .), and not {:?} (the type of nodes without one)",
                gangway_core::DEFAULT_GPU_TYPE
            ));
        }
    }
    Ok(())
}

/// Why the VCs' quotas per GPU type cannot be used, if they cannot: a VC
/// has either `quota_gpus` or quotas per type, and each type is one of
/// `[gpu_types]`.
fn check_type_quotas(vcs: &[VcConfig], types: &BTreeMap<String, u32>) -> Result<(), String> {
    for v in vcs.iter().filter(|v| !v.gpu_quota.is_empty()) {
        if v.quota_gpus.is_some() {
            return Err(format!(
                "[[vc]] {:?}: quota_gpus and gpu_quota together; a VC has one pooled quota or \
                 quotas per GPU type",
                v.name
            ));
        }
        if let Some(t) = v.gpu_quota.keys().find(|t| !types.contains_key(*t)) {
            return Err(format!(
                "[[vc]] {:?}: gpu_quota.{t} names a GPU type [gpu_types] does not declare",
                v.name
            ));
        }
    }
    Ok(())
}

/// The configuration's keys that name no setting: each must name a slot of
/// the registry and give a module file.
fn slot_modules<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<Slot, PathBuf>, D::Error> {
    use serde::de::Error;
    let rest = BTreeMap::<String, toml::Value>::deserialize(d)?;
    let mut modules = BTreeMap::new();
    for (key, value) in rest {
        let Some(slot) = Slot::from_name(&key) else {
            return Err(D::Error::custom(format!(
                "unknown field `{key}`: neither a setting nor a slot ({})",
                slot_names()
            )));
        };
        let toml::Value::String(path) = value else {
            return Err(D::Error::custom(format!(
                "`{key}` takes a module file (a string), not {value}"
            )));
        };
        modules.insert(slot, PathBuf::from(path));
    }
    Ok(modules)
}

/// The slots' names in their declaration order, for messages.
pub fn slot_names() -> String {
    Slot::DECLARED.map(Slot::as_str).join(", ")
}

/// The socket path inside a state folder.
pub fn socket_in(state_dir: &Path) -> PathBuf {
    state_dir.join("gangway.sock")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_resolves_paths() {
        let text = "state_dir = \"st\"\n[slurm]\nconf = \"/etc/slurm.conf\"\n[[vc]]\nname = \"a\"\nquota_gpus = 8\n";
        let cfg = Config::parse(text, "x.toml", Path::new("/base")).unwrap();
        assert_eq!(cfg.state_dir, Path::new("/base/st"));
        assert_eq!(
            cfg.slurm.conf.as_deref(),
            Some(Path::new("/etc/slurm.conf"))
        );
        assert_eq!(cfg.vc[0].weight, 1);
        assert_eq!(cfg.preset, "philly");
        assert_eq!(cfg.socket(), Path::new("/base/st/gangway.sock"));
        assert!(!cfg.large_policies);
        let large = Config::parse(
            "state_dir = \"st\"\nlarge_policies = true\n[[vc]]\nname = \"a\"\n",
            "x.toml",
            Path::new("/"),
        );
        assert!(large.unwrap().large_policies);
    }

    #[test]
    fn gpu_types_are_feature_names() {
        let parse = |types: &str| {
            let text = format!("state_dir = \"st\"\n[gpu_types]\n{types}\n[[vc]]\nname = \"a\"\n");
            Config::parse(&text, "x.toml", Path::new("/"))
        };
        let cfg = parse("a100 = 80\nv100-16gb = 16").unwrap();
        assert_eq!(cfg.gpu_types.get("a100"), Some(&80));
        assert_eq!(cfg.gpu_types.len(), 2);
        for bad in ["\"a 100\" = 80", "\"a:1\" = 8", "gpu = 8", "\"\" = 1"] {
            let e = parse(bad).unwrap_err();
            assert!(e.to_string().contains("[gpu_types]"), "{bad}: {e}");
        }
        assert!(parse("a100 = -1").is_err());
        assert!(parse("a100 = \"big\"").is_err());
    }

    #[test]
    fn quotas_per_gpu_type_parse_and_are_checked() {
        let parse = |vc: &str| {
            let text = format!(
                "state_dir = \"st\"\n[gpu_types]\na100 = 80\nv100 = 32\n[[vc]]\nname = \"a\"\n{vc}\n"
            );
            Config::parse(&text, "x.toml", Path::new("/"))
        };
        let cfg = parse(
            "gpu_quota.a100 = { nominal = 8, borrowing_limit = 4 }\ngpu_quota.v100 = { nominal = 2 }",
        )
        .unwrap();
        let q = &cfg.vc[0].gpu_quota;
        assert_eq!(
            q.get("a100"),
            Some(&TypeQuotaConfig {
                nominal: 8,
                borrowing_limit: Some(4)
            })
        );
        assert_eq!(q.get("v100").map(|q| q.borrowing_limit), Some(None));
        let e = parse("quota_gpus = 4\ngpu_quota.a100 = { nominal = 8 }").unwrap_err();
        assert!(
            e.to_string().contains("quota_gpus and gpu_quota together"),
            "{e}"
        );
        let e = parse("gpu_quota.h100 = { nominal = 8 }").unwrap_err();
        assert!(
            e.to_string().contains("gpu_quota.h100 names a GPU type"),
            "{e}"
        );
        assert!(parse("gpu_quota.a100 = { nominal = 8, borrow = 1 }").is_err());
        assert!(parse("gpu_quota.a100 = { borrowing_limit = 1 }").is_err());
    }

    #[test]
    fn every_slot_of_the_registry_takes_a_module() {
        let keys: String = Slot::DECLARED
            .iter()
            .map(|s| format!("{} = \"{}.wasm\"\n", s.as_str(), s.as_str()))
            .collect();
        let text = format!("state_dir = \"st\"\n{keys}[[vc]]\nname = \"a\"\n");
        let cfg = Config::parse(&text, "x.toml", Path::new("/base")).unwrap();
        assert_eq!(cfg.modules.len(), Slot::COUNT);
        for slot in Slot::DECLARED {
            let want = PathBuf::from(format!("/base/{}.wasm", slot.as_str()));
            assert_eq!(cfg.modules.get(&slot), Some(&want));
        }
        let e = Config::parse(
            "state_dir = \"s\"\ngang = 3\n[[vc]]\nname = \"a\"",
            "c.toml",
            Path::new("/"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("`gang` takes a module file"), "{e}");
    }

    #[test]
    fn bad_configs_name_file_and_problem() {
        let e = |t: &str| {
            Config::parse(t, "c.toml", Path::new("/"))
                .unwrap_err()
                .to_string()
        };
        assert!(
            e("state_dir = 1").starts_with("c.toml: "),
            "{}",
            e("state_dir = 1")
        );
        assert!(e("state_dir = \"s\"").contains("no [[vc]]"));
        assert!(e("state_dir = \"s\"\n[[vc]]\nname = \"(foreign)\"").contains("reserved"));
        assert!(
            e("state_dir = \"s\"\n[[vc]]\nname = \"a\"\n[[vc]]\nname = \"a\"").contains("twice")
        );
        assert!(e("state_dir = \"s\"\nbogus = 1\n[[vc]]\nname = \"a\"").contains("bogus"));
        assert!(
            e("state_dir = \"s\"\nmax_attempts = 0\n[[vc]]\nname = \"a\"").contains("max_attempts")
        );
        assert!(
            e("state_dir = \"s\"\nmode = \"native\"\n[[vc]]\nname = \"a\"").contains("partition")
        );
        assert!(
            e("state_dir = \"s\"\n[access]\nsocket = \"group\"\n[[vc]]\nname = \"a\"")
                .contains("socket_group")
        );
        assert!(
            e("state_dir = \"s\"\n[access]\nsocket = \"all\"\n[[vc]]\nname = \"a\"")
                .contains("unknown variant")
        );
    }

    #[test]
    fn access_and_members_parse() {
        let text = "state_dir = \"s\"\nmode = \"native\"\n[slurm]\npartition = \"gw\"\n\
                    [access]\nsocket = \"everyone\"\nadmins = [\"ops\"]\nvc_membership = \"slurm\"\n\
                    [[vc]]\nname = \"a\"\nusers = [\"alice\"]\n[[vc]]\nname = \"b\"\n";
        let cfg = Config::parse(text, "x.toml", Path::new("/")).unwrap();
        assert_eq!(cfg.mode, Mode::Native);
        assert_eq!(cfg.access.socket, SocketAccess::Everyone);
        assert_eq!(cfg.access.admins, ["ops"]);
        assert_eq!(cfg.access.vc_membership, Membership::Slurm);
        assert!(cfg.vc[0].restricted() && !cfg.vc[1].restricted());
        assert_eq!(cfg.lock_stale_s, 60);
        assert_eq!(cfg.limits, LimitsConfig::default());
    }

    #[test]
    fn limits_parse_and_are_checked() {
        let parse = |limits: &str| {
            let text = format!("state_dir = \"s\"\n[limits]\n{limits}\n[[vc]]\nname = \"a\"\n");
            Config::parse(&text, "x.toml", Path::new("/"))
        };
        let cfg = parse("connections_per_user = 8\njob_bytes = 4096").unwrap();
        assert_eq!(cfg.limits.connections_per_user, 8);
        assert_eq!(cfg.limits.job_bytes, 4096);
        assert_eq!(cfg.limits.connections, 1024);
        let e = parse("connections = 0").unwrap_err().to_string();
        assert!(e.contains("at least 1"), "{e}");
        let e = parse("request_bytes = 10").unwrap_err().to_string();
        assert!(e.contains("request_bytes"), "{e}");
        let e = parse("bogus = 1").unwrap_err().to_string();
        assert!(e.contains("bogus"), "{e}");
    }
}
