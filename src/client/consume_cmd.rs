//! `fetchbench consume`: fetchbench's consumer ([`crate::client::consumer`]) on the command
//! line, printing one record per line as kcat does (`--format`, kcat's `-f` tokens), or with
//! `--count` only the throughput.
//!
//! Without `--group` the consumer assigns itself the topic's partitions (all, or
//! `--partition`), starting at `--offset` (a number, `beginning` or `end`; `--from-beginning`
//! is `--offset beginning`; default `end`, as kcat). With `--group` it subscribes in that group
//! (`--from-beginning` sets `auto.offset.reset=earliest` for partitions without a committed
//! offset). `--exit-at-end` stops once every assigned partition reached the high watermark of
//! its last fetch (kcat `-e`). `-X key=value` sets any consumer config by Kafka's name.
//!
//! Commits (with a group and `enable.auto.commit`, the default) store exactly what was printed:
//! `--max-records N` caps `max.poll.records` at N, and records a poll returned but that were
//! not printed (past N, or after stdout closed) are rewound with `seek` before the consumer
//! closes, so the closing commit of each partition is its last printed offset + 1, as kcat
//! `-c N` commits (Kafka's auto-commit stores the positions of the records `poll` returned).
//!
//! Internal topics (`__consumer_offsets`) are read like any other by assignment (`--partition`,
//! `--offset`, or the whole topic) and in a group (subscribed by name), records printed raw
//! (`log dump --print-records` decodes them).

use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::consumer::{Consumer, ConsumerConfig, ConsumerError, ConsumerRecord, TopicPartition};

/// Arguments of `fetchbench consume`.
#[derive(clap::Args, Debug, Clone)]
pub struct ConsumeArgs {
    /// The broker(s), `host:port[,host:port...]` (`bootstrap.servers`).
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub bootstrap: String,
    /// The topic.
    #[arg(long)]
    pub topic: String,
    /// Consume in this consumer group (subscribe; commits as `enable.auto.commit` says).
    #[arg(long)]
    pub group: Option<String>,
    /// Only this partition (without `--group`; default: every partition of the topic).
    #[arg(long, conflicts_with = "group")]
    pub partition: Option<i32>,
    /// Start offset without `--group`: a number, `beginning` or `end` (default `end`).
    #[arg(long, conflicts_with = "group")]
    pub offset: Option<String>,
    /// Start at the beginning (`--offset beginning`; in a group, `auto.offset.reset=earliest`).
    #[arg(long)]
    pub from_beginning: bool,
    /// Exit once every assigned partition reached its end (kcat `-e`): the high watermark, the
    /// last stable offset under `isolation.level=read_committed`.
    #[arg(long)]
    pub exit_at_end: bool,
    /// Print no records, only the count and throughput (records/s, MB/s of keys and values).
    #[arg(long)]
    pub count: bool,
    /// Stop after this many records (kcat `-c`); in a group, commit exactly those.
    #[arg(long)]
    pub max_records: Option<u64>,
    /// Output format per record, kcat's `-f` tokens: `%t` topic, `%p` partition, `%o` offset,
    /// `%k` key, `%s` value, `%T` timestamp, `%S` value size, `%K` key size, `%h` headers,
    /// `\n`, `\t`, `%%`.
    #[arg(long, default_value = "%s\\n")]
    pub format: String,
    /// A consumer config with Kafka's name, `key=value` (repeatable), e.g.
    /// `-X fetch.max.wait.ms=100 -X check.crcs=false`.
    #[arg(short = 'X', value_name = "KEY=VALUE")]
    pub config: Vec<String>,
}

/// What a run consumed.
#[derive(Clone, Debug, PartialEq)]
pub struct ConsumeSummary {
    /// Records consumed.
    pub records: u64,
    /// Bytes of keys and values consumed.
    pub bytes: u64,
    /// Seconds from the start of the first poll (after assigning and seeking; in a group,
    /// before joining) to the arrival of the last record.
    pub seconds: f64,
}

impl ConsumeSummary {
    /// Records per second (0 when nothing was timed).
    pub fn records_per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.records as f64 / self.seconds
        } else {
            0.0
        }
    }
    /// MB (10^6 bytes) of keys and values per second.
    pub fn megabytes_per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.bytes as f64 / 1e6 / self.seconds
        } else {
            0.0
        }
    }
}

/// Builds the consumer config of `args`.
///
/// Errors: [`ConsumerError::Config`] for a bad `-X`.
pub fn config_of(args: &ConsumeArgs) -> Result<ConsumerConfig, ConsumerError> {
    let mut config = ConsumerConfig::new(args.bootstrap.clone());
    config.client_id = "fetchbench-consume".into();
    if let Some(g) = &args.group {
        config.group_id = Some(g.clone());
    }
    if args.from_beginning {
        config.set("auto.offset.reset", "earliest")?;
    }
    for kv in &args.config {
        let (k, v) = kv.split_once('=').ok_or_else(|| ConsumerError::Config {
            key: kv.clone(),
            value: String::new(),
            reason: "expected key=value".into(),
        })?;
        config.set(k.trim(), v.trim())?;
    }
    if let Some(max) = args.max_records {
        // No poll hands out more than `--max-records` (Kafka's `max.poll.records`); what one
        // poll returns beyond the records still to print is rewound before the commit.
        let max = usize::try_from(max).unwrap_or(usize::MAX).max(1);
        config.max_poll_records = config.max_poll_records.min(max);
    }
    Ok(config)
}

/// Runs `fetchbench consume`, writing records (or, with `--count`, nothing) to `out`.
///
/// Errors: [`ConsumerError`]; writing to `out` failing (a closed pipe) ends the run normally.
pub fn run(args: &ConsumeArgs, out: &mut dyn Write) -> Result<ConsumeSummary, ConsumerError> {
    run_until(args, out, &AtomicBool::new(false))
}

/// [`run`], also ending (consumer closed: commit, LeaveGroup) once `stop` is set, checked after
/// every poll (at most 200 ms apart).
///
/// Errors: as [`run`].
pub fn run_until(args: &ConsumeArgs, out: &mut dyn Write, stop: &AtomicBool) -> Result<ConsumeSummary, ConsumerError> {
    let config = config_of(args)?;
    let mut consumer = Consumer::new(config)?;
    if args.group.is_some() {
        consumer.subscribe(&[args.topic.as_str()])?;
    } else {
        let partitions: Vec<TopicPartition> = match args.partition {
            Some(p) => vec![(args.topic.clone(), p)],
            None => {
                let n = consumer.partition_count(&args.topic)?.ok_or_else(|| ConsumerError::Kafka {
                    context: format!("Metadata {}: no such topic", args.topic),
                    code: 3,
                })?;
                (0..n).map(|p| (args.topic.clone(), p)).collect()
            }
        };
        consumer.assign(&partitions)?;
        let offset = if args.from_beginning { Some("beginning") } else { args.offset.as_deref() };
        match offset.unwrap_or("end") {
            "beginning" | "earliest" => consumer.seek_to_beginning(&partitions)?,
            "end" | "latest" => consumer.seek_to_end(&partitions)?,
            n => {
                let o: i64 = n.parse().map_err(|_| ConsumerError::Config {
                    key: "--offset".into(),
                    value: n.into(),
                    reason: "expected a number, beginning or end".into(),
                })?;
                for tp in &partitions {
                    consumer.seek(tp, o)?;
                }
            }
        }
    }
    let format = Format::parse(&args.format);
    let mut summary = ConsumeSummary { records: 0, bytes: 0, seconds: 0.0 };
    let start = Instant::now();
    let mut last = start;
    let mut line = Vec::with_capacity(4096);
    let reached_max = |records: u64| args.max_records.is_some_and(|m| records >= m);
    loop {
        if reached_max(summary.records) {
            break;
        }
        let records = consumer.poll(Duration::from_millis(200))?;
        let mut delivered = 0;
        let mut pipe_closed = false;
        for r in &records {
            if reached_max(summary.records) {
                break;
            }
            if !args.count {
                line.clear();
                format.write(r, &mut line);
                if out.write_all(&line).is_err() {
                    pipe_closed = true;
                    break;
                }
            }
            delivered += 1;
            summary.records += 1;
            summary.bytes += (r.key.as_ref().map_or(0, |k| k.len()) + r.value.as_ref().map_or(0, |v| v.len())) as u64;
        }
        if delivered < records.len() {
            // The rest of this poll was not delivered: positions go back to it, so the commit
            // at close (auto-commit) stores last delivered + 1, not the end of the poll.
            rewind(&mut consumer, &records[delivered..])?;
        }
        if pipe_closed {
            break;
        }
        if !records.is_empty() {
            last = Instant::now();
            // Each poll's records are visible at once (a pipe, a terminal), as kcat's are.
            if !args.count && out.flush().is_err() {
                break;
            }
        }
        if stop.load(Ordering::SeqCst) || args.exit_at_end && at_end(&mut consumer)? {
            break;
        }
    }
    let _ = out.flush();
    summary.seconds = last.duration_since(start).as_secs_f64();
    consumer.close()?;
    Ok(summary)
}

/// Seeks every partition of `undelivered` (records `poll` returned that were not printed, in
/// poll order) back to its first such record, so that positions, and the offsets a commit
/// stores, end after the last delivered record (Kafka's `seek` before `commitSync`).
///
/// Errors: as [`Consumer::seek`] (the records' partitions are assigned, so none in practice).
fn rewind(consumer: &mut Consumer, undelivered: &[ConsumerRecord]) -> Result<(), ConsumerError> {
    let mut first: BTreeMap<TopicPartition, i64> = BTreeMap::new();
    for r in undelivered {
        first.entry((r.topic.to_string(), r.partition)).or_insert(r.offset);
    }
    for (tp, offset) in &first {
        consumer.seek(tp, *offset)?;
    }
    Ok(())
}

/// Whether every assigned partition's position reached its last known end
/// ([`Consumer::end_offset`]: the high watermark, the last stable offset under read_committed).
fn at_end(consumer: &mut Consumer) -> Result<bool, ConsumerError> {
    let assignment = consumer.assignment();
    if assignment.is_empty() {
        return Ok(false);
    }
    for tp in &assignment {
        let Some(end) = consumer.end_offset(tp) else { return Ok(false) };
        if consumer.position(tp)? < end {
            return Ok(false);
        }
    }
    Ok(true)
}

/// `fetchbench consume`: runs [`run`] on stdout, prints `--count`'s figures and errors.
///
/// SIGINT and SIGTERM (Ctrl-C) end the run as `--exit-at-end` does: the consumer is closed
/// (auto-commit, LeaveGroup) and the figures printed; a second signal exits at once (130).
pub fn main(args: ConsumeArgs) -> ExitCode {
    let stop = Arc::new(AtomicBool::new(false));
    catch_stop_signals(Arc::clone(&stop));
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    match run_until(&args, &mut out, &stop) {
        Ok(s) => {
            drop(out);
            if args.count {
                println!(
                    "{} records, {} bytes in {:.3} s: {:.0} records/s, {:.1} MB/s",
                    s.records,
                    s.bytes,
                    s.seconds,
                    s.records_per_second(),
                    s.megabytes_per_second()
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            drop(out);
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Blocks SIGINT and SIGTERM in this thread (before the consumer starts its threads, which
/// inherit the mask) and waits for them with `sigwait` on a thread of its own: the first sets
/// `stop`, the second exits with 130. No signal handler runs.
fn catch_stop_signals(stop: Arc<AtomicBool>) {
    use nix::sys::signal::{SigSet, Signal};
    let mut signals = SigSet::empty();
    signals.add(Signal::SIGINT);
    signals.add(Signal::SIGTERM);
    if signals.thread_block().is_err() {
        return;
    }
    let spawned = std::thread::Builder::new().name("consume-signals".into()).spawn(move || {
        if signals.wait().is_ok() {
            stop.store(true, Ordering::SeqCst);
        }
        if signals.wait().is_ok() {
            std::process::exit(130);
        }
    });
    if spawned.is_err() {
        let _ = SigSet::empty().thread_set_mask();
    }
}

/// A parsed `--format`.
#[derive(Debug)]
struct Format(Vec<Token>);

#[derive(Debug)]
enum Token {
    Literal(Vec<u8>),
    Topic,
    Partition,
    Offset,
    Key,
    Value,
    Timestamp,
    ValueSize,
    KeySize,
    Headers,
}

impl Format {
    fn parse(f: &str) -> Self {
        let mut tokens = Vec::new();
        let mut lit = Vec::new();
        let mut chars = f.chars().peekable();
        while let Some(c) = chars.next() {
            let token = match (c, chars.peek().copied()) {
                ('%', Some(n)) => {
                    chars.next();
                    match n {
                        't' => Token::Topic,
                        'p' => Token::Partition,
                        'o' => Token::Offset,
                        'k' => Token::Key,
                        's' => Token::Value,
                        'T' => Token::Timestamp,
                        'S' => Token::ValueSize,
                        'K' => Token::KeySize,
                        'h' => Token::Headers,
                        other => {
                            if other != '%' {
                                lit.push(b'%');
                            }
                            let mut b = [0u8; 4];
                            lit.extend_from_slice(other.encode_utf8(&mut b).as_bytes());
                            continue;
                        }
                    }
                }
                ('\\', Some(n @ ('n' | 't' | '\\'))) => {
                    chars.next();
                    lit.push(match n {
                        'n' => b'\n',
                        't' => b'\t',
                        _ => b'\\',
                    });
                    continue;
                }
                _ => {
                    let mut b = [0u8; 4];
                    lit.extend_from_slice(c.encode_utf8(&mut b).as_bytes());
                    continue;
                }
            };
            if !lit.is_empty() {
                tokens.push(Token::Literal(std::mem::take(&mut lit)));
            }
            tokens.push(token);
        }
        if !lit.is_empty() {
            tokens.push(Token::Literal(lit));
        }
        Format(tokens)
    }

    fn write(&self, r: &ConsumerRecord, out: &mut Vec<u8>) {
        for t in &self.0 {
            match t {
                Token::Literal(l) => out.extend_from_slice(l),
                Token::Topic => out.extend_from_slice(r.topic.as_bytes()),
                Token::Partition => out.extend_from_slice(r.partition.to_string().as_bytes()),
                Token::Offset => out.extend_from_slice(r.offset.to_string().as_bytes()),
                Token::Key => out.extend_from_slice(r.key.as_deref().unwrap_or(b"")),
                Token::Value => out.extend_from_slice(r.value.as_deref().unwrap_or(b"")),
                Token::Timestamp => out.extend_from_slice(r.timestamp.to_string().as_bytes()),
                Token::ValueSize => {
                    out.extend_from_slice(r.value.as_ref().map_or(-1, |v| v.len() as i64).to_string().as_bytes())
                }
                Token::KeySize => {
                    out.extend_from_slice(r.key.as_ref().map_or(-1, |k| k.len() as i64).to_string().as_bytes())
                }
                Token::Headers => {
                    for (i, h) in r.headers.iter().enumerate() {
                        if i > 0 {
                            out.push(b',');
                        }
                        out.extend_from_slice(&h.key);
                        out.push(b'=');
                        out.extend_from_slice(h.value.as_deref().unwrap_or(b""));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_tokens() {
        let r = ConsumerRecord {
            topic: "t".into(),
            partition: 3,
            offset: 42,
            timestamp: 7,
            timestamp_type: crate::client::consumer::TimestampType::CreateTime,
            key: Some(bytes::Bytes::from_static(b"k")),
            value: Some(bytes::Bytes::from_static(b"val")),
            headers: Vec::new(),
        };
        let mut out = Vec::new();
        Format::parse("%t/%p@%o %k=%s %S %K 100%% %x\\n").write(&r, &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), "t/3@42 k=val 3 1 100% %x\n");
    }
}
