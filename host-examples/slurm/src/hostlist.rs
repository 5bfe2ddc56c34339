//! Slurm host lists: `n[1-4,7]`, `gpu[01-03],login1`.

/// Expands a Slurm host list into names, in order. Refuses unbalanced
/// brackets and bad ranges, naming the list.
///
/// ```
/// use gangway_slurm::hostlist::expand;
/// assert_eq!(expand("n[1-3,7],x").unwrap(), ["n1", "n2", "n3", "n7", "x"]);
/// assert_eq!(expand("g[08-10]").unwrap(), ["g08", "g09", "g10"]);
/// assert!(expand("n[1-").is_err());
/// ```
pub fn expand(list: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for item in split_top(list)? {
        if item.is_empty() {
            continue;
        }
        let Some(open) = item.find('[') else {
            out.push(item.to_string());
            continue;
        };
        let close = item
            .rfind(']')
            .ok_or_else(|| format!("host list {list:?}: unclosed '['"))?;
        let (prefix, ranges, suffix) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
        for range in ranges.split(',') {
            let (lo, hi) = range.split_once('-').unwrap_or((range, range));
            let width = lo.len();
            let bad = || format!("host list {list:?}: bad range {range:?}");
            let a: u64 = lo.parse().map_err(|_| bad())?;
            let b: u64 = hi.parse().map_err(|_| bad())?;
            if b < a || b - a > 100_000 {
                return Err(bad());
            }
            for n in a..=b {
                out.push(format!("{prefix}{n:0width$}{suffix}"));
            }
        }
    }
    Ok(out)
}

/// Splits at commas outside brackets.
fn split_top(list: &str) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(list[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(format!("host list {list:?}: unbalanced brackets"));
        }
    }
    if depth != 0 {
        return Err(format!("host list {list:?}: unclosed '['"));
    }
    parts.push(list[start..].trim());
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_and_refuses() {
        assert_eq!(expand("n1").unwrap(), ["n1"]);
        assert_eq!(expand("a[1-2]b,c[3]").unwrap(), ["a1b", "a2b", "c3"]);
        assert!(expand("n[3-1]").is_err());
        assert!(expand("n[x]").is_err());
        assert!(expand("n]1[").is_err());
        assert!(expand("n[[1]]").is_err());
    }
}
