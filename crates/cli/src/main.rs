//! `pdcx`: run a deployment's servers and move arrays and tags in and out of it.

mod access_cmd;
mod args;
mod commands;
mod common;
mod config_cmd;
mod daemon;
mod examples;
mod files_cmd;
mod hdf5_cmd;
mod interrupt;
mod local_dest;
mod mpiio_cmd;
mod remove_cmd;
mod tag_cmd;
mod tiers_cmd;
mod versions_cmd;
mod xsite_cmd;

use anyhow::{anyhow, Result};
use args::{Cli, Command, RemoteAction, ServerAction, ServerArgs};
use clap::Parser;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(
        cli.command,
        Command::Server(_) | Command::Gateway { .. } | Command::Pull { .. } | Command::Push { .. }
    ) {
        // `pdcx ls | head` should end quietly like other Unix tools. Servers, the gateway and
        // transfers keep ignoring SIGPIPE: TLS writes with `writev`, which (unlike std's
        // `send`) raises it when the other end is gone; they get EPIPE and say so instead.
        // SAFETY: restoring the default disposition of a signal before any thread starts.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    if matches!(cli.command, Command::Server(_)) {
        // Everything a server (or `pdcx server start`) creates is its user's alone.
        pdcx_server::privacy::private_umask();
    }
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// The deployment root as an absolute path (so it can be handed to background servers).
fn require_root(root: Option<PathBuf>) -> Result<PathBuf> {
    let root = root
        .filter(|r| !r.as_os_str().is_empty())
        .ok_or_else(|| anyhow!("no deployment root: pass --root DIR or set PDCX_ROOT"))?;
    absolute(&root)
}

fn absolute(p: &Path) -> Result<PathBuf> {
    std::path::absolute(p).map_err(|e| anyhow!("cannot resolve {}: {e}", p.display()))
}

/// `pdcx server crash-points`: needs no deployment.
fn crash_points(json: bool) -> u8 {
    use pdcx_fsio::crash;
    if json {
        let v = serde_json::json!({"enabled": crash::ENABLED, "points": crash::POINTS});
        println!("{v}");
    } else {
        if !crash::ENABLED {
            eprintln!("(this build has no crash points compiled in: PDCX_CRASH_AT is ignored)");
        }
        for p in crash::POINTS {
            println!("{p}");
        }
    }
    0
}

/// A count setting: the flag's value, else the environment's, else the default.
fn count_setting(flag: Option<u64>, setting: &pdcx_core::config::Setting) -> Result<u64> {
    match flag {
        Some(v) => Ok(v),
        None => Ok(setting.count()?),
    }
}

/// Runs a command; the value is the process exit code.
fn run(mut cli: Cli) -> Result<u8> {
    // `--root` wins over PDCX_ROOT; `pdcx server config` reports which one it was.
    let root_flag = cli.root.clone();
    cli.root = cli.root.or_else(|| pdcx_core::config::ROOT.path());
    if let Command::Server(ServerArgs {
        action:
            Some(ServerAction::Config {
                flags,
                json,
                markdown,
            }),
        ..
    }) = &cli.command
    {
        if *markdown {
            print!("{}", pdcx_core::config::markdown_table());
            return Ok(0);
        }
        let mut given = flags.given();
        if let Some(r) = &root_flag {
            given.push((&pdcx_core::config::ROOT, r.display().to_string()));
        }
        let root = cli.root.as_deref().map(absolute).transpose()?;
        return config_cmd::show(root.as_deref(), &given, *json);
    }
    if let Command::Server(ServerArgs {
        action: Some(ServerAction::CrashPoints { json }),
        ..
    }) = &cli.command
    {
        return Ok(crash_points(*json));
    }
    if let Command::Completion { shell } = &cli.command {
        clap_complete::generate(
            *shell,
            &mut <Cli as clap::CommandFactory>::command(),
            "pdcx",
            &mut std::io::stdout(),
        );
        return Ok(0);
    }
    if let Command::Fits { program } = &cli.command {
        return files_cmd::fits_run(cli.root.as_deref(), program);
    }
    if let Command::Run {
        prefix,
        home,
        mode,
        program,
    } = &cli.command
    {
        return mpiio_cmd::run(cli.root.as_deref(), prefix, home, mode, program).map(|c| c as u8);
    }
    if let Command::Import { args } | Command::Export { args } = &cli.command {
        let import = matches!(cli.command, Command::Import { .. });
        if let Some(code) = xsite_cmd::bundle(import, cli.root.as_deref(), args)? {
            return Ok(code);
        }
        let what = if import { "import" } else { "export" };
        return hdf5_cmd::run(what, cli.root.as_deref(), args);
    }
    let root = require_root(cli.root)?;
    match cli.command {
        Command::Run { .. }
        | Command::Completion { .. }
        | Command::Fits { .. }
        | Command::Import { .. }
        | Command::Export { .. } => {
            unreachable!("handled above")
        }
        Command::Server(ServerArgs {
            action,
            flags: args,
        }) => match action {
            None => daemon::foreground(daemon::ForegroundOpts {
                root,
                rank: args.rank,
                size: args.size,
                bind: args
                    .bind
                    .unwrap_or_else(|| pdcx_core::config::BIND.default.to_string()),
                cache_mb: count_setting(args.cache_mb, &pdcx_core::config::CACHE_MB)?,
                node: args.node,
                agg_window: std::time::Duration::from_micros(count_setting(
                    args.agg_window_us,
                    &pdcx_core::config::AGG_WINDOW_US,
                )?),
                lazy_interval: std::time::Duration::from_millis(count_setting(
                    args.lazy_flush_ms,
                    &pdcx_core::config::LAZY_FLUSH_MS,
                )?),
                metrics: args.metrics,
            })
            .map(|()| 0),
            Some(ServerAction::Start {
                n,
                cache_mb,
                bind_host,
                metrics,
            }) => daemon::start(&root, n, cache_mb, &bind_host, metrics.as_deref()).map(|()| 0),
            Some(ServerAction::Stop { timeout }) => daemon::stop(&root, timeout).map(|()| 0),
            Some(ServerAction::Status { json }) => daemon::status(&root, json),
            Some(ServerAction::CrashPoints { json }) => Ok(crash_points(json)),
            Some(ServerAction::UserKey { user }) => {
                access_cmd::user_key_cmd(&root, &user).map(|()| 0)
            }
            Some(ServerAction::Config { .. }) => unreachable!("handled above"),
        },
        Command::Ls { container, json } => match container.as_deref() {
            Some(p) if p.starts_with(files_cmd::SCHEME) => {
                files_cmd::ls(&root, p, json).map(|()| 0)
            }
            c => commands::ls(&root, c, json).map(|()| 0),
        },
        Command::Rm {
            paths,
            recursive,
            quiet,
        } => {
            // pdcx://NAME is a file (a byte stream under a name prefix); a bare name is an
            // object or a container.
            let (files, named): (Vec<String>, Vec<String>) = paths
                .into_iter()
                .partition(|p| p.starts_with(files_cmd::SCHEME));
            if !files.is_empty() {
                files_cmd::rm(&root, &files, recursive, quiet)?;
            }
            if !named.is_empty() {
                remove_cmd::rm(&root, &named, recursive, quiet)?;
            }
            Ok(0)
        }
        Command::Cp {
            mut paths,
            recursive,
            quiet,
        } => {
            let dst = paths.pop().unwrap_or_default();
            files_cmd::cp(&root, &paths, &dst, recursive, quiet).map(|()| 0)
        }
        Command::Show { object, json } => commands::show(&root, &object, json).map(|()| 0),
        Command::Diff {
            object,
            from,
            to,
            values,
            json,
        } => versions_cmd::diff(&root, &object, &from, to.as_deref(), values, json).map(|()| 0),
        Command::Put {
            file,
            name,
            container,
            tags,
        } => commands::put(&root, &file, name.as_deref(), &container, &tags).map(|()| 0),
        Command::Get {
            object,
            region,
            output,
            version,
        } => commands::get(
            &root,
            &object,
            region.as_deref(),
            &output,
            version.as_deref(),
        )
        .map(|()| 0),
        Command::Query {
            conditions,
            values,
            region,
            container,
            count,
            limit,
            bins,
            json,
        } => {
            if values {
                let opts = commands::ValueQueryOpts {
                    region: region.as_deref(),
                    container: container.as_deref(),
                    count_only: count,
                    limit,
                    bins,
                    json,
                };
                commands::value_query(&root, &conditions.join(" & "), &opts).map(|()| 0)
            } else if region.is_some() || container.is_some() || count || bins > 0 {
                Err(anyhow::anyhow!(
                    "--region, --in, --count and --bins go with --values (a query of the objects' values)"
                ))
            } else {
                commands::query(&root, &conditions, json).map(|()| 0)
            }
        }
        Command::Tag {
            object,
            tags,
            delete,
            version,
            at,
        } => tag_cmd::tag(&root, &object, &tags, &delete, version.as_deref(), at).map(|()| 0),
        Command::Share {
            name,
            user,
            everyone: _,
            container,
            write,
            revoke,
        } => access_cmd::share(&root, &name, user.as_deref(), container, write, revoke).map(|()| 0),
        Command::Remote { action } => match action {
            RemoteAction::Init => xsite_cmd::init(&root),
            RemoteAction::Token { site } => xsite_cmd::token(&root, &site),
            RemoteAction::Add {
                name,
                url,
                token,
                fingerprint,
                as_site,
            } => xsite_cmd::add(&root, &name, &url, &token, &fingerprint, &as_site),
            RemoteAction::Grant {
                site,
                names,
                revoke,
            } => xsite_cmd::grant(&root, &site, &names, revoke),
            RemoteAction::Ls => xsite_cmd::ls(&root),
            RemoteAction::Rm { name } => xsite_cmd::rm(&root, &name),
        },
        Command::Gateway { site, listen } => xsite_cmd::gateway(&root, &site, listen.as_deref()),
        Command::Pull {
            from,
            region,
            as_name,
            where_,
            opts,
        } => xsite_cmd::pull(
            &root,
            &from,
            region.as_deref(),
            as_name.as_deref(),
            where_.as_deref(),
            &opts.options(),
        ),
        Command::Push {
            object,
            region,
            to,
            where_,
            as_name,
            opts,
        } => xsite_cmd::push(
            &root,
            &object,
            region.as_deref(),
            &to,
            where_.as_deref(),
            &pdcx_xsite::transfer::Options {
                as_name,
                ..opts.options()
            },
        ),
        Command::Flush { stall, quiet } => {
            let client = common::connect(&root)?;
            let tiers = (0..client.size())
                .map(|r| client.stats(r).map(|s| !s.tiers.is_empty()))
                .collect::<std::result::Result<Vec<bool>, _>>()
                .map_err(common::msg)?;
            // Without tiers the data stays in the logs by design: nothing to flush is
            // success (job scripts run `pdcx flush` after every job, tiers or not).
            if tiers.contains(&true) {
                tiers_cmd::flush(&root, stall, quiet)?;
            } else {
                println!(
                    "flush: no tiers configured (ROOT/pdcx.toml declares them); the data stays in the servers' logs"
                );
            }
            mpiio_cmd::wait_homes(&client, stall, quiet).map(|()| 0)
        }
        Command::Recover { stall, quiet } => mpiio_cmd::recover(&root, stall, quiet).map(|()| 0),
        Command::Migrate { object, tier } => tiers_cmd::migrate(&root, &object, &tier).map(|()| 0),
        Command::Resize { to, json } => daemon::resize(&root, to, json).map(|()| 0),
        Command::Compact { threshold, json } => {
            tiers_cmd::compact(&root, threshold, json).map(|()| 0)
        }
        Command::Top {
            interval,
            count,
            csv,
        } => {
            if !(interval > 0.0 && interval.is_finite()) {
                anyhow::bail!("--interval must be a positive number of seconds");
            }
            tiers_cmd::top(&root, interval, count, csv).map(|()| 0)
        }
    }
}
