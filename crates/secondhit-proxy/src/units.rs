//! Human-readable numbers: counts with thousands separators, byte sizes and durations, both
//! ways.

use std::time::Duration;

/// `1234567` -> `"1,234,567"`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Bytes in binary units: `119813248` -> `"114.3 MiB"`, `512` -> `"512 B"`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// Parses a byte size: a plain number of bytes, or a number with a unit: `B`, `KB`/`MB`/`GB`/`TB`
/// (powers of 1000) or `KiB`/`MiB`/`GiB`/`TiB` (powers of 1024), also `K`/`M`/`G`/`T` for the
/// binary ones. Decimals are allowed (`1.5GiB`).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size: expected e.g. 1048576, 64MiB or 2GB"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tib" => 1024.0f64.powi(4),
        other => {
            return Err(format!(
                "{s:?}: unknown size unit {other:?}: use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB"
            ))
        }
    };
    let bytes = (value * mult).round();
    if !(bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64) {
        return Err(format!("{s:?} is out of range"));
    }
    Ok(bytes as u64)
}

/// Parses a duration: a number with a unit `ms`, `s`, `m`, `h` or `d` (`30m`, `1.5h`), or `inf`
/// (`None`: forever).
pub fn parse_duration(s: &str) -> Result<Option<Duration>, String> {
    let t = s.trim().to_ascii_lowercase();
    if matches!(t.as_str(), "inf" | "infinite" | "never") {
        return Ok(None);
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let value: f64 = num.parse().map_err(|_| {
        format!("{s:?} is not a duration: expected e.g. 500ms, 90s, 30m, 1h, 2d or inf")
    })?;
    let secs = match unit.trim() {
        "ms" => value / 1000.0,
        "s" => value,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        "d" => value * 86_400.0,
        "" => return Err(format!("{s:?}: give a unit: ms, s, m, h or d (or inf)")),
        other => {
            return Err(format!(
                "{s:?}: unknown unit {other:?}: use ms, s, m, h or d"
            ))
        }
    };
    Duration::try_from_secs_f64(secs)
        .map(Some)
        .map_err(|_| format!("{s:?} is out of range"))
}

/// A duration as the shortest exact `parse_duration` form: `1h`, `30m`, `90s`, `inf`.
pub fn duration(d: Option<Duration>) -> String {
    let Some(d) = d else {
        return "inf".to_string();
    };
    let ms = d.as_millis();
    if ms % 1000 != 0 {
        return format!("{ms}ms");
    }
    let s = d.as_secs();
    match s {
        s if s > 0 && s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s > 0 && s % 3600 == 0 => format!("{}h", s / 3600),
        s if s > 0 && s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1,000");
        assert_eq!(count(958_505_838), "958,505,838");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(119_813_248), "114.3 MiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
    }

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_bytes("1048576"), Ok(1 << 20));
        assert_eq!(parse_bytes("64MiB"), Ok(64 << 20));
        assert_eq!(parse_bytes("64 mib"), Ok(64 << 20));
        assert_eq!(parse_bytes("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_bytes("1.5K"), Ok(1536));
        assert!(parse_bytes("12 parsecs")
            .unwrap_err()
            .contains("\"parsecs\""));
        assert!(parse_bytes("MiB").unwrap_err().contains("64MiB"));
    }

    #[test]
    fn parses_and_prints_durations() {
        assert_eq!(parse_duration("30m"), Ok(Some(Duration::from_secs(1800))));
        assert_eq!(parse_duration("1.5h"), Ok(Some(Duration::from_secs(5400))));
        assert_eq!(
            parse_duration("500ms"),
            Ok(Some(Duration::from_millis(500)))
        );
        assert_eq!(parse_duration("inf"), Ok(None));
        assert!(parse_duration("30").unwrap_err().contains("give a unit"));
        assert!(parse_duration("3 weeks").unwrap_err().contains("\"weeks\""));
        for d in ["1h", "30m", "90s", "2d", "500ms", "inf", "0s"] {
            assert_eq!(duration(parse_duration(d).unwrap()), d);
        }
    }
}
