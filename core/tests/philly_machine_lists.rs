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
    // Its memory column gives two GPU types, one per machine generation.
    let types: Vec<_> = topo
        .gpu_types()
        .iter()
        .map(|t| (t.name.as_str(), t.memory_gb))
        .collect();
    assert_eq!(types, [("12GB", 12), ("24GB", 24)]);
    let small = topo.gpu_type_by_name("12GB").unwrap();
    let large = topo.gpu_type_by_name("24GB").unwrap();
    assert_eq!(topo.type_gpus(small), 642);
    assert_eq!(topo.type_gpus(large), 1_848);
    assert!(
        topo.servers()
            .iter()
            .all(|s| (s.gpus == 2) == (s.gpu_type == small))
    );
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
    // No memory column: one GPU type.
    assert!(!topo.is_heterogeneous());
}
