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
    /// Serve the gRPC API (HorizontalAutoscaler, health, reflection).
    Serve(Box<ServeArgs>),
    /// Run the conformance cases of a folder through the engine; exit 1 on failures.
    Conformance(ConformanceArgs),
}

/// `autoscaled conformance DIR`.
#[derive(Debug, clap::Args)]
pub struct ConformanceArgs {
    /// Folder of conformance case files (e.g. conformance/hpa).
    pub dir: PathBuf,
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
    if let Err(e) = crate::telemetry::init(&config.log, config.log_format) {
        eprintln!("autoscaled: {e}");
        return ExitCode::from(EX_USAGE as u8);
    }
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
    let result: anyhow::Result<()> = runtime.block_on(async {
        // Open the store before binding, so that a bad data folder fails before anything
        // listens and the "listening" line is only printed by a server that can serve.
        let store = crate::server::open_store(&config)?;
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
        crate::server::serve_with_store(listener, config, store, signals.recv()).await?;
        Ok(())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "autoscaled stopped");
            eprintln!("autoscaled: {e}");
            ExitCode::FAILURE
        }
    }
}

fn conformance(args: ConformanceArgs) -> ExitCode {
    let report = crate::conformance::run_dir(&args.dir);
    println!("{report}");
    if report.success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
