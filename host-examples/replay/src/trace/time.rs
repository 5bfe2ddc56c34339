//! Philly's timestamps: `%Y-%m-%d %H:%M:%S`, no zone.

/// Seconds since 1970-01-01 00:00:00 of a `YYYY-MM-DD HH:MM:SS` timestamp
/// (the zone is ignored, as in the trace), or `None` if malformed.
///
/// ```
/// use gangway_replay::trace::parse_timestamp;
/// assert_eq!(parse_timestamp("1970-01-02 00:00:01"), Some(86_401));
/// assert_eq!(parse_timestamp("2017-10-07 01:11:39"), Some(1_507_338_699));
/// assert_eq!(parse_timestamp("2017-13-07 01:11:39"), None);
/// assert_eq!(parse_timestamp("99999999999999-01-07 01:11:39"), None);
/// assert_eq!(parse_timestamp("2017-01-07 -1:11:39"), None);
/// ```
pub fn parse_timestamp(s: &str) -> Option<u64> {
    let s = s.trim();
    let (date, time) = s.split_once(' ')?;
    let mut d = date.splitn(3, '-');
    let y: i64 = d.next()?.parse().ok()?;
    let m: i64 = d.next()?.parse().ok()?;
    let day: i64 = d.next()?.parse().ok()?;
    let mut t = time.splitn(3, ':');
    let hh: i64 = t.next()?.parse().ok()?;
    let mm: i64 = t.next()?.parse().ok()?;
    let ss: f64 = t.next()?.parse().ok()?;
    if !(1..=9999).contains(&y)
        || !(1..=12).contains(&m)
        || !(1..=31).contains(&day)
        || !(0..=23).contains(&hh)
        || !(0..=59).contains(&mm)
        || !(0.0..61.0).contains(&ss)
    {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y2 = if m <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hh * 3600 + mm * 60 + ss as i64;
    u64::try_from(secs).ok()
}
