//! Relative times ("3 min ago", "in 23 h") with the exact time for `title`.
//!
//! `light.js` ticks `relative` and `duration` on a phone's light pages in the
//! same words: change them there too.

/// "just now", "5 s ago", "in 3 min", … relative to `now_ms`.
pub fn relative(ms: i64, now_ms: i64) -> String {
    let delta = (ms - now_ms) / 1000;
    let secs = delta.unsigned_abs();
    let amount = match secs {
        0..=4 => return "just now".to_string(),
        5..=59 => format!("{secs} s"),
        60..=3599 => format!("{} min", secs / 60),
        3600..=86_399 => format!("{} h", secs / 3600),
        _ => format!("{} d", secs / 86_400),
    };
    if delta < 0 { format!("{amount} ago") } else { format!("in {amount}") }
}

/// A wait in words: "45 seconds", "2 minutes", "1 hour".
pub fn duration(secs: u64) -> String {
    let (n, unit) = match secs {
        0..=119 => (secs, "second"),
        120..=7199 => (secs.div_ceil(60), "minute"),
        _ => (secs.div_ceil(3600), "hour"),
    };
    crate::words::count(n, unit)
}

/// A wait in short: "45 s", "4 min", "3 h", "2 d" (for a number tile).
pub fn short_duration(secs: u64) -> String {
    match secs {
        0..=59 => format!("{secs} s"),
        60..=3599 => format!("{} min", secs / 60),
        3600..=86_399 => format!("{} h", secs / 3600),
        _ => format!("{} d", secs / 86_400),
    }
}

/// The exact UTC time, e.g. `2026-11-29 10:12:21 UTC`.
pub fn exact(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// RFC 3339 for `<time datetime>`.
pub fn iso(ms: i64) -> String {
    exact(ms).replace(' ', "T").replace("TUTC", "Z")
}

// Howard Hinnant's days-to-civil algorithm; avoids a date crate in the wasm bundle.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_relative_and_exact_times() {
        assert_eq!(relative(1_000, 1_000), "just now");
        assert_eq!(relative(0, 90_000), "1 min ago");
        assert_eq!(relative(7_200_000, 0), "in 2 h");
        assert_eq!(exact(1_764_411_141_000), "2025-11-29 10:12:21 UTC");
        assert_eq!(iso(0), "1970-01-01T00:00:00Z");
        assert_eq!(duration(30), "30 seconds");
        assert_eq!(duration(1), "1 second");
        assert_eq!(duration(240), "4 minutes");
        assert_eq!(duration(3600), "60 minutes");
        assert_eq!(short_duration(42), "42 s");
        assert_eq!(short_duration(3600 * 5), "5 h");
    }
}
