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

/// A realistic stream: the captured framework streams, repeated to ~1 MiB.
fn sample_stream() -> Vec<u8> {
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
    let big = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/streams/langgraph-legacy-interrupt.sse"
    ))
    .unwrap();
    // The largest event in the captures: a LangGraph STATE_SNAPSHOT.
    let snapshot = String::from_utf8(big)
        .unwrap()
        .split("\n\n")
        .filter_map(|f| f.strip_prefix("data: "))
        .max_by_key(|d| d.len())
        .unwrap()
        .to_owned();

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

criterion_group!(benches, sse_decode, per_event, pipeline);
criterion_main!(benches);
