//! Bytes as a sequence of scheduler events on a small mixed cluster: whatever
//! the sequence, every event is accepted or refused with a typed error and
//! the invariants hold after each step.
#![no_main]

use gangway_core::{AttemptEnd, JobSpec, Scheduler, ServerId, TopologyBuilder};
use gangway_plugin_sdk::JobId;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut b = TopologyBuilder::new();
    let root = b.root();
    for r in 0..2 {
        let rack = b.add_domain(root, format!("r{r}")).expect("rack");
        for (s, g) in [8u32, 4, 2].iter().enumerate() {
            b.add_server(rack, format!("r{r}s{s}"), *g).expect("server");
        }
    }
    let mut sched = Scheduler::new(b.build().expect("topology"));
    let vc = sched.virtual_cluster("vc");
    sched.set_quota(vc, Some(16));
    let mut now = 0u64;
    for chunk in data.chunks(3) {
        let (op, a, c) = (chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0));
        let job = JobId(u64::from(a % 32));
        let _ = match op % 7 {
            0 => sched
                .submit(JobSpec { id: job, vc, user: 0, gpus: u32::from(c % 40), submitted_s: now })
                .map(|_| ()),
            1 => {
                now += u64::from(c);
                sched.round(now).map(|_| ())
            }
            2 => sched.end_attempt(job, now, AttemptEnd::Passed),
            3 => sched.end_attempt(job, now, AttemptEnd::Failed { retry: c % 2 == 0 }),
            4 => sched.server_down(ServerId(u32::from(c % 8)), now).map(|_| ()),
            5 => sched.server_up(ServerId(u32::from(c % 8))),
            _ => sched.kill(job, now),
        };
        sched.check_invariants().expect("invariants");
    }
});
