//! Reading a URL so that every HTTP client reads the same host.
//!
//! The gateway checks URLs with the WHATWG parser (the `url` crate) — the
//! SSRF guard on multimodal sources, the URLs of the configuration — but
//! what fetches them is often something else: the agent's Python `httpx` or
//! `urllib`, Node's `fetch`, curl. Where parsers disagree on the host, a check
//! passes for one host and the request goes to another:
//! `https://cdn.example.com\@169.254.169.254/x` is `cdn.example.com` to
//! WHATWG (a `\` ends the authority like a `/`) and `169.254.169.254` to
//! `urllib` and `httpx` (everything before the `@` is userinfo).
//!
//! Rather than model every parser's quirks, [`parse`] accepts a URL only in
//! the plain form they all read alike, and refuses the rest with a reason
//! ([`Ambiguity`]):
//!
//! * no control character or whitespace anywhere (WHATWG silently drops tabs
//!   and newlines, others keep or refuse them),
//! * no backslash anywhere (WHATWG reads it as `/` in `http(s)` URLs),
//! * no userinfo, nor any `@` before the path (which `@` ends the userinfo
//!   differs between parsers, and `?`/`#` before an `@` are not authority
//!   ends to all of them),
//! * the host exactly as written is the host WHATWG reads (ASCII case
//!   aside): no percent-encoding, no Unicode (IDNA mapping differs; write the
//!   punycode), no IPv4 in decimal, hex, octal or shorthand form (WHATWG
//!   normalizes them, `inet_aton`-based clients read them differently).

use std::fmt;
use std::net::Ipv6Addr;
use url::Url;

/// Why a URL is refused: a part different parsers read differently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ambiguity {
    /// Not a URL at all (to WHATWG).
    Unparsable(String),
    /// A control character or whitespace (at this char index).
    Control(usize),
    /// A backslash.
    Backslash,
    /// Userinfo, or an `@` before the path.
    Userinfo,
    /// The host WHATWG reads is not the host as written.
    HostNotAsWritten { written: String, read: String },
}

impl fmt::Display for Ambiguity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ambiguity::Unparsable(e) => write!(f, "not a URL ({e})"),
            Ambiguity::Control(at) => write!(
                f,
                "contains a control character or whitespace (at character {at})"
            ),
            Ambiguity::Backslash => write!(
                f,
                "contains a backslash, which HTTP clients read differently"
            ),
            Ambiguity::Userinfo => write!(
                f,
                "has userinfo (an '@' before the path), which HTTP clients read differently"
            ),
            Ambiguity::HostNotAsWritten { written, read } => write!(
                f,
                "its host is written '{}' but read '{read}'; write the host in its plain \
                 ASCII form (punycode, dotted-decimal IPv4, no percent-encoding)",
                written.escape_default()
            ),
        }
    }
}

/// Parses `raw`, refusing any URL whose host HTTP clients could read
/// differently (see the module docs).
pub fn parse(raw: &str) -> Result<Url, Ambiguity> {
    if let Some(at) = raw
        .chars()
        .position(|c| c.is_control() || c.is_whitespace())
    {
        return Err(Ambiguity::Control(at));
    }
    if raw.contains('\\') {
        return Err(Ambiguity::Backslash);
    }
    let url = Url::parse(raw).map_err(|e| Ambiguity::Unparsable(e.to_string()))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(Ambiguity::Userinfo);
    }
    // The authority as written: after `scheme://`, up to the path.
    let rest = &raw[url.scheme().len() + 1..];
    let Some(after) = rest.strip_prefix("//") else {
        // `https:host` and the like: WHATWG finds a host there, others none.
        return match url.host_str() {
            Some(read) => Err(Ambiguity::HostNotAsWritten {
                written: String::new(),
                read: read.to_owned(),
            }),
            None => Ok(url),
        };
    };
    // Conservative: an `@` anywhere before the first `/` (past `?` or `#`
    // too) is refused, whatever a given parser would make of it.
    let before_path = after.split('/').next().unwrap_or_default();
    if before_path.contains('@') {
        return Err(Ambiguity::Userinfo);
    }
    let authority = after.split(['/', '?', '#']).next().unwrap_or_default();
    let written = match authority.strip_prefix('[') {
        Some(v6) => &authority[..v6.find(']').map_or(authority.len(), |end| end + 2)],
        None => authority.split(':').next().unwrap_or_default(),
    };
    let read = url.host_str().unwrap_or_default();
    let same = written.eq_ignore_ascii_case(read)
        || matches!(
            (v6_of(written), v6_of(read)),
            (Some(a), Some(b)) if a == b
        );
    if !same {
        return Err(Ambiguity::HostNotAsWritten {
            written: written.to_owned(),
            read: read.to_owned(),
        });
    }
    Ok(url)
}

/// The address of a bracketed IPv6 host (`[::1]`), in any spelling.
fn v6_of(host: &str) -> Option<Ipv6Addr> {
    host.strip_prefix('[')?.strip_suffix(']')?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_urls_are_read_as_written() {
        for (raw, host) in [
            ("https://cdn.example.com/cat.png", Some("cdn.example.com")),
            (
                "https://CDN.Example.com:8443/a?b=c@d#e",
                Some("cdn.example.com"),
            ),
            ("http://93.184.216.34/x", Some("93.184.216.34")),
            ("https://[2001:db8:0:0::1]/x", Some("[2001:db8::1]")),
            (
                "https://xn--bcher-kva.example/",
                Some("xn--bcher-kva.example"),
            ),
            ("https://a.example./x", Some("a.example.")),
            ("https://a.example/p@th", Some("a.example")),
            ("s3://bucket/key", Some("bucket")),
            ("data:image/png;base64,AAAA", None),
        ] {
            let url = parse(raw).unwrap_or_else(|e| panic!("{raw}: {e}"));
            assert_eq!(url.host_str(), host, "{raw}");
        }
    }

    #[test]
    fn urls_parsers_read_differently_are_refused() {
        for raw in [
            "https://cdn.example.com\\@169.254.169.254/x",
            "https://cdn.example.com\\.169.254.169.254/x",
            "https://user@cdn.example.com/x",
            "https://user:pw@cdn.example.com/x",
            "https://169.254.169.254@cdn.example.com/x",
            "https://cdn.example.com@169.254.169.254/x",
            "https://cdn.example.com?@169.254.169.254/x",
            "https://cdn.example.com#@169.254.169.254/x",
            "https://cdn.exa\tmple.com/x",
            "https://cdn.example.com\n.169.254.169.254/x",
            " https://cdn.example.com/x",
            "https://cdn.example.com /x",
            "https://cdn\0.example.com/x",
            "https://169.254.169%2e254/x",
            "https://cdn%2eexample.com/x",
            "https://bücher.example/x",
            "https://169。254。169。254/x",
            "https://2852039166/x",
            "https://0xa9.0xfe.0xa9.0xfe/x",
            "https://0251.0376.0251.0376/x",
            "https://169.254.43518/x",
            "https:cdn.example.com/x",
            "https:/cdn.example.com/x",
            "https:///cdn.example.com/x",
        ] {
            assert!(parse(raw).is_err(), "{raw:?} must be refused");
        }
    }

    #[test]
    fn refusals_say_why() {
        assert_eq!(
            parse("https://a.example\\@b.example/"),
            Err(Ambiguity::Backslash)
        );
        assert_eq!(parse("https://a@b.example/"), Err(Ambiguity::Userinfo));
        assert_eq!(parse("https://a\tb/"), Err(Ambiguity::Control(9)));
        let e = parse("https://2852039166/").unwrap_err();
        assert_eq!(
            e,
            Ambiguity::HostNotAsWritten {
                written: "2852039166".into(),
                read: "169.254.169.254".into()
            }
        );
        assert!(e.to_string().contains("dotted-decimal"), "{e}");
    }
}
