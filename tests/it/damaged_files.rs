//! One damaged file in a log directory (issue 12, item 3) and a lost segment (item 4): the
//! broker starts, warns naming the file, rebuilds what the data allows, and keeps serving.
//! The offset checkpoints, `producer-id-block` and the hole go through the real `fetchbench serve`
//! process (a damaged file used to end it with exit 2, or to break InitProducerId forever).
//! A malformed recovery-point checkpoint does not block `LogManager::open`.

use std::fs;
use std::path::Path;

use fetchbench::log::batch::{BatchBuilder, Compression};
use fetchbench::log::checkpoint::{
    read_leader_epoch_checkpoint, read_offset_checkpoint, read_partition_metadata, write_partition_metadata,
    EpochEntry, TopicId, LEADER_EPOCH_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, PARTITION_METADATA,
    RECOVERY_POINT_OFFSET_CHECKPOINT,
};
use fetchbench::log::manager::LogManager;
use fetchbench::log::LogConfig;
use kafka_protocol::messages::{ApiKey, InitProducerIdRequest, RequestKind, ResponseKind};
use nix::sys::signal::Signal;

use crate::broker::{fetch, Client};
use crate::serve_process::start_on;

/// Non-UTF-8 bytes and ASCII garbage: both must be handled the same way.
const DAMAGE: [(&str, &[u8]); 2] = [("non-UTF-8", b"\xff\xfe\x00\x80garbage\n"), ("ASCII garbage", b"0\n2\nt 0\n")];

/// A batch of `n` records (`k<first+i>` / `v<first+i>`), idempotent when `producer` is given as
/// (producer id, base sequence).
fn batch(first: usize, n: usize, producer: Option<(i64, i32)>) -> Vec<u8> {
    let mut b = BatchBuilder::new(0, Compression::None);
    if let Some((pid, seq)) = producer {
        b = b.producer(pid, 0, seq);
    }
    for i in first..first + n {
        b.append(1_700_000_000_000 + i as i64, Some(format!("k{i}").as_bytes()), Some(format!("v{i}").as_bytes()), &[]);
    }
    b.build().unwrap()
}

/// A log directory with topic `t`, partitions 0 and 1 (same topic id), 3 batches of 5 records
/// in partition 0 written under leader epochs 0, 2 and 5 (the last by an idempotent producer
/// `producer_id`), cleanly shut down. Returns partition 0's leader epoch cache.
fn populate(dir: &Path, producer_id: i64) -> Vec<EpochEntry> {
    let (logs, _) = LogManager::open(dir, LogConfig::default(), |_| None, false).unwrap();
    let id = TopicId::parse("B3_HiNPgSQ6oxG9ZZ6ED5A").unwrap();
    for p in [0, 1] {
        logs.get_or_create("t", p, None).unwrap().log_mut().set_topic_id(id).unwrap();
    }
    let partition = logs.partition("t", 0).unwrap();
    let mut log = partition.log_mut();
    for (i, epoch) in [0, 2, 5].into_iter().enumerate() {
        log.set_leader_epoch(epoch);
        let producer = (epoch == 5).then_some((producer_id, 0));
        log.append(&batch(i * 5, 5, producer), 0).unwrap();
    }
    let epochs = log.leader_epochs().to_vec();
    assert_eq!(epochs.len(), 3, "{epochs:?}");
    drop(log);
    logs.shutdown().unwrap();
    epochs
}

/// Offsets of every record of `topic`-0 from `offset` on (one fetch per segment at most).
fn values(client: &mut Client, topic: &str, offset: i64) -> Vec<i64> {
    let mut out = Vec::new();
    let mut next = offset;
    loop {
        let (err, hw, recs) = fetch(client, topic, next, 11);
        assert_eq!(err, 0, "fetch {topic} at {next}");
        out.extend(recs.iter().map(|r| r.0).filter(|&o| o >= next));
        match recs.last() {
            Some(last) if last.0 + 1 < hw => next = last.0 + 1,
            _ => return out,
        }
    }
}

#[test]
fn serve_starts_and_recovers_with_a_damaged_offset_checkpoint() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("logs");
    populate(&dir, 77);
    for file in [RECOVERY_POINT_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT] {
        for (what, bytes) in DAMAGE {
            let path = dir.join(file);
            std::fs::write(&path, bytes).unwrap();
            let mut serve = start_on(work.path(), "damaged-checkpoint", &dir);
            let stderr = serve.stderr();
            assert!(stderr.contains(file) && stderr.contains("damaged checkpoint ignored"), "{file} {what}:\n{stderr}");
            let mut c = Client::connect(serve.addr);
            assert_eq!(values(&mut c, "t", 0), (0..15).collect::<Vec<i64>>(), "{file} {what}");
            drop(c);
            serve.signal(Signal::SIGTERM);
            let status = serve.wait();
            assert!(status.success(), "{file} {what}: {status}\n{}", serve.stderr());
            // Rewritten from the logs.
            let cp = read_offset_checkpoint(&path).unwrap_or_else(|e| panic!("{file} {what}: {e}"));
            assert_eq!(
                cp.get(&("t".to_string(), 0)).copied(),
                Some(if file == LOG_START_OFFSET_CHECKPOINT { 0 } else { 15 })
            );
        }
    }
}

#[test]
fn a_damaged_recovery_point_checkpoint_recovers_every_partition_in_full() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs");
    populate(&dir, 77);
    for (what, bytes) in DAMAGE {
        std::fs::write(dir.join(RECOVERY_POINT_OFFSET_CHECKPOINT), bytes).unwrap();
        let (logs, report) = LogManager::open(&dir, LogConfig::default(), |_| None, false).unwrap();
        assert!(report.had_clean_shutdown, "{what}");
        let (_, load) = report.partitions.iter().find(|(k, _)| k == &("t".to_string(), 0)).unwrap();
        assert_eq!(load.recovered, vec![0], "{what}: recovered from its log start despite the clean shutdown");
        assert_eq!(report.damaged.len(), 1, "{what}: {:?}", report.damaged);
        assert_eq!(logs.partition("t", 0).unwrap().log_end_offset(), 15);
        logs.shutdown().unwrap();
    }
}

#[test]
fn a_damaged_leader_epoch_checkpoint_is_rebuilt_from_the_batches() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs");
    let epochs = populate(&dir, 77);
    let path = dir.join("t-0").join(LEADER_EPOCH_CHECKPOINT);
    let good = std::fs::read(&path).unwrap();
    for (what, bytes) in
        [("truncated", &good[..good.len() - 3]), ("garbage", &b"\xff\x00zz\n"[..]), ("wrong count", b"0\n9\n0 0\n")]
    {
        std::fs::write(&path, bytes).unwrap();
        let (logs, report) = LogManager::open(&dir, LogConfig::default(), |_| None, false)
            .unwrap_or_else(|e| panic!("{what}: one partition's epoch file stopped the broker: {e}"));
        assert_eq!(logs.partition("t", 0).unwrap().log().leader_epochs(), &epochs[..], "{what}");
        assert_eq!(logs.partition("t", 0).unwrap().leader_epoch(), 5, "{what}: appends go on in the latest epoch");
        assert_eq!(report.damaged.len(), 1, "{what}: {:?}", report.damaged);
        assert_eq!(report.damaged[0].path, path);
        assert!(report.damaged[0].action.contains("3 leader epoch entries"), "{:?}", report.damaged[0]);
        assert_eq!(read_leader_epoch_checkpoint(&path).unwrap(), epochs, "{what}: written back");
        drop(logs);
    }
}

#[test]
fn a_damaged_partition_metadata_takes_the_topic_id_of_a_sibling() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs");
    populate(&dir, 77);
    let id = TopicId::parse("B3_HiNPgSQ6oxG9ZZ6ED5A").unwrap();
    let path = dir.join("t-0").join(PARTITION_METADATA);
    for (what, bytes) in [("truncated", &b"version: 0\ntopic_id: B3_HiNPg"[..]), ("garbage", b"\xff\xfe\n\n")] {
        std::fs::write(&path, bytes).unwrap();
        let (logs, report) = LogManager::open(&dir, LogConfig::default(), |_| None, false)
            .unwrap_or_else(|e| panic!("{what}: one partition's metadata stopped the broker: {e}"));
        assert_eq!(logs.partition("t", 0).unwrap().topic_id(), Some(id), "{what}");
        assert_eq!(read_partition_metadata(&path).unwrap(), Some(id), "{what}: written back");
        assert_eq!(report.damaged.len(), 1, "{what}: {:?}", report.damaged);
        assert!(report.damaged[0].action.contains("taken from partition t-1"), "{:?}", report.damaged[0]);
        drop(logs);
    }
    // No sibling knows the id: the partition still loads and serves, without a topic id until
    // the broker assigns one.
    std::fs::write(&path, "garbage").unwrap();
    std::fs::write(dir.join("t-1").join(PARTITION_METADATA), "version: 7").unwrap();
    let (logs, report) = LogManager::open(&dir, LogConfig::default(), |_| None, false).unwrap();
    assert_eq!(report.damaged.len(), 2, "{:?}", report.damaged);
    assert_eq!(logs.partition("t", 0).unwrap().topic_id(), None);
    assert_eq!(logs.partition("t", 0).unwrap().log_end_offset(), 15);
    drop(logs);
    // A fresh, valid file is left alone.
    write_partition_metadata(&path, id).unwrap();
}

fn init_producer_id(client: &mut Client) -> (i16, i64) {
    let req = InitProducerIdRequest::default().with_transactional_id(None).with_transaction_timeout_ms(60_000);
    match client.call(ApiKey::InitProducerId, 4, RequestKind::InitProducerId(req)) {
        ResponseKind::InitProducerId(r) => (r.error_code, r.producer_id.0),
        other => panic!("{other:?}"),
    }
}

#[test]
fn serve_rebuilds_a_damaged_producer_id_block() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("logs");
    let in_log = 123_456;
    populate(&dir, in_log);
    for (what, bytes) in [DAMAGE[0], ("ASCII garbage", &b"0\nnext block: soon\n"[..])] {
        std::fs::write(dir.join("producer-id-block"), bytes).unwrap();
        let mut serve = start_on(work.path(), "damaged-pid-block", &dir);
        let mut c = Client::connect(serve.addr);
        let (err, id) = init_producer_id(&mut c);
        assert_eq!(err, 0, "{what}: InitProducerId failed");
        assert!(id > in_log, "{what}: producer id {id} must be above {in_log}, the largest in the log");
        let stderr = serve.stderr();
        assert!(stderr.contains("producer-id-block") && stderr.contains("damaged"), "{what}:\n{stderr}");
        drop(c);
        serve.signal(Signal::SIGTERM);
        assert!(serve.wait().success(), "{what}: {}", serve.stderr());
    }
}

#[test]
fn serve_warns_about_a_lost_segment_and_serves_across_the_hole() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("logs");
    let mut config = LogConfig::default();
    config.set("segment.bytes", "200").unwrap();
    {
        let (logs, _) = LogManager::open(&dir, config.clone(), |_| None, false).unwrap();
        let log = logs.get_or_create("holed", 0, Some(config.clone())).unwrap();
        for i in 0..3 {
            log.append(&batch(i * 4, 4, None), 0).unwrap();
        }
        assert_eq!(log.log().segments().len(), 3, "one batch per segment");
        logs.shutdown().unwrap();
    }
    // The middle segment (offsets 4..=7) goes.
    for suffix in ["log", "index", "timeindex"] {
        let _ = std::fs::remove_file(dir.join(format!("holed-0/00000000000000000004.{suffix}")));
    }
    let mut serve = start_on(work.path(), "holed", &dir);
    let stderr = serve.stderr();
    assert!(
        stderr.contains("holed-0: offsets 4..=7 are missing") && stderr.contains("00000000000000000008.log"),
        "{stderr}"
    );
    let mut c = Client::connect(serve.addr);
    assert_eq!(values(&mut c, "holed", 0), vec![0, 1, 2, 3, 8, 9, 10, 11]);
    // A fetch inside the hole gets the next batch, as in a compaction gap.
    assert_eq!(values(&mut c, "holed", 5), vec![8, 9, 10, 11]);
    drop(c);
    serve.signal(Signal::SIGTERM);
    assert!(serve.wait().success(), "{}", serve.stderr());
}

#[test]
fn a_hole_is_reported_at_load_unless_the_topic_is_compacted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs");
    let mut config = LogConfig::default();
    config.set("segment.bytes", "200").unwrap();
    {
        let (logs, _) = LogManager::open(&dir, config.clone(), |_| None, false).unwrap();
        for topic in ["plain", "cleaned"] {
            let log = logs.get_or_create(topic, 0, Some(config.clone())).unwrap();
            for i in 0..3 {
                log.append(&batch(i * 4, 4, None), 0).unwrap();
            }
        }
        logs.shutdown().unwrap();
    }
    for topic in ["plain", "cleaned"] {
        for suffix in ["log", "index", "timeindex"] {
            let _ = std::fs::remove_file(dir.join(format!("{topic}-0/00000000000000000004.{suffix}")));
        }
    }
    let mut compacted = config.clone();
    compacted.set("cleanup.policy", "compact").unwrap();
    let (logs, report) =
        LogManager::open(&dir, config, |t| (t == "cleaned").then(|| compacted.clone()), false).unwrap();
    let holes = |topic: &str| report.partitions.iter().find(|(k, _)| k.0 == topic).unwrap().1.holes.clone();
    let plain = holes("plain");
    assert_eq!(plain.len(), 1, "{plain:?}");
    assert_eq!((plain[0].first_missing, plain[0].last_missing), (4, 7));
    assert!(plain[0].previous_segment.ends_with("plain-0/00000000000000000000.log"));
    assert!(plain[0].next_segment.ends_with("plain-0/00000000000000000008.log"));
    assert!(holes("cleaned").is_empty(), "gaps between segments are normal when compacted");
    // The log serves on; a read inside the hole resolves to the next batch.
    let slice = logs.partition("plain", 0).unwrap().read(6, 1 << 20, true).unwrap();
    let bytes = slice.read_to_vec().unwrap();
    assert_eq!(fetchbench::log::RecordBatch::parse(&bytes).unwrap().base_offset(), 8);
}

/// A log-start checkpoint above the log end offset (review LOW 8): Kafka's `LogLoader` warns and
/// deletes every segment; here the warning names the partition and both offsets, the checkpoint
/// is ignored and every record stays readable.
#[test]
fn a_log_start_checkpoint_above_the_log_end_is_ignored_with_a_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs");
    populate(&dir, 77);
    std::fs::write(dir.join(LOG_START_OFFSET_CHECKPOINT), "0\n2\nt 0 99999\nt 1 0\n").unwrap();
    let (logs, report) = LogManager::open(&dir, LogConfig::default(), |_| None, false).unwrap();
    let log = logs.partition("t", 0).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 15), "the records stay visible");
    let (_, load) = report.partitions.iter().find(|(k, _)| k == &("t".to_string(), 0)).unwrap();
    assert_eq!(load.offset_warnings.len(), 1, "{:?}", load.offset_warnings);
    let w = &load.offset_warnings[0];
    assert!(w.starts_with("t-0:") && w.contains("99999") && w.contains("log end offset 15"), "{w}");
    logs.shutdown().unwrap();
    let ls = read_offset_checkpoint(&dir.join(LOG_START_OFFSET_CHECKPOINT)).unwrap();
    assert!(!ls.values().any(|&o| o == 99999), "the bad value is not kept: {ls:?}");
}

/// A recovery point above the log end offset at load (review LOW 10: the last segment was
/// deleted): a warning names the partition, both offsets and that records were lost.
#[test]
fn a_recovery_point_above_the_log_end_warns_that_records_were_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs");
    populate(&dir, 77);
    std::fs::write(dir.join(RECOVERY_POINT_OFFSET_CHECKPOINT), "0\n2\nt 0 300\nt 1 0\n").unwrap();
    let (logs, report) = LogManager::open(&dir, LogConfig::default(), |_| None, false).unwrap();
    let (_, load) = report.partitions.iter().find(|(k, _)| k == &("t".to_string(), 0)).unwrap();
    assert_eq!(load.offset_warnings.len(), 1, "{:?}", load.offset_warnings);
    let w = &load.offset_warnings[0];
    assert!(w.starts_with("t-0:") && w.contains("300") && w.contains("log end offset 15") && w.contains("lost"), "{w}");
    assert_eq!(logs.partition("t", 0).unwrap().log_end_offset(), 15);
    logs.shutdown().unwrap();
}

/// A directory in place of a small file cannot be rebuilt (review LOW 6): start-up stops with an
/// error naming the file and the way out, and no warning claims a rebuild first.
#[test]
fn a_directory_in_place_of_a_small_file_names_the_way_out() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs");
    populate(&dir, 77);
    for rel in ["t-0/leader-epoch-checkpoint", "producer-id-block"] {
        let path = dir.join(rel);
        let saved = std::fs::read(&path).ok();
        let _ = std::fs::remove_file(&path);
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("keep"), "x").unwrap();
        let err = match LogManager::open(&dir, LogConfig::default(), |_| None, false) {
            Ok(_) => panic!("{rel}: a directory in place of the file must stop the load"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(&format!("remove {} and start again", path.display())), "{rel}: {err}");
        assert!(path.join("keep").exists(), "{rel}: the directory is left alone");
        std::fs::remove_dir_all(&path).unwrap();
        if let Some(b) = saved {
            std::fs::write(&path, b).unwrap();
        }
    }
}

/// A valid `partition.metadata` holding another topic's id (review LOW 7): a warning names the
/// file and both ids; the records stay served.
#[test]
fn a_partition_metadata_with_another_topic_id_is_warned_about() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs");
    populate(&dir, 77);
    let other = TopicId::parse("AAAAAAAAAAAAAAAAAAAAAQ").unwrap();
    let path = dir.join("t-0").join(PARTITION_METADATA);
    write_partition_metadata(&path, other).unwrap();
    let (logs, report) = LogManager::open(&dir, LogConfig::default(), |_| None, false).unwrap();
    assert_eq!(report.damaged.len(), 1, "{:?}", report.damaged);
    let d = &report.damaged[0];
    // Two partitions, one id each: a tie, the lowest partition's id is the topic's (t-1 is named).
    assert_eq!(d.path, dir.join("t-1").join(PARTITION_METADATA));
    assert!(d.error.contains("AAAAAAAAAAAAAAAAAAAAAQ") && d.error.contains("B3_HiNPgSQ6oxG9ZZ6ED5A"), "{d:?}");
    assert_eq!(logs.partition("t", 0).unwrap().log_end_offset(), 15, "the records stay");
    drop(logs);
}

#[test]
fn r09_garbage_recovery_point_checkpoint_does_not_block_open() {
    use fetchbench::log::manager::LogManager;
    let tmp = tempfile::tempdir().unwrap();
    let (mgr, _) = LogManager::open(tmp.path(), LogConfig::default(), |_| None, false).unwrap();
    drop(mgr);
    fs::write(tmp.path().join("recovery-point-offset-checkpoint"), b"0\n3\ngarbage").unwrap();
    fs::write(tmp.path().join("log-start-offset-checkpoint"), b"").unwrap();
    let r = LogManager::open(tmp.path(), LogConfig::default(), |_| None, false);
    assert!(r.is_ok(), "Kafka resets a malformed checkpoint to 0 with a warning; fetchbench: {:?}", r.err());
}
