//! One log event, one line — whatever clients put in it.
//!
//! Log lines carry strings clients chose: thread and run ids (valid or not),
//! agent names, tool names, error messages quoting a request. A newline in
//! one of them would end the line and start a forged one (`… thread=x` then
//! `2026-01-01T00:00:00Z  INFO admin signed in`); a carriage return, NUL,
//! terminal escape or bidi override would hide or reorder what a person
//! reading the log sees.
//!
//! Escaping at each call site would have to be remembered at every one, and
//! the text formatter writes `%`-displayed fields and the message raw. So the
//! escape sits where nothing can go around it: [`Escaping`] wraps the log's
//! writer, and the formatters (text and JSON) hand it each event whole, as
//! one buffer ending in its newline. Everything before that newline that is a
//! control character (C0, DEL, C1), a line or paragraph separator or a bidi
//! control is written as an escape — `\n`, `\r`, `\t`, else `\uXXXX` — which
//! reads plainly in text and is the same string in JSON, where such
//! characters only occur inside strings. With colours on (a terminal), the
//! formatter's own SGR sequences (`ESC [ … m`) are kept.

use std::borrow::Cow;
use std::io::{self, Write};
use tracing_subscriber::fmt::MakeWriter;

/// A [`MakeWriter`] whose writers escape what could break or disguise a line.
pub struct Escaping<M> {
    inner: M,
    keep_colours: bool,
}

impl<M> Escaping<M> {
    /// Wraps `inner`; `keep_colours` when the formatter writes ANSI colours.
    pub fn new(inner: M, keep_colours: bool) -> Escaping<M> {
        Escaping {
            inner,
            keep_colours,
        }
    }
}

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for Escaping<M> {
    type Writer = EscapedWriter<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        EscapedWriter {
            inner: self.inner.make_writer(),
            keep_colours: self.keep_colours,
        }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Self::Writer {
        EscapedWriter {
            inner: self.inner.make_writer_for(meta),
            keep_colours: self.keep_colours,
        }
    }
}

/// A writer that escapes each buffer (one formatted event) before passing it on.
pub struct EscapedWriter<W> {
    inner: W,
    keep_colours: bool,
}

impl<W: Write> Write for EscapedWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write_all(&escape_line(buf, self.keep_colours))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// `line` with every character that could end, hide or reorder a log line
/// escaped, but for one trailing newline (the line's own end).
pub fn escape_line(line: &[u8], keep_colours: bool) -> Cow<'_, [u8]> {
    let (body, end) = match line.strip_suffix(b"\n") {
        Some(body) => (body, &b"\n"[..]),
        None => (line, &b""[..]),
    };
    // Plain printable ASCII (the common case) passes as it is.
    if body.iter().all(|b| (0x20..0x7f).contains(b)) {
        return Cow::Borrowed(line);
    }
    let text = String::from_utf8_lossy(body);
    let mut out = String::with_capacity(text.len() + 16);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && keep_colours && chars.peek() == Some(&'[') {
            // The formatter's colour: ESC [ digits/semicolons m.
            let sgr: String = chars
                .clone()
                .skip(1)
                .take_while(|c| c.is_ascii_digit() || *c == ';')
                .collect();
            if chars.clone().nth(1 + sgr.len()) == Some('m') {
                out.push(c);
                out.extend(chars.by_ref().take(2 + sgr.len()));
                continue;
            }
        }
        push_escaped(&mut out, c);
    }
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(end);
    Cow::Owned(bytes)
}

/// Appends `c`, escaped if it must not reach a log line raw.
fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if must_escape(c) => {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04x}"));
            }
        }
        c => out.push(c),
    }
}

/// Controls, line/paragraph separators and the bidi formatting characters
/// (Unicode's list of "Bidi_Control" plus ALM/LRM/RLM).
fn must_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{2028}'
                | '\u{2029}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn esc(s: &str) -> String {
        String::from_utf8(escape_line(s.as_bytes(), false).into_owned()).unwrap()
    }

    #[test]
    fn a_line_stays_one_line() {
        assert_eq!(esc("a=x\nforged\n"), "a=x\\nforged\n");
        assert_eq!(esc("a\r\n"), "a\\r\n");
        assert_eq!(esc("t\0x\u{7f}\u{85}\n"), "t\\u0000x\\u007f\\u0085\n");
        assert_eq!(
            esc("\u{202e}gnp.exe\u{2066}\u{2028}\n"),
            "\\u202egnp.exe\\u2066\\u2028\n"
        );
        assert_eq!(esc("plain ünïcode ok\n"), "plain ünïcode ok\n");
        assert!(matches!(
            escape_line(b"all plain\n", false),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn colours_are_kept_only_when_on_and_only_sgr() {
        let coloured = "\u{1b}[2m2026\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m x\u{1b}]0;title\u{7}\n";
        let kept = String::from_utf8(escape_line(coloured.as_bytes(), true).into_owned()).unwrap();
        assert_eq!(
            kept,
            "\u{1b}[2m2026\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m x\\u001b]0;title\\u0007\n"
        );
        assert!(!esc(coloured).contains('\u{1b}'));
    }

    #[test]
    fn json_lines_stay_the_same_json() {
        let v = serde_json::json!({"thread": "a\u{202e}b\u{85}c\nd"});
        let line = format!("{v}\n");
        let escaped = esc(&line);
        assert!(escaped.is_ascii(), "{escaped}");
        let back: serde_json::Value = serde_json::from_str(&escaped).unwrap();
        assert_eq!(back, v);
    }
}
