//! # gangway-replay
//!
//! `replay`, Gangway's main job: a discrete-event simulator that drives the
//! real scheduler and the real policy modules over a job trace and reports
//! the Philly study's metrics.
//!
//! - [`trace`] reads traces (Philly's `cluster_job_log`, Gangway CSV, RFold,
//!   AdaptDL, Gavel's) and [`workload`] generates the built-in
//!   Philly-calibrated one; [`throughputs`] is Gavel's table of speeds per
//!   GPU type;
//! - [`sim`] replays a trace on a topology with one policy set;
//! - [`report`] is `report.json` and the console table, [`plots`] the SVGs,
//!   [`reproduce`] what reproduces a report;
//! - [`cli`] is the `replay` command line, [`json`] the same run driven by
//!   JSON arguments (what the Python package calls);
//! - [`calibrate`] fits the model's knobs to observed targets (`replay calibrate`).

pub mod calibrate;
pub mod cli;
pub mod cluster_shape;
pub mod cpu_time;
pub mod json;
pub mod plots;
mod queued_time;
pub mod report;
pub mod reproduce;
pub mod sim;
pub mod throughputs;
pub mod trace;
pub mod workload;
