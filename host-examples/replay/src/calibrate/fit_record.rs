//! A run's fit to observed targets as `report.json` records it
//! (`runs[].fit`); the `fit` module beside it computes it.

use serde::{Deserialize, Serialize};

/// One run's fit to a targets set (`report.json`'s `runs[].fit`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fit {
    /// The targets' name.
    pub targets: String,
    /// The mean of the items' squared errors: 0 is a perfect fit, and a
    /// fit with every item met scores at most 1. Lower is better.
    pub score: f64,
    /// Items met.
    pub met: usize,
    /// Items compared.
    pub items: usize,
    /// Every item.
    pub detail: Vec<FitItem>,
}

/// One compared figure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FitItem {
    /// What it is: `first wait 5-8 p90 (min)`, `table2 >8 (%)`, ...
    pub name: String,
    /// The observed value.
    pub observed: f64,
    /// The replay's value (`null` when the replay has no such job).
    pub model: Option<f64>,
    /// The normalized error: |ln(model / observed)| / ln(factor) for waits,
    /// |model - observed| / points for shares, share / limit for the
    /// largest single-wait bin; at most 1 when met. A missing value counts 3.
    pub error: f64,
    /// Within its tolerance.
    pub met: bool,
}
