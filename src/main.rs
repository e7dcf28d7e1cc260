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
    /// invalid (or nothing was found to check), naming the file and position; 2 on an I/O error.
    Dump(DumpArgs),
}

#[derive(Args)]
struct DumpArgs {
    /// Files (`.log`, `.index`, `.timeindex`) or directories (searched recursively).
    #[arg(required_unless_present = "files")]
    paths: Vec<PathBuf>,
    /// Kafka's spelling: comma-separated files to dump (same as the positional paths).
    #[arg(long, value_delimiter = ',')]
    files: Vec<PathBuf>,
    /// Decode every record (decompressing) and check every index entry against its `.log`;
    /// print one line per file, the problems and a summary.
    #[arg(long)]
    verify: bool,
    /// Print record keys and values: `__consumer_offsets` records decoded, control records and
    /// KRaft metadata records described (Kafka: `--print-data-log`).
    #[arg(long, alias = "print-data-log")]
    print_records: bool,
    /// Accepted for Kafka compatibility: records are always iterated (Kafka's `--deep-iteration`).
    #[arg(long, hide = true)]
    deep_iteration: bool,
    /// Accepted for Kafka compatibility: `__consumer_offsets` partitions are always decoded
    /// (Kafka's `--offsets-decoder`).
    #[arg(long, hide = true)]
    offsets_decoder: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt().with_max_level(cli.log_level).with_writer(std::io::stderr).init();
    match cli.command {
        Command::Log(LogCommand::Dump(a)) => log_dump(a),
    }
}

/// Writes a line to stderr, ignoring a closed stderr (never panics, unlike `eprintln!`).
fn say(msg: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "{msg}");
}

fn log_dump(a: DumpArgs) -> ExitCode {
    let opts = DumpOptions { verify: a.verify, print_records: a.print_records };
    let paths: Vec<PathBuf> = a.paths.into_iter().chain(a.files).collect();
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let result = dump::dump_paths(&paths, &opts, &mut out).and_then(|s| {
        out.flush().map_err(|e| fetchbench::log::LogError::io("write", "<output>", e))?;
        Ok(s)
    });
    match result {
        Ok(summary) if summary.problems.is_empty() => ExitCode::SUCCESS,
        Ok(summary) => {
            for p in &summary.problems {
                say(format_args!("invalid: {p}"));
            }
            ExitCode::from(1)
        }
        // The reader went away (`| head`): stop quietly, as Unix tools do.
        Err(fetchbench::log::LogError::Io { source, .. }) if source.kind() == std::io::ErrorKind::BrokenPipe => {
            ExitCode::SUCCESS
        }
        Err(e) => {
            say(format_args!("error: {e}"));
            ExitCode::from(2)
        }
    }
}
