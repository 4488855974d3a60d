//! The command line (clap structs) and what each subcommand runs. `main.rs` only parses and
//! dispatches, so a new subcommand is one enum variant and one function here.

use std::{io::Write, process::ExitCode};

use clap::{Parser, Subcommand};

use crate::{
    config::{EX_USAGE, ServeArgs},
    server::Configured,
};

/// autoscaled: the Kubernetes HPA and VPA decisions as a gRPC service.
#[derive(Debug, Parser)]
#[command(name = "autoscaled", version = crate::config::VERSION, about)]
pub struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Serve the gRPC API (HorizontalAutoscaler, VerticalAutoscaler, health, reflection).
    Serve(Box<ServeArgs>),
    /// Print the configuration table of `serve` in Markdown (the README's, generated from
    /// these clap definitions; a test fails when the README's copy drifts).
    #[command(hide = true)]
    ConfigTable,
}

/// Parses the command line; bad usage exits 64 (`EX_USAGE`), `--help`/`--version` exit 0.
pub fn parse() -> Result<Cli, ExitCode> {
    Cli::try_parse().map_err(|e| {
        let _ = e.print();
        if e.use_stderr() {
            ExitCode::from(EX_USAGE as u8)
        } else {
            ExitCode::SUCCESS
        }
    })
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Serve(args) => serve(*args),
        Command::ConfigTable => print_stdout(config_table().trim_end()),
    }
}

/// The README's configuration table, from the `serve` arguments: flag, variable, TOML key,
/// default (the `[default: ...]` of the help text) and meaning.
pub(crate) fn config_table() -> String {
    use clap::CommandFactory;
    let command = Cli::command();
    let serve = command
        .find_subcommand("serve")
        .expect("the serve subcommand exists");
    let mut out = String::from(
        "| flag | env | TOML key | default | meaning |\n| --- | --- | --- | --- | --- |\n",
    );
    for arg in serve.get_arguments() {
        let Some(long) = arg.get_long() else {
            continue;
        };
        if long == "help" {
            continue;
        }
        let help = arg
            .get_long_help()
            .or_else(|| arg.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
        let (meaning, default) = match help.rsplit_once("[default: ") {
            Some((meaning, default)) => (
                meaning.trim_end().to_owned(),
                format!("`{}`", default.trim_end_matches(']')),
            ),
            None => (help.clone(), "none".to_owned()),
        };
        let env = arg
            .get_env()
            .map(|e| format!("`{}`", e.to_string_lossy()))
            .unwrap_or_default();
        let value = arg
            .get_value_names()
            .and_then(|names| names.first())
            .map(|n| format!(" {n}"))
            .unwrap_or_default();
        let key = if long == "config" {
            "-".to_owned()
        } else {
            format!("`{}`", long.replace('-', "_"))
        };
        out.push_str(&format!(
            "| `--{long}{value}` | {env} | {key} | {default} | {} |\n",
            meaning.replace('|', "\\|")
        ));
    }
    out
}

/// Serves until SIGTERM/SIGINT. A start-up error is one line on stderr (`autoscaled: ...`)
/// and nothing else; an error once serving is logged once through `tracing`.
fn serve(args: ServeArgs) -> ExitCode {
    let config = match args.load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("autoscaled: {e}");
            return ExitCode::from(EX_USAGE as u8);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("autoscaled: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Inside the runtime: the OTLP exporter's gRPC channel is spawned on it.
    let telemetry = {
        let _runtime = runtime.enter();
        crate::telemetry::init(
            &config.log,
            config.log_format,
            crate::config::log_colour(),
            config.otlp_endpoint.as_deref(),
        )
    };
    let telemetry = match telemetry {
        Ok(guard) => guard,
        Err(e) => {
            eprintln!("autoscaled: {e}");
            return ExitCode::from(EX_USAGE as u8);
        }
    };
    // TLS and authorization files are checked (and SIGHUP handled) before anything listens;
    // unusable files are bad configuration.
    let mut configured = match runtime.block_on(async { Configured::load(config.clone()) }) {
        Ok(configured) => configured,
        Err(e) => {
            eprintln!("autoscaled: {e}");
            telemetry.shutdown();
            return ExitCode::from(EX_USAGE as u8);
        }
    };
    if let Some(listen) = config.metrics_listen {
        let _runtime = runtime.enter();
        let served = crate::metrics::install()
            .map_err(|e| e.to_string())
            .and_then(|metrics| {
                let console = crate::console::Console {
                    shared: configured.shared(),
                    rendering: tokio::sync::Semaphore::new(crate::console::RENDERS),
                    sessions: crate::console::Sessions::default(),
                    hosts: crate::connect::HostCheck::new(
                        config.security.authz.is_none(),
                        &config.doors.allowed_hosts,
                    ),
                    login: config.security.authz.is_some(),
                    pages: crate::console::Pages::default(),
                };
                crate::admin::serve(
                    listen,
                    metrics,
                    crate::doors::Doors::of(&config).admin,
                    console,
                )
                .map_err(|e| e.to_string())
            });
        match served {
            // The address it really has (port 0), for the log line and stdout.
            Ok(local) => configured.config_mut().metrics_listen = Some(local),
            Err(e) => {
                eprintln!("autoscaled: cannot serve metrics on {listen}: {e}");
                telemetry.shutdown();
                return ExitCode::FAILURE;
            }
        }
    }
    let result: Result<(), Stop> = runtime.block_on(async {
        let startup = |e: String| Stop::Startup(e);
        let signals = crate::shutdown::Signals::install()
            .map_err(|e| startup(format!("cannot install the SIGTERM/SIGINT handlers: {e}")))?;
        // Bind before opening the store: a busy port must not leave a new data folder behind.
        // Connections queue in the backlog until the server accepts.
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|e| startup(format!("cannot listen on {}: {e}", config.listen)))?;
        let addr = listener
            .local_addr()
            .map_err(|e| startup(format!("cannot listen on {}: {e}", config.listen)))?;
        let admin = configured.config_mut().metrics_listen;
        // The health listener and the store before the "listening" line: only a server that
        // can serve prints it.
        let server = configured
            .bind(listener)
            .await
            .map_err(|e| startup(e.to_string()))?;
        {
            let mut out = std::io::stdout().lock();
            // A closed stdout (nobody waiting for the line) is no reason not to serve.
            let _ = writeln!(out, "autoscaled listening on {addr}").and_then(|()| {
                if let Some(health) = server.health_addr() {
                    writeln!(out, "autoscaled health listening on {health}")?;
                }
                if let Some(admin) = admin {
                    writeln!(out, "autoscaled admin listening on {admin}")?;
                }
                out.flush()
            });
        }
        server
            .serve(signals.recv())
            .await
            .map_err(|e| Stop::Serving(e.to_string()))
    });
    if let Err(Stop::Serving(e)) = &result {
        tracing::error!(error = %e, "autoscaled stopped");
    }
    // After the server's final flush, on this (non-worker) thread while the runtime still
    // drives the exporter's channel: export the spans still queued.
    telemetry.shutdown();
    drop(runtime);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Stop::Startup(e)) => {
            eprintln!("autoscaled: {e}");
            ExitCode::FAILURE
        }
        Err(Stop::Serving(_)) => ExitCode::FAILURE,
    }
}

/// Why `serve` stopped: before serving (reported once on stderr) or while serving (logged).
enum Stop {
    Startup(String),
    Serving(String),
}

/// Prints `text` and a newline; a closed stdout (`| head`) is not an error.
fn print_stdout(text: &str) -> ExitCode {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}").and_then(|()| out.flush());
    ExitCode::SUCCESS
}
