//! Users' files: machine lists, topology files, the trace formats and
//! preset files.

use gangway_catalog as catalog;
use gangway_core::{RackGrouping, Topology, TopologyError};
use gangway_replay::trace::{self, Format, Trace, TraceError};

/// The checks every topology that loads must pass.
fn sane(topo: &Topology) {
    let sum: u32 = topo.servers().iter().map(|s| s.gpus).sum();
    assert_eq!(
        topo.total_gpus(),
        sum,
        "total GPUs disagree with the servers"
    );
    assert!(
        !topo.servers().is_empty(),
        "a topology without servers loaded"
    );
}

/// Any bytes as a Philly machine list, grouped both ways.
pub(crate) fn machine_list(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for grouping in [
        RackGrouping::default(),
        RackGrouping::Consecutive {
            servers_per_rack: 3,
        },
    ] {
        match Topology::from_machine_list_str("fuzz.csv", text, grouping) {
            Ok(topo) => sane(&topo),
            Err(e) => assert!(e.to_string().contains("fuzz.csv"), "{e}"),
        }
    }
}

/// Any bytes as a topology file.
pub(crate) fn topology_toml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Topology::from_toml_str("fuzz.toml", text) {
        Ok(topo) => sane(&topo),
        Err(TopologyError::Parse { line, .. }) => assert!(line >= 1, "line 0"),
        Err(_) => {}
    }
}

/// Any bytes as a trace of `format`: an error naming the file, or jobs
/// that can be replayed.
fn read(format: Format, data: &[u8]) {
    match trace::read("fuzz.trace", format, data) {
        Ok(Trace { jobs, .. }) => {
            assert!(!jobs.is_empty(), "an empty trace was accepted");
            for job in &jobs {
                assert!(job.gpus > 0, "job {} asks for 0 GPUs", job.name);
                assert!(!job.attempts.is_empty(), "job {} has no attempts", job.name);
            }
            assert!(
                jobs.windows(2).all(|w| w[0].submit_s <= w[1].submit_s),
                "jobs out of submit order"
            );
        }
        Err(TraceError::Io { .. }) => panic!("reading from memory failed"),
        Err(e) => assert!(e.to_string().contains("fuzz.trace"), "{e}"),
    }
}

/// Philly's own `cluster_job_log`.
pub(crate) fn philly_log(data: &[u8]) {
    read(Format::Philly, data);
}

/// Gangway's CSV job list.
pub(crate) fn csv_jobs(data: &[u8]) {
    read(Format::Csv, data);
}

/// The RFold-derived trace.
pub(crate) fn rfold(data: &[u8]) {
    read(Format::Rfold, data);
}

/// The AdaptDL-derived trace.
pub(crate) fn adaptdl(data: &[u8]) {
    read(Format::Adaptdl, data);
}

/// Any bytes as a presets file; presets that parse must build.
pub(crate) fn presets(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(choices) = catalog::parse_presets(text) {
        for choice in choices {
            // A preset that parses names policies and configurations the
            // catalog checked; building it natively is then an error at
            // worst, never a panic.
            let _ = choice.build_native();
        }
    }
}
