//! `protocol::frame` against frames real clients and brokers exchanged (`../shared/corpus/protocol`,
//! see its README.md): every request frame decodes and re-encodes to the same bytes, frames the
//! capture cut short are "need more bytes", responses decode for their request's API/version; and
//! arbitrary bytes never panic the frame reader or the request decoder.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bytes::{Bytes, BytesMut};
use fetchbench::protocol::frame::{
    check_frame, decode_request, decode_response, encode_request, encode_response, read_frame, split_frame, FrameCheck,
    ProtocolError, DEFAULT_SOCKET_REQUEST_MAX_BYTES,
};
use kafka_protocol::messages::ApiKey;
use proptest::prelude::*;

use crate::common;

/// One corpus frame file, parsed from its name:
/// `stream<S>_<c2s|s2c>_<NNN>_<Api>v<V>_req_corr<C>.bin` or `stream<S>_s2c_<NNN>_resp_corr<C>.bin`.
#[derive(Debug)]
struct FrameFile {
    path: PathBuf,
    stream: u32,
    correlation_id: i32,
    /// `Some((api name, version))` for a request.
    request: Option<(String, i16)>,
}

fn parse_name(path: &Path) -> FrameFile {
    let name = path.file_stem().unwrap().to_string_lossy().into_owned();
    let parts: Vec<&str> = name.split('_').collect();
    let stream = parts[0].strip_prefix("stream").unwrap().parse().unwrap();
    let correlation_id = parts.last().unwrap().strip_prefix("corr").unwrap().parse().unwrap();
    let request = if parts[parts.len() - 2] == "req" {
        let api = parts[3];
        let v = api.rfind('v').unwrap();
        Some((api[..v].to_string(), api[v + 1..].parse().unwrap()))
    } else {
        assert_eq!(parts[parts.len() - 2], "resp", "{name}");
        None
    };
    FrameFile { path: path.to_path_buf(), stream, correlation_id, request }
}

fn api_key_named(name: &str) -> ApiKey {
    ApiKey::iter().find(|k| format!("{k:?}") == name).unwrap_or_else(|| panic!("no API named {name}"))
}

/// Capture directories: each `kafka-go-pcap-frames/<capture>/` and `nDPI-kafka-frames/`.
fn capture_dirs(corpus: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(corpus.join("protocol/kafka-go-pcap-frames"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs.push(corpus.join("protocol/nDPI-kafka-frames"));
    dirs
}

/// Checks INDEX.txt (`<name> <size>B` per line), where present, against the files.
fn check_index(dir: &Path, files: &[PathBuf]) {
    let Ok(index) = std::fs::read_to_string(dir.join("INDEX.txt")) else { return };
    let mut listed = 0;
    for line in index.lines().filter(|l| !l.trim().is_empty()) {
        let (name, size) = line.split_once(' ').unwrap();
        let size: u64 = size.trim().strip_suffix('B').unwrap().parse().unwrap();
        assert_eq!(std::fs::metadata(dir.join(name)).unwrap().len(), size, "{}/{name}", dir.display());
        listed += 1;
    }
    assert_eq!(listed, files.len(), "INDEX.txt of {} lists every frame", dir.display());
}

#[derive(Default)]
struct Tally {
    requests: usize,
    requests_cut_short: usize,
    requests_with_trailing_bytes: usize,
    responses: usize,
    responses_cut_short: usize,
    responses_without_request: usize,
    responses_differing: Vec<String>,
}

#[test]
fn corpus_request_frames_round_trip_and_responses_decode() {
    let Some(corpus) = common::corpus() else { return };
    let mut tally = Tally::default();
    for dir in capture_dirs(&corpus) {
        let is_ndpi = dir.ends_with("nDPI-kafka-frames");
        let files = common::files_with_suffix(&dir, ".bin");
        assert!(!files.is_empty(), "{} holds frames", dir.display());
        check_index(&dir, &files);
        let frames: Vec<FrameFile> = files.iter().map(|p| parse_name(p)).collect();

        // (stream, correlation id) -> (api key, version) of the request.
        let mut requests: BTreeMap<(u32, i32), (ApiKey, i16)> = BTreeMap::new();
        for f in frames.iter().filter(|f| f.request.is_some()) {
            let (api, version) = f.request.clone().unwrap();
            let api_key = api_key_named(&api);
            requests.insert((f.stream, f.correlation_id), (api_key, version));
            let bytes = std::fs::read(&f.path).unwrap();
            match check_frame(&bytes, DEFAULT_SOCKET_REQUEST_MAX_BYTES).unwrap() {
                FrameCheck::Incomplete { needed } => {
                    assert!(is_ndpi, "{}: only nDPI flows are cut short", f.path.display());
                    assert!(needed > 0);
                    // The blocking reader sees the same frame as truncated, not as garbage.
                    let err = read_frame(&mut &bytes[..], DEFAULT_SOCKET_REQUEST_MAX_BYTES).unwrap_err();
                    assert!(matches!(err, ProtocolError::Truncated { .. }), "{}: {err}", f.path.display());
                    let mut buf = BytesMut::from(&bytes[..]);
                    assert!(split_frame(&mut buf, DEFAULT_SOCKET_REQUEST_MAX_BYTES).unwrap().is_none());
                    assert_eq!(buf.len(), bytes.len(), "an incomplete frame is left in the buffer");
                    tally.requests_cut_short += 1;
                }
                FrameCheck::Complete { payload_len } => {
                    assert_eq!(payload_len + 4, bytes.len(), "{}: one frame per file", f.path.display());
                    let payload = read_frame(&mut &bytes[..], DEFAULT_SOCKET_REQUEST_MAX_BYTES).unwrap().unwrap();
                    let req = decode_request(payload).unwrap_or_else(|e| panic!("{}: {e}", f.path.display()));
                    assert_eq!(req.api_key, api_key, "{}", f.path.display());
                    assert_eq!(req.api_version(), version, "{}", f.path.display());
                    assert_eq!(req.correlation_id(), f.correlation_id, "{}", f.path.display());
                    // librdkafka's ApiVersions v0 request carries 4 zero bytes after its empty
                    // body (nDPI streams 0, 3, 6, 7); Kafka ignores them, so do we. Re-encoding
                    // gives the header and body; the frame is those bytes plus the trailing ones.
                    if req.trailing_bytes != 0 {
                        assert!(is_ndpi, "{}: {} trailing bytes", f.path.display(), req.trailing_bytes);
                        tally.requests_with_trailing_bytes += 1;
                    }
                    let encoded = encode_request(&req.header, &req.body).unwrap();
                    let (frame_body, trailing) = bytes[4..].split_at(bytes.len() - 4 - req.trailing_bytes);
                    assert_eq!(&encoded[4..], frame_body, "{}: re-encoded request differs", f.path.display());
                    let mut reframed = encoded.to_vec();
                    reframed.extend_from_slice(trailing);
                    let size = (reframed.len() - 4) as i32;
                    reframed[..4].copy_from_slice(&size.to_be_bytes());
                    assert_eq!(reframed, bytes, "{}: re-encoded frame differs", f.path.display());
                    tally.requests += 1;
                }
            }
        }

        for f in frames.iter().filter(|f| f.request.is_none()) {
            let Some(&(api_key, version)) = requests.get(&(f.stream, f.correlation_id)) else {
                // The capture holds the response but not its request (nDPI streams 0 and 1).
                eprintln!("response without its request in the capture: {}", f.path.display());
                tally.responses_without_request += 1;
                continue;
            };
            let bytes = std::fs::read(&f.path).unwrap();
            let FrameCheck::Complete { payload_len } = check_frame(&bytes, DEFAULT_SOCKET_REQUEST_MAX_BYTES).unwrap()
            else {
                assert!(is_ndpi, "{}: only nDPI flows are cut short", f.path.display());
                tally.responses_cut_short += 1;
                continue;
            };
            assert_eq!(payload_len + 4, bytes.len(), "{}", f.path.display());
            let payload = Bytes::copy_from_slice(&bytes[4..]);
            let resp =
                decode_response(payload, api_key, version).unwrap_or_else(|e| panic!("{}: {e}", f.path.display()));
            assert_eq!(resp.header.correlation_id, f.correlation_id, "{}", f.path.display());
            let encoded = encode_response(api_key, version, f.correlation_id, &resp.body).unwrap();
            if encoded[..] != bytes[..] || resp.trailing_bytes != 0 {
                tally.responses_differing.push(format!(
                    "{} ({api_key:?} v{version}): {} bytes, re-encoded {} bytes, {} trailing",
                    f.path.display(),
                    bytes.len(),
                    encoded.len(),
                    resp.trailing_bytes
                ));
            }
            tally.responses += 1;
        }
    }
    eprintln!(
        "protocol corpus: {} requests round-tripped ({} with trailing bytes), {} cut short; {} responses \
         decoded, {} cut short, {} without their request",
        tally.requests,
        tally.requests_with_trailing_bytes,
        tally.requests_cut_short,
        tally.responses,
        tally.responses_cut_short,
        tally.responses_without_request
    );
    for d in &tally.responses_differing {
        eprintln!("response re-encoding differs: {d}");
    }
    assert!(tally.requests >= 11 * 17, "every kafka-go request frame was checked");
    assert!(tally.responses_differing.is_empty(), "{:#?}", tally.responses_differing);
}

#[test]
fn frame_size_is_checked_before_allocation() {
    // 2 GiB announced, 4 bytes sent: an error, not an allocation.
    let huge = i32::MAX.to_be_bytes();
    let err = check_frame(&huge, DEFAULT_SOCKET_REQUEST_MAX_BYTES).unwrap_err();
    assert!(matches!(err, ProtocolError::FrameTooLarge { size: i32::MAX, limit: DEFAULT_SOCKET_REQUEST_MAX_BYTES }));
    let err = read_frame(&mut &huge[..], DEFAULT_SOCKET_REQUEST_MAX_BYTES).unwrap_err();
    assert!(matches!(err, ProtocolError::FrameTooLarge { .. }));
    let neg = (-1i32).to_be_bytes();
    assert!(matches!(check_frame(&neg, 100), Err(ProtocolError::NegativeSize { size: -1 })));
    // Exactly at the limit is allowed; one byte over is not (Kafka: `receiveSize > maxSize`).
    assert_eq!(check_frame(&100i32.to_be_bytes(), 100).unwrap(), FrameCheck::Incomplete { needed: 100 });
    assert!(check_frame(&101i32.to_be_bytes(), 100).is_err());
    assert_eq!(check_frame(&[0, 0], 100).unwrap(), FrameCheck::Incomplete { needed: 2 });
    assert!(read_frame(&mut &[][..], 100).unwrap().is_none(), "clean end of file");
    assert!(matches!(decode_request(Bytes::new()), Err(ProtocolError::HeaderTooShort { len: 0 })));
}

#[test]
fn unknown_key_and_unsupported_version_keep_the_correlation_id() {
    // api key 999, version 0, correlation id 7, client id null.
    let mut p = vec![0x03, 0xE7, 0, 0, 0, 0, 0, 7, 0xFF, 0xFF];
    let err = decode_request(Bytes::from(p.clone())).unwrap_err();
    assert!(matches!(err, ProtocolError::UnknownApiKey { api_key: 999, correlation_id: 7, .. }), "{err}");
    // ApiVersions v127 (header v2: client id, then an empty tagged-field section).
    p[..4].copy_from_slice(&[0, 18, 0, 127]);
    p.push(0);
    let err = decode_request(Bytes::from(p)).unwrap_err();
    assert!(
        matches!(err, ProtocolError::UnsupportedVersion { api_key: 18, api_version: 127, correlation_id: 7, .. }),
        "{err}"
    );
}

#[test]
fn trailing_bytes_after_a_valid_body_are_accepted() {
    // ApiVersions v0: header v1 (client id "a"), empty body, then 3 extra bytes.
    let p = Bytes::from_static(&[0, 18, 0, 0, 0, 0, 0, 1, 0, 1, b'a', 9, 9, 9]);
    let req = decode_request(p).unwrap();
    assert_eq!((req.header_len, req.body_len, req.trailing_bytes), (11, 0, 3));
}

#[test]
fn huge_array_counts_are_refused_before_allocation() {
    // Metadata v0 (header v1, client id null), topics array count i32::MAX, 2 bytes left: with
    // kafka-protocol alone this pre-allocates ~150 GB and aborts the process.
    let p = Bytes::from_static(&[0, 3, 0, 0, 0, 0, 0, 1, 0xFF, 0xFF, 0x7F, 0xFF, 0xFF, 0xFF, 0, 0]);
    let err = decode_request(p).unwrap_err();
    assert!(matches!(err, ProtocolError::Decode { what: "request body", api_key: 3, correlation_id: 1, .. }), "{err}");
    // Metadata v9 (flexible: header v2), topics compact array count 0xFFFF_FFFF (varint).
    let p = Bytes::from_static(&[0, 3, 0, 9, 0, 0, 0, 1, 0xFF, 0xFF, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0, 0]);
    let err = decode_request(p).unwrap_err();
    assert!(err.to_string().contains("exceeds the 2 bytes left"), "{err}");
}

#[test]
fn large_plain_i32_fields_still_decode() {
    // Heartbeat v0: group id "g", generation id i32::MAX (larger than the bytes left, but a
    // plain field), member id "m".
    let mut p = vec![0, 12, 0, 0, 0, 0, 0, 5, 0xFF, 0xFF, 0, 1, b'g'];
    p.extend_from_slice(&i32::MAX.to_be_bytes());
    p.extend_from_slice(&[0, 1, b'm']);
    let req = decode_request(Bytes::from(p.clone())).unwrap();
    let kafka_protocol::messages::RequestKind::Heartbeat(hb) = &req.body else { panic!("{req:?}") };
    assert_eq!(hb.generation_id, i32::MAX);
    let header = req.header.clone();
    let encoded = encode_request(&header, &req.body).unwrap();
    assert_eq!(&encoded[4..], &p[..]);
}

#[test]
fn every_prefix_of_a_corpus_frame_needs_more_bytes() {
    // The corpus holds no frame cut inside itself (the nDPI flows are cut between frames), so cut
    // every frame at every length: always "need more bytes", never an error; and the request
    // decoder, given a cut payload, returns an error or a request but never panics.
    let Some(corpus) = common::corpus() else { return };
    let frames = common::files_with_suffix(&corpus.join("protocol/kafka-go-pcap-frames"), ".bin")
        .into_iter()
        .chain(common::files_with_suffix(&corpus.join("protocol/nDPI-kafka-frames"), ".bin"));
    for path in frames {
        let bytes = std::fs::read(&path).unwrap();
        for cut in 0..bytes.len() {
            let prefix = &bytes[..cut];
            let FrameCheck::Incomplete { needed } = check_frame(prefix, DEFAULT_SOCKET_REQUEST_MAX_BYTES).unwrap()
            else {
                panic!("{} cut at {cut} is complete", path.display())
            };
            assert!(needed >= 1 && (cut < 4 || needed == bytes.len() - cut), "{} cut at {cut}", path.display());
            let mut buf = BytesMut::from(prefix);
            assert!(split_frame(&mut buf, DEFAULT_SOCKET_REQUEST_MAX_BYTES).unwrap().is_none());
            match read_frame(&mut &prefix[..], DEFAULT_SOCKET_REQUEST_MAX_BYTES) {
                Ok(None) => assert_eq!(cut, 0),
                Err(ProtocolError::Truncated { .. }) => {}
                other => panic!("{} cut at {cut}: {other:?}", path.display()),
            }
            if cut >= 4 {
                let _ = decode_request(Bytes::copy_from_slice(&bytes[4..cut]));
            }
        }
    }
}

/// A valid 8-byte header prefix for a random supported API/version, then arbitrary bytes: this
/// reaches the body decoders, which random bytes alone almost never do.
fn header_then_bytes() -> impl Strategy<Value = Vec<u8>> {
    let keys: Vec<ApiKey> = ApiKey::iter().collect();
    (prop::sample::select(keys), any::<u16>(), any::<i32>(), prop::collection::vec(any::<u8>(), 0..256)).prop_map(
        |(key, v, corr, rest)| {
            let r = key.valid_versions();
            let span = (r.max - r.min + 1) as u16;
            let version = r.min + (v % span) as i16;
            let mut p = Vec::with_capacity(8 + rest.len());
            p.extend_from_slice(&(key as i16).to_be_bytes());
            p.extend_from_slice(&version.to_be_bytes());
            p.extend_from_slice(&corr.to_be_bytes());
            p.extend_from_slice(&rest);
            p
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic_the_frame_reader(bytes in prop::collection::vec(any::<u8>(), 0..512), limit in 0usize..1024) {
        let checked = check_frame(&bytes, limit);
        let read = read_frame(&mut &bytes[..], limit);
        let mut buf = BytesMut::from(&bytes[..]);
        let split = split_frame(&mut buf, limit);
        // The three entry points agree on what a frame is.
        match checked {
            Ok(FrameCheck::Complete { payload_len }) => {
                prop_assert_eq!(read.unwrap().unwrap().len(), payload_len);
                prop_assert_eq!(split.unwrap().unwrap().len(), payload_len);
            }
            Ok(FrameCheck::Incomplete { .. }) => {
                prop_assert!(read.map(|r| r.is_none()).unwrap_or(true));
                prop_assert!(split.unwrap().is_none());
            }
            Err(_) => {
                prop_assert!(read.is_err());
                prop_assert!(split.is_err());
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_request_decoder(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode_request(Bytes::from(bytes));
    }

    #[test]
    fn arbitrary_bodies_never_panic_the_request_decoder(payload in header_then_bytes()) {
        let _ = decode_request(Bytes::from(payload));
    }
}
