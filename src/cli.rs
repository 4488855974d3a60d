//! The command line (clap structs) and what each subcommand runs. `main.rs` only parses and
//! dispatches, so a new subcommand is one enum variant and one function here.

use std::{io::Write, path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};

use crate::config::{EX_USAGE, ServeArgs};

/// autoscaled: the Kubernetes HPA and VPA decisions as a gRPC service.
#[derive(Debug, Parser)]
#[command(name = "autoscaled", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the gRPC API (HorizontalAutoscaler, VerticalAutoscaler, health, reflection).
    Serve(Box<ServeArgs>),
    /// Run the conformance cases of a folder through the engine; exit 1 on failures.
    Conformance(ConformanceArgs),
    /// Send a RecommendRequest (proto3 JSON file) to a server and print the decision.
    Recommend(RecommendArgs),
    /// Print the stored history of a target.
    History(HistoryArgs),
}

/// `autoscaled recommend --addr ADDR --file REQUEST.json`.
#[derive(Debug, clap::Args)]
pub struct RecommendArgs {
    /// Server address (`host:port` or `http://host:port`).
    #[arg(long, value_name = "ADDR")]
    pub addr: String,
    /// The request in the proto3 JSON mapping (see examples/recommend.json).
    #[arg(long, value_name = "REQUEST.json")]
    pub file: PathBuf,
    #[arg(long, value_enum, default_value_t)]
    pub output: crate::client::OutputFormat,
}

/// `autoscaled history --addr ADDR TARGET_KEY`.
#[derive(Debug, clap::Args)]
pub struct HistoryArgs {
    /// Server address (`host:port` or `http://host:port`).
    #[arg(long, value_name = "ADDR")]
    pub addr: String,
    pub target_key: String,
    #[arg(long, value_enum, default_value_t)]
    pub output: crate::client::OutputFormat,
}

/// `autoscaled conformance DIR`.
#[derive(Debug, clap::Args)]
pub struct ConformanceArgs {
    /// Folder of conformance case files (e.g. conformance/hpa).
    pub dir: PathBuf,
    /// Send the HPA cases through the server at ADDR (started with --trust-request-time)
    /// instead of the engine.
    #[arg(long, value_name = "ADDR")]
    pub grpc: Option<String>,
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
        Command::Conformance(args) => conformance(args),
        Command::Recommend(args) => crate::client::run(crate::client::recommend(
            &args.addr,
            &args.file,
            args.output,
        )),
        Command::History(args) => crate::client::run(crate::client::history(
            &args.addr,
            &args.target_key,
            args.output,
        )),
    }
}

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
    if let Some(listen) = config.metrics_listen {
        let _runtime = runtime.enter();
        if let Err(e) = crate::metrics::install(listen) {
            eprintln!("autoscaled: cannot serve metrics on {listen}: {e}");
            return ExitCode::FAILURE;
        }
    }
    let result: anyhow::Result<()> = runtime.block_on(async {
        // Open the store before binding, so that a bad data folder fails before anything
        // listens and the "listening" line is only printed by a server that can serve.
        let store = crate::server::open_configured_store(&config)?;
        let signals = crate::shutdown::Signals::install()
            .map_err(|e| anyhow::anyhow!("cannot install the SIGTERM/SIGINT handlers: {e}"))?;
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.listen))?;
        let addr = listener.local_addr()?;
        {
            let mut out = std::io::stdout().lock();
            writeln!(out, "autoscaled listening on {addr}")?;
            out.flush()?;
        }
        crate::server::serve_opened(listener, config, store, signals.recv()).await?;
        Ok(())
    });
    if let Err(e) = &result {
        tracing::error!(error = %e, "autoscaled stopped");
    }
    // After the server's final flush, on this (non-worker) thread while the runtime still
    // drives the exporter's channel: export the spans still queued.
    telemetry.shutdown();
    drop(runtime);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("autoscaled: {e}");
            ExitCode::FAILURE
        }
    }
}

fn conformance(args: ConformanceArgs) -> ExitCode {
    if let Some(addr) = &args.grpc {
        return crate::conformance::grpc::run_command(addr, &args.dir);
    }
    let report = crate::conformance::run_dir(&args.dir);
    println!("{report}");
    if report.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
