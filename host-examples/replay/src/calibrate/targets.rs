//! Observed targets a replay is compared with: a TOML file (the format is
//! the built-in `philly` targets, `philly-targets.toml`, with comments).

use std::path::Path;

use serde::{Deserialize, Serialize};

/// A targets file that cannot be used: what is wrong and where.
#[derive(Debug, thiserror::Error)]
#[error("{origin}: {what}")]
pub struct TargetsError {
    /// The file (or built-in name).
    pub origin: String,
    /// What is wrong with it.
    pub what: String,
}

/// What a replay should reproduce.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Targets {
    /// A short name for reports.
    pub name: String,
    /// Where the figures come from.
    #[serde(default)]
    pub source: String,
    /// What "met" means.
    #[serde(default)]
    pub tolerance: Tolerance,
    /// First-attempt wait quantiles by job size.
    #[serde(default)]
    pub first_wait: Vec<FirstWait>,
    /// Table 2: fragmentation's share of delay events by size bucket.
    #[serde(default)]
    pub table2: Vec<Table2Share>,
    /// Shares of first attempts on one server.
    #[serde(default)]
    pub one_server: Vec<OneServer>,
    /// GPU time by final status (percent), compared when the trace has
    /// killed or failed jobs.
    #[serde(default)]
    pub gpu_time_by_status: Option<GpuTimeByStatus>,
}

/// How close counts as met.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Tolerance {
    /// Wait quantiles p50-p90: within this factor.
    pub wait_factor: f64,
    /// Wait p99: within this factor.
    pub wait_factor_p99: f64,
    /// Shares: within this many percentage points.
    pub share_points: f64,
    /// No one-round-interval bin of waits (after the first) holds more than
    /// this percent of a first-wait group's jobs.
    pub single_wait_percent: f64,
}

impl Default for Tolerance {
    fn default() -> Self {
        Tolerance {
            wait_factor: 2.0,
            wait_factor_p99: 3.0,
            share_points: 10.0,
            single_wait_percent: 10.0,
        }
    }
}

/// First-attempt wait quantiles (minutes) of one group of jobs.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FirstWait {
    /// The group's name (`4`, `5-8`, ...).
    pub name: String,
    /// GPUs, inclusive range.
    pub gpus: [u32; 2],
    /// Only jobs whose recorded run time (all attempts) is at least this.
    #[serde(default)]
    pub min_run_s: u64,
    /// Median, minutes.
    pub p50: Option<f64>,
    /// 75th percentile, minutes.
    pub p75: Option<f64>,
    /// 90th percentile, minutes.
    pub p90: Option<f64>,
    /// 99th percentile, minutes.
    pub p99: Option<f64>,
}

impl FirstWait {
    /// The quantiles given, as (percentile, minutes).
    pub fn quantiles(&self) -> Vec<(u8, f64)> {
        [
            (50, self.p50),
            (75, self.p75),
            (90, self.p90),
            (99, self.p99),
        ]
        .into_iter()
        .filter_map(|(p, v)| v.map(|v| (p, v)))
        .collect()
    }
}

/// Table 2's share for one bucket.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Table2Share {
    /// `1`, `2-4`, `5-8` or `>8`.
    pub bucket: String,
    /// Percent of delay events that are fragmentation delay.
    pub fragmentation_share: f64,
}

/// Share of first attempts on one server.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OneServer {
    /// GPUs, inclusive range.
    pub gpus: [u32; 2],
    /// Percent.
    pub share: f64,
}

/// GPU time by final status, percent.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct GpuTimeByStatus {
    /// Passed jobs.
    pub passed: f64,
    /// Killed jobs.
    pub killed: f64,
    /// Failed jobs.
    pub failed: f64,
}

/// The built-in `philly` targets file.
pub const PHILLY_TARGETS: &str = include_str!("philly-targets.toml");

impl Targets {
    /// Parses a targets file's text; `origin` names it in errors.
    ///
    /// ```
    /// use gangway_replay::calibrate::targets::{Targets, PHILLY_TARGETS};
    /// let t = Targets::parse(PHILLY_TARGETS, "philly").unwrap();
    /// assert_eq!(t.first_wait.len(), 3);
    /// let e = Targets::parse("name = 'x'\n[[table2]]\nbucket = '3-4'\nfragmentation_share = 5.0", "t.toml");
    /// assert!(e.unwrap_err().to_string().contains("t.toml: table2 bucket \"3-4\""));
    /// ```
    pub fn parse(text: &str, origin: &str) -> Result<Targets, TargetsError> {
        let t: Targets = toml::from_str(text).map_err(|e| TargetsError {
            origin: origin.to_string(),
            what: format!("targets: {e}"),
        })?;
        t.check(origin)?;
        Ok(t)
    }

    fn check(&self, origin: &str) -> Result<(), TargetsError> {
        let bad = |what: String| {
            Err(TargetsError {
                origin: origin.to_string(),
                what,
            })
        };
        for b in &self.table2 {
            if !crate::report::BUCKETS.contains(&b.bucket.as_str()) {
                return bad(format!(
                    "table2 bucket {:?} is not one of {:?}",
                    b.bucket,
                    crate::report::BUCKETS
                ));
            }
        }
        for w in &self.first_wait {
            if w.gpus[0] > w.gpus[1] {
                return bad(format!(
                    "first_wait {:?}: gpus {:?} is empty",
                    w.name, w.gpus
                ));
            }
            if let Some((p, v)) = w
                .quantiles()
                .into_iter()
                .find(|(_, v)| v.is_nan() || *v <= 0.0)
            {
                return bad(format!(
                    "first_wait {:?}: p{p} = {v} must be a positive number of minutes",
                    w.name
                ));
            }
        }
        let t = &self.tolerance;
        for (name, v, min) in [
            ("wait_factor", t.wait_factor, 1.0),
            ("wait_factor_p99", t.wait_factor_p99, 1.0),
            ("share_points", t.share_points, 0.0),
            ("single_wait_percent", t.single_wait_percent, 0.0),
        ] {
            if v.is_nan() || v <= min || v.is_infinite() {
                return bad(format!(
                    "tolerance {name} = {v} must be a number above {min}"
                ));
            }
        }
        Ok(())
    }

    /// A built-in targets set by name (`philly`).
    pub fn builtin(name: &str) -> Option<Targets> {
        match name {
            "philly" => Targets::parse(PHILLY_TARGETS, "philly").ok(),
            _ => None,
        }
    }

    /// A built-in set by name, else the file at `spec`.
    pub fn named_or_file(spec: &str) -> Result<Targets, TargetsError> {
        if let Some(t) = Targets::builtin(spec) {
            return Ok(t);
        }
        let path = Path::new(spec);
        let text = std::fs::read_to_string(path).map_err(|e| TargetsError {
            origin: spec.to_string(),
            what: format!("cannot read targets ({e}); the built-in targets are `philly`"),
        })?;
        Targets::parse(&text, spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_targets_parse_and_say_where_they_come_from() {
        let t = Targets::builtin("philly").expect("philly targets parse");
        assert_eq!(t.table2.len(), 3);
        assert_eq!(t.one_server.len(), 2);
        assert!(t.source.contains("PHILLY.md"));
        assert_eq!(t.first_wait[2].quantiles().len(), 4);
    }

    #[test]
    fn bad_targets_name_what_is_wrong() {
        let e = Targets::parse("name = 'x'\nwait = 3", "t.toml").unwrap_err();
        assert!(e.to_string().contains("t.toml"), "{e}");
        let e = Targets::parse(
            "name = 'x'\n[[first_wait]]\nname = 'a'\ngpus = [4, 4]\np50 = 0.0",
            "t.toml",
        )
        .unwrap_err();
        assert!(e.to_string().contains("p50 = 0"), "{e}");
        let e = Targets::parse("name = 'x'\n[tolerance]\nwait_factor = 0.5", "t.toml").unwrap_err();
        assert!(e.to_string().contains("wait_factor"), "{e}");
        assert!(Targets::named_or_file("/nonexistent/targets.toml").is_err());
    }
}
