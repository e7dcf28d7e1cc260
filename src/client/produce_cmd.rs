//! `fetchbench produce`: load a topic with the [`Producer`] and print the throughput, the way
//! Kafka's `kafka-producer-perf-test.sh` does.
//!
//! ## Record layout
//!
//! Every record value is `--record-size` bytes (at least 8):
//!
//! ```text
//! offset  size  field
//!  0       8    send timestamp: nanoseconds since the Unix epoch, big-endian u64, taken just
//!               before `send` (a consumer computes end-to-end latency from it)
//!  8       ..   filler: bytes of `--payload-file` (cycled), else random uppercase ASCII letters
//!               (kafka-producer-perf-test's payload: compressible like text, not like zeros)
//! ```
//!
//! Keys (`--key-distribution`): `none` (null keys: the sticky partitioner), `sequential` (the
//! record number in decimal ASCII, `0`, `1`, ...), `random:K` (a uniformly random number in
//! `0..K` in decimal ASCII). Keyed records are partitioned by murmur2, as Kafka's producer does.
//!
//! ## Transactions
//!
//! With `-X transactional.id=ID` and `--transaction-records N`, the producer is transactional
//! (`init_transactions` before the clock starts) and each group of `N` records is one
//! transaction, committed after its last record (the last one may hold fewer). With
//! `--abort-every K`, every `K`-th transaction (the `K`-th, `2K`-th, ...) is flushed (its
//! records written to the log) and then aborted instead: a log of committed and aborted
//! transactions, for `read_committed` consumers. The summary adds the transactions committed
//! and aborted and the records of the aborted ones (they count in the records and bytes sent).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::producer::{Producer, ProducerConfig, ProducerError, ProducerStats};
use crate::log::batch::Compression;

/// How record keys are chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyDistribution {
    /// Null keys.
    None,
    /// The record number, decimal.
    Sequential,
    /// A uniformly random number in `0..K`, decimal.
    Random(u64),
}

impl std::str::FromStr for KeyDistribution {
    type Err = String;

    /// Parses `none`, `sequential` or `random:K` (K >= 1).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(KeyDistribution::None),
            "sequential" => Ok(KeyDistribution::Sequential),
            _ => match s.strip_prefix("random:").map(str::parse::<u64>) {
                Some(Ok(k)) if k > 0 => Ok(KeyDistribution::Random(k)),
                _ => Err(format!("{s:?}: expected none, sequential or random:K with K >= 1")),
            },
        }
    }
}

/// Parses a byte count: `4096`, `64K`, `64KiB`, `1M`, `2GiB`, `1.5G` (suffixes are powers of
/// 1024; `B` or none means bytes).
///
/// Errors: a message naming the input.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        other => return Err(format!("unknown unit {other:?} in {s:?} (use K, M, G, T or KiB, MiB, GiB, TiB)")),
    };
    let value: f64 = num.parse().map_err(|_| format!("{s:?} is not a byte count like 4096, 64KiB or 1GiB"))?;
    let bytes = value * mult as f64;
    if !(0.0..=u64::MAX as f64).contains(&bytes) {
        return Err(format!("{s:?} is out of range"));
    }
    Ok(bytes as u64)
}

/// Arguments of `fetchbench produce`.
#[derive(clap::Args, Clone, Debug)]
pub struct ProduceArgs {
    /// The broker(s), `host:port[,host:port...]` (`bootstrap.servers`).
    #[arg(long)]
    pub bootstrap: String,
    /// The topic (created by the broker's auto-creation when missing).
    #[arg(long)]
    pub topic: String,
    /// Records to send. Default 1000000 unless `--bytes` is given.
    #[arg(long, conflicts_with = "bytes")]
    pub num_records: Option<u64>,
    /// Value bytes to send (K/M/G/KiB/MiB/GiB suffixes are powers of 1024): `bytes / record-size` records.
    #[arg(long, value_parser = parse_bytes)]
    pub bytes: Option<u64>,
    /// Value size of each record, bytes (at least 8: the send timestamp).
    #[arg(long, value_parser = parse_bytes, default_value = "100")]
    pub record_size: u64,
    /// Keys: none, sequential, random:K.
    #[arg(long, default_value = "none")]
    pub key_distribution: KeyDistribution,
    /// Filler bytes after the timestamp come from this file (cycled).
    #[arg(long)]
    pub payload_file: Option<PathBuf>,
    /// Records per second to send at most (default: as fast as possible).
    #[arg(long)]
    pub rate: Option<f64>,
    /// `compression.type`: none, gzip, snappy, lz4, zstd.
    #[arg(long)]
    pub compression: Option<Compression>,
    /// A producer config with Kafka's name, `key=value` (repeatable): `acks`, `batch.size`,
    /// `linger.ms`, `enable.idempotence`, `max.in.flight.requests.per.connection`, ... Wins over
    /// `--compression`.
    #[arg(short = 'X', value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// Records per transaction (needs `-X transactional.id=ID`): each group of N records is one
    /// transaction, committed after its last record.
    #[arg(long, value_name = "N")]
    pub transaction_records: Option<u64>,
    /// Abort every K-th transaction (after flushing its records to the log) instead of
    /// committing it (needs `--transaction-records`).
    #[arg(long, value_name = "K", requires = "transaction_records")]
    pub abort_every: Option<u64>,
}

/// What one run produced.
#[derive(Clone, Debug, PartialEq)]
pub struct ProduceSummary {
    /// Records acknowledged (written, with `acks=0`).
    pub records: u64,
    /// Value bytes of the acknowledged records.
    pub bytes: u64,
    /// From the first send to the end of the final flush, seconds.
    pub seconds: f64,
    /// Records that failed.
    pub errors: u64,
    /// The first delivery error, when there was one.
    pub first_error: Option<String>,
    /// The producer's counters.
    pub stats: ProducerStats,
    /// Transactions committed (0 without `--transaction-records`).
    pub transactions_committed: u64,
    /// Transactions aborted (`--abort-every`).
    pub transactions_aborted: u64,
    /// Records of the aborted transactions (written to the log, never committed).
    pub records_aborted: u64,
}

impl ProduceSummary {
    /// Records per second.
    pub fn records_per_second(&self) -> f64 {
        self.records as f64 / self.seconds.max(1e-9)
    }
    /// Value megabytes (10^6 bytes) per second.
    pub fn mb_per_second(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.seconds.max(1e-9)
    }
    /// One line: records, bytes, seconds, records/s, MB/s, errors, then batch counts; with
    /// transactions, `, C transactions committed, A aborted (R records)` after them.
    pub fn line(&self) -> String {
        let mut line = self.counts_line();
        if self.transactions_committed + self.transactions_aborted > 0 {
            line.push_str(&format!(
                ", {} transactions committed, {} aborted ({} records)",
                self.transactions_committed, self.transactions_aborted, self.records_aborted
            ));
        }
        line
    }

    fn counts_line(&self) -> String {
        format!(
            "{} records, {} bytes in {:.3} s: {:.0} records/s, {:.2} MB/s, {} errors ({} batches, {} requests, {} batch bytes sent, {} retries)",
            self.records,
            self.bytes,
            self.seconds,
            self.records_per_second(),
            self.mb_per_second(),
            self.errors,
            self.stats.batches_sent,
            self.stats.requests_sent,
            self.stats.batch_bytes_sent,
            self.stats.retries,
        )
    }
}

/// Errors of `fetchbench produce` before or around the run (delivery errors are counted in the
/// summary instead).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProduceCmdError {
    /// An argument is invalid.
    #[error("{0}")]
    Args(String),
    /// The payload file could not be read.
    #[error("reading --payload-file {path}: {source}")]
    PayloadFile {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The producer failed (config, connection, metadata).
    #[error("{0}")]
    Producer(#[from] ProducerError),
}

/// xorshift64*: the filler and random keys (quality is irrelevant, speed is not).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Writes `n` in decimal into `buf`, returning the digits.
fn decimal(n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    let mut n = n;
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

/// Runs the load: sends the records, flushes, closes. `progress` gets the summary line.
///
/// Errors: [`ProduceCmdError`] for bad arguments, an unreadable payload file, or a producer that
/// cannot start (config, bootstrap, metadata).
pub fn run(args: &ProduceArgs) -> Result<ProduceSummary, ProduceCmdError> {
    if args.record_size < 8 {
        return Err(ProduceCmdError::Args(format!(
            "--record-size {} is below 8 bytes (the send timestamp)",
            args.record_size
        )));
    }
    let record_size = args.record_size as usize;
    let records = match (args.num_records, args.bytes) {
        (Some(n), _) => n,
        (None, Some(b)) => b / args.record_size,
        (None, None) => 1_000_000,
    };
    let mut pairs: Vec<(String, String)> = vec![("bootstrap.servers".into(), args.bootstrap.clone())];
    if let Some(c) = args.compression {
        pairs.push(("compression.type".into(), c.name().into()));
    }
    for kv in &args.overrides {
        let (k, v) = kv.split_once('=').ok_or_else(|| ProduceCmdError::Args(format!("-X {kv}: expected key=value")))?;
        pairs.push((k.trim().into(), v.trim().into()));
    }
    let config = ProducerConfig::from_pairs(&pairs)?;
    let transaction_records = match (args.transaction_records, &config.transactional_id) {
        (Some(0), _) => return Err(ProduceCmdError::Args("--transaction-records must be at least 1".into())),
        (Some(n), Some(_)) => Some(n),
        (Some(_), None) => {
            return Err(ProduceCmdError::Args(
                "--transaction-records needs a transactional producer: -X transactional.id=ID".into(),
            ))
        }
        (None, Some(id)) => {
            return Err(ProduceCmdError::Args(format!(
                "-X transactional.id={id} needs --transaction-records N (records per transaction)"
            )))
        }
        (None, None) => None,
    };
    if args.abort_every == Some(0) {
        return Err(ProduceCmdError::Args("--abort-every must be at least 1".into()));
    }
    // Filler pool: a record's filler is a window of it starting at a moving position.
    let pool_len = (1 << 20) + record_size;
    let pool: Vec<u8> = match &args.payload_file {
        Some(path) => {
            let data =
                std::fs::read(path).map_err(|source| ProduceCmdError::PayloadFile { path: path.clone(), source })?;
            if data.is_empty() {
                return Err(ProduceCmdError::Args(format!("--payload-file {} is empty", path.display())));
            }
            data.iter().copied().cycle().take(pool_len).collect()
        }
        None => {
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
            (0..pool_len).map(|_| b'A' + (rng.next() % 26) as u8).collect()
        }
    };
    let max_block = Duration::from_millis(config.max_block_ms);
    let producer = Producer::new(config)?;
    // Metadata (and the producer id of a transactional producer) before the clock starts (as
    // the perf test's first send would pay for it).
    producer.partitions(&args.topic)?;
    let mut txn =
        transaction_records.map(|n| Transactions { records: n, abort_every: args.abort_every, ..Default::default() });
    if txn.is_some() {
        producer.init_transactions(max_block)?;
    }
    let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ records);
    let mut value = vec![0u8; record_size];
    let mut key_buf = [0u8; 20];
    let mut first_error: Option<String> = None;
    let filler = record_size - 8;
    let mut pos = 0usize;
    // A prime stride: consecutive records get different filler windows.
    let stride = 4099;
    let start = Instant::now();
    let interval = args.rate.filter(|r| *r > 0.0).map(|r| 1.0 / r);
    for i in 0..records {
        if let Some(interval) = interval {
            let due = start + Duration::from_secs_f64(i as f64 * interval);
            let now = Instant::now();
            if due > now + Duration::from_micros(200) {
                std::thread::sleep(due - now);
            }
        }
        value[8..].copy_from_slice(&pool[pos..pos + filler]);
        pos = (pos + stride) % (1 << 20);
        let key: Option<&[u8]> = match args.key_distribution {
            KeyDistribution::None => None,
            KeyDistribution::Sequential => Some(decimal(i, &mut key_buf)),
            KeyDistribution::Random(k) => Some(decimal(rng.next() % k, &mut key_buf)),
        };
        if let Some(t) = txn.as_mut() {
            if let Err(e) = t.before_record(&producer, max_block) {
                first_error.get_or_insert_with(|| e.to_string());
                break;
            }
        }
        let ns = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        value[..8].copy_from_slice(&ns.to_be_bytes());
        if let Err(e) = producer.send(&args.topic, None, key, Some(&value), &[], Some((ns / 1_000_000) as i64)) {
            first_error.get_or_insert_with(|| e.to_string());
            break;
        }
    }
    if let Some(t) = txn.as_mut() {
        if first_error.is_none() {
            if let Err(e) = t.end(&producer, max_block) {
                first_error.get_or_insert_with(|| e.to_string());
            }
        } else if t.in_transaction > 0 {
            // Best effort: do not leave the transaction open until the coordinator's timeout.
            let _ = producer.abort_transaction(max_block);
        }
    }
    producer.flush()?;
    let seconds = start.elapsed().as_secs_f64();
    producer.close()?;
    let stats = producer.stats();
    if first_error.is_none() {
        first_error = producer.first_error().map(|e| e.to_string());
    }
    Ok(ProduceSummary {
        records: stats.records_acked,
        bytes: stats.records_acked * args.record_size,
        seconds,
        errors: stats.records_failed + (stats.records_sent < records) as u64 * (records - stats.records_sent),
        first_error,
        stats,
        transactions_committed: txn.as_ref().map_or(0, |t| t.committed),
        transactions_aborted: txn.as_ref().map_or(0, |t| t.aborted),
        records_aborted: txn.as_ref().map_or(0, |t| t.records_aborted),
    })
}

/// The transactions of a run with `--transaction-records`.
#[derive(Debug, Default)]
struct Transactions {
    /// Records per transaction.
    records: u64,
    /// Abort every K-th transaction.
    abort_every: Option<u64>,
    /// Records sent in the open transaction (0: none open).
    in_transaction: u64,
    committed: u64,
    aborted: u64,
    records_aborted: u64,
}

impl Transactions {
    /// Before a record: ends a full transaction, and begins one when none is open.
    fn before_record(&mut self, producer: &Producer, timeout: Duration) -> Result<(), ProducerError> {
        if self.in_transaction == self.records {
            self.end(producer, timeout)?;
        }
        if self.in_transaction == 0 {
            producer.begin_transaction()?;
        }
        self.in_transaction += 1;
        Ok(())
    }

    /// Commits the open transaction, or (every `abort_every`-th) flushes and aborts it.
    fn end(&mut self, producer: &Producer, timeout: Duration) -> Result<(), ProducerError> {
        if self.in_transaction == 0 {
            return Ok(());
        }
        let number = self.committed + self.aborted + 1;
        if self.abort_every.is_some_and(|k| number.is_multiple_of(k)) {
            producer.flush()?;
            producer.abort_transaction(timeout)?;
            self.aborted += 1;
            self.records_aborted += self.in_transaction;
        } else {
            producer.commit_transaction(timeout)?;
            self.committed += 1;
        }
        self.in_transaction = 0;
        Ok(())
    }
}

/// `fetchbench produce`: [`run`], then the summary on stdout. Exit 0 when every record was
/// delivered (and every transaction ended as asked), 1 when some failed, 2 when the run could
/// not start.
pub fn main(args: ProduceArgs) -> ExitCode {
    match run(&args) {
        Ok(summary) => {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", summary.line());
            if let Some(e) = &summary.first_error {
                let _ = writeln!(std::io::stderr().lock(), "first error: {e}");
            }
            if summary.errors == 0 && summary.first_error.is_none() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            let _ = writeln!(std::io::stderr().lock(), "error: {e}");
            ExitCode::from(2)
        }
    }
}
