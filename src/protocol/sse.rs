//! Server-Sent Events codec.
//!
//! The decoder is hand-written rather than taken from a crate because the
//! gateway needs three things together that the crates we looked at do not all
//! give: it works on raw bytes, so a UTF-8 character or a CR/LF pair split across
//! two network reads is reassembled before any decoding; it enforces a
//! per-frame byte cap while reading (a hostile upstream gets an error, not our
//! memory); and it dispatches an unterminated last frame at end of stream, as
//! the stock AG-UI client does. Line handling follows the WHATWG
//! `text/event-stream` rules: LF, CR and CRLF end lines, a leading BOM is
//! skipped, `:` lines are comments, multi-line `data` joins with `\n`.
//!
//! Zero copy: fed the response's own chunks ([`SseDecoder::feed_bytes`]), a
//! frame whose one `data:` line lies whole in one chunk (nearly every AG-UI
//! event) is a slice of that chunk ([`SseData`]), not a copy. An event's text
//! then costs no allocation of its own, and a journal that keeps it keeps the
//! agent's bytes once.
//!
//! The encoder writes only `\n` (the AG-UI client splits frames on `\n\n`
//! and would never see a CRLF-framed event).

use bytes::{BufMut, Bytes, BytesMut};
use std::fmt;

/// Default per-frame cap, the same 10 MiB the AG-UI client allows.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 10 * 1024 * 1024;

/// The comment frame sent on idle streams so proxies keep them open.
pub const KEEPALIVE: &[u8] = b": keepalive\n\n";

/// One dispatched SSE message.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseFrame {
    /// The `event:` name, if one was given.
    pub event: Option<String>,
    /// All `data:` lines joined with `\n`.
    pub data: SseData,
    /// The `id:` value, if one was given in this frame.
    pub id: Option<String>,
    /// The `retry:` value in milliseconds, if one was given.
    pub retry: Option<u64>,
}

/// A frame's `data`: UTF-8 text held as [`Bytes`], a slice of the chunk it
/// arrived in when it could be (see the module doc).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct SseData(Bytes);

impl SseData {
    /// The text (`""` cannot happen: every constructor checks UTF-8).
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or_default()
    }

    /// The text's bytes, shared.
    pub fn into_bytes(self) -> Bytes {
        self.0
    }

    /// `bytes` as text when it is UTF-8 (shared, no copy), else a lossy copy
    /// (`U+FFFD` for what is not), as browsers decode event streams.
    fn from_bytes(bytes: Bytes) -> SseData {
        match std::str::from_utf8(&bytes) {
            Ok(_) => SseData(bytes),
            Err(_) => SseData::from(String::from_utf8_lossy(&bytes).into_owned()),
        }
    }
}

impl std::ops::Deref for SseData {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl From<String> for SseData {
    fn from(s: String) -> SseData {
        SseData(Bytes::from(s))
    }
}

impl From<&str> for SseData {
    fn from(s: &str) -> SseData {
        SseData(Bytes::copy_from_slice(s.as_bytes()))
    }
}

impl From<SseData> for Bytes {
    fn from(d: SseData) -> Bytes {
        d.0
    }
}

impl PartialEq<&str> for SseData {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl fmt::Debug for SseData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// Why a stream could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    #[error("SSE frame exceeds {limit} bytes")]
    FrameTooLarge { limit: usize },
}

/// Incremental decoder: feed it byte chunks as they arrive, in any sizes.
#[derive(Debug)]
pub struct SseDecoder {
    max_frame_bytes: usize,
    /// Bytes of the line being read (no terminator).
    line: Vec<u8>,
    /// The previous chunk ended in CR, so a leading LF is that CRLF's tail.
    skip_lf: bool,
    /// Still looking at the first bytes of the stream (BOM check).
    at_start: bool,
    /// Bytes of the stream start held back while they could still be a BOM.
    bom_probe: Vec<u8>,
    frame: SseFrame,
    /// The frame's data so far: `Some` while it is one line not yet copied
    /// (a slice of its chunk), moved into `text` if more lines follow.
    slice: Option<Bytes>,
    /// The frame's data once copied (several lines, or a line read across
    /// chunks).
    text: String,
    has_data: bool,
    /// Bytes held for the current frame (data + current line), for the cap.
    frame_bytes: usize,
    failed: bool,
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

impl SseDecoder {
    /// A decoder that rejects frames larger than `max_frame_bytes`.
    pub fn new(max_frame_bytes: usize) -> Self {
        SseDecoder {
            max_frame_bytes,
            line: Vec::new(),
            skip_lf: false,
            at_start: true,
            bom_probe: Vec::new(),
            frame: SseFrame::default(),
            slice: None,
            text: String::new(),
            has_data: false,
            frame_bytes: 0,
            failed: false,
        }
    }

    /// Decodes `chunk`, appending every completed frame to `out`; a frame's
    /// data that lies whole in `chunk` is a slice of it (no copy).
    pub fn feed_bytes(&mut self, chunk: &Bytes, out: &mut Vec<SseFrame>) -> Result<(), SseError> {
        self.feed_from(chunk, Some(chunk), out)
    }

    /// Decodes `chunk`, appending every completed frame to `out`.
    ///
    /// After an error the decoder stays failed: the stream cannot be trusted.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<SseFrame>) -> Result<(), SseError> {
        self.feed_from(chunk, None, out)
    }

    /// `chunk`, which is `whole` when the caller has it as [`Bytes`].
    fn feed_from(
        &mut self,
        chunk: &[u8],
        whole: Option<&Bytes>,
        out: &mut Vec<SseFrame>,
    ) -> Result<(), SseError> {
        if self.failed {
            return Err(SseError::FrameTooLarge {
                limit: self.max_frame_bytes,
            });
        }
        let mut chunk = chunk;
        let probe;
        if self.at_start && self.bom_probe.is_empty() && chunk.len() >= BOM.len() {
            // The usual start: the first read decides at once, in place.
            self.at_start = false;
            let rest = chunk.strip_prefix(BOM).unwrap_or(chunk);
            return self.scan(rest, whole, out);
        }
        if self.at_start {
            self.bom_probe.extend_from_slice(chunk);
            let n = self.bom_probe.len().min(BOM.len());
            if self.bom_probe[..n] != BOM[..n] {
                self.at_start = false;
            } else if self.bom_probe.len() < BOM.len() {
                return Ok(()); // could still be a BOM: wait for more bytes
            } else {
                self.at_start = false;
                self.bom_probe.drain(..BOM.len());
            }
            probe = std::mem::take(&mut self.bom_probe);
            chunk = &probe;
            return self.scan(chunk, None, out);
        }
        self.scan(chunk, whole, out)
    }

    /// `whole`, when given, is what `chunk` is a slice of (data lines are
    /// sliced from it rather than copied).
    fn scan(
        &mut self,
        mut chunk: &[u8],
        whole: Option<&Bytes>,
        out: &mut Vec<SseFrame>,
    ) -> Result<(), SseError> {
        // An empty read between a CR and its LF must not forget the CR.
        if self.skip_lf && !chunk.is_empty() {
            if chunk[0] == b'\n' {
                chunk = &chunk[1..];
            }
            self.skip_lf = false;
        }
        while let Some(pos) = memchr::memchr2(b'\n', b'\r', chunk) {
            self.grow(pos)?;
            if self.line.is_empty()
                && let Some(whole) = whole
            {
                // The line lies whole in this chunk: read it in place.
                self.take_line(whole.slice_ref(&chunk[..pos]), out);
            } else {
                self.line.extend_from_slice(&chunk[..pos]);
                self.end_line(out);
            }
            let ended_with_cr = chunk[pos] == b'\r';
            chunk = &chunk[pos + 1..];
            if ended_with_cr {
                match chunk.first() {
                    Some(b'\n') => chunk = &chunk[1..],
                    None => self.skip_lf = true,
                    _ => {}
                }
            }
        }
        self.grow(chunk.len())?;
        self.line.extend_from_slice(chunk);
        Ok(())
    }

    fn grow(&mut self, n: usize) -> Result<(), SseError> {
        self.frame_bytes += n;
        if self.frame_bytes > self.max_frame_bytes {
            self.failed = true;
            return Err(SseError::FrameTooLarge {
                limit: self.max_frame_bytes,
            });
        }
        Ok(())
    }

    /// Ends the stream: an unterminated last frame is still dispatched.
    pub fn finish(&mut self, out: &mut Vec<SseFrame>) -> Result<(), SseError> {
        if self.failed {
            return Err(SseError::FrameTooLarge {
                limit: self.max_frame_bytes,
            });
        }
        if self.at_start && !self.bom_probe.is_empty() {
            // A stream shorter than a BOM that was not one.
            let probe = std::mem::take(&mut self.bom_probe);
            self.at_start = false;
            self.scan(&probe, None, out)?;
        }
        if !self.line.is_empty() {
            self.end_line(out);
        }
        self.dispatch(out);
        Ok(())
    }

    /// Ends the line held in `self.line` (read across chunks).
    fn end_line(&mut self, out: &mut Vec<SseFrame>) {
        if self.line.is_empty() {
            // (The line buffer stays: taking it here would drop its
            // capacity and allocate again for every event.)
            self.dispatch(out);
            return;
        }
        let line = std::mem::take(&mut self.line);
        self.field(&line, None);
        self.line = line;
        self.line.clear();
    }

    /// Ends a line that lies whole in the chunk `line` is a slice of.
    fn take_line(&mut self, line: Bytes, out: &mut Vec<SseFrame>) {
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        self.field(&line, Some(&line));
    }

    /// One non-empty line; `shared` is the same bytes as [`Bytes`] when the
    /// data may be sliced from them.
    fn field(&mut self, line: &[u8], shared: Option<&Bytes>) {
        if line[0] == b':' {
            self.frame_bytes -= line.len().min(self.frame_bytes);
            return; // comment / keepalive
        }
        let (name, value) = match memchr::memchr(b':', line) {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match name {
            b"data" => {
                if !self.has_data
                    && let Some(shared) = shared
                {
                    self.slice = Some(shared.slice_ref(value));
                } else {
                    if let Some(first) = self.slice.take() {
                        self.text.push_str(&String::from_utf8_lossy(&first));
                    }
                    if self.has_data {
                        self.text.push('\n');
                    }
                    self.text.push_str(&String::from_utf8_lossy(value));
                }
                self.has_data = true;
            }
            b"event" => self.frame.event = Some(String::from_utf8_lossy(value).into_owned()),
            b"id" if !value.contains(&0) => {
                self.frame.id = Some(String::from_utf8_lossy(value).into_owned())
            }
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                self.frame.retry = std::str::from_utf8(value).ok().and_then(|s| s.parse().ok())
            }
            _ => {} // unknown field: ignored, as the spec says
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseFrame>) {
        let mut frame = std::mem::take(&mut self.frame);
        let slice = self.slice.take();
        if self.has_data {
            frame.data = match slice {
                Some(slice) => SseData::from_bytes(slice),
                None => SseData::from(std::mem::take(&mut self.text)),
            };
            out.push(frame);
        }
        self.text.clear();
        self.has_data = false;
        self.frame_bytes = 0;
    }
}

/// Appends one `data:` frame for `json`, with an `id:` line when `id` is given.
///
/// `json` is written as is; should it contain line breaks (an upstream's
/// pretty-printed JSON kept byte-for-byte), each line becomes its own `data:`
/// line, which every SSE reader joins back with `\n`.
pub fn encode_data(json: &[u8], id: Option<u64>, out: &mut BytesMut) {
    out.reserve(json.len() + 32);
    if let Some(id) = id {
        out.put_slice(b"id: ");
        out.put_slice(itoa::Buffer::new().format(id).as_bytes());
        out.put_u8(b'\n');
    }
    let mut rest = json;
    loop {
        out.put_slice(b"data: ");
        match memchr::memchr2(b'\n', b'\r', rest) {
            Some(i) => {
                out.put_slice(&rest[..i]);
                out.put_u8(b'\n');
                let skip = if rest[i] == b'\r' && rest.get(i + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
                rest = &rest[i + skip..];
            }
            None => {
                out.put_slice(rest);
                out.put_slice(b"\n\n");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(chunks: &[&[u8]]) -> Vec<SseFrame> {
        let mut d = SseDecoder::new(DEFAULT_MAX_FRAME_BYTES);
        let mut out = Vec::new();
        for c in chunks {
            d.feed(c, &mut out).unwrap();
        }
        d.finish(&mut out).unwrap();
        out
    }

    fn data(frames: &[SseFrame]) -> Vec<&str> {
        frames.iter().map(|f| f.data.as_str()).collect()
    }

    #[test]
    fn a_data_line_within_one_chunk_is_a_slice_of_it_and_the_rest_is_copied_alike() {
        let chunks: [&[u8]; 4] = [
            b"data: {\"a\":1}\n\nid: 2\ndata: one\ndata: two\n\ndata: spl",
            b"it\n\n: note\ndata: caf\xc3",
            b"\xa9\n\ndata: bad \xff\n\n",
            b"data: last",
        ];
        let mut d = SseDecoder::new(DEFAULT_MAX_FRAME_BYTES);
        let mut shared = Vec::new();
        let first = Bytes::from_static(chunks[0]);
        d.feed_bytes(&first, &mut shared).unwrap();
        for c in &chunks[1..] {
            d.feed_bytes(&Bytes::copy_from_slice(c), &mut shared)
                .unwrap();
        }
        d.finish(&mut shared).unwrap();
        assert_eq!(
            shared,
            decode_all(&chunks),
            "feed_bytes decodes as feed does"
        );
        assert_eq!(
            data(&shared),
            [
                "{\"a\":1}",
                "one\ntwo",
                "split",
                "café",
                "bad \u{fffd}",
                "last"
            ]
        );
        // The first event's text is the chunk's own bytes, not a copy.
        let text = shared[0].data.clone().into_bytes();
        let range = first.as_ptr() as usize..first.as_ptr() as usize + first.len();
        assert!(range.contains(&(text.as_ptr() as usize)));
    }

    #[test]
    fn lf_crlf_and_cr_line_endings() {
        assert_eq!(data(&decode_all(&[b"data: a\n\ndata: b\n\n"])), ["a", "b"]);
        assert_eq!(
            data(&decode_all(&[b"data: a\r\n\r\ndata: b\r\n\r\n"])),
            ["a", "b"]
        );
        assert_eq!(data(&decode_all(&[b"data: a\r\rdata: b\r\r"])), ["a", "b"]);
    }

    #[test]
    fn crlf_split_across_chunks_is_one_line_end() {
        // "data: a\r" | "\n\r\n": the LF after the split CR must not start an empty line early.
        let frames = decode_all(&[b"data: a\r", b"\ndata: b\r", b"\n\r\n"]);
        assert_eq!(data(&frames), ["a\nb"]);
    }

    #[test]
    fn empty_read_between_cr_and_lf_keeps_the_crlf_whole() {
        let frames = decode_all(&[b"id: 7\r", b"", b"\ndata: x\r\n\r\n"]);
        assert_eq!(frames[0].id.as_deref(), Some("7"));
        assert_eq!(data(&frames), ["x"]);
    }

    #[test]
    fn utf8_split_across_chunks() {
        let text = "data: {\"d\":\"h\u{e9}llo \u{1F600}\"}\n\n".as_bytes();
        let mut chunks = Vec::new();
        for b in text {
            chunks.push(std::slice::from_ref(b));
        }
        assert_eq!(
            data(&decode_all(&chunks)),
            ["{\"d\":\"h\u{e9}llo \u{1F600}\"}"]
        );
    }

    #[test]
    fn bom_is_skipped_even_when_split() {
        assert_eq!(
            data(&decode_all(&[b"\xEF", b"\xBB", b"\xBFdata: x\n\n"])),
            ["x"]
        );
        // Only at the very start.
        let frames = decode_all(&[b"data: x\n\n\xEF\xBB\xBFdata: y\n\n"]);
        assert_eq!(frames.len(), 1, "a mid-stream BOM makes an unknown field");
    }

    #[test]
    fn comments_keepalives_and_unknown_fields_are_ignored() {
        let frames = decode_all(&[b": keepalive\n\n:x\nfoo: bar\ndata: 1\n\n"]);
        assert_eq!(data(&frames), ["1"]);
    }

    #[test]
    fn multi_line_data_id_event_retry() {
        let frames = decode_all(&[b"event: msg\nid: 7\nretry: 1500\ndata: {\"a\":\ndata: 1}\n\n"]);
        assert_eq!(
            frames,
            [SseFrame {
                event: Some("msg".into()),
                data: "{\"a\":\n1}".into(),
                id: Some("7".into()),
                retry: Some(1500),
            }]
        );
    }

    #[test]
    fn field_without_space_and_without_colon() {
        let frames = decode_all(&[b"data:x\ndata\n\n"]);
        assert_eq!(data(&frames), ["x\n"]);
    }

    #[test]
    fn bad_retry_and_nul_id_are_ignored() {
        let frames = decode_all(&[b"retry: 12a\nid: a\0b\ndata: 1\n\n"]);
        assert_eq!(frames[0].retry, None);
        assert_eq!(frames[0].id, None);
    }

    #[test]
    fn frame_without_data_is_not_dispatched() {
        assert!(decode_all(&[b"event: x\nid: 1\n\n"]).is_empty());
    }

    #[test]
    fn unterminated_last_frame_is_dispatched() {
        assert_eq!(data(&decode_all(&[b"data: 1\n\ndata: 2"])), ["1", "2"]);
        assert_eq!(data(&decode_all(&[b"data: 1\n\ndata: 2\n"])), ["1", "2"]);
    }

    #[test]
    fn frame_cap_is_an_error_not_an_allocation() {
        let mut d = SseDecoder::new(16);
        let mut out = Vec::new();
        d.feed(b"data: 0123456789", &mut out).unwrap();
        assert_eq!(
            d.feed(b"0123456789", &mut out),
            Err(SseError::FrameTooLarge { limit: 16 })
        );
        assert!(d.finish(&mut out).is_err(), "stays failed");
        // Small frames under the cap pass; the count resets per frame.
        let mut d = SseDecoder::new(16);
        for _ in 0..100 {
            d.feed(b"data: 12345\n\n", &mut out).unwrap();
        }
        assert_eq!(out.len(), 100);
    }

    #[test]
    fn short_stream_that_starts_like_a_bom() {
        assert!(decode_all(&[b"\xEF"]).is_empty());
        assert_eq!(data(&decode_all(&[b"d", b"ata: 1"])), ["1"]);
    }

    #[test]
    fn encoder_writes_lf_only_with_id() {
        let mut out = BytesMut::new();
        encode_data(br#"{"type":"X"}"#, Some(42), &mut out);
        encode_data(br#"{"type":"Y"}"#, None, &mut out);
        assert_eq!(
            &out[..],
            b"id: 42\ndata: {\"type\":\"X\"}\n\ndata: {\"type\":\"Y\"}\n\n"
        );
    }

    #[test]
    fn encoder_splits_multi_line_json_and_decoder_restores_it() {
        let json = b"{\"a\":\r\n 1,\r \"b\":\n2}";
        let mut out = BytesMut::new();
        encode_data(json, None, &mut out);
        assert!(!out.contains(&b'\r'));
        let frames = decode_all(&[&out]);
        let v: serde_json::Value = serde_json::from_str(&frames[0].data).unwrap();
        assert_eq!(v, serde_json::json!({"a":1,"b":2}));
    }
}
