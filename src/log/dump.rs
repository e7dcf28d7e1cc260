//! `fetchbench log dump`: Kafka's `kafka-dump-log.sh --deep-iteration`, with verification.
//!
//! For a `.log`: per batch its offsets, record count, position, size, magic, codec, CRC validity,
//! timestamps and producer state; per record its offset, timestamp, key and value sizes and header
//! keys, with contents under `--print-records` (`__consumer_offsets` records decoded by the
//! [`DumpOptions::offsets_decoder`] hook, like `--offsets-decoder`). For a `.index`: each (offset, position) entry and whether a batch starts at
//! that position and ends at or below that offset (Kafka indexes an append of several batches by
//! its largest offset at its first batch). For a `.timeindex`: each (timestamp, offset) entry and
//! whether the offset lies in a batch whose max timestamp it is, the largest so far. For a
//! `.txnindex`: each aborted transaction (Kafka's `DumpLogSegments.dumpTxnIndex` line), checked
//! against the segment's ABORT markers both ways (each entry's last offset is an ABORT marker of
//! its producer, each ABORT marker has an entry, first offset <= last offset).
//! Preallocated zero entries (an active segment's untrimmed index) end the listing, as in Kafka.
//!
//! Every problem (bad CRC, undecodable record, torn tail, index entry that points nowhere, offsets
//! missing between two segments of a partition not known to be compacted: see [`DumpOptions`]) is
//! collected in [`DumpSummary::problems`] with the file and position; the CLI exits 1 when there is
//! any.
//!
//! The `__consumer_offsets` record schemas are wire formats and live in `protocol`, a layer above
//! this one, so the dump does not decode them itself: the caller hands it an [`OffsetsDecoder`]
//! (`fetchbench log dump` passes `protocol::consumer_offsets::dump_record`), as Kafka's
//! `DumpLogSegments` takes its `--offsets-decoder` parser class.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::batch::record::read_unsigned_varlong;
use super::batch::{legacy, BatchError, BatchHeader, RecordBatch, HEADER_SIZE, LOG_OVERHEAD, MAGIC_OFFSET, MAGIC_V2};
use super::offset_index::OffsetIndex;
use super::producer_state::increment_sequence;
use super::segment::{
    fits_relative_offset, parse_base_offset, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX,
};
use super::time_index::TimeIndex;
use super::txn_index;
use super::LogError;

/// Options of a dump.
#[derive(Clone, Debug, Default)]
pub struct DumpOptions {
    /// Print only problems and the summary (every record is still decoded, every index entry
    /// checked).
    pub verify: bool,
    /// Print keys and values.
    pub print_records: bool,
    /// Topics known to be compacted (`cleanup.policy` includes `compact`): offsets missing between
    /// their segments are not a problem. Kafka's internal topics (`__consumer_offsets`,
    /// `__transaction_state`, `__share_group_state`) always count as compacted.
    pub compacted_topics: Vec<String>,
    /// How to decode `__consumer_offsets` records (Kafka's `--offsets-decoder`): under
    /// `print_records` each record's key and value are printed through it, and every record of a
    /// `__consumer_offsets-*` partition it cannot decode is a problem. `None`: those records are
    /// printed as plain text and not checked.
    pub offsets_decoder: Option<OffsetsDecoder>,
}

/// Decodes one `__consumer_offsets` record from its key and value (`None` = null) into the text
/// `--print-records` shows after the record's fields, as Kafka's
/// `DumpLogSegments.OffsetsMessageParser` does. The error says why the record does not decode;
/// it is printed as ` undecodable: <error>` and reported as a problem.
pub type OffsetsDecoder =
    fn(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<String, Box<dyn std::error::Error + Send + Sync>>;

/// One problem found, with where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The file.
    pub path: PathBuf,
    /// Byte position in the file (of the batch, or of the index entry).
    pub position: u64,
    /// What is wrong (includes the offset when known).
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at position {}: {}", self.path.display(), self.position, self.message)
    }
}

/// Totals of a dump.
#[derive(Clone, Debug, Default)]
pub struct DumpSummary {
    /// Files dumped.
    pub files: usize,
    /// Batches (v2) and legacy entries seen in `.log` files.
    pub batches: u64,
    /// Records decoded.
    pub records: u64,
    /// Control batches seen.
    pub control_batches: u64,
    /// Index entries checked.
    pub index_entries: u64,
    /// Per `.log` file: (batches, records, first offset, last offset).
    pub per_log: Vec<(PathBuf, LogFileSummary)>,
    /// Everything invalid.
    pub problems: Vec<Problem>,
}

/// Totals of one `.log` file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogFileSummary {
    /// Batches (or legacy entries).
    pub batches: u64,
    /// Records.
    pub records: u64,
    /// First offset (base offset of the first batch), -1 when empty.
    pub first_offset: i64,
    /// Last offset of the last batch, -1 when empty.
    pub last_offset: i64,
    /// Base offset from the file name (`None` when the name is not a 20-digit offset).
    pub base_offset: Option<i64>,
    /// The offset after the last entry walked (by length fields, even if it does not decode), or
    /// the base offset of an empty file: where the next segment should start.
    pub next_offset: Option<i64>,
    /// Evidence that the log was compacted: a v2 batch starting above the previous batch's next
    /// offset (or above the file's base offset), or holding fewer records than its offset span.
    pub compaction_seen: bool,
}

/// Dumps every path (files, or directories searched recursively for `.log`, `.index`,
/// `.timeindex` and `.txnindex`, in name order) to `out`.
///
/// Errors: [`LogError::Io`] when a path cannot be read at all (writing to `out` failing included);
/// everything wrong inside a file is a [`Problem`] instead.
pub fn dump_paths(paths: &[PathBuf], opts: &DumpOptions, out: &mut dyn Write) -> Result<DumpSummary, LogError> {
    let mut summary = DumpSummary::default();
    let mut files = Vec::new();
    for p in paths {
        let before = files.len();
        collect(p, &mut files, &mut summary)?;
        if files.len() == before && summary.problems.last().is_none_or(|pr| pr.path != *p) {
            summary.problems.push(Problem {
                path: p.clone(),
                position: 0,
                message: "no .log, .index, .timeindex or .txnindex files here: nothing was checked".into(),
            });
        }
    }
    let mut headers_cache: HashMap<PathBuf, Vec<Entry>> = HashMap::new();
    let w = |e| LogError::io("write", "<output>", e);
    for f in &files {
        let name = f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        summary.files += 1;
        let res = if name.ends_with(LOG_SUFFIX) {
            dump_log(f, opts, out, &mut summary)
        } else if name.ends_with(INDEX_SUFFIX) {
            dump_offset_index(f, opts, out, &mut summary, &mut headers_cache)
        } else if name.ends_with(TXN_INDEX_SUFFIX) {
            dump_txn_index(f, opts, out, &mut summary, &mut headers_cache)
        } else {
            dump_time_index(f, opts, out, &mut summary, &mut headers_cache)
        };
        match res {
            Ok(()) => {}
            Err(Failure::Output(e)) => return Err(w(e)),
            Err(Failure::Input(e)) => {
                summary.problems.push(Problem { path: f.clone(), position: 0, message: format!("cannot read: {e}") })
            }
        }
    }
    check_holes(opts, out, &mut summary).map_err(w)?;
    writeln!(
        out,
        "Summary: files={} batches={} control_batches={} records={} index_entries={} problems={}",
        summary.files,
        summary.batches,
        summary.control_batches,
        summary.records,
        summary.index_entries,
        summary.problems.len()
    )
    .map_err(w)?;
    Ok(summary)
}

/// Offsets missing between consecutive `.log` files of one partition directory (both dumped): the
/// next file's base offset is above the previous file's next offset. In a log that is not
/// compacted only a lost or deleted segment does that (segments roll at the log end offset,
/// retention deletes from the start, transaction markers take their own offsets), so it is a
/// [`Problem`] naming both files and the range. Compaction legitimately leaves such gaps (Kafka's
/// cleaner keeps a cleaned group's base offset and may drop the records at its end), and a log
/// directory does not record its topics' configs (Kafka keeps them in the metadata log), so a
/// partition is not checked when its topic is in [`DumpOptions::compacted_topics`], is one of
/// Kafka's internal (compacted) topics, or shows compaction in its batches
/// ([`LogFileSummary::compaction_seen`]); those gaps are printed as notes (not in `--verify`).
fn check_holes(opts: &DumpOptions, out: &mut dyn Write, summary: &mut DumpSummary) -> io::Result<()> {
    let mut by_dir: Vec<(&Path, &PathBuf, &LogFileSummary)> = summary
        .per_log
        .iter()
        .filter(|(_, s)| s.base_offset.is_some())
        .filter_map(|(p, s)| p.parent().map(|d| (d, p, s)))
        .collect();
    by_dir.sort_by_key(|(d, _, s)| (*d, s.base_offset));
    let mut problems = Vec::new();
    for pair in by_dir.windows(2) {
        let [(dir, prev_path, prev), (next_dir, next_path, next)] = pair else { continue };
        if dir != next_dir {
            continue;
        }
        let (Some(prev_next), Some(next_base)) = (prev.next_offset, next.base_offset) else { continue };
        if next_base <= prev_next {
            continue;
        }
        let dir_name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let topic = super::partition::parse_topic_partition(&dir_name).map(|(t, _)| t);
        let known_compacted = topic.as_deref().is_some_and(|t| {
            super::partition::compacted_internal_topic(t) || opts.compacted_topics.iter().any(|c| c == t)
        });
        let compaction_seen = summary.per_log.iter().any(|(p, s)| p.parent() == Some(*dir) && s.compaction_seen);
        let range = format!("offsets {prev_next}..={}", next_base - 1);
        if known_compacted || compaction_seen {
            if !opts.verify {
                let why = if known_compacted { "the topic is compacted" } else { "its batches show compaction" };
                writeln!(
                    out,
                    "Note: {range} are not in any segment between {} and {} ({why}: expected)",
                    prev_path.display(),
                    next_path.display()
                )?;
            }
            continue;
        }
        problems.push(Problem {
            path: (*prev_path).clone(),
            position: 0,
            message: format!(
                "{range} are missing: this file ends at offset {} and the next segment {} starts at {next_base} (a lost or deleted segment; gaps between segments are normal only in a compacted topic: if {} has cleanup.policy=compact, pass --compacted {})",
                prev_next - 1,
                next_path.display(),
                topic.as_deref().unwrap_or("the topic"),
                topic.as_deref().unwrap_or("<topic>")
            ),
        });
    }
    summary.problems.extend(problems);
    Ok(())
}

/// Why dumping one file stopped: reading the input (a problem of that file) or writing the output
/// (fatal: a closed pipe, a full disk).
enum Failure {
    Input(io::Error),
    Output(io::Error),
}

impl From<io::Error> for Failure {
    /// Writes to the output are the only `?` on `io::Error` in the dump functions.
    fn from(e: io::Error) -> Self {
        Failure::Output(e)
    }
}

fn collect(p: &Path, files: &mut Vec<PathBuf>, summary: &mut DumpSummary) -> Result<(), LogError> {
    let meta = std::fs::metadata(p).map_err(|e| LogError::io("stat", p, e))?;
    let is_kafka_file = |n: &str| {
        n.ends_with(LOG_SUFFIX)
            || n.ends_with(INDEX_SUFFIX)
            || n.ends_with(TIME_INDEX_SUFFIX)
            || n.ends_with(TXN_INDEX_SUFFIX)
    };
    if meta.is_dir() {
        let mut children: Vec<PathBuf> = std::fs::read_dir(p)
            .map_err(|e| LogError::io("list", p, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        children.sort();
        for c in children {
            if c.is_dir() {
                collect(&c, files, summary)?;
            } else if is_kafka_file(&c.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()) {
                files.push(c);
            }
        }
    } else if is_kafka_file(&p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()) {
        files.push(p.to_path_buf());
    } else {
        summary.problems.push(Problem {
            path: p.to_path_buf(),
            position: 0,
            message: "not a Kafka segment file (expected .log, .index, .timeindex or .txnindex)".into(),
        });
    }
    Ok(())
}

/// Header-level facts of one entry of a `.log`.
#[derive(Clone, Copy, Debug)]
struct Entry {
    position: u64,
    size: u64,
    base_offset: i64,
    last_offset: i64,
    max_timestamp: i64,
    /// False for a v2 header with impossible offsets (reported when the batch is dumped; left out
    /// of the offset-order check, which it would only confuse).
    offsets_valid: bool,
    /// A v2 batch holding fewer records than its offset span (compaction removed some).
    sparse: bool,
    magic: i8,
}

/// Walks a `.log` by length fields. Returns the entries and, when the walk stopped early, a
/// problem (torn tail or impossible length).
fn walk(file: &File, path: &Path) -> io::Result<(Vec<Entry>, Option<Problem>)> {
    let len = file.metadata()?.len();
    let mut pos = 0u64;
    let mut entries = Vec::new();
    let mut head = [0u8; HEADER_SIZE];
    while pos < len {
        let want = (HEADER_SIZE as u64).min(len - pos) as usize;
        file.read_exact_at(&mut head[..want], pos)?;
        let problem = |message: String| Some(Problem { path: path.to_path_buf(), position: pos, message });
        if want < LOG_OVERHEAD + 5 {
            return Ok((entries, problem(format!("{} trailing bytes, too few for a batch header", len - pos))));
        }
        let Ok((offset, length, magic)) = BatchHeader::peek(&head[..want]) else { unreachable!("checked length") };
        if !(0..=2).contains(&magic) {
            return Ok((
                entries,
                problem(format!("not a Kafka record batch: magic byte {magic} (offset field {offset})")),
            ));
        }
        if length < 14 {
            return Ok((entries, problem(format!("impossible batch length {length} (offset {offset})"))));
        }
        let size = length as u64 + LOG_OVERHEAD as u64;
        if pos + size > len {
            return Ok((
                entries,
                problem(format!(
                    "batch at offset {offset} claims {size} bytes but only {} remain (torn tail)",
                    len - pos
                )),
            ));
        }
        let (last_offset, max_timestamp, offsets_valid, sparse) = match magic {
            MAGIC_V2 => match BatchHeader::parse(&head[..want]) {
                Ok(h) => (
                    h.last_offset(),
                    h.max_timestamp,
                    true,
                    i64::from(h.records_count) < i64::from(h.last_offset_delta) + 1,
                ),
                // The length is sound, so the walk goes on; the batch itself is reported (as a
                // finding, never as a wrapped number) when it is dumped.
                Err(BatchError::InvalidOffsetRange { .. }) => (offset, -1, false, false),
                Err(e) => return Ok((entries, problem(format!("invalid batch header: {e}")))),
            },
            // A legacy entry at i64::MAX (no next offset) is reported when it is decoded.
            1 if want >= 26 => (offset, i64::from_be_bytes(head[18..26].try_into().expect("8 bytes")), true, false),
            _ => (offset, -1, true, false),
        };
        entries.push(Entry {
            position: pos,
            size,
            base_offset: offset,
            last_offset,
            max_timestamp,
            offsets_valid,
            sparse,
            magic,
        });
        pos += size;
    }
    Ok((entries, None))
}

fn dump_log(path: &Path, opts: &DumpOptions, out: &mut dyn Write, summary: &mut DumpSummary) -> Result<(), Failure> {
    let file = File::open(path).map_err(Failure::Input)?;
    let dir_name = path.parent().and_then(|d| d.file_name()).map(|n| n.to_string_lossy().into_owned());
    let is_offsets_topic = dir_name.as_deref().is_some_and(|n| n.starts_with("__consumer_offsets-"));
    let is_metadata_topic = dir_name.as_deref().is_some_and(|n| n.starts_with("__cluster_metadata-"));
    let base = path.file_name().and_then(|n| parse_base_offset(&n.to_string_lossy()));
    if !opts.verify {
        writeln!(out, "Dumping {}", path.display())?;
        if let Some(b) = base {
            writeln!(out, "Log starting offset: {b}")?;
        }
    }
    let (entries, tail) = walk(&file, path).map_err(Failure::Input)?;
    // Offsets never go backwards, and none is below the base offset in the file name.
    let mut expected_min = base.unwrap_or(i64::MIN);
    for e in entries.iter().filter(|e| e.offsets_valid) {
        let first = if e.last_offset == e.base_offset { e.last_offset } else { e.base_offset };
        if first < expected_min {
            summary.problems.push(Problem {
                path: path.to_path_buf(),
                position: e.position,
                message: format!("batch starts at offset {first}, below {expected_min} (the file's base offset or the previous batch's end)"),
            });
        }
        expected_min = expected_min.max(e.last_offset.saturating_add(1));
        // Recovery's rule (Kafka's `LogSegment` relative offsets): the last offset must be within
        // i32::MAX of the base offset in the file name, or recovery cuts the segment here.
        if let Some(b) = base {
            if first >= b && !fits_relative_offset(b, e.last_offset) {
                summary.problems.push(Problem {
                    path: path.to_path_buf(),
                    position: e.position,
                    message: format!(
                        "batch offsets {}..={} do not fit this segment (base offset {b}: a segment holds offsets up to base + {}); recovery cuts the segment here",
                        e.base_offset,
                        e.last_offset,
                        i32::MAX
                    ),
                });
            }
        }
    }
    let mut fs = LogFileSummary { first_offset: -1, last_offset: -1, base_offset: base, ..Default::default() };
    // Compaction evidence and the offset after the last entry (legacy entries are skipped: a
    // compressed wrapper carries the offset of its last inner message).
    let mut next = base;
    for e in entries.iter().filter(|e| e.offsets_valid) {
        if e.magic == MAGIC_V2 && (e.sparse || next.is_some_and(|n| e.base_offset > n)) {
            fs.compaction_seen = true;
        }
        next = Some(e.last_offset.saturating_add(1));
    }
    fs.next_offset = next;
    for e in &entries {
        let mut bytes = vec![0u8; e.size as usize];
        file.read_exact_at(&mut bytes, e.position).map_err(Failure::Input)?;
        summary.batches += 1;
        fs.batches += 1;
        let magic = bytes[MAGIC_OFFSET] as i8;
        let mut problem = |message: String| {
            summary.problems.push(Problem { path: path.to_path_buf(), position: e.position, message });
        };
        if magic == MAGIC_V2 {
            let batch = match RecordBatch::parse(&bytes) {
                Ok(b) => b,
                Err(err) => {
                    if !opts.verify {
                        writeln!(out, "position: {} size: {} isvalid: false ({err})", e.position, e.size)?;
                    }
                    problem(err.to_string());
                    continue;
                }
            };
            let h = *batch.header();
            let crc_ok = batch.is_crc_valid();
            if fs.first_offset < 0 {
                fs.first_offset = h.base_offset;
            }
            fs.last_offset = h.last_offset();
            if h.attributes.is_control() {
                summary.control_batches += 1;
            }
            if !opts.verify {
                let codec = h.attributes.compression().map(|c| c.name()).unwrap_or("unknown");
                let last_seq =
                    if h.base_sequence < 0 { -1 } else { increment_sequence(h.base_sequence, h.last_offset_delta) };
                writeln!(
                    out,
                    "baseOffset: {} lastOffset: {} count: {} baseSequence: {} lastSequence: {} producerId: {} producerEpoch: {} partitionLeaderEpoch: {} isTransactional: {} isControl: {} deleteHorizonMs: {} position: {} {}: {} size: {} magic: {} compresscodec: {} crc: {} isvalid: {}",
                    h.base_offset,
                    h.last_offset(),
                    h.records_count,
                    h.base_sequence,
                    last_seq,
                    h.producer_id,
                    h.producer_epoch,
                    h.partition_leader_epoch,
                    h.attributes.is_transactional(),
                    h.attributes.is_control(),
                    h.delete_horizon_ms().map_or("none".to_string(), |d| d.to_string()),
                    e.position,
                    if h.attributes.is_log_append_time() { "LogAppendTime" } else { "CreateTime" },
                    h.max_timestamp,
                    e.size,
                    h.magic,
                    codec,
                    h.crc,
                    crc_ok
                )?;
            }
            if !crc_ok {
                problem(format!(
                    "CRC mismatch in batch {}..={}: stored {:#010x}, computed {:#010x}",
                    h.base_offset,
                    h.last_offset(),
                    h.crc,
                    batch.compute_crc()
                ));
                continue;
            }
            let records = match batch.records() {
                Ok(r) => r,
                Err(err) => {
                    problem(format!("batch {}: {err}", h.base_offset));
                    continue;
                }
            };
            let mut n = 0;
            for r in records.iter() {
                let r = match r {
                    Ok(r) => r,
                    Err(err) => {
                        problem(format!("batch {}: {err}", h.base_offset));
                        break;
                    }
                };
                n += 1;
                if !opts.verify {
                    let hk: Vec<String> =
                        r.headers.iter().map(|h| String::from_utf8_lossy(h.key).into_owned()).collect();
                    write!(
                        out,
                        "| offset: {} {}: {} keySize: {} valueSize: {} sequence: {} headerKeys: [{}]",
                        r.offset,
                        if h.attributes.is_log_append_time() { "LogAppendTime" } else { "CreateTime" },
                        r.timestamp,
                        r.key.map_or(-1, |k| k.len() as i64),
                        r.value.map_or(-1, |v| v.len() as i64),
                        if h.base_sequence < 0 {
                            -1
                        } else {
                            increment_sequence(
                                h.base_sequence,
                                (r.offset - h.base_offset).clamp(0, i32::MAX as i64) as i32,
                            )
                        },
                        hk.join(",")
                    )?;
                    if opts.print_records {
                        let kind = if h.attributes.is_control() {
                            Contents::Control
                        } else if let (true, Some(decoder)) = (is_offsets_topic, opts.offsets_decoder) {
                            Contents::ConsumerOffsets(decoder)
                        } else if is_metadata_topic {
                            Contents::KraftMetadata
                        } else {
                            Contents::Plain
                        };
                        write_contents(out, kind, r.key, r.value)?;
                    }
                    writeln!(out)?;
                } else if let (true, false, Some(decoder)) =
                    (is_offsets_topic, h.attributes.is_control(), opts.offsets_decoder)
                {
                    if let Err(err) = decoder(r.key, r.value) {
                        problem(format!("offset {}: undecodable __consumer_offsets record: {err}", r.offset));
                    }
                }
            }
            if n != h.records_count.max(0) as u64 && records.iter().all(|r| r.is_ok()) {
                problem(format!("batch {} says {} records, holds {n}", h.base_offset, h.records_count));
            }
            summary.records += n;
            fs.records += n;
        } else {
            match legacy::decode_entry(&bytes) {
                Ok(msgs) => {
                    if fs.first_offset < 0 {
                        fs.first_offset = msgs.first().map_or(e.last_offset, |m| m.offset);
                    }
                    fs.last_offset = e.last_offset;
                    if !opts.verify {
                        writeln!(
                            out,
                            "offset: {} position: {} magic: {magic} size: {} isvalid: true",
                            e.last_offset, e.position, e.size
                        )?;
                        for m in &msgs {
                            write!(
                                out,
                                "| offset: {} timestamp: {} keySize: {} valueSize: {}",
                                m.offset,
                                m.timestamp.unwrap_or(-1),
                                m.key.as_ref().map_or(-1, |k| k.len() as i64),
                                m.value.as_ref().map_or(-1, |v| v.len() as i64)
                            )?;
                            if opts.print_records {
                                write_contents(out, Contents::Plain, m.key.as_deref(), m.value.as_deref())?;
                            }
                            writeln!(out)?;
                        }
                    }
                    summary.records += msgs.len() as u64;
                    fs.records += msgs.len() as u64;
                }
                Err(err) => problem(format!("legacy entry at offset {}: {err}", e.last_offset)),
            }
        }
    }
    if let Some(p) = tail {
        summary.problems.push(p);
    }
    let offsets = if fs.batches == 0 { "none".to_string() } else { format!("{}..{}", fs.first_offset, fs.last_offset) };
    let bytes = file.metadata().map_err(Failure::Input)?.len();
    if opts.verify {
        write!(out, "{}: ", path.display())?;
    }
    writeln!(out, "batches: {} records: {} offsets: {offsets} bytes: {bytes}", fs.batches, fs.records)?;
    summary.per_log.push((path.to_path_buf(), fs));
    Ok(())
}

/// How to print a record's key and value.
#[derive(Clone, Copy)]
enum Contents {
    /// As (lossy) UTF-8 text.
    Plain,
    /// `__consumer_offsets` keys and values decoded (`--offsets-decoder`).
    ConsumerOffsets(OffsetsDecoder),
    /// A control record: its type (Kafka's `ControlRecordType`) and, for transaction markers, the
    /// coordinator epoch.
    Control,
    /// A KRaft `__cluster_metadata` record: frame version, api key and version of the record.
    KraftMetadata,
}

fn write_contents(out: &mut dyn Write, kind: Contents, key: Option<&[u8]>, value: Option<&[u8]>) -> io::Result<()> {
    match kind {
        Contents::Plain => {}
        Contents::ConsumerOffsets(decoder) => {
            return match decoder(key, value) {
                Ok(rec) => write!(out, " {rec}"),
                Err(e) => write!(out, " undecodable: {e}"),
            }
        }
        Contents::Control => {
            let Some(k) = key.filter(|k| k.len() >= 4) else {
                return write!(out, " controlType: invalid key");
            };
            let ty = i16::from_be_bytes([k[2], k[3]]);
            let name = match ty {
                0 => "ABORT",
                1 => "COMMIT",
                2 => "LEADER_CHANGE",
                3 => "SNAPSHOT_HEADER",
                4 => "SNAPSHOT_FOOTER",
                5 => "KRAFT_VERSION",
                6 => "KRAFT_VOTERS",
                _ => "UNKNOWN",
            };
            write!(out, " controlType: {name}({ty})")?;
            if let (0 | 1, Some(v)) = (ty, value.filter(|v| v.len() >= 6)) {
                write!(out, " coordinatorEpoch: {}", i32::from_be_bytes([v[2], v[3], v[4], v[5]]))?;
            }
            return Ok(());
        }
        Contents::KraftMetadata => {
            let mut rest = value.unwrap_or_default();
            let mut fields = [0u64; 3];
            for f in &mut fields {
                match read_unsigned_varlong(rest) {
                    Some((v, n)) => {
                        *f = v;
                        rest = &rest[n..];
                    }
                    None => return write!(out, " metadataRecord: undecodable frame"),
                }
            }
            return write!(
                out,
                " metadataRecord: frameVersion: {} apiKey: {} version: {} size: {}",
                fields[0],
                fields[1],
                fields[2],
                value.map_or(0, <[u8]>::len)
            );
        }
    }
    let show = |b: Option<&[u8]>| b.map_or("null".to_string(), |b| String::from_utf8_lossy(b).into_owned());
    write!(out, " key: {} payload: {}", show(key), show(value))
}

fn companion_log(path: &Path) -> Option<(PathBuf, i64)> {
    let name = path.file_name()?.to_string_lossy().into_owned();
    let base = parse_base_offset(&name)?;
    Some((path.with_file_name(format!("{base:020}{LOG_SUFFIX}")), base))
}

fn log_entries<'a>(cache: &'a mut HashMap<PathBuf, Vec<Entry>>, log: &Path) -> io::Result<Option<&'a Vec<Entry>>> {
    if !cache.contains_key(log) {
        let Ok(file) = File::open(log) else { return Ok(None) };
        let (entries, _) = walk(&file, log)?;
        cache.insert(log.to_path_buf(), entries);
    }
    Ok(cache.get(log))
}

/// What both index dumps need.
struct OpenedIndex<'c, I> {
    /// Base offset from the file name.
    base: i64,
    /// The index, read-only.
    idx: I,
    /// Batch headers of the `.log` beside it (`None` without one, reported as one problem).
    entries: Option<&'c Vec<Entry>>,
    /// Problems recorded before this file.
    problems_before: usize,
}

/// Opens an index for dumping: prints its name, finds its `.log`, reports what is missing.
/// `None` when the index cannot be opened (reported as a problem).
fn open_index<'c, I: IndexEntries>(
    path: &Path,
    opts: &DumpOptions,
    out: &mut dyn Write,
    summary: &mut DumpSummary,
    cache: &'c mut HashMap<PathBuf, Vec<Entry>>,
    open: fn(&Path, i64) -> Result<I, LogError>,
    suffix: &str,
) -> Result<Option<OpenedIndex<'c, I>>, Failure> {
    if !opts.verify {
        writeln!(out, "Dumping {}", path.display())?;
    }
    let problems_before = summary.problems.len();
    let mut problem = |message: String| {
        summary.problems.push(Problem { path: path.to_path_buf(), position: 0, message });
    };
    let Some((log, base)) = companion_log(path) else {
        problem(format!("name is not <20-digit base offset>.{suffix}"));
        return Ok(None);
    };
    let idx = match open(path, base) {
        Ok(i) => i,
        Err(e) => {
            problem(e.to_string());
            return Ok(None);
        }
    };
    let entries = log_entries(cache, &log).map_err(Failure::Input)?;
    if entries.is_none() {
        problem(format!("no {} beside this index: its {} entries were not checked", log.display(), idx.entry_count()));
    }
    Ok(Some(OpenedIndex { base, idx, entries, problems_before }))
}

/// The entry count of either index kind.
trait IndexEntries {
    fn entry_count(&self) -> usize;
}
impl IndexEntries for OffsetIndex {
    fn entry_count(&self) -> usize {
        self.entries()
    }
}
impl IndexEntries for TimeIndex {
    fn entry_count(&self) -> usize {
        self.entries()
    }
}

fn dump_offset_index(
    path: &Path,
    opts: &DumpOptions,
    out: &mut dyn Write,
    summary: &mut DumpSummary,
    cache: &mut HashMap<PathBuf, Vec<Entry>>,
) -> Result<(), Failure> {
    let Some(OpenedIndex { base, idx, entries, problems_before }) =
        open_index(path, opts, out, summary, cache, OffsetIndex::open_read_only, "index")?
    else {
        return Ok(());
    };
    let mut problem = |position: u64, message: String| {
        summary.problems.push(Problem { path: path.to_path_buf(), position, message });
    };
    let mut checked = 0;
    let mut prev = None;
    for (i, entry) in idx.iter().enumerate() {
        // (base offset, 0) is never written (the first batch gets no entry): preallocated zeros.
        if entry.offset == base && entry.position == 0 {
            writeln!(out, "({} preallocated zero entries follow)", idx.entries() - i)?;
            break;
        }
        summary.index_entries += 1;
        let at = (i * 8) as u64;
        if !opts.verify {
            writeln!(out, "offset: {} position: {}", entry.offset, entry.position)?;
        }
        if let Some((po, pp)) = prev {
            if entry.offset <= po || entry.position < pp {
                problem(
                    at,
                    format!("entry ({}, {}) does not increase after ({po}, {pp})", entry.offset, entry.position),
                );
            }
        }
        prev = Some((entry.offset, entry.position));
        checked += 1;
        match entries {
            None => {}
            Some(es) => match es.binary_search_by_key(&(entry.position as u64), |e| e.position) {
                // Kafka indexes an append by its largest offset at its first batch: the batch there
                // ends at or below the entry's offset.
                Ok(k) if es[k].last_offset <= entry.offset => {}
                Ok(k) => problem(
                    at,
                    format!(
                        "index offset {} at position {} but the batch there ends later, at offset {}",
                        entry.offset, entry.position, es[k].last_offset
                    ),
                ),
                Err(_) => problem(
                    at,
                    format!("entry ({}, {}) does not point at a batch boundary", entry.offset, entry.position),
                ),
            },
        }
    }
    verified_line(opts, out, path, checked, summary.problems.len() - problems_before)
}

/// A `.txnindex` (see the module docs): its entries, checked against the ABORT markers of the
/// segment's `.log` when there is one.
fn dump_txn_index(
    path: &Path,
    opts: &DumpOptions,
    out: &mut dyn Write,
    summary: &mut DumpSummary,
    cache: &mut HashMap<PathBuf, Vec<Entry>>,
) -> Result<(), Failure> {
    if !opts.verify {
        writeln!(out, "Dumping {}", path.display())?;
    }
    let problems_before = summary.problems.len();
    let mut problem = |position: u64, message: String| {
        summary.problems.push(Problem { path: path.to_path_buf(), position, message });
    };
    let bytes = std::fs::read(path).map_err(Failure::Input)?;
    let entries = match txn_index::decode(&bytes) {
        Ok(e) => e,
        Err(m) => {
            problem(0, format!("transaction index: {m}"));
            return Ok(());
        }
    };
    // The segment's ABORT markers: (offset, producer id), from its control batches.
    let markers: Option<Vec<(i64, i64)>> = match companion_log(path) {
        None => {
            problem(0, "name is not <20-digit base offset>.txnindex".into());
            None
        }
        Some((log, _)) => match (log_entries(cache, &log).map_err(Failure::Input)?, File::open(&log)) {
            (Some(es), Ok(file)) => {
                let mut found = Vec::new();
                for e in es.iter().filter(|e| e.magic == MAGIC_V2) {
                    let mut bytes = vec![0u8; e.size as usize];
                    if file.read_exact_at(&mut bytes, e.position).is_err() {
                        continue;
                    }
                    let Ok(batch) = RecordBatch::parse(&bytes) else { continue };
                    if batch.attributes().is_control() && txn_index::end_marker(&bytes) == Ok(Some(true)) {
                        found.push((batch.base_offset(), batch.header().producer_id));
                    }
                }
                Some(found)
            }
            _ => {
                problem(
                    0,
                    format!("no {} beside this index: its {} entries were not checked", log.display(), entries.len()),
                );
                None
            }
        },
    };
    for (i, t) in entries.iter().enumerate() {
        summary.index_entries += 1;
        let at = (i * txn_index::ENTRY_SIZE) as u64;
        if !opts.verify {
            writeln!(
                out,
                "version: {} producerId: {} firstOffset: {} lastOffset: {} lastStableOffset: {}",
                txn_index::CURRENT_VERSION,
                t.producer_id,
                t.first_offset,
                t.last_offset,
                t.last_stable_offset
            )?;
        }
        if t.first_offset > t.last_offset {
            problem(at, format!("first offset {} is after the last offset {}", t.first_offset, t.last_offset));
        }
        if let Some(m) = &markers {
            if !m.contains(&(t.last_offset, t.producer_id)) {
                problem(
                    at,
                    format!("no ABORT marker of producer {} at offset {} in the log", t.producer_id, t.last_offset),
                );
            }
        }
    }
    for (offset, producer_id) in markers.iter().flatten() {
        if !entries.iter().any(|t| t.last_offset == *offset && t.producer_id == *producer_id) {
            problem(0, format!("the ABORT marker of producer {producer_id} at offset {offset} has no entry"));
        }
    }
    verified_line(opts, out, path, entries.len(), summary.problems.len() - problems_before)
}

/// An index file's `--verify` line: `PATH: N entries, ok` or `..., K problems`.
fn verified_line(
    opts: &DumpOptions,
    out: &mut dyn Write,
    path: &Path,
    entries: usize,
    found: usize,
) -> Result<(), Failure> {
    if opts.verify {
        let verdict = if found == 0 { "ok".to_string() } else { format!("{found} problems") };
        writeln!(out, "{}: {entries} entries, {verdict}", path.display())?;
    }
    Ok(())
}

fn dump_time_index(
    path: &Path,
    opts: &DumpOptions,
    out: &mut dyn Write,
    summary: &mut DumpSummary,
    cache: &mut HashMap<PathBuf, Vec<Entry>>,
) -> Result<(), Failure> {
    let Some(OpenedIndex { base, idx, entries, problems_before }) =
        open_index(path, opts, out, summary, cache, TimeIndex::open_read_only, "timeindex")?
    else {
        return Ok(());
    };
    let mut problem = |position: u64, message: String| {
        summary.problems.push(Problem { path: path.to_path_buf(), position, message });
    };
    let mut checked = 0;
    let mut prev_ts = i64::MIN;
    for (i, entry) in idx.iter().enumerate() {
        if entry.offset == base && entry.timestamp == 0 {
            writeln!(out, "({} preallocated zero entries follow)", idx.entries() - i)?;
            break;
        }
        summary.index_entries += 1;
        let at = (i * 12) as u64;
        if !opts.verify {
            writeln!(out, "timestamp: {} offset: {}", entry.timestamp, entry.offset)?;
        }
        if entry.timestamp <= prev_ts {
            problem(at, format!("timestamp {} does not increase after {prev_ts}", entry.timestamp));
        }
        prev_ts = entry.timestamp;
        checked += 1;
        let Some(es) = entries else { continue };
        // Kafka writes (max timestamp so far, offset of that batch's last record); brokers before
        // KIP-734's fix wrote the offset of the record holding it. Either way the offset lies in
        // the batch whose max timestamp the entry is, and nothing before it is later.
        match es.iter().position(|e| e.base_offset <= entry.offset && entry.offset <= e.last_offset) {
            None => problem(at, format!("offset {} is in no batch of the log", entry.offset)),
            Some(k) => {
                let max_before = es[..=k].iter().map(|e| e.max_timestamp).max().unwrap_or(-1);
                if es[k].max_timestamp != entry.timestamp || max_before != entry.timestamp {
                    problem(
                        at,
                        format!(
                            "entry ({}, {}): that batch's max timestamp is {}, the max so far {}",
                            entry.timestamp, entry.offset, es[k].max_timestamp, max_before
                        ),
                    );
                }
            }
        }
    }
    verified_line(opts, out, path, checked, summary.problems.len() - problems_before)
}
