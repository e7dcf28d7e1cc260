//! The `fetchbench` command line.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use fetchbench::log::dump::{self, DumpOptions};

/// fetchbench: what it costs to move Kafka log data from disk to consumers.
#[derive(Parser)]
#[command(name = "fetchbench", version, about)]
struct Cli {
    /// Log level filter (error, warn, info, debug, trace).
    #[arg(long, global = true, default_value = "warn")]
    log_level: tracing::Level,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Tools for Kafka log directories and segment files.
    #[command(subcommand)]
    Log(LogCommand),
}

#[derive(Subcommand)]
enum LogCommand {
    /// Print batches, records and index entries of `.log`, `.index` and `.timeindex` files, like
    /// Kafka's `kafka-dump-log.sh --deep-iteration`. Exits 1 when any CRC, batch or index entry is
    /// invalid, naming the file and position.
    Dump(DumpArgs),
}

#[derive(Args)]
struct DumpArgs {
    /// Files (`.log`, `.index`, `.timeindex`) or directories (searched recursively).
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Decode every record (decompressing) and check every index entry against the log; print
    /// only problems and a summary.
    #[arg(long)]
    verify: bool,
    /// Print record keys and values (`__consumer_offsets` records decoded).
    #[arg(long)]
    print_records: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt().with_max_level(cli.log_level).with_writer(std::io::stderr).init();
    match cli.command {
        Command::Log(LogCommand::Dump(a)) => {
            let opts = DumpOptions { verify: a.verify, print_records: a.print_records };
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            let summary = match dump::dump_paths(&a.paths, &opts, &mut out) {
                Ok(s) => s,
                Err(e) => {
                    let _ = out.flush();
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            let _ = out.flush();
            if summary.problems.is_empty() {
                ExitCode::SUCCESS
            } else {
                for p in &summary.problems {
                    eprintln!("invalid: {p}");
                }
                ExitCode::from(1)
            }
        }
    }
}
