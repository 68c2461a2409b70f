//! Event time: nanoseconds since the Unix epoch, strict RFC 3339 parsing and formatting,
//! and the duration syntax of the contract (SPEC §2, §3).

use std::fmt;

/// Event time in nanoseconds since the Unix epoch, `0..=i64::MAX` for valid events.
/// Serialized as its nanoseconds (for checkpoints); shown as RFC 3339 by `Display`.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(transparent)]
pub struct EventTime(pub i64);

/// A non-negative span of time in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Duration(pub i64);

impl EventTime {
    /// The earliest representable time, below every valid event time.
    pub const MIN: EventTime = EventTime(i64::MIN);
    /// The latest representable time.
    pub const MAX: EventTime = EventTime(i64::MAX);

    /// Adds a duration, saturating at the ends of the range.
    #[must_use]
    pub fn saturating_add(self, d: Duration) -> EventTime {
        EventTime(self.0.saturating_add(d.0))
    }

    /// Subtracts a duration, saturating at the ends of the range.
    #[must_use]
    pub fn saturating_sub(self, d: Duration) -> EventTime {
        EventTime(self.0.saturating_sub(d.0))
    }

    /// Parses an RFC 3339 date-time as SPEC §2 restricts it.
    pub fn parse_rfc3339(s: &str) -> Result<EventTime, TimeError> {
        parse_rfc3339(s.as_bytes())
    }

    /// Accepts an integer count of nanoseconds, which must be in `0..=2^63-1`.
    pub fn from_nanos(n: i128) -> Result<EventTime, TimeError> {
        if (0..=i128::from(i64::MAX)).contains(&n) {
            Ok(EventTime(n as i64))
        } else {
            Err(TimeError::OutOfRange)
        }
    }
}

impl fmt::Display for EventTime {
    /// RFC 3339 in UTC with nine fraction digits, e.g. `2025-11-29T12:00:02.000000000Z`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == i64::MIN {
            return f.write_str("-inf");
        }
        let secs = self.0.div_euclid(1_000_000_000);
        let nanos = self.0.rem_euclid(1_000_000_000);
        let days = secs.div_euclid(86_400);
        let sod = secs.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        write!(
            f,
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{nanos:09}Z",
            sod / 3600,
            (sod / 60) % 60,
            sod % 60
        )
    }
}

/// Why a timestamp is not valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    /// Not of the form `YYYY-MM-DDThh:mm:ss[.f]Z|±hh:mm`.
    #[error("not an RFC 3339 date-time (expected YYYY-MM-DDThh:mm:ss[.fraction] and Z or ±hh:mm)")]
    Syntax,
    /// A field out of its range (month 13, second 60, offset hour 24…).
    #[error("date or time field out of range")]
    Field,
    /// Before 1970 or after 2262-04-11T23:47:16.854775807Z.
    #[error("outside 1970-01-01T00:00:00Z..=2262-04-11T23:47:16.854775807Z")]
    OutOfRange,
}

fn digits(b: &[u8], at: usize, n: usize) -> Result<i64, TimeError> {
    let part = b.get(at..at + n).ok_or(TimeError::Syntax)?;
    let mut v = 0i64;
    for &c in part {
        if !c.is_ascii_digit() {
            return Err(TimeError::Syntax);
        }
        v = v * 10 + i64::from(c - b'0');
    }
    Ok(v)
}

fn expect(b: &[u8], at: usize, c: u8) -> Result<(), TimeError> {
    if b.get(at) == Some(&c) {
        Ok(())
    } else {
        Err(TimeError::Syntax)
    }
}

fn parse_rfc3339(b: &[u8]) -> Result<EventTime, TimeError> {
    let year = digits(b, 0, 4)?;
    expect(b, 4, b'-')?;
    let month = digits(b, 5, 2)?;
    expect(b, 7, b'-')?;
    let day = digits(b, 8, 2)?;
    if !matches!(b.get(10), Some(b'T' | b't')) {
        return Err(TimeError::Syntax);
    }
    let hour = digits(b, 11, 2)?;
    expect(b, 13, b':')?;
    let minute = digits(b, 14, 2)?;
    expect(b, 16, b':')?;
    let second = digits(b, 17, 2)?;
    let mut i = 19;
    let mut nanos = 0i64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let n = i - start;
        if n == 0 || n > 9 {
            return Err(TimeError::Syntax);
        }
        nanos = digits(b, start, n)? * 10i64.pow((9 - n) as u32);
    }
    let offset_secs = match b.get(i) {
        Some(b'Z' | b'z') => {
            i += 1;
            0
        }
        Some(&sign @ (b'+' | b'-')) => {
            let oh = digits(b, i + 1, 2)?;
            expect(b, i + 3, b':')?;
            let om = digits(b, i + 4, 2)?;
            i += 6;
            if oh > 23 || om > 59 {
                return Err(TimeError::Field);
            }
            let s = oh * 3600 + om * 60;
            if sign == b'+' { s } else { -s }
        }
        _ => return Err(TimeError::Syntax),
    };
    if i != b.len() {
        return Err(TimeError::Syntax);
    }
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return Err(TimeError::Field);
    }
    let days = days_from_civil(year, month, day);
    let secs = i128::from(days) * 86_400 + i128::from(hour * 3600 + minute * 60 + second)
        - i128::from(offset_secs);
    EventTime::from_nanos(secs * 1_000_000_000 + i128::from(nanos))
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

/// Why a contract duration does not parse ([`Duration::parse`]); each carries the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not of the form `^[0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h)$`.
    #[error("`{0}` is not a duration (expected e.g. 50ms, 1.5s, 5m, 1h)")]
    Syntax(String),
    /// More than `i64::MAX` nanoseconds.
    #[error("`{0}` is too long a duration")]
    TooLong(String),
    /// A fraction below one nanosecond.
    #[error("`{0}` is finer than a nanosecond")]
    TooFine(String),
}

impl Duration {
    /// Parses `^[0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h)$` exactly; fractions below a nanosecond are
    /// rejected rather than rounded.
    pub fn parse(s: &str) -> Result<Duration, DurationError> {
        let unit_at = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len());
        let (num, unit) = s.split_at(unit_at);
        let syntax = || DurationError::Syntax(s.to_string());
        let scale: i128 = match unit {
            "ns" => 1,
            "us" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(syntax()),
        };
        let (int, frac) = match num.split_once('.') {
            Some((i, f)) => (i, f),
            None => (num, ""),
        };
        let well_formed = !int.is_empty()
            && int.bytes().all(|c| c.is_ascii_digit())
            && (!num.contains('.')
                || (!frac.is_empty() && frac.bytes().all(|c| c.is_ascii_digit())));
        if !well_formed {
            return Err(syntax());
        }
        let too_big = || DurationError::TooLong(s.to_string());
        let too_fine = || DurationError::TooFine(s.to_string());
        let int: i128 = int.parse().map_err(|_| too_big())?;
        let mut total = int.checked_mul(scale).ok_or_else(too_big)?;
        if !frac.is_empty() {
            let frac = frac.trim_end_matches('0');
            if frac.len() > 30 {
                return Err(too_fine());
            }
            let f: i128 = if frac.is_empty() {
                0
            } else {
                frac.parse().map_err(|_| too_big())?
            };
            let denom = 10i128.pow(frac.len() as u32);
            let part = f * scale;
            if part % denom != 0 {
                return Err(too_fine());
            }
            total += part / denom;
        }
        i64::try_from(total).map(Duration).map_err(|_| too_big())
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        for (unit, scale) in [
            ("h", 3_600_000_000_000),
            ("m", 60_000_000_000),
            ("s", 1_000_000_000),
            ("ms", 1_000_000),
            ("us", 1_000),
        ] {
            if n != 0 && n % scale == 0 {
                return write!(f, "{}{unit}", n / scale);
            }
        }
        write!(f, "{n}ns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_formats_rfc3339() {
        let t = EventTime::parse_rfc3339("2025-11-29T12:00:02Z").unwrap();
        assert_eq!(t.0, 1_764_417_602_000_000_000);
        assert_eq!(t.to_string(), "2025-11-29T12:00:02.000000000Z");
        let t = EventTime::parse_rfc3339("2025-11-29t13:00:02.5+01:00").unwrap();
        assert_eq!(t.to_string(), "2025-11-29T12:00:02.500000000Z");
        let t = EventTime::parse_rfc3339("1970-01-01T00:00:00.000000001z").unwrap();
        assert_eq!(t.0, 1);
        assert_eq!(
            EventTime::parse_rfc3339("2262-04-11T23:47:16.854775807Z")
                .unwrap()
                .0,
            i64::MAX
        );
        assert_eq!(
            EventTime::parse_rfc3339("2024-02-29T00:00:00Z")
                .unwrap()
                .to_string(),
            "2024-02-29T00:00:00.000000000Z"
        );
    }

    #[test]
    fn rejects_what_the_spec_rejects() {
        for bad in [
            "12:00Z",
            "20251129T120000Z",
            "2025-11-29T12:00:60Z",
            "1969-12-31T23:59:59Z",
            "2025-11-29 12:00:00Z",
            "2025-11-29T12:00Z",
            "2025-11-29T12:00:00",
            "2025-11-29T12:00:00.Z",
            "2025-11-29T12:00:00.1234567890Z",
            "2025-02-29T12:00:00Z",
            "2025-11-29T12:00:00+24:00",
            "2025-11-29T12:00:00+0100",
            "2262-04-11T23:47:16.854775808Z",
            "1970-01-01T00:30:00+01:00",
            "2025-11-29T12:00:00Z ",
            "",
        ] {
            assert!(EventTime::parse_rfc3339(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn round_trips_civil_dates() {
        for days in [-1, 0, 1, 59, 365, 10_957, 20_000, 106_751] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }

    #[test]
    fn durations() {
        assert_eq!(Duration::parse("50ms").unwrap().0, 50_000_000);
        assert_eq!(Duration::parse("1.5s").unwrap().0, 1_500_000_000);
        assert_eq!(Duration::parse("5m").unwrap().0, 300_000_000_000);
        assert_eq!(Duration::parse("0.5us").unwrap().0, 500);
        assert_eq!(Duration::parse("1.50h").unwrap().0, 5_400_000_000_000);
        for bad in [
            "",
            "5",
            "ms",
            "1.ms",
            ".5s",
            "-1s",
            "1 s",
            "1d",
            "1.5.s",
            "0.5ns",
            "99999999999999h",
        ] {
            assert!(Duration::parse(bad).is_err(), "{bad} accepted");
        }
        let msg = |s: &str| Duration::parse(s).unwrap_err().to_string();
        assert_eq!(
            msg("1d"),
            "`1d` is not a duration (expected e.g. 50ms, 1.5s, 5m, 1h)"
        );
        assert_eq!(msg("0.5ns"), "`0.5ns` is finer than a nanosecond");
        assert_eq!(
            msg("99999999999999h"),
            "`99999999999999h` is too long a duration"
        );
        assert_eq!(Duration(300_000_000_000).to_string(), "5m");
        assert_eq!(Duration(50_000_000).to_string(), "50ms");
    }
}
