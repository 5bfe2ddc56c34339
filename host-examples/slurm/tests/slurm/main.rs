//! gangway-slurm against real Slurm daemons: `tests/slurm/cluster.sh`
//! starts munged, slurmctld and 4 slurmd nodes of 8 fake GPUs in 2 racks,
//! all on 127.0.0.1, for each test; the tests make real unprivileged Unix
//! users (`gangway-t-*`, with `useradd`) and run clients and `sbatch` as
//! them.
//!
//! * [`e2e`]: a workload of 1-16 GPU jobs from two virtual clusters with
//!   quotas, a node set DOWN and RESUMEd, the daemon killed with SIGKILL and
//!   started again, a job started in Slurm directly, a job that fails at
//!   once (retried by the retry slot), bad submissions, a hot swap and a
//!   rollback. Every attempt's own view of where it runs is checked
//!   against Gangway's choice; every socket is on loopback.
//! * [`faults`]: the faults an operator sees (a controller outage, the
//!   daemon away longer than Slurm remembers, a corrupt state, a full disk,
//!   a bad setup, a stopped daemon).
//! * [`security`]: identity from the kernel, jobs run as their submitter,
//!   authorization, private reports, forged end records, the module cache.
//! * [`native`]: users' own `sbatch` into the partition Gangway manages.
//! * [`gpu_types`]: nodes of two GPU types; typed `sbatch` and `submit`.
//! * [`daemons`]: one daemon per partition and node set (a lock named by
//!   the resolved partition and its nodes, fencing a daemon that lost it,
//!   given back on a clean stop),
//!   and jobs started in Slurm directly keep their GPUs under `philly`.
//! * [`records`]: end records no user can block, fill or take.
//! * [`soak`]: the seeded soak test (random operations and faults, an
//!   invariant checker after every step), in submit and native mode.
//! * [`clients`]: the socket's limits (held and slow connections, oversize
//!   requests, per-user queues).
//!
//! Without Slurm's packages (or not as root, which fake GPU devices,
//! slurmd and test users need) each test prints `SKIPPED: ...` and passes,
//! unless `GANGWAY_REQUIRE_SLURM` is set (CI sets it), when it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod clients;
mod daemons;
mod e2e;
mod faults;
mod gpu_types;
mod harness;
mod native;
mod records;
mod security;
mod soak;
