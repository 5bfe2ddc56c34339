//! `delay`: delay scheduling for gangs (locality slot).
//!
//! A job first may span only the smallest domain that can hold it (its
//! [`PendingJob::min_level`]: one server if it fits on one, else one rack, ...)
//! on the fewest servers that can hold it ([`PendingJob::min_servers`]). Each
//! time its wait since it last became pending passes the next threshold of
//! [`DelayConfig::widen_after_s`], its spread limit widens one level towards
//! the whole cluster, never past [`DelayConfig::widest`], and the number of
//! servers it may span grows to `min_servers` times the next factor of
//! [`DelayConfig::server_factors`] (so a 16-GPU gang on 8-GPU servers may
//! take 2, then 4, then 8 servers, rather than scatter over a whole rack the
//! moment it may use the rack). The limit therefore never narrows while a job
//! keeps waiting; a retry starts narrow again because its wait restarts.
//!
//! # Options (TOML)
//!
//! | key | type | default | meaning |
//! |---|---|---|---|
//! | `widen_after_s` | list of seconds, non-decreasing | `[60, 600]` | wait after which the limit is 1, 2, ... levels wider than `min_level` |
//! | `widest` | level (0 = whole cluster) | `0` | the widest level ever allowed |
//! | `server_factors` | list of factors (0 = no bound) | `[1, 2, 4]` | after 0, 1, 2, ... thresholds the gang may span `min_servers` times this many servers (the last factor applies to all later steps) |
//! | `gang_deadline_factor` | number in `(0, 1]` | `1` | the thresholds of a gang that needs more than one server (`min_servers > 1`) are multiplied by this: large gangs relax sooner |
//! | `deadline_spread` | number in `[0, 1]` | `0` | how much each job's thresholds vary: every threshold of a job is multiplied by its own factor `(1 - s) + s * u / (1 - u)`, `u` uniform in (0, 1) drawn from its id and attempt (so the same job always draws the same); `0` relaxes every job after the same waits, `1` draws log-logistic factors with median 1 |
//!
//! With `deadline_spread` above 0 the waits after which jobs relax are
//! spread out instead of sitting at the same thresholds: a scheduler's
//! relaxation is not a clock shared by every job (Philly's waits form a
//! smooth CDF, the study's Figure 3, PHILLY.md §2.2, not steps at the
//! thresholds; its first-attempt waits of large jobs have a long tail,
//! §5.4). The factor uses only exact floating-point arithmetic, so native
//! and Wasm runs decide alike.
//!
//! # How the defaults were chosen
//!
//! The Philly scheduler's own relaxation ladder is not public (PHILLY.md
//! §3.3). The public trace shows that spreading over more servers than the
//! minimum becomes much more likely once a job has waited about a minute
//! (8-GPU jobs: 20 % spread when they waited under 1 min, 54 % after
//! 1–2.5 min; 4-GPU jobs: 6 % → 17 %), so the first widening (server → rack,
//! or rack → cluster for multi-rack gangs) comes after **60 s**. Beyond
//! 4–10 min of waiting the spread share stops growing (PHILLY.md §3.3 table),
//! and by 10 min a 4- or 8-GPU job is already in the tail of its wait
//! distribution (p75 6.9 and 13.6 min, §5.4), so the second widening comes
//! after **600 s**. Both are starting points: calibrate them against the
//! placement mix of §5.2 for a given topology.
//!
//! The `philly` preset (plugins/catalog/presets.toml) uses `[600, 3600]`,
//! calibrated on the real RFold window with real VCs against the
//! first-attempt waits of >= 4 GPU jobs (§5.4) and the one-server shares
//! (§5.2); the comparison with these defaults is in the preset's comment.
//!
//! ```
//! use gangway_plugin_sdk::Configure;
//! use gangway_policy_delay::Delay;
//!
//! let delay = Delay::from_config(b"widen_after_s = [30, 300]\nwidest = 1").unwrap();
//! assert_eq!(delay.config().widen_after_s, vec![30, 300]);
//! assert_eq!(delay.config().widest, 1);
//! assert!(Delay::from_config(b"wait = 3").is_err());
//! ```

use gangway_plugin_sdk::{
    ConfigError, ConfigForm, Configure, Level, LocalityDecision, LocalityPolicy, PendingJob,
    QueueView, SpreadLimit, read_options,
};
use serde::Deserialize;

/// Configuration of [`Delay`], parsed from TOML by [`Configure::from_config`].
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DelayConfig {
    /// Cumulative waits (seconds since the job last became pending) after
    /// which the spread limit is one, two, ... levels wider than the job's
    /// `min_level`. Must be non-decreasing. Default `[60, 600]`.
    pub widen_after_s: Vec<u64>,
    /// The widest level a job may ever span (`0` = the whole cluster,
    /// `1` = one rack in the usual cluster > rack > server shape). A job whose
    /// `min_level` is already wider keeps its `min_level`. Default `0`.
    pub widest: u8,
    /// After 0, 1, 2, ... thresholds, a gang may span at most its
    /// `min_servers` times this factor servers (0: no bound); the last
    /// factor holds for every later step. Default `[1, 2, 4]`.
    pub server_factors: Vec<u32>,
    /// How much each job's thresholds vary, in `[0, 1]`: a job's thresholds
    /// are all multiplied by `(1 - s) + s * u / (1 - u)` with `u` drawn
    /// uniformly from its id and attempt ([`deadline_factor`]). Default `0`
    /// (every job relaxes after the same waits).
    pub deadline_spread: f64,
    /// Multiplies the thresholds of a gang needing more than one server
    /// (`min_servers > 1`), in `(0, 1]`. Default `1`.
    pub gang_deadline_factor: f64,
}

impl Default for DelayConfig {
    fn default() -> Self {
        DelayConfig {
            widen_after_s: vec![60, 600],
            widest: 0,
            server_factors: vec![1, 2, 4],
            deadline_spread: 0.0,
            gang_deadline_factor: 1.0,
        }
    }
}

/// The factor on every threshold of the job with `id` on attempt
/// `attempts` (0 before its first) for spread `s`: `(1 - s) + s * u / (1 -
/// u)`, `u` uniform in `[1/2048, 2047/2048]` from a hash of both. Its
/// median is 1; with `s = 1` it is log-logistic (P(factor > x) = 1 / (1 +
/// x)), with `s = 0` always 1. Only exact IEEE operations: native and Wasm
/// give the same bits.
///
/// ```
/// use gangway_policy_delay::deadline_factor;
/// assert_eq!(deadline_factor(7, 0, 0.0), 1.0);
/// let f: Vec<f64> = (0..1000).map(|id| deadline_factor(id, 0, 1.0)).collect();
/// assert!(f.iter().all(|x| (0.0..=2048.0).contains(x)));
/// let below = f.iter().filter(|x| **x < 1.0).count();
/// assert!((400..600).contains(&below), "median about 1: {below} of 1000 below");
/// assert_eq!(deadline_factor(7, 0, 0.5), deadline_factor(7, 0, 0.5));
/// assert_ne!(deadline_factor(7, 0, 0.5), deadline_factor(7, 1, 0.5));
/// ```
pub fn deadline_factor(id: u64, attempts: u32, spread: f64) -> f64 {
    if spread <= 0.0 {
        return 1.0;
    }
    // splitmix64 of the id and attempt.
    let mut z = id ^ (u64::from(attempts) << 48) ^ 0x9E37_79B9_7F4A_7C15;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    // 11 bits: u = (k + 0.5) / 2048 with k in 0..2048, never 0 or 1.
    let k = f64::from(u32::try_from(z >> 53).unwrap_or(0));
    let u = (k + 0.5) / 2048.0;
    (1.0 - spread) + spread * (u / (1.0 - u))
}

/// Delay scheduling for gangs: narrow first, wider level by level as the job
/// waits. See the [crate docs](crate) for the rule and its defaults.
///
/// ```
/// use gangway_plugin_sdk::*;
/// use gangway_policy_delay::Delay;
///
/// let job = |waiting_s| PendingJob {
///     id: JobId(1), vc: VcId(0), user: 0, gpus: 8, submitted_s: 0, waiting_s,
///     attempts: 0, attained_gpu_s: 0, min_level: Level(2), min_servers: 1,
/// };
/// let view = QueueView {
///     now_s: 1_000,
///     cluster: ClusterSummary { total_gpus: 64, free_gpus: 8, server_level: Level(2), levels: vec![] },
///     jobs: vec![job(0), job(90), job(900)],
///     spread: vec![],
/// };
/// // One server, then 2 servers of one rack after 60 s, then 4 anywhere after 600 s.
/// assert_eq!(
///     Delay::default().spread(&view).limits,
///     vec![SpreadLimit::new(Level(2), 1), SpreadLimit::new(Level(1), 2), SpreadLimit::new(Level(0), 4)]
/// );
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Delay {
    config: DelayConfig,
}

impl Delay {
    /// Builds the policy from a checked configuration.
    pub fn new(config: DelayConfig) -> Result<Delay, ConfigError> {
        if let Some(w) = config.widen_after_s.windows(2).find(|w| w[0] > w[1]) {
            return Err(ConfigError(format!(
                "delay: widen_after_s must be non-decreasing, but {} comes before {}",
                w[0], w[1]
            )));
        }
        if let Some(w) = config
            .server_factors
            .windows(2)
            .find(|w| w[1] != 0 && (w[0] == 0 || w[0] > w[1]))
        {
            return Err(ConfigError(format!(
                "delay: server_factors must not shrink (0, no bound, may only come last), but \
                 {} comes before {}",
                w[0], w[1]
            )));
        }
        if !(0.0..=1.0).contains(&config.deadline_spread) {
            return Err(ConfigError(format!(
                "delay: deadline_spread must be between 0 and 1, not {}",
                config.deadline_spread
            )));
        }
        if !(config.gang_deadline_factor > 0.0 && config.gang_deadline_factor <= 1.0) {
            return Err(ConfigError(format!(
                "delay: gang_deadline_factor must be above 0 and at most 1, not {}",
                config.gang_deadline_factor
            )));
        }
        Ok(Delay { config })
    }

    /// The configuration in use.
    pub fn config(&self) -> &DelayConfig {
        &self.config
    }

    /// The spread limit for one job with the cluster's server level `server_level`.
    pub fn limit(&self, job: &PendingJob, server_level: Level) -> SpreadLimit {
        let start = job.min_level.min(server_level);
        let mut stretch = deadline_factor(job.id.0, job.attempts, self.config.deadline_spread);
        if job.min_servers > 1 {
            stretch *= self.config.gang_deadline_factor;
        }
        // u64 -> f64 is exact below 2^53 s; beyond, a job has waited past
        // every threshold anyway.
        #[allow(clippy::cast_precision_loss)]
        let waited = job.waiting_s as f64;
        #[allow(clippy::cast_precision_loss)]
        let steps = self
            .config
            .widen_after_s
            .iter()
            .take_while(|w| waited >= **w as f64 * stretch)
            .count();
        let factor = self
            .config
            .server_factors
            .get(steps)
            .or(self.config.server_factors.last())
            .copied()
            .unwrap_or(0);
        let steps = u8::try_from(steps).unwrap_or(u8::MAX);
        let widest = self.config.widest.min(start.0);
        let level = Level(start.0.saturating_sub(steps).max(widest));
        let max_servers = match factor {
            0 => 0,
            f => job.min_servers.max(1).saturating_mul(f),
        };
        SpreadLimit::new(level, max_servers)
    }
}

impl Configure for Delay {
    // The host hands it its TOML as a tree: no parser in its module.
    const CONFIG_FORM: ConfigForm = ConfigForm::Tree;

    fn from_config(config: &[u8]) -> Result<Self, ConfigError> {
        let config: DelayConfig = read_options("delay", config)?;
        Delay::new(config)
    }
}

impl LocalityPolicy for Delay {
    fn spread(&self, view: &QueueView) -> LocalityDecision {
        let server_level = view.cluster.server_level;
        LocalityDecision {
            limits: view
                .jobs
                .iter()
                .map(|j| self.limit(j, server_level))
                .collect(),
        }
    }
}

gangway_plugin_sdk::export!(Locality, Delay);

#[cfg(test)]
mod tests {
    use super::*;
    use gangway_plugin_sdk::{ClusterSummary, JobId, VcId};
    use proptest::prelude::*;

    fn job(id: u64, min_level: u8, waiting_s: u64) -> PendingJob {
        PendingJob {
            id: JobId(id),
            vc: VcId(0),
            user: 0,
            gpus: 8,
            submitted_s: 0,
            waiting_s,
            attempts: 0,
            attained_gpu_s: 0,
            min_level: Level(min_level),
            min_servers: 1,
        }
    }

    fn view(jobs: Vec<PendingJob>) -> QueueView {
        QueueView {
            now_s: 10_000,
            cluster: ClusterSummary {
                total_gpus: 64,
                free_gpus: 0,
                server_level: Level(2),
                levels: vec![],
            },
            jobs,
            spread: vec![],
        }
    }

    /// The levels of the limits `d` gives the jobs of `v`.
    fn levels(d: &Delay, v: &QueueView) -> Vec<Level> {
        d.spread(v).limits.iter().map(|l| l.level).collect()
    }

    #[test]
    fn varied_deadlines_spread_the_waits_and_gangs_can_relax_sooner() {
        // With a spread, jobs waiting the same 60 s are not all widened:
        // some deadlines come before, some after.
        let d = Delay::from_config(b"deadline_spread = 1.0").unwrap();
        let v = view((0..200).map(|i| job(i, 2, 60)).collect());
        let widened = levels(&d, &v).iter().filter(|l| **l < Level(2)).count();
        assert!((60..140).contains(&widened), "{widened} of 200");
        assert_eq!(levels(&d, &v), levels(&d, &v), "the same draw each round");
        // A multi-server gang's deadlines shrink by gang_deadline_factor.
        let d = Delay::from_config(b"gang_deadline_factor = 0.5").unwrap();
        let mut gang = job(1, 1, 30);
        gang.min_servers = 2;
        let alone = job(2, 2, 30);
        assert_eq!(d.limit(&gang, Level(2)).level, Level(0));
        assert_eq!(d.limit(&alone, Level(2)).level, Level(2));
        for bad in [&b"deadline_spread = 1.5"[..], b"gang_deadline_factor = 0.0"] {
            assert!(Delay::from_config(bad).is_err());
        }
    }

    #[test]
    fn widens_one_level_per_threshold() {
        let d = Delay::default();
        let v = view(vec![
            job(1, 2, 0),
            job(2, 2, 59),
            job(3, 2, 60),
            job(4, 2, 599),
            job(5, 2, 600),
            job(6, 2, 1_000_000),
        ]);
        assert_eq!(
            levels(&d, &v),
            vec![Level(2), Level(2), Level(1), Level(1), Level(0), Level(0)]
        );
    }

    #[test]
    fn server_bound_grows_with_the_ladder() {
        let d = Delay::default();
        let gang = |waiting_s| {
            let mut j = job(1, 1, waiting_s);
            j.gpus = 16;
            j.min_servers = 2;
            j
        };
        let v = view(vec![gang(0), gang(60), gang(600), gang(100_000)]);
        let servers: Vec<u32> = d.spread(&v).limits.iter().map(|l| l.max_servers).collect();
        assert_eq!(servers, [2, 4, 8, 8]);
        let unbounded = Delay::from_config(b"server_factors = [1, 0]").unwrap();
        let servers: Vec<u32> = unbounded
            .spread(&v)
            .limits
            .iter()
            .map(|l| l.max_servers)
            .collect();
        assert_eq!(servers, [2, 0, 0, 0]);
        let shrinking = Delay::from_config(b"server_factors = [4, 2]").unwrap_err();
        assert!(shrinking.0.contains("must not shrink"), "{shrinking}");
        let zero_first = Delay::from_config(b"server_factors = [0, 2]").unwrap_err();
        assert!(zero_first.0.contains("must not shrink"), "{zero_first}");
    }

    #[test]
    fn multi_rack_gang_starts_at_its_min_level() {
        let d = Delay::default();
        let v = view(vec![job(1, 1, 0), job(2, 1, 60), job(3, 0, 0)]);
        assert_eq!(levels(&d, &v), vec![Level(1), Level(0), Level(0)]);
    }

    #[test]
    fn widest_caps_relaxation_but_never_narrows_below_min_level() {
        let d = Delay::from_config(b"widest = 1").unwrap();
        let v = view(vec![job(1, 2, 10_000), job(2, 0, 10_000)]);
        assert_eq!(levels(&d, &v), vec![Level(1), Level(0)]);
    }

    #[test]
    fn min_level_below_the_server_level_is_clamped() {
        let d = Delay::default();
        let v = view(vec![job(1, 5, 0)]);
        assert_eq!(levels(&d, &v), vec![Level(2)]);
    }

    #[test]
    fn empty_list_never_relaxes() {
        let d = Delay::from_config(b"widen_after_s = []").unwrap();
        let v = view(vec![job(1, 2, u64::MAX)]);
        assert_eq!(d.spread(&v).limits, vec![SpreadLimit::new(Level(2), 1)]);
    }

    #[test]
    fn config_errors_are_clear() {
        assert_eq!(Delay::from_config(b"").unwrap(), Delay::default());
        assert_eq!(Delay::from_config(b"  \n").unwrap(), Delay::default());
        let unknown = Delay::from_config(b"timeout = 3").unwrap_err();
        assert!(unknown.0.contains("unknown field `timeout`"), "{unknown}");
        let order = Delay::from_config(b"widen_after_s = [600, 60]").unwrap_err();
        assert!(order.0.contains("non-decreasing"), "{order}");
        let ty = Delay::from_config(b"widest = -1").unwrap_err();
        assert!(ty.0.starts_with("delay:"), "{ty}");
        assert!(Delay::from_config(&[0xff, 0xfe]).is_err());
    }

    proptest! {
        #[test]
        fn spread_never_shrinks_as_a_job_waits(
            mut waits in proptest::collection::vec(0u64..2_000, 0..5),
            widest in 0u8..4,
            min_level in 0u8..4,
            server_level in 0u8..4,
            mut ages in proptest::collection::vec(0u64..3_000, 1..20),
        ) {
            waits.sort_unstable();
            let d = Delay::new(DelayConfig { widen_after_s: waits, widest, ..DelayConfig::default() }).unwrap();
            ages.sort_unstable();
            let mut v = view(ages.iter().enumerate().map(|(i, a)| job(i as u64, min_level, *a)).collect());
            v.cluster.server_level = Level(server_level);
            let limits = d.spread(&v).limits;
            prop_assert_eq!(limits.len(), v.jobs.len());
            for pair in limits.windows(2) {
                // The server bound never shrinks either (0 = unbounded).
                prop_assert!(pair[1].max_servers == 0 || (pair[0].max_servers != 0 && pair[1].max_servers >= pair[0].max_servers));
            }
            let spread: Vec<Level> = limits.iter().map(|l| l.level).collect();
            let start = Level(min_level.min(server_level));
            for pair in spread.windows(2) {
                // Longer waits come later: the level number may only go down (wider).
                prop_assert!(pair[1] <= pair[0]);
            }
            for l in &spread {
                prop_assert!(*l <= start, "never narrower than min_level");
                prop_assert!(*l <= v.cluster.server_level);
            }
        }
    }
}
