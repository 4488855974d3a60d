//! The command line of `autoscalectl` (clap structs) and what each subcommand runs; `main.rs`
//! only parses and dispatches.

use std::{path::PathBuf, process::ExitCode};

use clap::{Parser, Subcommand};

/// Exit status for bad usage (BSD `EX_USAGE`), as `autoscaled` uses.
const EX_USAGE: u8 = autoscaled_wire::EX_USAGE as u8;

/// autoscalectl: talk to an autoscaled server, replay its decisions, run the conformance cases.
#[derive(Debug, Parser)]
#[command(name = "autoscalectl", version = autoscaled_wire::VERSION, about)]
pub struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the conformance cases of a folder through the engine; exit 1 on failures.
    Conformance(ConformanceArgs),
    /// Send a RecommendRequest (proto3 JSON file) to a server and print the decision.
    Recommend(RecommendArgs),
    /// Print the stored history of a target.
    History(HistoryArgs),
    /// List targets with their last decision, one line each (as `kubectl get hpa`).
    Get(GetArgs),
    /// Show a target's last decision, or a scaling group, in detail (as `kubectl describe`).
    Describe(DescribeArgs),
    /// Create or replace the policies and scaling groups of a YAML file (docs/groups.md).
    Apply(ApplyArgs),
    /// Delete a target's history, a policy or a scaling group.
    Delete(DeleteArgs),
    /// What-if: replay a trace (offline) or a target's stored decisions (through a server)
    /// under another spec; print both runs side by side, optionally draw them (docs/whatif.md).
    Simulate(crate::whatif::SimulateArgs),
    /// Run a recording proxy: forward every call to a server and append each Recommend
    /// request to a trace file.
    Record(crate::whatif::record::RecordArgs),
    /// Write a self-contained HTML report of a target's history.
    Report(crate::whatif::report::ReportArgs),
}

/// `autoscalectl recommend --addr ADDR --file REQUEST.json`.
#[derive(Debug, clap::Args)]
pub(crate) struct RecommendArgs {
    /// Server address (`host:port` or `http://host:port`).
    #[arg(long, value_name = "ADDR", env = "AUTOSCALED_ADDR", default_value = autoscaled_wire::DEFAULT_LISTEN)]
    pub(crate) addr: String,
    /// The request in the proto3 JSON mapping (see examples/recommend.json); quantities may
    /// be written the Kubernetes way (`"requests": {"cpu": "500m"}`).
    #[arg(long, value_name = "REQUEST.json")]
    pub(crate) file: PathBuf,
    /// Take the spec from this autoscaling/v2 HorizontalPodAutoscaler manifest (YAML, as
    /// `kubectl get hpa NAME -o yaml` prints it); the request file then carries no spec.
    #[arg(long, value_name = "HPA.yaml")]
    pub(crate) hpa: Option<PathBuf>,
    /// Shadow mode: record the decision as if applied (the next one starts from its count);
    /// scale nothing (docs/shadow.md).
    #[arg(long, conflicts_with = "dry_run")]
    pub(crate) shadow: bool,
    /// Decide with the stored history but record nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    #[arg(long, value_enum, default_value_t)]
    pub(crate) output: crate::client::OutputFormat,
    #[command(flatten)]
    pub(crate) security: crate::client::security::ClientSecurity,
}

/// `autoscalectl history --addr ADDR TARGET_KEY`.
#[derive(Debug, clap::Args)]
pub(crate) struct HistoryArgs {
    /// Server address (`host:port` or `http://host:port`).
    #[arg(long, value_name = "ADDR", env = "AUTOSCALED_ADDR", default_value = autoscaled_wire::DEFAULT_LISTEN)]
    pub(crate) addr: String,
    pub(crate) target_key: String,
    #[arg(long, value_enum, default_value_t)]
    pub(crate) output: crate::client::OutputFormat,
    #[command(flatten)]
    pub(crate) security: crate::client::security::ClientSecurity,
}

/// `autoscalectl get targets`.
#[derive(Debug, clap::Args)]
pub(crate) struct GetArgs {
    #[command(subcommand)]
    pub(crate) what: GetWhat,
}

/// What `get` lists.
#[derive(Debug, Subcommand)]
pub(crate) enum GetWhat {
    /// Every target (under --prefix), one line each, through all pages.
    #[command(visible_alias = "target")]
    Targets(GetTargetsArgs),
    /// Every policy, one line each.
    #[command(visible_alias = "policy")]
    Policies(ServerArgs),
    /// Every scaling group with what its members hold, one line each.
    #[command(visible_alias = "group")]
    Groups(ServerArgs),
}

/// Just a server to talk to.
#[derive(Debug, clap::Args)]
pub(crate) struct ServerArgs {
    /// Server address (`host:port` or `http://host:port`).
    #[arg(long, value_name = "ADDR", env = "AUTOSCALED_ADDR", default_value = autoscaled_wire::DEFAULT_LISTEN)]
    pub(crate) addr: String,
    #[command(flatten)]
    pub(crate) security: crate::client::security::ClientSecurity,
}

/// `autoscalectl apply -f FILE.yaml`.
#[derive(Debug, clap::Args)]
pub(crate) struct ApplyArgs {
    /// YAML (or JSON) documents, each `kind: Policy` or `kind: ScalingGroup`.
    #[arg(short = 'f', long = "filename", value_name = "FILE.yaml")]
    pub(crate) file: PathBuf,
    #[command(flatten)]
    pub(crate) server: ServerArgs,
}

/// `autoscalectl delete target|policy|group NAME`.
#[derive(Debug, clap::Args)]
pub(crate) struct DeleteArgs {
    #[command(subcommand)]
    pub(crate) what: DeleteWhat,
}

/// What `delete` removes.
#[derive(Debug, Subcommand)]
pub(crate) enum DeleteWhat {
    /// A target: everything stored for it (its decisions and the controller's memory), as
    /// deleting an HPA forgets it; what it held in a scaling group is freed.
    Target(DeleteTargetArgs),
    /// A policy (refused while a target's newest decision or a group uses it, unless --force).
    Policy(DeleteNameArgs),
    /// A scaling group (its members decide alone from their next call).
    Group(DeleteNameArgs),
}

/// `autoscalectl delete policy|group NAME`.
#[derive(Debug, clap::Args)]
pub(crate) struct DeleteNameArgs {
    pub(crate) name: String,
    /// Delete a policy even while it is in use.
    #[arg(long)]
    pub(crate) force: bool,
    #[command(flatten)]
    pub(crate) server: ServerArgs,
}

/// `autoscalectl delete target KEY`.
#[derive(Debug, clap::Args)]
pub(crate) struct DeleteTargetArgs {
    pub(crate) target_key: String,
    #[command(flatten)]
    pub(crate) server: ServerArgs,
}

/// `autoscalectl get targets [--prefix P] [-o wide|json|yaml] [--watch]`.
#[derive(Debug, clap::Args)]
pub(crate) struct GetTargetsArgs {
    /// Server address (`host:port` or `http://host:port`).
    #[arg(long, value_name = "ADDR", env = "AUTOSCALED_ADDR", default_value = autoscaled_wire::DEFAULT_LISTEN)]
    pub(crate) addr: String,
    /// Only the targets whose key starts with this.
    #[arg(long, value_name = "P", default_value = "")]
    pub(crate) prefix: String,
    /// wide: more columns; json or yaml: the listing as a ListTargetsResponse. [default: a table]
    #[arg(short = 'o', long, value_enum)]
    pub(crate) output: Option<crate::client::targets::GetOutput>,
    /// List again every --interval until interrupted (Ctrl-C).
    #[arg(short = 'w', long)]
    pub(crate) watch: bool,
    /// Seconds between two listings of --watch (at least 1).
    #[arg(long, value_name = "SECONDS", default_value_t = 5, requires = "watch", value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) interval: u64,
    /// Stop --watch after this many listings.
    #[arg(long, value_name = "N", requires = "watch", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) rounds: Option<u64>,
    #[command(flatten)]
    pub(crate) security: crate::client::security::ClientSecurity,
}

/// `autoscalectl describe target KEY`.
#[derive(Debug, clap::Args)]
pub(crate) struct DescribeArgs {
    #[command(subcommand)]
    pub(crate) what: DescribeWhat,
}

/// What `describe` shows.
#[derive(Debug, Subcommand)]
pub(crate) enum DescribeWhat {
    /// One target: metrics current / target, bounds, conditions, recent decisions.
    Target(DescribeTargetArgs),
    /// One scaling group: its capacity, what each member holds, and its fair share.
    Group(DescribeGroupArgs),
}

/// `autoscalectl describe group NAME`.
#[derive(Debug, clap::Args)]
pub(crate) struct DescribeGroupArgs {
    pub(crate) name: String,
    #[command(flatten)]
    pub(crate) server: ServerArgs,
}

/// `autoscalectl describe target KEY`.
#[derive(Debug, clap::Args)]
pub(crate) struct DescribeTargetArgs {
    /// Server address (`host:port` or `http://host:port`).
    #[arg(long, value_name = "ADDR", env = "AUTOSCALED_ADDR", default_value = autoscaled_wire::DEFAULT_LISTEN)]
    pub(crate) addr: String,
    pub(crate) target_key: String,
    #[command(flatten)]
    pub(crate) security: crate::client::security::ClientSecurity,
}

/// `autoscalectl conformance DIR`.
#[derive(Debug, clap::Args)]
pub(crate) struct ConformanceArgs {
    /// Folder of conformance case files (e.g. conformance/hpa).
    pub(crate) dir: PathBuf,
    /// Send the HPA cases through the server at ADDR (started with --trust-request-time)
    /// instead of the engine.
    #[arg(long, value_name = "ADDR")]
    pub(crate) grpc: Option<String>,
}

/// Parses the command line; bad usage exits 64 (`EX_USAGE`), `--help`/`--version` exit 0.
pub fn parse() -> Result<Cli, ExitCode> {
    Cli::try_parse().map_err(|e| {
        let _ = e.print();
        if e.use_stderr() {
            ExitCode::from(EX_USAGE)
        } else {
            ExitCode::SUCCESS
        }
    })
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Conformance(args) => conformance(args),
        Command::Recommend(args) => crate::client::run(crate::client::recommend(
            &args.addr,
            &args.security,
            &args.file,
            args.hpa.as_deref(),
            crate::client::Mode {
                shadow: args.shadow,
                dry_run: args.dry_run,
            },
            args.output,
        )),
        Command::History(args) => crate::client::run(crate::client::history(
            &args.addr,
            &args.security,
            &args.target_key,
            args.output,
        )),
        Command::Get(GetArgs {
            what: GetWhat::Targets(args),
        }) => crate::client::run(crate::client::targets::get_targets(
            &args.addr,
            &args.security,
            &args.prefix,
            args.output,
            args.watch.then_some(crate::client::targets::Watch {
                interval: std::time::Duration::from_secs(args.interval),
                rounds: args.rounds,
            }),
        )),
        Command::Describe(DescribeArgs {
            what: DescribeWhat::Target(args),
        }) => crate::client::run(crate::client::targets::describe_target(
            &args.addr,
            &args.security,
            &args.target_key,
        )),
        Command::Get(GetArgs {
            what: GetWhat::Policies(args),
        }) => crate::client::run(crate::client::policies::get_policies(
            &args.addr,
            &args.security,
        )),
        Command::Get(GetArgs {
            what: GetWhat::Groups(args),
        }) => crate::client::run(crate::client::policies::get_groups(
            &args.addr,
            &args.security,
        )),
        Command::Describe(DescribeArgs {
            what: DescribeWhat::Group(args),
        }) => crate::client::run(crate::client::policies::describe_group(
            &args.server.addr,
            &args.server.security,
            &args.name,
        )),
        Command::Apply(args) => crate::client::run(crate::client::policies::apply(
            &args.server.addr,
            &args.server.security,
            &args.file,
        )),
        Command::Delete(DeleteArgs {
            what: DeleteWhat::Target(args),
        }) => crate::client::run(crate::client::targets::delete_target(
            &args.server.addr,
            &args.server.security,
            &args.target_key,
        )),
        Command::Delete(DeleteArgs { what }) => {
            let (what, args) = match what {
                DeleteWhat::Policy(args) => ("policy", args),
                DeleteWhat::Group(args) => ("group", args),
                DeleteWhat::Target(_) => unreachable!("matched above"),
            };
            crate::client::run(crate::client::policies::delete(
                &args.server.addr,
                &args.server.security,
                what,
                &args.name,
                args.force,
            ))
        }
        Command::Simulate(args) => crate::client::run(crate::whatif::simulate_command(args)),
        Command::Record(args) => crate::whatif::record::run(args),
        Command::Report(args) => crate::client::run(crate::whatif::report::report_command(args)),
    }
}

fn conformance(args: ConformanceArgs) -> ExitCode {
    if let Some(addr) = &args.grpc {
        return crate::conformance::grpc::run_command(addr, &args.dir);
    }
    let report = crate::conformance::run_dir(&args.dir);
    let printed = crate::client::print_stdout(&report.to_string());
    if report.success() {
        printed
    } else {
        ExitCode::FAILURE
    }
}
