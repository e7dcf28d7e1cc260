//! [`BatchBoundaries`]: walking concatenated batches of any magic by their length field, as
//! Kafka's `FileRecords.batches()` does.

use super::header::{BatchHeader, LOG_OVERHEAD};

/// Walks a buffer of concatenated batches (any magic), yielding each batch's
/// `(position, base_offset, total_size, magic)` without decoding past the first 17 bytes. Stops
/// at the end, or at a partial trailing batch (reported by [`BatchBoundaries::partial_tail`]).
/// This is how Kafka's `FileRecords.batches()` walks a log: by the length field alone.
#[derive(Debug)]
pub struct BatchBoundaries<'a> {
    bytes: &'a [u8],
    position: usize,
    partial: bool,
}

/// One entry of [`BatchBoundaries`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Boundary {
    /// Byte position in the buffer.
    pub position: usize,
    /// Base offset (magic 2) or offset of the message (magic 0/1).
    pub base_offset: i64,
    /// Total size including the 12-byte log overhead.
    pub size: usize,
    /// Magic byte.
    pub magic: i8,
}

impl<'a> BatchBoundaries<'a> {
    /// Starts walking `bytes` at position 0.
    pub fn new(bytes: &'a [u8]) -> Self {
        BatchBoundaries { bytes, position: 0, partial: false }
    }
    /// Whether iteration stopped at a batch that extends past the end of the buffer (or a
    /// length field too short to be a batch).
    pub fn partial_tail(&self) -> bool {
        self.partial
    }
}

impl Iterator for BatchBoundaries<'_> {
    type Item = Boundary;
    fn next(&mut self) -> Option<Boundary> {
        let rest = &self.bytes[self.position..];
        if rest.is_empty() {
            return None;
        }
        let Ok((base_offset, len, magic)) = BatchHeader::peek(rest) else {
            self.partial = true;
            return None;
        };
        // The smallest legacy message (magic 0, empty key and value) has size 14.
        if len < 14 || rest.len() < len as usize + LOG_OVERHEAD {
            self.partial = true;
            return None;
        }
        let b = Boundary { position: self.position, base_offset, size: len as usize + LOG_OVERHEAD, magic };
        self.position += b.size;
        Some(b)
    }
}
