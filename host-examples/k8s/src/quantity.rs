//! Kubernetes resource quantities (`500m`, `2`, `1Gi`, `1e3`, `129M`) as
//! exact integers of thousandths (CPU in millicores, memory in
//! thousandths of a byte), the way the API server's `resource.Quantity`
//! reads them. Hand-written: the crates that parse quantities pin old
//! `k8s-openapi` releases or bring a regex or decimal library for what is
//! a few suffixes and an exponent; this follows the grammar of
//! `k8s.io/apimachinery/pkg/api/resource` and is tested on its examples.

/// A quantity in thousandths of its unit (millicores for CPU), or `None`
/// if the text is not a quantity. Values beyond `i128` are refused.
pub fn milli(text: &str) -> Option<i128> {
    let t = text.trim();
    let (sign, t) = match t.as_bytes().first()? {
        b'-' => (-1i128, &t[1..]),
        b'+' => (1, &t[1..]),
        _ => (1, t),
    };
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, suffix) = t.split_at(end);
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if (whole.is_empty() && frac.is_empty()) || frac.contains('.') {
        return None;
    }
    // The number as digits and a power of ten: `12.5` is 125 x 10^-1.
    let digits = format!("{whole}{frac}");
    let mut mantissa: i128 = 0;
    for d in digits.bytes() {
        mantissa = mantissa
            .checked_mul(10)?
            .checked_add(i128::from(d - b'0'))?;
    }
    let mut pow10 = -i32::try_from(frac.len()).ok()?;
    let mut pow2 = 0u32;
    match suffix {
        "" => {}
        "n" => pow10 -= 9,
        "u" => pow10 -= 6,
        "m" => pow10 -= 3,
        "k" => pow10 += 3,
        "M" => pow10 += 6,
        "G" => pow10 += 9,
        "T" => pow10 += 12,
        "P" => pow10 += 15,
        "E" => pow10 += 18,
        "Ki" => pow2 = 10,
        "Mi" => pow2 = 20,
        "Gi" => pow2 = 30,
        "Ti" => pow2 = 40,
        "Pi" => pow2 = 50,
        "Ei" => pow2 = 60,
        s if s.starts_with(['e', 'E']) => pow10 += s[1..].parse::<i32>().ok()?,
        _ => return None,
    }
    // Thousandths: three more powers of ten; a fraction of a thousandth
    // rounds up, as the API server's MilliValue does.
    pow10 += 3;
    let mut v = mantissa.checked_mul(1i128.checked_shl(pow2)?)?;
    if pow10 >= 0 {
        v = v.checked_mul(10i128.checked_pow(u32::try_from(pow10).ok()?)?)?;
    } else {
        let d = 10i128.checked_pow(u32::try_from(-pow10).ok()?)?;
        v = v.div_euclid(d) + i128::from(v.rem_euclid(d) != 0);
    }
    Some(sign * v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_as_the_api_server_reads_them() {
        for (text, want) in [
            ("0", 0),
            ("1", 1_000),
            ("500m", 500),
            ("2.5", 2_500),
            ("0.1", 100),
            ("1k", 1_000_000),
            ("1Ki", 1_024_000),
            ("1Mi", 1_048_576_000),
            ("1Gi", 1_073_741_824_000),
            ("129M", 129_000_000_000),
            ("1e3", 1_000_000),
            ("1E3", 1_000_000),
            ("12e-3", 12),
            ("1n", 1),
            ("100u", 1),
            ("+2", 2_000),
            ("-1", -1_000),
            (".5", 500),
        ] {
            assert_eq!(milli(text), Some(want), "{text}");
        }
        for bad in ["", "x", "1x", "1.2.3", "Mi", "1 Gi", "-", "."] {
            assert_eq!(milli(bad), None, "{bad}");
        }
    }
}
