//! The request path of the broker on untrusted bytes: size-prefixed frames read as the broker's
//! network threads read them (`FrameReceive` with `socket.request.max.bytes`, here from a reader
//! that hands out 7 bytes at a time), and as `read_frame` reads them, each payload decoded to a
//! request through kafka-protocol (`decode_request`, with its count guard), and the input as a
//! bare payload too. Errors are fine; a panic or an abort (allocation failure) is a
//! finding.
#![no_main]

use bytes::{Bytes, BytesMut};
use fetchbench::protocol::frame;
use libfuzzer_sys::fuzz_target;

/// A reader that returns at most 7 bytes per read, so frames arrive in pieces.
struct Pieces<'a>(&'a [u8]);

impl std::io::Read for Pieces<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.0.len()).min(7);
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

/// Small, so a frame that claims more than the input holds is refused or incomplete quickly.
const MAX_BYTES: usize = 1 << 20;

fuzz_target!(|data: &[u8]| {
    // As the broker's network threads: frame after frame until the stream ends or fails.
    let mut receive = frame::FrameReceive::new();
    let mut pieces = Pieces(data);
    while let Ok(frame::ReceiveProgress::Frame(payload)) = receive.read_from(&mut pieces, MAX_BYTES) {
        let _ = frame::decode_request(payload);
    }
    // As a blocking reader.
    let mut reader = data;
    while let Ok(Some(payload)) = frame::read_frame(&mut reader, MAX_BYTES) {
        let _ = frame::peek_request_ids(&payload);
        let _ = frame::decode_request(payload);
    }
    // The buffered splitter (same frames, from a buffer).
    let mut buf = BytesMut::from(data);
    while let Ok(Some(payload)) = frame::split_frame(&mut buf, MAX_BYTES) {
        let _ = frame::decode_request(payload);
    }
    // The input as one payload (seeds are whole frames: this skips their size prefix too).
    let _ = frame::check_frame(data, MAX_BYTES);
    let _ = frame::decode_request(Bytes::copy_from_slice(data));
    if data.len() > frame::SIZE_PREFIX_BYTES {
        let _ = frame::decode_request(Bytes::copy_from_slice(&data[frame::SIZE_PREFIX_BYTES..]));
    }
});
