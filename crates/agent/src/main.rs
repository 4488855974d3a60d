//! `autoscaled-agent --config agent.toml`: runs the configured targets until SIGTERM.
//! `--check` reads the configuration, prints each target's state and exits (2 when a target
//! or the file has a mistake).

use std::{path::PathBuf, process::ExitCode};

use autoscaled_agent::{check, config::Config, http, metrics, run::Supervisor};
use clap::Parser;

#[derive(Parser)]
#[command(
    name = "autoscaled-agent",
    version,
    about = "Prometheus in, the HPA decision from autoscaled, the scheduler's scale command out"
)]
struct Args {
    /// The configuration file (TOML; `.yaml`/`.yml`: YAML). Reloaded on SIGHUP and when it changes.
    #[arg(long, short, env = "AUTOSCALED_AGENT_CONFIG", value_name = "FILE")]
    config: PathBuf,
    /// Read the configuration, run each Prometheus query once and read each policy from the
    /// server, print each target and exit: 0 when every target is valid, 2 otherwise.
    #[arg(long)]
    check: bool,
    /// With --check: the file alone, without contacting Prometheus or the server.
    #[arg(long, requires = "check")]
    offline: bool,
    /// Log filter (tracing's EnvFilter syntax).
    #[arg(long, env = "AUTOSCALED_AGENT_LOG", default_value = "info")]
    log: String,
    /// Log format.
    #[arg(long, value_parser = ["text", "json"], default_value = "text")]
    log_format: String,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if args.log_format == "json" {
        builder.json().init();
    } else {
        builder.with_ansi(false).init();
    }
    let config = match Config::load(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("autoscaled-agent: {e}");
            return ExitCode::from(2);
        }
    };
    if args.check || args.offline {
        let runtime = match runtime(&mut tokio::runtime::Builder::new_current_thread()) {
            Ok(r) => r,
            Err(code) => return code,
        };
        let (lines, good) = runtime.block_on(check::check(&config, args.offline));
        for line in lines {
            println!("{line}");
        }
        return if good {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(2)
        };
    }
    let runtime = match runtime(tokio::runtime::Builder::new_multi_thread().worker_threads(2)) {
        Ok(r) => r,
        Err(code) => return code,
    };
    runtime.block_on(async move {
        if let Some(addr) = &config.metrics_listen {
            let handle = match metrics::install() {
                Ok(h) => h,
                Err(e) => {
                    eprintln!("autoscaled-agent: metrics: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match http::bind(addr).await {
                Ok((listener, local)) => {
                    tracing::info!(addr = %local, "metrics listening (/metrics, /healthz)");
                    tokio::spawn(http::serve_metrics(listener, handle));
                }
                Err(e) => {
                    eprintln!("autoscaled-agent: agent.metrics_listen: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        let mut supervisor = Supervisor::new(args.config.clone());
        if let Err(e) = supervisor.apply(&config) {
            eprintln!("autoscaled-agent: {e}");
            return ExitCode::from(2);
        }
        tracing::info!(config = %args.config.display(), targets = config.targets.len(), rejected = config.rejected.len(), "agent started");
        match supervisor.run().await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("autoscaled-agent: {e}");
                ExitCode::FAILURE
            }
        }
    })
}

/// The runtime `builder` describes, with I/O and timers; a failure is said and exits.
fn runtime(builder: &mut tokio::runtime::Builder) -> Result<tokio::runtime::Runtime, ExitCode> {
    builder.enable_all().build().map_err(|e| {
        eprintln!("autoscaled-agent: cannot start the runtime: {e}");
        ExitCode::FAILURE
    })
}
