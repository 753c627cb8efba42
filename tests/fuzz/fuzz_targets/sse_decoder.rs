//! Fuzz target `sse_decoder`: the SSE decoder (`protocol::sse::SseDecoder`).
//!
//! The input is the raw byte stream, so captured `.sse` files are seeds as
//! they are. For every input it asserts:
//!
//! 1. differential: the input fed as one chunk, then `finish`, gives exactly
//!    the frames of [`reference`], a whole-buffer reading of the rules the
//!    decoder documents (WHATWG line endings, BOM, comments, fields; an
//!    unterminated last frame is dispatched);
//! 2. split invariance: the same bytes cut differently (byte by byte with an
//!    empty read after each byte, cut after every CR so CRLF pairs straddle
//!    reads, and pseudo-random cuts) give the same frames, and under a cap
//!    the same error after the same frames;
//! 3. the cap: under a small cap derived from the input, decoding gives the
//!    uncapped frames, or fails with `FrameTooLarge` having emitted a prefix of
//!    them; no frame ever holds more characters than the cap allows, and a
//!    failed decoder stays failed;
//! 4. zero copy changes nothing: the same cuts fed as `Bytes`
//!    (`feed_bytes`, where a data line is sliced from its chunk) give the
//!    same frames and errors as fed as slices (`feed`, which copies).

#![no_main]

use agui_gateway::protocol::sse::{DEFAULT_MAX_FRAME_BYTES, SseDecoder, SseError, SseFrame};
use libfuzzer_sys::fuzz_target;

/// What one decode produced: its frames, and the error that stopped it.
type Outcome = (Vec<SseFrame>, Option<SseError>);

fuzz_target!(|data: &[u8]| {
    let expected = reference(data);

    let whole = decode(DEFAULT_MAX_FRAME_BYTES, [data]);
    assert_eq!(whole, (expected, None), "one chunk vs the reference");

    let seed = fnv1a(data);
    let cap = 1 + (seed % (2 * data.len() as u64 + 16)) as usize;
    let capped = decode(cap, [data]);
    match &capped.1 {
        None => assert_eq!(capped.0, whole.0, "a cap that is not hit changes nothing"),
        Some(SseError::FrameTooLarge { limit }) => {
            assert_eq!(*limit, cap);
            assert!(whole.0.starts_with(&capped.0), "frames before the error");
        }
    }
    for f in &capped.0 {
        let held = f.data.chars().count()
            + f.event.as_deref().map_or(0, |e| e.chars().count())
            + f.id.as_deref().map_or(0, |i| i.chars().count());
        assert!(
            held <= cap,
            "frame holds {held} characters, cap is {cap}: {f:?}"
        );
    }

    for (cap, one) in [(DEFAULT_MAX_FRAME_BYTES, &whole), (cap, &capped)] {
        assert_eq!(&decode_shared(cap, [data]), one, "one shared chunk, cap {cap}");
        let shared = decode_shared(cap, random_cuts(data, seed ^ 3));
        assert_eq!(&shared, one, "random shared cuts, cap {cap}");
        let bytes = decode(cap, data.chunks(1).flat_map(|b| [b, &b""[..]]));
        assert_eq!(&bytes, one, "byte by byte, cap {cap}");
        let at_cr = decode(cap, data.split_inclusive(|&b| b == b'\r'));
        assert_eq!(&at_cr, one, "cut after every CR, cap {cap}");
        for salt in [1, 2] {
            let random = decode(cap, random_cuts(data, seed ^ salt));
            assert_eq!(&random, one, "random cuts (salt {salt}), cap {cap}");
        }
    }
});

/// Feeds `chunks` in order, then finishes; stops at the first error, after
/// checking that the decoder stays failed and emits nothing more.
fn decode<'a>(cap: usize, chunks: impl IntoIterator<Item = &'a [u8]>) -> Outcome {
    decode_with(cap, chunks, false)
}

/// [`decode`] with each chunk fed as `Bytes` (`feed_bytes`).
fn decode_shared<'a>(cap: usize, chunks: impl IntoIterator<Item = &'a [u8]>) -> Outcome {
    decode_with(cap, chunks, true)
}

fn decode_with<'a>(
    cap: usize,
    chunks: impl IntoIterator<Item = &'a [u8]>,
    shared: bool,
) -> Outcome {
    let mut d = SseDecoder::new(cap);
    let mut out = Vec::new();
    let mut error = None;
    for chunk in chunks {
        let fed = if shared {
            d.feed_bytes(&bytes::Bytes::copy_from_slice(chunk), &mut out)
        } else {
            d.feed(chunk, &mut out)
        };
        if let Err(e) = fed {
            error = Some(e);
            break;
        }
    }
    let error = match error {
        Some(e) => e,
        None => match d.finish(&mut out) {
            Ok(()) => return (out, None),
            Err(e) => e,
        },
    };
    let n = out.len();
    assert_eq!(d.feed(b"data: more\n\n", &mut out), Err(error.clone()));
    assert_eq!(d.finish(&mut out), Err(error.clone()));
    assert_eq!(out.len(), n, "a failed decoder emitted a frame");
    (out, Some(error))
}

/// The decoder's documented rules applied to the whole input at once.
fn reference(input: &[u8]) -> Vec<SseFrame> {
    let input = input.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(input);
    let mut lines = Vec::new();
    let (mut start, mut i) = (0, 0);
    while i < input.len() {
        match input[i] {
            b'\n' => {
                lines.push(&input[start..i]);
                i += 1;
                start = i;
            }
            b'\r' => {
                lines.push(&input[start..i]);
                i += 1;
                if input.get(i) == Some(&b'\n') {
                    i += 1;
                }
                start = i;
            }
            _ => i += 1,
        }
    }
    if start < input.len() {
        lines.push(&input[start..]);
    }

    let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let mut frames = Vec::new();
    let mut frame = SseFrame::default();
    let mut data: Option<String> = None;
    let mut dispatch = |frame: &mut SseFrame, data: &mut Option<String>| {
        let f = std::mem::take(frame);
        if let Some(d) = data.take() {
            frames.push(SseFrame { data: d.into(), ..f });
        }
    };
    for line in lines {
        if line.is_empty() {
            dispatch(&mut frame, &mut data);
            continue;
        }
        if line[0] == b':' {
            continue;
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match name {
            b"data" => match &mut data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(&lossy(value));
                }
                None => data = Some(lossy(value)),
            },
            b"event" => frame.event = Some(lossy(value)),
            b"id" if !value.contains(&0) => frame.id = Some(lossy(value)),
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                frame.retry = std::str::from_utf8(value).ok().and_then(|s| s.parse().ok())
            }
            _ => {}
        }
    }
    dispatch(&mut frame, &mut data);
    frames
}

/// Cuts `data` into pieces of 0 to 16 bytes (empty reads included), chosen
/// by a xorshift generator seeded from the input, so a crash reproduces.
fn random_cuts(data: &[u8], seed: u64) -> Vec<&[u8]> {
    let mut x = seed | 1;
    let mut rest = data;
    let mut out = Vec::new();
    while !rest.is_empty() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let n = (x % 17) as usize;
        let (a, b) = rest.split_at(n.min(rest.len()));
        out.push(a);
        rest = b;
    }
    out
}

/// FNV-1a, to derive the cap and the cuts from the input itself.
fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
