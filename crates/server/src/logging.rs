//! Server logging: `tracing` events, written to stderr by a `tracing-subscriber` fmt layer and
//! filtered by `PDCX_LOG` (EnvFilter syntax, e.g. `PDCX_LOG=info,pdcx_store=debug`).
//!
//! Server code only emits events (`tracing::info!(rank, ...)`); the process that runs a server
//! decides where they go. `pdcx server` calls [`init`]; the server embedded in a Python process
//! calls it too, but [`init`] only *tries* to install a global subscriber, so a host
//! application that set up its own keeps it (and gets pdcx's events through it).

use tracing_subscriber::EnvFilter;

/// The environment variable holding the filter.
pub const ENV: &str = "PDCX_LOG";

/// The filter when `PDCX_LOG` is unset: what a server has always printed (start, recovery,
/// tier errors, shutdown flush), nothing per request.
pub const DEFAULT_FILTER: &str = "info";

/// Parses a filter in `PDCX_LOG` syntax (`LEVEL`, `TARGET=LEVEL`, comma-separated).
pub fn parse_filter(spec: &str) -> Result<EnvFilter, String> {
    EnvFilter::builder()
        .parse(spec)
        .map_err(|e| format!("{ENV}={spec:?}: {e}"))
}

/// Installs the stderr subscriber with the filter from `PDCX_LOG` (default [`DEFAULT_FILTER`])
/// unless the process already has a global subscriber. Returns whether it installed one.
/// A malformed `PDCX_LOG` falls back to the default and says so once (on stderr, since the
/// logger it would go through is the one being set up).
pub fn init() -> bool {
    let spec = pdcx_core::config::LOG.text().unwrap_or_default();
    let (filter, warning) = if spec.trim().is_empty() {
        (EnvFilter::new(DEFAULT_FILTER), None)
    } else {
        match parse_filter(&spec) {
            Ok(f) => (f, None),
            Err(e) => (EnvFilter::new(DEFAULT_FILTER), Some(e)),
        }
    };
    let installed = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Logs usually end up in files (ROOT/logs/server-N.log): no colour escapes.
        .with_ansi(false)
        .try_init()
        .is_ok();
    if installed {
        if let Some(w) = warning {
            tracing::warn!("ignoring invalid filter ({w}); using {DEFAULT_FILTER:?}");
        }
    }
    installed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_parse_and_bad_ones_are_refused() {
        assert!(parse_filter("info").is_ok());
        assert!(parse_filter("info,pdcx_store=debug").is_ok());
        assert!(parse_filter("warn,pdcx_server::tiering=trace").is_ok());
        let e = parse_filter("info,pdcx_store=loud").unwrap_err();
        assert!(e.contains("PDCX_LOG"), "{e}");
    }
}
