//! Micro-benchmarks of the per-event hot path: SSE decoding throughput and
//! parse + re-encode cost per event. Numbers and the command that produced
//! them are in docs/benchmarks.md.

use agui_gateway::protocol::Event;
use agui_gateway::protocol::chunks::ChunkNormalizer;
use agui_gateway::protocol::sse::{SseDecoder, encode_data};
use agui_gateway::protocol::verify::Verifier;
use bytes::BytesMut;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;

/// The captured framework streams (tests/fixtures/streams), one after the
/// other: what real agents put on the wire.
fn captures() -> Vec<u8> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/streams/");
    let mut one = Vec::new();
    for name in [
        "pydantic-ai-tool-and-text.sse",
        "langgraph-legacy-interrupt.sse",
        "pydantic-ai-approval-interrupt.sse",
        "langgraph-resumed.sse",
    ] {
        one.extend(std::fs::read(format!("{dir}{name}")).expect("fixtures beside the repo"));
    }
    one
}

/// A realistic stream: the captured framework streams, repeated to ~1 MiB.
fn sample_stream() -> Vec<u8> {
    let one = captures();
    let mut out = Vec::new();
    while out.len() < 1 << 20 {
        out.extend_from_slice(&one);
    }
    out
}

fn sse_decode(c: &mut Criterion) {
    let stream = sample_stream();
    let mut g = c.benchmark_group("sse_decode");
    g.throughput(Throughput::Bytes(stream.len() as u64));
    for chunk in [64usize, 1024, 16 * 1024] {
        g.bench_with_input(
            BenchmarkId::new("chunk_bytes", chunk),
            &chunk,
            |b, &chunk| {
                b.iter(|| {
                    let mut d = SseDecoder::new(10 << 20);
                    let mut frames = Vec::with_capacity(64);
                    let mut n = 0;
                    for piece in stream.chunks(chunk) {
                        d.feed(piece, &mut frames).unwrap();
                        n += frames.len();
                        frames.clear();
                    }
                    d.finish(&mut frames).unwrap();
                    black_box(n + frames.len())
                })
            },
        );
    }
    g.finish();
}

fn per_event(c: &mut Criterion) {
    let text = br#"{"type":"TEXT_MESSAGE_CONTENT","timestamp":1795344420594,"messageId":"29ae642a-38e5-4a02-af51-8282efc30e27","delta":"answer "}"#;
    let snapshot = largest_capture_event();

    let mut g = c.benchmark_group("per_event");
    for (name, json) in [
        ("text_delta", text.to_vec()),
        ("state_snapshot", snapshot.into_bytes()),
    ] {
        let json = bytes::Bytes::from(json);
        g.throughput(Throughput::Elements(1));
        g.bench_function(BenchmarkId::new("parse_encode", name), |b| {
            let mut out = BytesMut::with_capacity(4096);
            b.iter(|| {
                let e = Event::parse(json.clone()).unwrap();
                out.clear();
                encode_data(e.json(), Some(42), &mut out);
                black_box(out.len())
            })
        });
        g.bench_function(BenchmarkId::new("parse_rewrite_encode", name), |b| {
            let mut out = BytesMut::with_capacity(4096);
            b.iter(|| {
                let e = Event::parse(json.clone()).unwrap();
                let e = e.modify(|m| {
                    m.insert("x".into(), 1.into());
                });
                out.clear();
                encode_data(e.json(), Some(42), &mut out);
                black_box(out.len())
            })
        });
    }
    g.finish();
}

/// What the run loop needs from each event (its type, its ids, its delta),
/// as a derived struct borrowing from the text: the way the JSON crates
/// compared in [`scan`] can each read it.
#[derive(serde::Deserialize)]
struct Head<'a> {
    #[serde(rename = "type", borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(rename = "messageId", borrow, default)]
    message_id: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    delta: Option<std::borrow::Cow<'a, str>>,
}

/// Choosing the JSON crate for reading events (issue 22, item 1): the
/// gateway's scan (`Event::parse`: serde_json, hand-written visitors, the
/// text kept) against a full `serde_json::Value` (what it replaced), a
/// derived borrowing struct with serde_json, sonic-rs and simd-json (which
/// parses in place, so it pays a copy of the shared text first). Each reads
/// the type, `messageId` and `delta` of the event and validates all of it.
fn scan(c: &mut Criterion) {
    let text = br#"{"type":"TEXT_MESSAGE_CONTENT","timestamp":1795344420594,"messageId":"29ae642a-38e5-4a02-af51-8282efc30e27","delta":"answer "}"#;
    let snapshot = largest_capture_event();
    let mut g = c.benchmark_group("scan");
    for (name, json) in [
        ("text_delta", text.to_vec()),
        ("state_snapshot", snapshot.into_bytes()),
    ] {
        let json = bytes::Bytes::from(json);
        g.throughput(Throughput::Elements(1));
        g.bench_function(BenchmarkId::new("gateway_scan", name), |b| {
            b.iter(|| {
                let e = Event::parse(json.clone()).unwrap();
                black_box((
                    e.kind().as_str().len(),
                    e.str_field("messageId").map(str::len),
                    e.str_field("delta").map(str::len),
                ))
            })
        });
        g.bench_function(BenchmarkId::new("serde_json_value", name), |b| {
            b.iter(|| {
                let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
                black_box((
                    v["type"].as_str().map(str::len),
                    v.get("messageId").and_then(|m| m.as_str()).map(str::len),
                    v.get("delta").and_then(|m| m.as_str()).map(str::len),
                ))
            })
        });
        g.bench_function(BenchmarkId::new("serde_json_struct", name), |b| {
            b.iter(|| {
                let h: Head = serde_json::from_slice(&json).unwrap();
                black_box((
                    h.kind.len(),
                    h.message_id.map(|m| m.len()),
                    h.delta.map(|d| d.len()),
                ))
            })
        });
        g.bench_function(BenchmarkId::new("sonic_rs_struct", name), |b| {
            b.iter(|| {
                let h: Head = sonic_rs::from_slice(&json).unwrap();
                black_box((
                    h.kind.len(),
                    h.message_id.map(|m| m.len()),
                    h.delta.map(|d| d.len()),
                ))
            })
        });
        g.bench_function(BenchmarkId::new("simd_json_struct_with_copy", name), |b| {
            let mut buf = Vec::with_capacity(json.len());
            b.iter(|| {
                buf.clear();
                buf.extend_from_slice(&json);
                let h: Head = simd_json::serde::from_slice(&mut buf).unwrap();
                black_box((
                    h.kind.len(),
                    h.message_id.map(|m| m.len()),
                    h.delta.map(|d| d.len()),
                ))
            })
        });
    }
    g.finish();
}

/// The largest event in the captures: a LangGraph `STATE_SNAPSHOT`.
fn largest_capture_event() -> String {
    let big = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/streams/langgraph-legacy-interrupt.sse"
    ))
    .unwrap();
    String::from_utf8(big)
        .unwrap()
        .split("\n\n")
        .filter_map(|f| f.strip_prefix("data: "))
        .max_by_key(|d| d.len())
        .unwrap()
        .to_owned()
}

fn pipeline(c: &mut Criterion) {
    // Decode + parse + normalize + verify + encode: the whole upstream path.
    let stream = sample_stream();
    let mut g = c.benchmark_group("pipeline");
    g.throughput(Throughput::Bytes(stream.len() as u64));
    g.bench_function("decode_parse_normalize_verify_encode", |b| {
        b.iter(|| {
            let mut d = SseDecoder::new(10 << 20);
            let mut frames = Vec::new();
            let mut events = Vec::new();
            let mut out = BytesMut::with_capacity(1 << 21);
            let mut norm = ChunkNormalizer::new();
            let mut verifier = Verifier::new();
            for piece in stream.chunks(4096) {
                d.feed(piece, &mut frames).unwrap();
                for f in frames.drain(..) {
                    let e = Event::parse(f.data).unwrap();
                    norm.push(e, &mut events).unwrap();
                    for e in events.drain(..) {
                        if verifier.check(&e).is_err() {
                            verifier = Verifier::new(); // fixtures repeat whole runs
                        }
                        encode_data(e.json(), None, &mut out);
                    }
                }
            }
            black_box(out.len())
        })
    });
    g.finish();
}

/// The demo agent's journal (`tests/fixtures/journal-text/demo-agent.jsonl`)
/// cut into chunks at event boundaries, each at most 16 KiB, the way a
/// thread's tail packs it (`src/thread/packed.rs`).
fn journal_chunks() -> Vec<Vec<u8>> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/journal-text/demo-agent.jsonl"
    ))
    .unwrap();
    let mut chunks = vec![Vec::new()];
    for event in text.lines() {
        if chunks.last().unwrap().len() + event.len() > 16 << 10 {
            chunks.push(Vec::new());
        }
        chunks
            .last_mut()
            .unwrap()
            .extend_from_slice(event.as_bytes());
    }
    chunks
}

/// The captured framework streams' events end to end, as one chunk: real
/// agents' ids and text, which repeat less than the demo agent's.
fn captures_chunk() -> Vec<u8> {
    let streams = String::from_utf8(captures()).unwrap();
    let mut text = Vec::new();
    for data in streams
        .split("\n\n")
        .filter_map(|f| f.strip_prefix("data: "))
    {
        text.extend_from_slice(data.as_bytes());
    }
    text
}

type Pack = fn(&[u8]) -> Vec<u8>;
type Unpack = fn(&[u8], usize) -> Vec<u8>;

/// The compressors compared for a tail's sealed chunks.
const COMPRESSORS: [(&str, Pack, Unpack); 4] = [
    (
        "lz4_flex",
        |t| lz4_flex::block::compress(t),
        |z, n| lz4_flex::block::decompress(z, n).unwrap(),
    ),
    (
        "zstd_-1",
        |t| zstd::bulk::compress(t, -1).unwrap(),
        |z, n| zstd::bulk::decompress(z, n).unwrap(),
    ),
    (
        "zstd_1",
        |t| zstd::bulk::compress(t, 1).unwrap(),
        |z, n| zstd::bulk::decompress(z, n).unwrap(),
    ),
    (
        "zstd_3",
        |t| zstd::bulk::compress(t, 3).unwrap(),
        |z, n| zstd::bulk::decompress(z, n).unwrap(),
    ),
];

/// Choosing the compressor of a tail's sealed chunks (issue 30, item 3):
/// LZ4 (`lz4_flex`, what the tail uses) against zstd at three levels, on
/// the demo agent's journal in 16 KiB chunks and on the framework captures.
/// Sealing is on the publishing path (once per chunk), unpacking on a
/// reader of the past's. Criterion reports times; the size ratio of each
/// is printed once before (`tail_chunk ratio …`).
fn tail_chunk(c: &mut Criterion) {
    let inputs = [
        ("demo_journal", journal_chunks()),
        ("framework_captures", vec![captures_chunk()]),
    ];
    let mut g = c.benchmark_group("tail_chunk");
    for (input, chunks) in &inputs {
        let text: usize = chunks.iter().map(Vec::len).sum();
        g.throughput(Throughput::Bytes(text as u64));
        for (name, pack, unpack) in COMPRESSORS {
            let packed: Vec<Vec<u8>> = chunks.iter().map(|c| pack(c)).collect();
            let size: usize = packed.iter().map(Vec::len).sum();
            for (z, c) in packed.iter().zip(chunks) {
                assert_eq!(&unpack(z, c.len()), c, "{name} round-trips");
            }
            eprintln!(
                "tail_chunk ratio {input} {name}: {:.2}x ({text} -> {size} bytes, {} chunks)",
                text as f64 / size as f64,
                chunks.len()
            );
            g.bench_function(BenchmarkId::new(format!("seal_{name}"), input), |b| {
                b.iter(|| chunks.iter().map(|c| pack(c).len()).sum::<usize>())
            });
            g.bench_function(BenchmarkId::new(format!("unpack_{name}"), input), |b| {
                b.iter(|| {
                    packed
                        .iter()
                        .zip(chunks)
                        .map(|(z, c)| unpack(z, c.len()).len())
                        .sum::<usize>()
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, sse_decode, per_event, scan, pipeline, tail_chunk);
criterion_main!(benches);
