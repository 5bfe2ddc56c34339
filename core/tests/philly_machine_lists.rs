//! Both Philly machine lists in `$GANGWAY_DATA/philly/` load (the official one
//! with its leading spaces, the revised one with its index column) and give
//! the study's machine counts.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use gangway_core::{RackGrouping, Scheduler, Topology};

fn data() -> Option<PathBuf> {
    match std::env::var_os("GANGWAY_DATA") {
        Some(d) => Some(PathBuf::from(d).join("philly")),
        None => {
            eprintln!("SKIPPED: GANGWAY_DATA is not set (CI sets it to ../shared/data)");
            None
        }
    }
}

#[test]
fn official_machine_list_loads() {
    let Some(dir) = data() else { return };
    let topo = Topology::from_machine_list(
        dir.join("cluster_machine_list.csv"),
        RackGrouping::default(),
    )
    .unwrap();
    assert_eq!(topo.servers().len(), 552);
    assert_eq!(topo.total_gpus(), 2_490);
    let two = topo.servers().iter().filter(|s| s.gpus == 2).count();
    assert_eq!(two, 321);
    let sched = Scheduler::new(topo);
    sched.check_invariants().unwrap();
}

#[test]
fn revised_machine_list_loads() {
    let Some(dir) = data() else { return };
    let topo = Topology::from_machine_list(
        dir.join("revised_machine_list.csv"),
        RackGrouping::Consecutive {
            servers_per_rack: 24,
        },
    )
    .unwrap();
    assert_eq!(topo.servers().len(), 552);
    assert_eq!(topo.total_gpus(), 3_205);
    assert_eq!(topo.servers().iter().filter(|s| s.gpus == 8).count(), 264);
    assert_eq!(topo.domains_at(gangway_plugin_sdk::Level(1)).len(), 23);
}
