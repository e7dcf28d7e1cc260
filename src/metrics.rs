//! Metric types shared by broker and harness: the [`Latency`] histogram (HdrHistogram,
//! nanoseconds from 1 us to 60 s at 3 significant digits) and its [`Summary`].
//!
//! The broker records its own Fetch latency in it (`BrokerHandle::take_fetch_latency`, Kafka's
//! `RequestMetrics` `TotalTimeMs`); the harness (`bench`) records produce-to-consume latencies in
//! it and carries it in the results JSON. The bottom layer: it imports nothing of this crate, so
//! both may use it without one depending on the other.
//!
//! Histograms of many consumers are merged with [`Latency::merge`] (bucket counts added);
//! percentiles are never averaged. [`Latency::encode`] / [`Latency::decode`] carry a histogram
//! in the results JSON as base64 of its V2 serialization (HdrHistogram's portable format,
//! readable by the Java and other implementations).

use std::fmt;

use base64::Engine as _;
use hdrhistogram::serialization::{Deserializer, Serializer as _, V2Serializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// The lowest discernible value: 1 us in nanoseconds.
pub const LOWEST_NS: u64 = 1_000;
/// The highest trackable value: 60 s in nanoseconds. Larger values are recorded as this.
pub const HIGHEST_NS: u64 = 60_000_000_000;
/// Significant decimal digits kept (values within 0.1%).
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// Errors of decoding a histogram from results JSON.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HistogramError {
    /// The text is not base64.
    #[error("histogram is not valid base64: {source}")]
    Base64 {
        /// The decoder's error.
        #[source]
        source: base64::DecodeError,
    },
    /// The bytes are not a V2 HdrHistogram serialization.
    #[error("histogram is not a V2 HdrHistogram serialization: {source}")]
    Decode {
        /// The deserializer's error.
        #[source]
        source: hdrhistogram::serialization::DeserializeError,
    },
    /// The histogram's range or precision differs from [`LOWEST_NS`]..[`HIGHEST_NS`] at
    /// [`SIGNIFICANT_DIGITS`].
    #[error(
        "histogram tracks {low}..{high} at {digits} digits, expected {LOWEST_NS}..{HIGHEST_NS} at {SIGNIFICANT_DIGITS}"
    )]
    Range {
        /// Its lowest discernible value.
        low: u64,
        /// Its highest trackable value.
        high: u64,
        /// Its significant digits.
        digits: u8,
    },
}

/// One latency histogram in nanoseconds (1 us ..= 60 s, 3 significant digits).
#[derive(Clone)]
pub struct Latency {
    hist: Histogram<u64>,
}

impl Default for Latency {
    fn default() -> Self {
        Latency::new()
    }
}

impl fmt::Debug for Latency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Latency").field("summary", &self.summary()).finish()
    }
}

impl PartialEq for Latency {
    fn eq(&self, other: &Self) -> bool {
        self.hist == other.hist
    }
}

impl Latency {
    /// An empty histogram.
    pub fn new() -> Latency {
        Latency {
            hist: Histogram::new_with_bounds(LOWEST_NS, HIGHEST_NS, SIGNIFICANT_DIGITS)
                .expect("constant bounds are valid"),
        }
    }

    /// Records one latency in nanoseconds; above [`HIGHEST_NS`] it counts as [`HIGHEST_NS`].
    pub fn record_ns(&mut self, ns: u64) {
        self.hist.saturating_record(ns.min(HIGHEST_NS));
    }

    /// Records `count` latencies of `ns` nanoseconds each (a bucket of a Prometheus histogram
    /// read back as its upper bound); above [`HIGHEST_NS`] they count as [`HIGHEST_NS`].
    pub fn record_n_ns(&mut self, ns: u64, count: u64) {
        self.hist.saturating_record_n(ns.min(HIGHEST_NS), count);
    }

    /// Adds every count of `other` (merging consumers, or runs): percentiles of the result
    /// are those of all the recorded values together.
    pub fn merge(&mut self, other: &Latency) {
        self.hist.add(&other.hist).expect("histograms of the same range always add");
    }

    /// Number of recorded values.
    pub fn count(&self) -> u64 {
        self.hist.len()
    }

    /// The value at quantile `q` (0.0 ..= 1.0) in nanoseconds; 0 when empty.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.hist.is_empty() {
            0
        } else {
            self.hist.value_at_quantile(q)
        }
    }

    /// Count, p50, p99, p99.9 and max.
    pub fn summary(&self) -> Summary {
        let us = |ns: u64| ns as f64 / 1e3;
        Summary {
            count: self.count(),
            p50_us: us(self.quantile_ns(0.50)),
            p99_us: us(self.quantile_ns(0.99)),
            p999_us: us(self.quantile_ns(0.999)),
            max_us: us(if self.hist.is_empty() { 0 } else { self.hist.max() }),
        }
    }

    /// The V2 serialization (uncompressed), base64-encoded (standard alphabet, padded).
    pub fn encode(&self) -> String {
        let mut bytes = Vec::new();
        V2Serializer::new().serialize(&self.hist, &mut bytes).expect("serializing to a Vec cannot fail");
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    /// Decodes [`Latency::encode`]'s text. Errors: not base64, not a V2 histogram, or another
    /// range or precision ([`HistogramError::Range`]: such a histogram would not merge).
    pub fn decode(text: &str) -> Result<Latency, HistogramError> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text.trim())
            .map_err(|source| HistogramError::Base64 { source })?;
        let hist: Histogram<u64> = Deserializer::new()
            .deserialize(&mut bytes.as_slice())
            .map_err(|source| HistogramError::Decode { source })?;
        let (low, high, digits) = (hist.low(), hist.high(), hist.sigfig());
        if low != LOWEST_NS || high != HIGHEST_NS || digits != SIGNIFICANT_DIGITS {
            return Err(HistogramError::Range { low, high, digits });
        }
        Ok(Latency { hist })
    }
}

/// Percentiles of a [`Latency`], in microseconds (what results JSON and tables show).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    /// Number of recorded values.
    pub count: u64,
    /// Median, us.
    pub p50_us: f64,
    /// 99th percentile, us.
    pub p99_us: f64,
    /// 99.9th percentile, us.
    pub p999_us: f64,
    /// Largest recorded value, us.
    pub max_us: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn precision_range_and_saturation() {
        let mut h = Latency::new();
        h.record_ns(123_456_789);
        let v = h.quantile_ns(1.0) as f64;
        assert!((v - 123_456_789.0).abs() / 123_456_789.0 < 1e-3, "{v}");
        h.record_ns(3_600 * 1_000 * MS);
        assert_eq!(h.count(), 2);
        assert!(h.summary().max_us >= 59_000_000.0 && h.summary().max_us <= 60_100_000.0);
        assert_eq!(Latency::new().summary(), Summary::default());
    }
}
