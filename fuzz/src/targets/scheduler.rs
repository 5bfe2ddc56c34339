//! Sequences of host events, under the built-in policies, the `philly`
//! preset (quota reclaim, delay scheduling, fixed retries) or the
//! `tiresias` preset (LAS with preemption).

use gangway_catalog as catalog;
use gangway_core::{
    AttemptEnd, FailureClass, JobId, JobSpec, Scheduler, ServerId, TopologyBuilder,
};

/// Byte 0 picks the policies; then each 3 bytes are one event (kind, job,
/// argument). Every event is accepted or refused with a typed error, and
/// the invariants hold after each.
pub(crate) fn scheduler_events(data: &[u8]) {
    let Some((&which, events)) = data.split_first() else {
        return;
    };
    let mut b = TopologyBuilder::new();
    let root = b.root();
    for r in 0..2 {
        let rack = b.add_domain(root, format!("r{r}")).expect("a rack");
        for (s, g) in [8u32, 4, 2].iter().enumerate() {
            b.add_server(rack, format!("r{r}s{s}"), *g)
                .expect("a server");
        }
    }
    let topology = b.build().expect("the topology");
    let set = match which % 3 {
        0 => gangway_core::policy::PolicySet::fallbacks(),
        1 => catalog::preset("philly")
            .and_then(|p| p.build_native())
            .expect("the philly preset"),
        _ => catalog::preset("tiresias")
            .and_then(|p| p.build_native())
            .expect("the tiresias preset"),
    };
    let mut sched = Scheduler::with_policies(topology, set);
    let a = sched.virtual_cluster("a");
    let b = sched.virtual_cluster("b");
    sched.set_quota(a, Some(12));
    sched.set_view_window(usize::from(which / 3 % 8));
    let mut now = 0u64;
    for chunk in events.chunks(3) {
        let (op, j, c) = (
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        );
        let job = JobId(u64::from(j % 32));
        let class = FailureClass::ALL[usize::from(c) % FailureClass::ALL.len()];
        let _ = match op % 9 {
            0 => sched
                .submit(JobSpec {
                    id: job,
                    vc: if c % 2 == 0 { a } else { b },
                    user: u32::from(c % 3),
                    gpus: u32::from(c % 40),
                    submitted_s: now,
                })
                .map(|_| ()),
            1 => {
                now += u64::from(c) * 7;
                sched.round(now).map(|_| ())
            }
            2 => sched.end_attempt(job, now, AttemptEnd::Passed),
            3 => sched.end_attempt(
                job,
                now,
                AttemptEnd::Failed {
                    class,
                    last: c % 5 == 0,
                },
            ),
            4 => sched
                .server_down(ServerId(u32::from(c % 8)), now)
                .map(|_| ()),
            5 => sched.server_up(ServerId(u32::from(c % 8))),
            6 => sched.drain(ServerId(u32::from(c % 8))),
            7 => sched.forget(job).map(|_| ()),
            _ => sched.kill(job, now),
        };
        if let Err(e) = sched.check_invariants() {
            panic!("invariant broken after event {:?}: {e}", chunk);
        }
    }
}
