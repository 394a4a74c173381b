//! Columns of dates: a value parsed as a date or a date-time (`chrono`), and the numbers
//! it gives as features, a part each (`data.date`'s `parts`).

use chrono::{Datelike, NaiveDate, NaiveDateTime, Timelike};
use manifests::DatePart;

/// The date-times a value may be written as (after the plain dates).
const DATE_TIMES: &[&str] = &[
    "%Y-%m-%d %H:%M:%S%.f",
    "%Y-%m-%dT%H:%M:%S%.f",
    "%Y/%m/%d %H:%M:%S%.f",
    "%Y-%m-%d %H:%M:%S",
    "%Y-%m-%dT%H:%M:%S",
    "%Y/%m/%d %H:%M:%S",
    "%Y-%m-%d %H:%M",
    "%Y-%m-%dT%H:%M",
    "%Y/%m/%d %H:%M",
];

/// `text` as a date-time: `YYYY-MM-DD` or `YYYY/MM/DD`, with a time of day
/// (`HH:MM[:SS[.fff]]`, after a space or `T`) or not, or ISO 8601 with a zone (`Z`,
/// `+01:00`: the time written, as pandas' `.dt.hour` reads it); `None` when it is not one.
pub fn parse(text: &str) -> Option<NaiveDateTime> {
    let text = text.trim();
    // A date starts with a four-digit year.
    if text.len() < 8 || !text.as_bytes()[..4].iter().all(u8::is_ascii_digit) {
        return None;
    }
    for format in ["%Y-%m-%d", "%Y/%m/%d"] {
        if let Ok(date) = NaiveDate::parse_from_str(text, format) {
            return date.and_hms_opt(0, 0, 0);
        }
    }
    for format in DATE_TIMES {
        if let Ok(t) = NaiveDateTime::parse_from_str(text, format) {
            return Some(t);
        }
    }
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.naive_local())
}

/// A share of a column's values from which a column of text that are dates but for a
/// few is refused (naming the first that is not one) rather than read as categories.
const MOSTLY_DATES: f64 = 0.8;

/// What a column of text no `categorical` or `date` node names holds, by its values.
pub enum Found {
    /// Not dates, or too few of them: categories.
    Categories,
    /// Dates: each of the column's values (by code) as one.
    Dates(Vec<Option<NaiveDateTime>>),
    /// Dates but for a few: the first row (0-based) whose value is not one.
    MostlyDates(usize),
}

/// Whether `column` holds dates: every value present is one ([`Found::Dates`]), most
/// of them are ([`Found::MostlyDates`], refused), or not ([`Found::Categories`]). The
/// same for every format that reads text (CSV, JSON, Parquet).
pub fn found_in(column: &crate::categorical::Categories) -> Found {
    let values: Vec<Option<NaiveDateTime>> = column.values.iter().map(|v| parse(v)).collect();
    let (mut present, mut good, mut first_bad) = (0usize, 0usize, None);
    for (i, &code) in column.codes.iter().enumerate() {
        if code == crate::categorical::MISSING {
            continue;
        }
        present += 1;
        match values[code as usize] {
            Some(_) => good += 1,
            None => {
                first_bad.get_or_insert(i);
            }
        }
    }
    match first_bad {
        _ if good == 0 => Found::Categories,
        None => Found::Dates(values),
        Some(_) if (good as f64) < MOSTLY_DATES * present as f64 => Found::Categories,
        Some(row) => Found::MostlyDates(row),
    }
}

/// `part` of `t`, as a feature.
pub fn part(t: &NaiveDateTime, part: DatePart) -> f32 {
    match part {
        DatePart::Year => t.year() as f32,
        DatePart::Month => t.month() as f32,
        DatePart::Day => t.day() as f32,
        DatePart::DayOfYear => t.ordinal() as f32,
        DatePart::DayOfWeek => t.weekday().num_days_from_monday() as f32,
        DatePart::Hour => t.hour() as f32,
        DatePart::Minute => t.minute() as f32,
        DatePart::Days => {
            let epoch = NaiveDate::from_ymd_opt(1970, 1, 1)
                .and_then(|d| d.and_hms_opt(0, 0, 0))
                .expect("a date");
            ((*t - epoch).num_milliseconds() as f64 / 86_400_000.0) as f32
        }
    }
}

/// The features' names of a date column `name`: `name.part`.
pub fn names(name: &str, parts: &[DatePart]) -> Vec<String> {
    parts
        .iter()
        .map(|p| format!("{name}.{}", p.as_str()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_date_times_as_people_write_them() {
        let t = parse("2024-03-01").unwrap();
        let parts = [
            DatePart::Year,
            DatePart::Month,
            DatePart::Day,
            DatePart::DayOfYear,
            DatePart::DayOfWeek,
            DatePart::Hour,
        ];
        let values: Vec<f32> = parts.iter().map(|&p| part(&t, p)).collect();
        // 2024 is a leap year; 1 March 2024 was a Friday.
        assert_eq!(values, [2024., 3., 1., 61., 4., 0.]);
        assert_eq!(parse("2024/03/01"), Some(t));
        let noon = parse("2024-03-01 12:30:00").unwrap();
        assert_eq!(
            (part(&noon, DatePart::Hour), part(&noon, DatePart::Minute)),
            (12., 30.)
        );
        assert_eq!(parse("2024-03-01T12:30:00Z"), Some(noon));
        assert_eq!(parse("2024-03-01T12:30:00+02:00"), Some(noon));
        assert_eq!(parse("2024-03-01T12:30"), Some(noon));
        assert_eq!(
            part(&parse("1970-01-02 06:00").unwrap(), DatePart::Days),
            1.25
        );
        for text in [
            "Dream",
            "12.5",
            "2024-13-01",
            "2024-02-30",
            "20240301",
            "03/01/2024",
        ] {
            assert_eq!(parse(text), None, "{text}");
        }
        assert_eq!(names("when", &parts[..2]), ["when.year", "when.month"]);
    }
}
