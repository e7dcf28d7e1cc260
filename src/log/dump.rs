//! `fetchbench log dump`: Kafka's `kafka-dump-log.sh --deep-iteration`, with verification.
//!
//! For a `.log`: per batch its offsets, record count, position, size, magic, codec, CRC validity,
//! timestamps and producer state; per record its offset, timestamp, key and value sizes and header
//! keys, with contents under `--print-records` (`__consumer_offsets` records decoded like
//! `--offsets-decoder`). For a `.index`: each (offset, position) entry and whether a batch with that
//! last offset starts at that position. For a `.timeindex`: each (timestamp, offset) entry and
//! whether it names the last offset of a batch whose max timestamp it is, the largest so far.
//! Preallocated zero entries (an active segment's untrimmed index) end the listing, as in Kafka.
//!
//! Every problem (bad CRC, undecodable record, torn tail, index entry that points nowhere) is
//! collected in [`DumpSummary::problems`] with the file and position; the CLI exits 1 when there is
//! any.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::batch::{legacy, BatchHeader, RecordBatch, HEADER_SIZE, LOG_OVERHEAD, MAGIC_OFFSET, MAGIC_V2};
use super::consumer_offsets;
use super::offset_index::OffsetIndex;
use super::segment::{parse_base_offset, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};
use super::time_index::TimeIndex;
use super::LogError;

/// Options of a dump.
#[derive(Clone, Debug, Default)]
pub struct DumpOptions {
    /// Print only problems and the summary (every record is still decoded, every index entry
    /// checked).
    pub verify: bool,
    /// Print keys and values.
    pub print_records: bool,
}

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
}

/// Dumps every path (files, or directories searched recursively for `.log`, `.index` and
/// `.timeindex`, in name order) to `out`.
///
/// Errors: [`LogError::Io`] when a path cannot be read at all (writing to `out` failing included);
/// everything wrong inside a file is a [`Problem`] instead.
pub fn dump_paths(paths: &[PathBuf], opts: &DumpOptions, out: &mut dyn Write) -> Result<DumpSummary, LogError> {
    let mut files = Vec::new();
    for p in paths {
        collect(p, &mut files)?;
    }
    let mut summary = DumpSummary::default();
    let mut headers_cache: HashMap<PathBuf, Vec<Entry>> = HashMap::new();
    for f in &files {
        let name = f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let io = |e| LogError::io("write dump of", f, e);
        summary.files += 1;
        if name.ends_with(LOG_SUFFIX) {
            dump_log(f, opts, out, &mut summary).map_err(io)?;
        } else if name.ends_with(INDEX_SUFFIX) {
            dump_offset_index(f, opts, out, &mut summary, &mut headers_cache).map_err(io)?;
        } else if name.ends_with(TIME_INDEX_SUFFIX) {
            dump_time_index(f, opts, out, &mut summary, &mut headers_cache).map_err(io)?;
        }
    }
    writeln!(
        out,
        "Summary: {} files, {} batches ({} control), {} records, {} index entries, {} problems",
        summary.files,
        summary.batches,
        summary.control_batches,
        summary.records,
        summary.index_entries,
        summary.problems.len()
    )
    .map_err(|e| LogError::io("write", "<output>", e))?;
    Ok(summary)
}

fn collect(p: &Path, files: &mut Vec<PathBuf>) -> Result<(), LogError> {
    let meta = std::fs::metadata(p).map_err(|e| LogError::io("stat", p, e))?;
    if meta.is_dir() {
        let mut children: Vec<PathBuf> = std::fs::read_dir(p)
            .map_err(|e| LogError::io("list", p, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        children.sort();
        for c in children {
            if c.is_dir() {
                collect(&c, files)?;
            } else {
                let n = c.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                if n.ends_with(LOG_SUFFIX) || n.ends_with(INDEX_SUFFIX) || n.ends_with(TIME_INDEX_SUFFIX) {
                    files.push(c);
                }
            }
        }
    } else {
        files.push(p.to_path_buf());
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
        let (last_offset, max_timestamp) = match magic {
            MAGIC_V2 if want >= HEADER_SIZE => {
                let h = BatchHeader::parse(&head).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                (h.last_offset(), h.max_timestamp)
            }
            1 if want >= 26 => (offset, i64::from_be_bytes(head[18..26].try_into().expect("8 bytes"))),
            _ => (offset, -1),
        };
        entries.push(Entry { position: pos, size, base_offset: offset, last_offset, max_timestamp });
        pos += size;
    }
    Ok((entries, None))
}

fn dump_log(path: &Path, opts: &DumpOptions, out: &mut dyn Write, summary: &mut DumpSummary) -> io::Result<()> {
    let file = File::open(path)?;
    let is_offsets_topic = path
        .parent()
        .and_then(|d| d.file_name())
        .is_some_and(|n| n.to_string_lossy().starts_with("__consumer_offsets-"));
    writeln!(out, "Dumping {}", path.display())?;
    let base = path.file_name().and_then(|n| parse_base_offset(&n.to_string_lossy()));
    if let Some(b) = base {
        writeln!(out, "Log starting offset: {b}")?;
    }
    let (entries, tail) = walk(&file, path)?;
    let mut fs = LogFileSummary { first_offset: -1, last_offset: -1, ..Default::default() };
    for e in &entries {
        let mut bytes = vec![0u8; e.size as usize];
        file.read_exact_at(&mut bytes, e.position)?;
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
                let last_seq = if h.base_sequence < 0 { -1 } else { h.base_sequence.wrapping_add(h.last_offset_delta) };
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
                            h.base_sequence.wrapping_add((r.offset - h.base_offset) as i32)
                        },
                        hk.join(",")
                    )?;
                    if opts.print_records {
                        write_contents(out, is_offsets_topic && !h.attributes.is_control(), r.key, r.value)?;
                    }
                    writeln!(out)?;
                } else if is_offsets_topic && !h.attributes.is_control() {
                    if let Err(err) = consumer_offsets::decode_record(r.key, r.value) {
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
                                write_contents(out, false, m.key.as_deref(), m.value.as_deref())?;
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
    writeln!(
        out,
        "batches: {} records: {} offsets: {}..{} bytes: {}",
        fs.batches,
        fs.records,
        fs.first_offset,
        fs.last_offset,
        file.metadata()?.len()
    )?;
    summary.per_log.push((path.to_path_buf(), fs));
    Ok(())
}

fn write_contents(
    out: &mut dyn Write,
    offsets_topic: bool,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) -> io::Result<()> {
    if offsets_topic {
        match consumer_offsets::decode_record(key, value) {
            Ok(rec) => return write!(out, " {rec}"),
            Err(e) => return write!(out, " undecodable: {e}"),
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

fn dump_offset_index(
    path: &Path,
    opts: &DumpOptions,
    out: &mut dyn Write,
    summary: &mut DumpSummary,
    cache: &mut HashMap<PathBuf, Vec<Entry>>,
) -> io::Result<()> {
    writeln!(out, "Dumping {}", path.display())?;
    let mut problem = |position: u64, message: String| {
        summary.problems.push(Problem { path: path.to_path_buf(), position, message });
    };
    let Some((log, base)) = companion_log(path) else {
        problem(0, "name is not <20-digit base offset>.index".into());
        return Ok(());
    };
    let idx = match OffsetIndex::open_read_only(path, base) {
        Ok(i) => i,
        Err(e) => {
            problem(0, e.to_string());
            return Ok(());
        }
    };
    let entries = log_entries(cache, &log)?;
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
        match entries {
            None => problem(
                at,
                format!("no {} beside the index to check entry ({}, {})", log.display(), entry.offset, entry.position),
            ),
            Some(es) => match es.binary_search_by_key(&(entry.position as u64), |e| e.position) {
                Ok(k) if es[k].last_offset == entry.offset => {}
                Ok(k) => problem(
                    at,
                    format!(
                        "index offset {} at position {} but the batch there ends at offset {}",
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
    Ok(())
}

fn dump_time_index(
    path: &Path,
    opts: &DumpOptions,
    out: &mut dyn Write,
    summary: &mut DumpSummary,
    cache: &mut HashMap<PathBuf, Vec<Entry>>,
) -> io::Result<()> {
    writeln!(out, "Dumping {}", path.display())?;
    let mut problem = |position: u64, message: String| {
        summary.problems.push(Problem { path: path.to_path_buf(), position, message });
    };
    let Some((log, base)) = companion_log(path) else {
        problem(0, "name is not <20-digit base offset>.timeindex".into());
        return Ok(());
    };
    let idx = match TimeIndex::open_read_only(path, base) {
        Ok(i) => i,
        Err(e) => {
            problem(0, e.to_string());
            return Ok(());
        }
    };
    let entries = log_entries(cache, &log)?;
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
        let Some(es) = entries else {
            problem(
                at,
                format!("no {} beside the index to check entry ({}, {})", log.display(), entry.timestamp, entry.offset),
            );
            continue;
        };
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
    Ok(())
}
