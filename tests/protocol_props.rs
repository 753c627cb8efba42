//! Property tests of the pure wire layer.
//!
//! 1. The SSE decoder gives the same events however the bytes are cut:
//!    at every single boundary, byte by byte, and at random cut sets, with
//!    LF/CRLF/CR line endings, comments, a BOM and multi-byte UTF-8.
//! 2. Events round-trip arbitrary extra fields: parsing keeps the exact bytes,
//!    rewriting keeps every unknown field, chunk normalization passes
//!    non-chunk events through byte-for-byte.

use agui_gateway::protocol::Event;
use agui_gateway::protocol::chunks::ChunkNormalizer;
use agui_gateway::protocol::sse::{SseDecoder, SseFrame, encode_data};
use bytes::BytesMut;
use proptest::prelude::*;
use serde_json::{Map, Value};

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e12f64..1e12).prop_map(Value::from),
        "[a-zA-Z0-9 _\\-\u{e9}\u{2603}\u{1F600}\"\\\\/\n\t]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-zA-Z]{1,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// An event of a known or unknown type with arbitrary extra fields.
fn event_body() -> impl Strategy<Value = Map<String, Value>> {
    (
        prop_oneof![
            Just("CUSTOM"),
            Just("RAW"),
            Just("STATE_SNAPSHOT"),
            Just("RUN_STARTED"),
            Just("FUTURE_EVENT_TYPE"),
            Just("TEXT_MESSAGE_CONTENT"),
        ],
        prop::collection::btree_map("[a-zA-Z][a-zA-Z0-9]{0,8}", json_value(), 0..6),
    )
        .prop_map(|(t, extra)| {
            let mut m = Map::new();
            m.insert("type".into(), t.into());
            for (k, v) in extra {
                if k != "type" {
                    m.insert(k, v);
                }
            }
            m
        })
}

#[derive(Debug, Clone, Copy)]
enum Eol {
    Lf,
    Crlf,
    Cr,
}

fn eol() -> impl Strategy<Value = Eol> {
    prop_oneof![Just(Eol::Lf), Just(Eol::Crlf), Just(Eol::Cr)]
}

/// Writes `frames` as an SSE stream with the given line ending, a comment
/// before each frame, an `id:` line, and optionally a BOM.
fn write_stream(datas: &[String], eol: Eol, bom: bool, split_lines: bool) -> Vec<u8> {
    let nl = match eol {
        Eol::Lf => "\n",
        Eol::Crlf => "\r\n",
        Eol::Cr => "\r",
    };
    let mut out = String::new();
    if bom {
        out.push('\u{feff}');
    }
    for (i, d) in datas.iter().enumerate() {
        out.push_str(&format!(": comment {i}{nl}id: {i}{nl}"));
        if split_lines {
            // JSON text may be split across data lines at its own newlines.
            for line in d.split('\n') {
                out.push_str(&format!("data: {line}{nl}"));
            }
        } else {
            out.push_str(&format!("data:{d}{nl}"));
        }
        out.push_str(nl);
    }
    out.into_bytes()
}

fn decode(pieces: &[&[u8]]) -> Vec<SseFrame> {
    let mut d = SseDecoder::new(1 << 20);
    let mut out = Vec::new();
    for p in pieces {
        d.feed(p, &mut out).unwrap();
    }
    d.finish(&mut out).unwrap();
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn sse_decoding_is_independent_of_chunk_boundaries(
        bodies in prop::collection::vec(event_body(), 1..5),
        eol in eol(),
        bom in any::<bool>(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
    ) {
        let datas: Vec<String> = bodies.iter().map(|b| serde_json::to_string(b).unwrap()).collect();
        let bytes = write_stream(&datas, eol, bom, false);
        let whole = decode(&[&bytes]);
        let got: Vec<&str> = whole.iter().map(|f| f.data.as_str()).collect();
        prop_assert_eq!(&got, &datas.iter().map(String::as_str).collect::<Vec<_>>());
        for (i, f) in whole.iter().enumerate() {
            prop_assert_eq!(f.id.clone(), Some(i.to_string()));
        }
        // Every single cut point.
        for at in 0..=bytes.len() {
            let (a, b) = bytes.split_at(at);
            prop_assert_eq!(&decode(&[a, b]), &whole, "cut at {}", at);
        }
        // Byte by byte.
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        prop_assert_eq!(&decode(&singles), &whole);
        // A random set of cuts.
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
        points.sort();
        let mut pieces = Vec::new();
        let mut last = 0;
        for p in points {
            pieces.push(&bytes[last..p]);
            last = p;
        }
        pieces.push(&bytes[last..]);
        prop_assert_eq!(&decode(&pieces), &whole);
    }

    #[test]
    fn encoder_output_decodes_to_the_same_json(body in event_body(), id in prop::option::of(any::<u64>())) {
        let pretty = serde_json::to_string_pretty(&body).unwrap();
        let mut buf = BytesMut::new();
        encode_data(pretty.as_bytes(), id, &mut buf);
        prop_assert!(!buf.contains(&b'\r'));
        let frames = decode(&[&buf]);
        prop_assert_eq!(frames.len(), 1);
        let back: Map<String, Value> = serde_json::from_str(&frames[0].data).unwrap();
        prop_assert_eq!(back, body);
        prop_assert_eq!(frames[0].id.clone(), id.map(|i| i.to_string()));
    }

    #[test]
    fn events_round_trip_arbitrary_extra_fields(body in event_body()) {
        let text = serde_json::to_string(&body).unwrap();
        let event = Event::parse(text.clone()).unwrap();
        // Unchanged: the exact bytes.
        prop_assert_eq!(&event.json()[..], text.as_bytes());
        prop_assert_eq!(event.body(), &body);
        // Rewritten: every field survives, only the changed one differs.
        let changed = event.modify(|m| { m.insert("gatewayTouched".into(), true.into()); });
        let mut expected = body.clone();
        expected.insert("gatewayTouched".into(), true.into());
        let reparsed: Map<String, Value> = serde_json::from_slice(changed.json()).unwrap();
        prop_assert_eq!(reparsed, expected);
        // Chunk normalization leaves non-chunk events byte-identical.
        let mut out = Vec::new();
        ChunkNormalizer::new().push(event.clone(), &mut out).unwrap();
        prop_assert_eq!(out.len(), 1);
        prop_assert_eq!(&out[0].json()[..], text.as_bytes());
    }

    #[test]
    fn multi_line_data_split_at_json_newlines(bodies in prop::collection::vec(event_body(), 1..4), eol in eol()) {
        let datas: Vec<String> = bodies.iter().map(|b| serde_json::to_string_pretty(b).unwrap()).collect();
        let bytes = write_stream(&datas, eol, false, true);
        let frames = decode(&bytes.chunks(3).collect::<Vec<_>>());
        prop_assert_eq!(frames.len(), datas.len());
        for (f, b) in frames.iter().zip(&bodies) {
            let back: Map<String, Value> = serde_json::from_str(&f.data).unwrap();
            prop_assert_eq!(&back, b);
        }
    }
}
