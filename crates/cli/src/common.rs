//! Helpers every subcommand shares: reaching the deployment, pdcx errors as the user reads
//! them, and human-readable sizes, durations, dates and tables. Nothing here knows any
//! subcommand, so every command module may use it.

use anyhow::{anyhow, Result};
use pdcx_client::Client;
use pdcx_core::{ErrorKind, ObjectMeta};
use std::path::Path;

/// A pdcx error as the user should see it: its message, without the kind's debug name.
pub fn msg(e: pdcx_core::Error) -> anyhow::Error {
    anyhow!(e.message)
}

pub fn connect(root: &Path) -> Result<Client> {
    Client::connect(Some(root)).map_err(msg)
}

/// Opens an object by name, or by id written as 0x... hex.
pub fn resolve(client: &Client, what: &str) -> Result<ObjectMeta> {
    match client.open_object(what) {
        Ok(m) => Ok(m),
        Err(e) if e.kind == ErrorKind::NotFound => {
            let id = what
                .strip_prefix("0x")
                .and_then(|h| u64::from_str_radix(h, 16).ok());
            match id {
                Some(id) => client.get_object(id).map_err(msg),
                None => Err(anyhow!("{} (see `pdcx ls`)", e.message)),
            }
        }
        Err(e) => Err(msg(e)),
    }
}

pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

pub fn human_duration(secs: f64) -> String {
    let s = secs.max(0.0) as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86399 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

/// Seconds since the epoch as ISO-8601 UTC, e.g. `2024-05-01T12:34:56Z`.
pub fn iso8601(t: f64) -> String {
    if !t.is_finite() {
        return "?".into();
    }
    let secs = t.floor() as i64;
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days to civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    )
}

pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let parts: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", parts.join("  ").trim_end());
    };
    line(header.to_vec());
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_dates() {
        assert_eq!(iso8601(0.0), "1970-01-01T00:00:00Z");
        assert_eq!(iso8601(951_782_400.5), "2000-02-29T00:00:00Z");
        assert_eq!(iso8601(1e9), "2001-09-09T01:46:40Z");
        assert_eq!(iso8601(-1.0), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn human_units() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
        assert_eq!(human_duration(75.0), "1m15s");
        assert_eq!(pdcx_cli::dims_str(&[1024, 3]), "1024x3");
    }
}
