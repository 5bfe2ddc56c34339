//! The model's knobs a calibration searches, each a replay argument.

use serde::{Deserialize, Serialize};

/// A knob of the model, and the `replay` arguments that set it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Knob {
    /// `--time-scale`: the factor on submit times (arrival rate: below 1
    /// adds load the public trace lacks).
    TimeScale,
    /// `--quotas MODEL:F`: F times the VCs' quotas of the quota model
    /// (`demand`: shares of F times the cluster).
    QuotaFactor,
    /// `--quotas MODEL`: `demand` (each VC's share of the workload's GPU
    /// time), `helios` (the Helios artifact's Philly VC sizes) or `none`.
    QuotaModel,
    /// `--set fairness.lend=B`: whether `vc-quota` lends idle GPUs beyond a quota.
    Lend,
    /// The `delay` ladder's first widening, seconds (`locality.widen_after_s[0]`).
    FirstWidenS,
    /// The second widening as a multiple of the first (`widen_after_s[1]`).
    SecondWidenRatio,
    /// `--set locality.deadline_spread=S`: how much each job's relaxation
    /// deadlines vary (model feature `varied-deadlines`).
    DeadlineSpread,
    /// `--set locality.gang_deadline_factor=F`: the deadlines of gangs that
    /// need more than one server, as a fraction of the others'.
    GangDeadlineFactor,
    /// `--placement`: `heartbeat` (YARN-like, model feature
    /// `heartbeat-placement`), `spread` or `best-fit`.
    Placement,
    /// `--round-interval`: seconds between scheduling passes.
    RoundIntervalS,
    /// `--view-window`: pending jobs per VC a fairness view shows.
    ViewWindow,
}

impl Knob {
    /// Every knob, in the order arguments are written.
    pub const ALL: [Knob; 11] = [
        Knob::TimeScale,
        Knob::QuotaFactor,
        Knob::QuotaModel,
        Knob::Lend,
        Knob::FirstWidenS,
        Knob::SecondWidenRatio,
        Knob::DeadlineSpread,
        Knob::GangDeadlineFactor,
        Knob::Placement,
        Knob::RoundIntervalS,
        Knob::ViewWindow,
    ];

    /// Its name in a calibration file.
    pub fn as_str(self) -> &'static str {
        match self {
            Knob::TimeScale => "time_scale",
            Knob::QuotaFactor => "quota_factor",
            Knob::QuotaModel => "quota_model",
            Knob::Lend => "lend",
            Knob::FirstWidenS => "first_widen_s",
            Knob::SecondWidenRatio => "second_widen_ratio",
            Knob::DeadlineSpread => "deadline_spread",
            Knob::GangDeadlineFactor => "gang_deadline_factor",
            Knob::Placement => "placement",
            Knob::RoundIntervalS => "round_interval_s",
            Knob::ViewWindow => "view_window",
        }
    }

    /// The knob named `name`.
    pub fn named(name: &str) -> Option<Knob> {
        Knob::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The model's value when a calibration does not set the knob (the
    /// `philly` preset's and `replay`'s defaults).
    pub fn default_value(self) -> Value {
        match self {
            Knob::TimeScale | Knob::QuotaFactor | Knob::GangDeadlineFactor => Value::Number(1.0),
            Knob::Lend => Value::Choice("true".into()),
            Knob::QuotaModel => Value::Choice("demand".into()),
            Knob::FirstWidenS => Value::Number(600.0),
            Knob::SecondWidenRatio => Value::Number(6.0),
            Knob::DeadlineSpread => Value::Number(0.0),
            Knob::Placement => Value::Choice("heartbeat".into()),
            Knob::RoundIntervalS => Value::Number(10.0),
            Knob::ViewWindow => Value::Number(32.0),
        }
    }

    /// Whether its values are whole numbers.
    fn integer(self) -> bool {
        matches!(
            self,
            Knob::FirstWidenS | Knob::RoundIntervalS | Knob::ViewWindow
        )
    }

    /// Whether a range of it is searched on a log scale.
    pub fn log_scale(self) -> bool {
        matches!(
            self,
            Knob::FirstWidenS
                | Knob::SecondWidenRatio
                | Knob::RoundIntervalS
                | Knob::ViewWindow
                | Knob::GangDeadlineFactor
        )
    }

    /// `x` as this knob takes it (whole numbers rounded).
    pub fn snap(self, x: f64) -> f64 {
        if self.integer() {
            x.round()
        } else {
            (x * 1000.0).round() / 1000.0
        }
    }
}

/// One knob's value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Value {
    /// A number.
    Number(f64),
    /// A choice among names (`true`/`false` for switches).
    Choice(String),
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Number(x) => write!(f, "{x}"),
            Value::Choice(c) => f.write_str(c),
        }
    }
}

/// Where a knob may go.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum Range {
    /// Numbers from `lo` to `hi`.
    Between(f64, f64),
    /// One of these.
    OneOf(Vec<String>),
}

/// Values for a set of knobs, in [`Knob::ALL`] order.
pub type Setting = std::collections::BTreeMap<Knob, Value>;

/// The `replay` arguments that set `setting` (knobs it lacks keep
/// `replay`'s defaults, except that the two ladder knobs complete each
/// other from [`Knob::default_value`]).
///
/// ```
/// use gangway_replay::calibrate::knobs::{args_of, Knob, Setting, Value};
/// let mut s = Setting::new();
/// s.insert(Knob::TimeScale, Value::Number(0.7));
/// s.insert(Knob::FirstWidenS, Value::Number(300.0));
/// assert_eq!(
///     args_of(&s),
///     ["--time-scale", "0.7", "--set", "locality.widen_after_s=[300, 1800]"]
/// );
/// ```
pub fn args_of(setting: &Setting) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let num = |k: Knob| match setting.get(&k).cloned().unwrap_or(k.default_value()) {
        Value::Number(x) => x,
        Value::Choice(_) => 0.0,
    };
    let mut ladder_done = false;
    let mut quotas_done = false;
    for (knob, value) in setting {
        let v = value.to_string();
        match knob {
            Knob::TimeScale => out.extend(["--time-scale".into(), v]),
            Knob::QuotaFactor | Knob::QuotaModel => {
                if !std::mem::replace(&mut quotas_done, true) {
                    out.extend(["--quotas".into(), quotas_arg(setting)]);
                }
            }
            Knob::Lend => out.extend(["--set".into(), format!("fairness.lend={v}")]),
            Knob::FirstWidenS | Knob::SecondWidenRatio => {
                if !std::mem::replace(&mut ladder_done, true) {
                    let first = num(Knob::FirstWidenS).round().max(0.0);
                    let second = (first * num(Knob::SecondWidenRatio).max(1.0)).round();
                    out.extend([
                        "--set".into(),
                        format!("locality.widen_after_s=[{first}, {second}]"),
                    ]);
                }
            }
            Knob::DeadlineSpread => {
                out.extend(["--set".into(), format!("locality.deadline_spread={v}")])
            }
            Knob::GangDeadlineFactor => {
                out.extend(["--set".into(), format!("locality.gang_deadline_factor={v}")])
            }
            Knob::Placement => out.extend(["--placement".into(), v]),
            Knob::RoundIntervalS => out.extend(["--round-interval".into(), v]),
            Knob::ViewWindow => out.extend(["--view-window".into(), v]),
        }
    }
    out
}

/// The `--quotas` argument of `setting`: its quota model and factor
/// (`demand:0.7`, `helios`, `helios:1.2`, `none`).
///
/// ```
/// use gangway_replay::calibrate::knobs::{quotas_arg, Knob, Setting, Value};
/// let mut s = Setting::new();
/// s.insert(Knob::QuotaModel, Value::Choice("helios".into()));
/// assert_eq!(quotas_arg(&s), "helios");
/// s.insert(Knob::QuotaFactor, Value::Number(0.9));
/// assert_eq!(quotas_arg(&s), "helios:0.9");
/// s.remove(&Knob::QuotaModel);
/// assert_eq!(quotas_arg(&s), "demand:0.9");
/// ```
pub fn quotas_arg(setting: &Setting) -> String {
    let model = setting
        .get(&Knob::QuotaModel)
        .cloned()
        .unwrap_or(Knob::QuotaModel.default_value())
        .to_string();
    match setting.get(&Knob::QuotaFactor) {
        Some(f) if model != "none" => format!("{model}:{f}"),
        _ => model,
    }
}

/// The flags [`args_of`] may write: a calibration's base arguments must
/// not set them too.
pub const KNOB_FLAGS: [&str; 6] = [
    "--time-scale",
    "--quotas",
    "--set",
    "--placement",
    "--round-interval",
    "--view-window",
];
