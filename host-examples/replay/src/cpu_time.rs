//! The process's CPU time (user plus system, all threads), for the replay's
//! timing line beside wall time: a replay that waited for a shared machine
//! shows more wall than CPU time.
//!
//! Read through `rustix` (`clock_gettime(CLOCK_PROCESS_CPUTIME_ID)`), so no
//! unsafe code here; on platforms without it [`process_cpu`] is `None` and
//! the timing line leaves CPU time out.

use std::time::Duration;

/// CPU time the process has used so far (user + system, every thread), or
/// `None` where the platform does not say.
///
/// ```
/// use gangway_replay::cpu_time::process_cpu;
/// let before = process_cpu();
/// let mut x = 0u64;
/// for i in 0..1_000_000u64 { x = x.wrapping_add(i * i); }
/// std::hint::black_box(x);
/// if let (Some(a), Some(b)) = (before, process_cpu()) {
///     assert!(b >= a);
/// }
/// ```
pub fn process_cpu() -> Option<Duration> {
    #[cfg(unix)]
    {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
        let secs = u64::try_from(t.tv_sec).ok()?;
        let nanos = u32::try_from(t.tv_nsec).ok()?;
        Some(Duration::new(secs, nanos))
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// CPU time used between two readings of [`process_cpu`], when both exist.
pub fn since(start: Option<Duration>) -> Option<Duration> {
    Some(process_cpu()?.saturating_sub(start?))
}

/// `", Y s CPU"` for the timing line, or nothing where CPU time is unknown.
///
/// ```
/// use std::time::Duration;
/// use gangway_replay::cpu_time::describe;
/// assert_eq!(describe(Some(Duration::from_millis(1500))), ", 1.50 s CPU");
/// assert_eq!(describe(None), "");
/// ```
pub fn describe(cpu: Option<Duration>) -> String {
    cpu.map_or(String::new(), |d| format!(", {:.2} s CPU", d.as_secs_f64()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn cpu_time_advances_with_work() {
        let start = process_cpu();
        assert!(start.is_some(), "unix platforms report CPU time");
        // Busy work until the clock has moved 20 ms (or give up after a
        // minute of wall time, which only a broken clock would take).
        let wall = std::time::Instant::now();
        let mut x = 0u64;
        let mut used = Duration::ZERO;
        while used < Duration::from_millis(20) && wall.elapsed() < Duration::from_secs(60) {
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            used = since(start).unwrap_or_default();
        }
        assert!(
            used >= Duration::from_millis(20),
            "CPU time stuck at {used:?}"
        );
        assert_eq!(since(None), None);
    }
}
