//! Latency recording for the harness, on [`Latency`] (the HdrHistogram type in
//! [`crate::metrics`], shared with the broker).
//!
//! An open-loop producer sends record `i` at its *intended* time `start + i / rate`
//! ([`OpenLoopSchedule`]). When the producer (or the broker behind it) stalls, the records
//! due during the stall go out late, and a latency measured from the *actual* send time hides
//! the stall: this is coordinated omission. [`LatencyRecorder`] keeps both views: `raw`
//! (receive time - actual send time) and `corrected` (receive time - intended send time).
//! Report the corrected one; the raw one shows what the stall hid.

use crate::metrics::Latency;

/// The intended send times of an open-loop schedule: record `i` is due at
/// `start_ns + i * 1e9 / rate` whatever happened to the records before it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct OpenLoopSchedule {
    /// Time of record 0, ns on the clock the send and receive times use.
    pub start_ns: u64,
    /// Records per second (> 0).
    pub records_per_sec: f64,
}

impl OpenLoopSchedule {
    /// When record `index` is due, ns.
    pub(crate) fn intended_ns(&self, index: u64) -> u64 {
        self.start_ns + (index as f64 * 1e9 / self.records_per_sec).round() as u64
    }
}

/// Both views of one stream of latencies: `raw` from the actual send time, `corrected` from
/// the intended send time of the schedule (see the [module docs](self)).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct LatencyRecorder {
    /// Receive time - actual send time.
    pub raw: Latency,
    /// Receive time - intended send time (coordinated omission corrected).
    pub corrected: Latency,
}

impl LatencyRecorder {
    /// An empty recorder.
    pub(crate) fn new() -> LatencyRecorder {
        LatencyRecorder::default()
    }

    /// Records one record: due at `intended_ns`, sent at `sent_ns`, received at
    /// `received_ns` (all ns on one clock). `corrected` measures from the earlier of the
    /// intended and actual send times (a record sent ahead of schedule is not credited), and a
    /// receive time before the send time counts as 0. In a closed loop (no schedule) pass
    /// `intended_ns = sent_ns`: both views agree.
    pub(crate) fn record(&mut self, intended_ns: u64, sent_ns: u64, received_ns: u64) {
        self.raw.record_ns(received_ns.saturating_sub(sent_ns));
        self.corrected.record_ns(received_ns.saturating_sub(intended_ns.min(sent_ns)));
    }

    /// Merges another consumer's recorder into this one.
    pub(crate) fn merge(&mut self, other: &LatencyRecorder) {
        self.raw.merge(&other.raw);
        self.corrected.merge(&other.corrected);
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use hdrhistogram::serialization::{Serializer as _, V2Serializer};
    use hdrhistogram::Histogram;

    use super::*;
    use crate::metrics::HistogramError;

    const MS: u64 = 1_000_000;

    /// A 1,000 records/s open-loop producer over 10 s that stalls for one second before
    /// record 5,000; every record takes 1 ms from send to receive.
    fn stalled_run() -> LatencyRecorder {
        let schedule = OpenLoopSchedule { start_ns: 1_000 * MS, records_per_sec: 1_000.0 };
        let stall_at = 5_000;
        let mut now = schedule.start_ns;
        let mut rec = LatencyRecorder::new();
        for i in 0..10_000u64 {
            let due = schedule.intended_ns(i);
            if i == stall_at {
                now += 1_000 * MS; // the producer is stuck for one second
            }
            let sent = now.max(due);
            rec.record(due, sent, sent + MS);
            now = sent;
        }
        rec
    }

    #[test]
    fn a_stall_shows_in_the_corrected_histogram_only() {
        let rec = stalled_run();
        let corrected = rec.corrected.summary();
        let raw = rec.raw.summary();
        assert_eq!(corrected.count, 10_000);
        assert!(corrected.p999_us >= 500_000.0, "corrected p99.9 {corrected:?}");
        assert!(corrected.max_us >= 1_000_000.0, "corrected max {corrected:?}");
        assert!(raw.p999_us < 2_000.0, "raw p99.9 {raw:?}");
        assert!(raw.max_us < 2_000.0, "raw max {raw:?}");
        // The stall delays ~1,000 records by 1..1000 ms: about 5% lie above 500 ms.
        assert!(corrected.p99_us >= 500_000.0, "{corrected:?}");
        assert!(corrected.p50_us < 2_000.0, "{corrected:?}");
    }

    #[test]
    fn merging_adds_counts_and_never_averages_percentiles() {
        let mut fast = Latency::new();
        let mut slow = Latency::new();
        for _ in 0..990 {
            fast.record_ns(MS);
        }
        for _ in 0..10 {
            slow.record_ns(100 * MS);
        }
        let mut all = fast.clone();
        all.merge(&slow);
        assert_eq!(all.count(), 1_000);
        let s = all.summary();
        // Averaging the two p99s would give ~50 ms; the merged p99 is the fast consumers' 1 ms,
        // and p99.9 is the slow one's 100 ms.
        assert!((s.p99_us - 1_000.0).abs() < 2.0, "{s:?}");
        assert!((s.p999_us - 100_000.0).abs() < 100.0, "{s:?}");
        let mut recorders = [LatencyRecorder::new(), stalled_run()];
        recorders[0].record(0, 0, 5 * MS);
        let mut merged = LatencyRecorder::new();
        for r in &recorders {
            merged.merge(r);
        }
        assert_eq!(merged.corrected.count(), 10_001);
    }

    #[test]
    fn v2_base64_round_trip_and_bad_input() {
        let rec = stalled_run();
        let text = rec.corrected.encode();
        assert!(text.starts_with("HISTEw"), "V2 cookie 0x1c849313: {}", &text[..12]);
        let back = Latency::decode(&text).unwrap();
        assert_eq!(back, rec.corrected);
        assert_eq!(back.summary(), rec.corrected.summary());
        let empty = Latency::decode(&Latency::new().encode()).unwrap();
        assert_eq!(empty.count(), 0);
        let e = Latency::decode("not base64!").unwrap_err().to_string();
        assert!(e.starts_with("histogram is not valid base64"), "{e}");
        let e = Latency::decode("aGVsbG8gd29ybGQ=").unwrap_err().to_string();
        assert!(e.starts_with("histogram is not a V2 HdrHistogram serialization"), "{e}");
        let other: Histogram<u64> = Histogram::new_with_bounds(1, 1_000, 2).unwrap();
        let mut bytes = Vec::new();
        V2Serializer::new().serialize(&other, &mut bytes).unwrap();
        let e = Latency::decode(&base64::engine::general_purpose::STANDARD.encode(bytes)).unwrap_err();
        assert!(matches!(e, HistogramError::Range { low: 1, high: 1_000, digits: 2 }), "{e}");
    }
}
