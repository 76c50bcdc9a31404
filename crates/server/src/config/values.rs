//! Values of the configuration that have their own syntax: memory sizes
//! (`100mb`) and latency percentiles, parsed as Redis parses them, for the
//! file, the flags and CONFIG SET alike.

/// A redis.conf memory value (`100mb`, `1gb`, `4096`): Redis's `memtoull`,
/// for `maxmemory`, the client limits and the pubsub output limit.
pub fn parse_memory(s: &str) -> Option<u64> {
    let lower = s.to_ascii_lowercase();
    let digits = lower.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit: u64 = match &lower[digits.len()..] {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(unit)
}

/// `latency-tracking-info-percentiles`: numbers between 0 and 100
/// separated by spaces ("" = none), with Redis's errors.
pub fn parse_percentiles(v: &str) -> Result<Vec<f64>, String> {
    v.split(' ')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let x: f64 = p
                .parse()
                .ok()
                .filter(|x: &f64| x.is_finite())
                .ok_or("Invalid latency-tracking-info-percentiles parameters")?;
            if !(0.0..=100.0).contains(&x) {
                return Err(
                    "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]"
                        .to_string(),
                );
            }
            Ok(x)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_values_parse_as_redis_memtoull() {
        assert_eq!(parse_memory("100"), Some(100));
        assert_eq!(parse_memory("1kb"), Some(1024));
        assert_eq!(parse_memory("1K"), Some(1000));
        assert_eq!(parse_memory("2GB"), Some(2 << 30));
        for bad in ["", "-1", "x", "1xb", "mb"] {
            assert_eq!(parse_memory(bad), None, "{bad}");
        }
    }

    #[test]
    fn percentiles_parse_with_redis_errors() {
        assert_eq!(parse_percentiles("50 99 99.9"), Ok(vec![50.0, 99.0, 99.9]));
        assert_eq!(parse_percentiles(""), Ok(vec![]));
        assert!(parse_percentiles("101").is_err());
        assert!(parse_percentiles("abc").is_err());
    }
}
