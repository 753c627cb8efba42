//! Limit rules: sizes and counts, and what multimodal input may contain.
//!
//! Request side: message and tool counts; for every image/audio/video/document
//! part (AG-UI 1.0) and legacy `binary` part: allowed MIME types, inline
//! (`data`) bytes after base64 decoding, URL sources only with allowed schemes
//! and hosts and never to a loopback, private, link-local or unspecified
//! address written as an IP literal in any form (dotted, decimal, hex, octal,
//! shorthand, IPv6), and `file` sources only when allowed. Event side: event
//! size and events per run (`RUN_ERROR policy_violation`).

use super::{Policy, RuleFile, Scope};
use crate::auth::Principal;
use crate::protocol::Event;
use crate::protocol::event::run_error;
use crate::thread::run::EventFilter;
use base64::Engine;
use serde_json::Value;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

/// A compiled limits rule.
#[derive(Debug, Default)]
pub struct LimitRule {
    pub name: String,
    scope: Scope,
    max_request_bytes: Option<usize>,
    max_run_seconds: Option<u64>,
    max_messages: Option<usize>,
    max_tools: Option<usize>,
    max_event_bytes: Option<usize>,
    max_events_per_run: Option<usize>,
    mime_types: Option<Vec<String>>,
    max_inline_bytes: Option<usize>,
    url_schemes: Option<Vec<String>>,
    url_hosts: Option<Vec<String>>,
    allow_file_sources: Option<bool>,
}

impl LimitRule {
    /// Builds a rule from its file form.
    pub fn new(file: &RuleFile, scope: Scope) -> Result<LimitRule, String> {
        Ok(LimitRule {
            name: file.name.clone(),
            scope,
            max_request_bytes: file.max_request_bytes,
            max_run_seconds: file.max_run_seconds,
            max_messages: file.max_messages,
            max_tools: file.max_tools,
            max_event_bytes: file.max_event_bytes,
            max_events_per_run: file.max_events_per_run,
            mime_types: file.mime_types.clone(),
            max_inline_bytes: file.max_inline_bytes,
            url_schemes: file.url_schemes.clone(),
            url_hosts: file.url_hosts.clone(),
            allow_file_sources: file.allow_file_sources,
        })
    }
}

/// A refused request: `too_large` when a size was exceeded, else `forbidden`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub too_large: bool,
    pub message: String,
}

fn refuse(rule: &LimitRule, too_large: bool, what: String) -> Refusal {
    Refusal {
        too_large,
        message: format!("{what} (policy rule '{}')", rule.name),
    }
}

/// Checks a run request's serialized size against `max_request_bytes`.
pub fn check_size(
    policy: &Policy,
    who: &Principal,
    agent: &str,
    thread: &str,
    bytes: usize,
) -> Result<(), Refusal> {
    for rule in policy
        .limits
        .iter()
        .filter(|r| r.scope.applies_on(who, agent, thread))
    {
        if let Some(max) = rule.max_request_bytes.filter(|m| bytes > *m) {
            return Err(refuse(
                rule,
                true,
                format!("the request is {bytes} bytes; at most {max}"),
            ));
        }
    }
    Ok(())
}

/// Checks a run request's messages and tools against every applicable limit.
pub fn check_request(
    policy: &Policy,
    who: &Principal,
    agent: &str,
    thread: &str,
    messages: &[Value],
    tools: &[Value],
) -> Result<(), Refusal> {
    for rule in policy
        .limits
        .iter()
        .filter(|r| r.scope.applies_on(who, agent, thread))
    {
        if let Some(max) = rule.max_messages.filter(|m| messages.len() > *m) {
            return Err(refuse(
                rule,
                true,
                format!("{} messages; at most {max}", messages.len()),
            ));
        }
        if let Some(max) = rule.max_tools.filter(|m| tools.len() > *m) {
            return Err(refuse(
                rule,
                true,
                format!("{} tools; at most {max}", tools.len()),
            ));
        }
        for (mi, m) in messages.iter().enumerate() {
            let Some(parts) = m.get("content").and_then(Value::as_array) else {
                continue;
            };
            for (pi, part) in parts.iter().enumerate() {
                check_part(rule, part).map_err(|r| Refusal {
                    message: format!("messages[{mi}].content[{pi}]: {}", r.message),
                    ..r
                })?;
            }
        }
    }
    Ok(())
}

fn check_part(rule: &LimitRule, part: &Value) -> Result<(), Refusal> {
    let kind = part.get("type").and_then(Value::as_str).unwrap_or("");
    // (source type, value, mime) for 1.0 parts and the legacy binary part.
    let (source, value, mime) = match kind {
        "image" | "audio" | "video" | "document" => {
            let s = part.get("source").cloned().unwrap_or_default();
            let t = s
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let v = s
                .get("value")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let m = s.get("mimeType").and_then(Value::as_str).map(str::to_owned);
            (t, v, m)
        }
        "binary" => {
            let m = part
                .get("mimeType")
                .and_then(Value::as_str)
                .map(str::to_owned);
            if let Some(d) = part.get("data").and_then(Value::as_str) {
                ("data".into(), d.to_owned(), m)
            } else if let Some(u) = part.get("url").and_then(Value::as_str) {
                ("url".into(), u.to_owned(), m)
            } else {
                (
                    "file".into(),
                    part.get("id")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                    m,
                )
            }
        }
        _ => return Ok(()),
    };
    if let (Some(allowed), Some(m)) = (&rule.mime_types, &mime)
        && !allowed
            .iter()
            .any(|a| crate::auth::access::glob_match(a, m))
    {
        return Err(refuse(
            rule,
            false,
            format!("MIME type '{m}' is not allowed"),
        ));
    }
    if rule.mime_types.is_some() && mime.is_none() && source == "data" {
        return Err(refuse(
            rule,
            false,
            "inline data without a MIME type".into(),
        ));
    }
    match source.as_str() {
        "data" => {
            if let Some(max) = rule.max_inline_bytes {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(value.trim())
                    .map_err(|_| refuse(rule, false, "inline data is not valid base64".into()))?;
                if bytes.len() > max {
                    return Err(refuse(
                        rule,
                        true,
                        format!("inline data is {} bytes; at most {max}", bytes.len()),
                    ));
                }
            }
        }
        "url" => check_url(rule, &value)?,
        "file" => {
            if rule.allow_file_sources == Some(false) {
                return Err(refuse(rule, false, "file sources are not allowed".into()));
            }
        }
        other => {
            return Err(refuse(
                rule,
                false,
                format!("unknown source type '{other}'"),
            ));
        }
    }
    Ok(())
}

fn check_url(rule: &LimitRule, raw: &str) -> Result<(), Refusal> {
    let url = reqwest::Url::parse(raw)
        .map_err(|_| refuse(rule, false, "source URL does not parse".into()))?;
    if let Some(schemes) = &rule.url_schemes
        && !schemes.iter().any(|s| s.eq_ignore_ascii_case(url.scheme()))
    {
        return Err(refuse(
            rule,
            false,
            format!("URL scheme '{}' is not allowed", url.scheme()),
        ));
    }
    let host = url
        .host_str()
        .unwrap_or("")
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    if is_internal_host(&host) {
        return Err(refuse(
            rule,
            false,
            format!("URL host '{host}' is internal (SSRF guard)"),
        ));
    }
    if let Some(hosts) = &rule.url_hosts
        && !hosts
            .iter()
            .any(|h| crate::auth::access::glob_match(&h.to_ascii_lowercase(), &host))
    {
        return Err(refuse(
            rule,
            false,
            format!("URL host '{host}' is not allowed"),
        ));
    }
    Ok(())
}

/// Loopback, private, link-local, unspecified or broadcast, in any IP literal
/// form (the WHATWG URL parser has already normalized decimal, hex, octal and
/// shorthand IPv4), plus `localhost`.
pub fn is_internal_host(host: &str) -> bool {
    if host == "localhost" || host.ends_with(".localhost") {
        return true;
    }
    let ip = match host.parse::<IpAddr>() {
        Ok(ip) => ip,
        Err(_) => match parse_loose_ipv4(host) {
            Some(v4) => IpAddr::V4(v4),
            None => return false,
        },
    };
    match ip {
        IpAddr::V4(v4) => internal_v4(v4),
        IpAddr::V6(v6) => {
            v6.is_loopback()
                || v6.is_unspecified()
                || (v6.segments()[0] & 0xfe00) == 0xfc00 // unique local
                || (v6.segments()[0] & 0xffc0) == 0xfe80 // link-local
                || v6.to_ipv4_mapped().is_some_and(internal_v4)
        }
    }
}

fn internal_v4(v4: Ipv4Addr) -> bool {
    v4.is_loopback()
        || v4.is_private()
        || v4.is_link_local()
        || v4.is_unspecified()
        || v4.is_broadcast()
        || v4.octets()[0] == 100 && (v4.octets()[1] & 0xc0) == 64 // carrier-grade NAT
}

/// IPv4 in the forms `inet_aton` accepts (decimal, hex, octal, 1–4 parts).
fn parse_loose_ipv4(host: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = host.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let nums: Vec<u64> = parts
        .iter()
        .map(|p| {
            if let Some(h) = p.strip_prefix("0x").or_else(|| p.strip_prefix("0X")) {
                u64::from_str_radix(h, 16).ok()
            } else if p.len() > 1 && p.starts_with('0') {
                u64::from_str_radix(&p[1..], 8).ok()
            } else {
                p.parse().ok()
            }
        })
        .collect::<Option<_>>()?;
    let (last, head) = nums.split_last()?;
    if head.iter().any(|n| *n > 255) || *last >= 1u64 << (8 * (4 - head.len())) {
        return None;
    }
    let mut v: u64 = 0;
    for (i, n) in head.iter().enumerate() {
        v |= n << (24 - 8 * i);
    }
    Some(Ipv4Addr::from((v | last) as u32))
}

/// Event-side limits for one run (an [`EventFilter`]).
pub struct EventLimits {
    max_event_bytes: Option<(usize, String)>,
    max_events: Option<(usize, String)>,
    max_duration: Option<(std::time::Duration, String)>,
    started: std::time::Instant,
    seen: usize,
}

impl EventLimits {
    /// The tightest applicable limits, or `None` when there are none.
    pub fn new(
        policy: &Arc<Policy>,
        who: &Principal,
        agent: &str,
        thread: &str,
    ) -> Option<EventLimits> {
        let mut l = EventLimits {
            max_event_bytes: None,
            max_events: None,
            max_duration: None,
            started: std::time::Instant::now(),
            seen: 0,
        };
        for r in policy
            .limits
            .iter()
            .filter(|r| r.scope.applies_on(who, agent, thread))
        {
            if let Some(m) = r.max_event_bytes
                && l.max_event_bytes.as_ref().is_none_or(|(c, _)| m < *c)
            {
                l.max_event_bytes = Some((m, r.name.clone()));
            }
            if let Some(m) = r.max_events_per_run
                && l.max_events.as_ref().is_none_or(|(c, _)| m < *c)
            {
                l.max_events = Some((m, r.name.clone()));
            }
        }
        for r in policy
            .limits
            .iter()
            .filter(|r| r.scope.applies_on(who, agent, thread))
        {
            if let Some(secs) = r.max_run_seconds {
                let d = std::time::Duration::from_secs(secs);
                if l.max_duration.as_ref().is_none_or(|(c, _)| d < *c) {
                    l.max_duration = Some((d, r.name.clone()));
                }
            }
        }
        (l.max_event_bytes.is_some() || l.max_events.is_some() || l.max_duration.is_some())
            .then_some(l)
    }
}

impl EventFilter for EventLimits {
    fn filter(&mut self, event: Event) -> Result<Vec<Event>, Box<Event>> {
        self.seen += 1;
        // Checked as events arrive; a silent agent is bounded by its `timeouts.total`.
        if let Some((max, rule)) = &self.max_duration
            && self.started.elapsed() > *max
        {
            return Err(Box::new(run_error(
                "policy_violation",
                format!(
                    "the run exceeded {} s (policy rule '{rule}')",
                    max.as_secs()
                ),
            )));
        }
        if let Some((max, rule)) = &self.max_events
            && self.seen > *max
        {
            return Err(Box::new(run_error(
                "policy_violation",
                format!("the run exceeded {max} events (policy rule '{rule}')"),
            )));
        }
        if let Some((max, rule)) = &self.max_event_bytes
            && event.json().len() > *max
        {
            return Err(Box::new(run_error(
                "policy_violation",
                format!(
                    "a {} event of {} bytes exceeds {max} (policy rule '{rule}')",
                    event.kind(),
                    event.json().len()
                ),
            )));
        }
        Ok(vec![event])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ssrf_forms_are_internal() {
        for h in [
            "127.0.0.1",
            "169.254.169.254",
            "::1",
            "10.1.2.3",
            "192.168.0.1",
            "0.0.0.0",
            "2130706433",
            "0x7f000001",
            "0177.0.0.1",
            "127.1",
            "localhost",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "100.64.0.1",
        ] {
            assert!(is_internal_host(h), "{h}");
        }
        for h in ["8.8.8.8", "cdn.example.com", "2001:4860::8888", "1.2.3.4"] {
            assert!(!is_internal_host(h), "{h}");
        }
    }

    fn policy() -> Policy {
        Policy::parse(
            r#"
[[rules]]
name = "images-from-cdn"
kind = "limits"
max_messages = 3
mime_types = ["image/*"]
max_inline_bytes = 4
url_schemes = ["https"]
url_hosts = ["cdn.example.com"]
allow_file_sources = false
"#,
            "t",
        )
        .unwrap()
    }

    fn user(parts: Value) -> Vec<Value> {
        vec![json!({"id": "u", "role": "user", "content": parts})]
    }

    fn check(parts: Value) -> Result<(), Refusal> {
        let who = Principal::for_test("u", &[]);
        check_request(&policy(), &who, "a", "t", &user(parts), &[])
    }

    #[test]
    fn request_size_run_duration_and_event_limits() {
        let p = Arc::new(
            Policy::parse(
                "[[rules]]\nname = \"small\"\nkind = \"limits\"\nmax_request_bytes = 10\nmax_run_seconds = 0\nmax_events_per_run = 5\n",
                "t",
            )
            .unwrap(),
        );
        let who = Principal::for_test("u", &[]);
        assert!(check_size(&p, &who, "a", "t", 10).is_ok());
        let r = check_size(&p, &who, "a", "t", 11).unwrap_err();
        assert!(r.too_large && r.message.contains("'small'"));
        let mut l = EventLimits::new(&p, &who, "a", "t").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2)); // exceed the 0 s budget
        let end = l
            .filter(Event::build(
                json!({"type": "CUSTOM", "name": "x", "value": 1}),
            ))
            .unwrap_err();
        assert_eq!(end.body()["code"], "policy_violation");
        assert!(
            end.body()["message"]
                .as_str()
                .unwrap()
                .contains("exceeded 0 s")
        );
    }

    #[test]
    fn multimodal_rules() {
        check(json!([{"type": "image", "source": {"type": "url", "value": "https://cdn.example.com/a.png", "mimeType": "image/png"}}])).unwrap();
        check(json!([{"type": "image", "source": {"type": "data", "value": "aGk=", "mimeType": "image/png"}}])).unwrap();
        let too_big = check(json!([{"type": "image", "source": {"type": "data", "value": "aGVsbG8=", "mimeType": "image/png"}}])).unwrap_err();
        assert!(
            too_big.too_large && too_big.message.contains("5 bytes"),
            "{too_big:?}"
        );
        for (url, why) in [
            ("http://cdn.example.com/a.png", "scheme"),
            ("https://evil.example/a.png", "not allowed"),
            ("https://127.0.0.1/a.png", "SSRF"),
            ("https://169.254.169.254/latest", "SSRF"),
            ("https://[::1]/x", "SSRF"),
            ("https://2130706433/x", "SSRF"),
            ("https://0x7f000001/x", "SSRF"),
        ] {
            let e = check(json!([{"type": "image", "source": {"type": "url", "value": url, "mimeType": "image/png"}}])).unwrap_err();
            assert!(e.message.contains(why), "{url}: {e:?}");
        }
        let pdf = check(json!([{"type": "document", "source": {"type": "data", "value": "aGk=", "mimeType": "application/pdf"}}])).unwrap_err();
        assert!(pdf.message.contains("MIME"));
        let file = check(json!([{"type": "image", "source": {"type": "file", "value": "f-1", "mimeType": "image/png"}}])).unwrap_err();
        assert!(file.message.contains("file sources"));
        let legacy = check(
            json!([{"type": "binary", "mimeType": "image/png", "url": "https://10.0.0.1/x.png"}]),
        )
        .unwrap_err();
        assert!(legacy.message.contains("SSRF"));
    }
}
