//! Gavel's measured throughputs (`simulation_throughputs.json`): steps per
//! second of each job class (a model and batch size) at each scale factor
//! (its GPUs) on each GPU type, with its GPUs on one server
//! (*consolidated*) or spread (`<type>_unconsolidated`). A job of the Gavel
//! traces runs `steps / throughput` seconds on a type.
//!
//! The table lists scale factors 1, 2, 4 and 8, and not every class at
//! every factor; the traces have gangs of up to 64 GPUs. A factor the table
//! lacks takes the throughput of the largest listed factor below it,
//! scaled linearly by the ratio of factors (ideal data-parallel scaling:
//! optimistic for large gangs, the same for every type). A throughput of 0
//! (the job does not fit the type's memory) means the job cannot run on
//! that type.

use std::collections::BTreeMap;
use std::path::Path;

/// Steps per second by GPU type, job class and scale factor.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Throughputs {
    /// Per GPU type (`k80`, `v100_unconsolidated`, ...): per (class, scale
    /// factor), steps per second running alone.
    table: BTreeMap<String, BTreeMap<(String, u32), f64>>,
}

/// Why a throughput table could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ThroughputError {
    /// The file could not be read.
    #[error("{file}: cannot read: {source}")]
    Io {
        /// The file.
        file: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not the table's JSON.
    #[error("{file}: {message}")]
    Format {
        /// The file.
        file: String,
        /// What is wrong.
        message: String,
    },
}

/// The suffix of a type's spread-placement throughputs.
const UNCONSOLIDATED: &str = "_unconsolidated";

impl Throughputs {
    /// Reads Gavel's `simulation_throughputs.json`.
    pub fn load(path: &Path) -> Result<Throughputs, ThroughputError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ThroughputError::Io {
            file: file.clone(),
            source,
        })?;
        Throughputs::parse(&file, &text)
    }

    /// Parses the table's JSON; `file` names it in errors.
    ///
    /// ```
    /// use gangway_replay::throughputs::Throughputs;
    /// let json = r#"{"k80": {"('LM (batch size 5)', 1)": {"null": 0.5}, "('LM (batch size 5)', 4)": {"null": 1.5}},
    ///                "v100": {"('LM (batch size 5)', 1)": {"null": 4.0}}}"#;
    /// let t = Throughputs::parse("t.json", json).unwrap();
    /// assert_eq!(t.steps_per_s("k80", "LM (batch size 5)", 4, true), Some(1.5));
    /// // No 8-GPU entry: the 4-GPU one, doubled.
    /// assert_eq!(t.steps_per_s("k80", "LM (batch size 5)", 8, true), Some(3.0));
    /// assert_eq!(t.steps_per_s("v100", "LM (batch size 5)", 2, false), Some(8.0));
    /// assert_eq!(t.steps_per_s("p100", "LM (batch size 5)", 1, true), None);
    /// assert_eq!(t.gpu_types(), ["k80", "v100"]);
    /// ```
    pub fn parse(file: &str, text: &str) -> Result<Throughputs, ThroughputError> {
        let err = |message: String| ThroughputError::Format {
            file: file.to_string(),
            message,
        };
        let json: serde_json::Value =
            serde_json::from_str(text).map_err(|e| err(format!("not JSON: {e}")))?;
        let types = json
            .as_object()
            .ok_or_else(|| err("expected an object of GPU types".into()))?;
        let mut table = BTreeMap::new();
        for (gpu_type, entries) in types {
            let entries = entries
                .as_object()
                .ok_or_else(|| err(format!("{gpu_type}: expected an object of job classes")))?;
            let mut by_class = BTreeMap::new();
            for (key, value) in entries {
                let (class, scale) = parse_key(key).ok_or_else(|| {
                    err(format!("{gpu_type}: {key:?} is not ('<class>', <GPUs>)"))
                })?;
                // A null alone-throughput (some unconsolidated entries) is
                // no measurement: the consolidated one stands in for it.
                let Some(alone) = value.get("null").and_then(serde_json::Value::as_f64) else {
                    continue;
                };
                if !(alone >= 0.0 && alone.is_finite()) {
                    return Err(err(format!(
                        "{gpu_type} {key}: throughput {alone} is not a rate"
                    )));
                }
                by_class.insert((class, scale), alone);
            }
            table.insert(gpu_type.clone(), by_class);
        }
        Ok(Throughputs { table })
    }

    /// The GPU types measured (without the `_unconsolidated` variants).
    pub fn gpu_types(&self) -> Vec<&str> {
        self.table
            .keys()
            .filter(|t| !t.ends_with(UNCONSOLIDATED))
            .map(String::as_str)
            .collect()
    }

    /// Steps per second of a job of `class` on `gpus` GPUs of `gpu_type`,
    /// on one server (`consolidated`) or spread (the unconsolidated
    /// measurement where the table has one); `None` where the table has no
    /// entry for the class on the type at `gpus` or fewer GPUs.
    pub fn steps_per_s(
        &self,
        gpu_type: &str,
        class: &str,
        gpus: u32,
        consolidated: bool,
    ) -> Option<f64> {
        let spread = (!consolidated)
            .then(|| self.lookup(&format!("{gpu_type}{UNCONSOLIDATED}"), class, gpus))
            .flatten();
        spread.or_else(|| self.lookup(gpu_type, class, gpus))
    }

    /// The entry of `class` on `gpu_type` at the largest factor up to
    /// `gpus`, scaled to `gpus`.
    fn lookup(&self, gpu_type: &str, class: &str, gpus: u32) -> Option<f64> {
        let by_class = self.table.get(gpu_type)?;
        let ((_, scale), rate) = by_class
            .range((class.to_string(), 0)..=(class.to_string(), gpus.max(1)))
            .next_back()?;
        Some(rate * f64::from(gpus.max(1)) / f64::from((*scale).max(1)))
    }
}

/// `('ResNet-18 (batch size 16)', 1)` as its class and scale factor.
fn parse_key(key: &str) -> Option<(String, u32)> {
    let inner = key.trim().strip_prefix("('")?.strip_suffix(')')?;
    let (class, scale) = inner.rsplit_once("',")?;
    Some((class.to_string(), scale.trim().parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_tables_name_what_is_wrong() {
        let e = |t: &str| Throughputs::parse("t.json", t).unwrap_err().to_string();
        assert!(e("[1]").contains("expected an object of GPU types"));
        assert!(e(r#"{"k80": {"ResNet": {"null": 1}}}"#).contains("is not ('<class>', <GPUs>)"));
        assert!(e(r#"{"k80": {"('A', 1)": {"null": -1}}}"#).contains("is not a rate"));
        assert!(e("{").starts_with("t.json: not JSON"));
        let t = Throughputs::parse(
            "t.json",
            r#"{"k80_unconsolidated": {"('A', 1)": {"null": null}}}"#,
        )
        .unwrap();
        assert!(t.gpu_types().is_empty());
        assert_eq!(t.steps_per_s("k80", "A", 1, false), None);
    }
}
