//! Compression codecs of record batches (attributes bits 0-2), Kafka's `CompressionType`.
//! PLACEHOLDER: being written by a helper.

use std::fmt;
use std::io;

use super::BatchError;

/// A batch's compression codec.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Compression {
    /// No compression (id 0).
    #[default]
    None,
    /// gzip (id 1).
    Gzip,
    /// snappy (id 2).
    Snappy,
    /// lz4 (id 3).
    Lz4,
    /// zstd (id 4).
    Zstd,
}

impl Compression {
    /// The codec for an id; errors: [`BatchError::UnknownCodec`].
    pub fn from_id(id: u8) -> Result<Self, BatchError> {
        Ok(match id {
            0 => Compression::None,
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            4 => Compression::Zstd,
            id => return Err(BatchError::UnknownCodec { id }),
        })
    }
    /// The id stored in attributes bits 0-2.
    pub fn id(self) -> u8 {
        self as u8
    }
    /// Kafka's name (`compression.type` value).
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Snappy => "snappy",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
    /// Compresses `input`.
    pub fn compress(self, input: &[u8]) -> io::Result<Vec<u8>> {
        let _ = input;
        Err(io::Error::new(io::ErrorKind::Unsupported, "not yet"))
    }
    /// Decompresses `input`, producing at most `max_output` bytes.
    pub fn decompress(self, input: &[u8], max_output: usize) -> io::Result<Vec<u8>> {
        let _ = (input, max_output);
        Err(io::Error::new(io::ErrorKind::Unsupported, "not yet"))
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
