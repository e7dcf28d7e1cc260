//! Which partition a record goes to (Kafka's `BuiltInPartitioner`): a keyed record goes to
//! `toPositive(murmur2(key)) % partitions` ([`murmur2`], [`partition_for_key`]); an unkeyed one
//! sticks to one partition ([`StickyPartition`]) until `batch.size` bytes went to it (KIP-794)
//! or its batch is full, then moves to the next (round robin). A record that names its
//! partition goes there ([`Producer::send`](super::Producer::send) checks it exists).

/// Kafka's `Utils.murmur2`: 32-bit MurmurHash2 with seed `0x9747b28c`, little-endian blocks,
/// returned as Java's signed int.
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h: u32 = 0x9747_b28c ^ (data.len() as u32);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() == 3 {
        h ^= (rest[2] as u32) << 16;
    }
    if rest.len() >= 2 {
        h ^= (rest[1] as u32) << 8;
    }
    if !rest.is_empty() {
        h ^= rest[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// Kafka's `BuiltInPartitioner.partitionForKey`: `Utils.toPositive(murmur2(key)) % partitions`
/// (`toPositive` clears the sign bit). `partitions` must be positive.
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    (murmur2(key) & 0x7fff_ffff) % partitions
}

/// The sticky partition of a topic's unkeyed records (Kafka's `BuiltInPartitioner`
/// `StickyPartitionInfo`, moving round robin rather than by queue size): the partition, and the
/// bytes sent to it since it was chosen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct StickyPartition {
    /// The current partition.
    partition: i32,
    /// Bytes sent to it since it was chosen (KIP-794).
    produced_bytes: usize,
}

impl StickyPartition {
    /// The partition of an unkeyed record of `size` bytes among `partitions`. KIP-794: move on
    /// once `batch_size` bytes went to the sticky partition, whether or not `linger.ms` sent them
    /// in smaller batches, so low rates spread over every partition too.
    pub(super) fn partition(&mut self, partitions: i32, batch_size: usize, size: usize) -> i32 {
        if self.produced_bytes >= batch_size {
            self.partition = (self.partition + 1) % partitions;
            self.produced_bytes = 0;
        }
        self.produced_bytes += size;
        self.partition
    }

    /// The sticky partition's batch is full: move on to the next partition, which gets the
    /// record of `size` bytes (Kafka's `onNewBatch`). Returns the new partition.
    pub(super) fn batch_full(&mut self, partitions: i32, size: usize) -> i32 {
        self.partition = (self.partition + 1) % partitions;
        self.produced_bytes = size;
        self.partition
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafkas_utils_test() {
        // Kafka's UtilsTest.testMurmur2.
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973932308),
            (b"foobar", -790332482),
            (b"a-little-bit-long-string", -985981536),
            (b"a-little-bit-longer-string", -1486304829),
            (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
            (b"abc", 479470107),
        ];
        for (key, want) in cases {
            assert_eq!(murmur2(key), want, "{}", String::from_utf8_lossy(key));
        }
    }
}
