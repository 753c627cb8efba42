//! Limit rules: sizes and counts, and what multimodal input may contain.
//!
//! Request side: message and tool counts; for every image/audio/video/document
//! part (AG-UI 1.0) and legacy `binary` part: allowed MIME types, inline
//! (`data`) bytes after base64 decoding, URL sources only in a form every HTTP
//! client reads with the same host ([`crate::protocol::url_host`]: no `\`,
//! no userinfo, no encoded or Unicode host), with allowed schemes and hosts
//! and never to `localhost` or to an address that is not globally
//! reachable (the IANA special-purpose registries, multicast, embedded IPv4;
//! see [`is_internal_ip`]) written as an IP literal in any form (dotted,
//! decimal, hex, octal, shorthand, IPv6), and `file` sources only when
//! allowed. Event side: event size and events per run (`RUN_ERROR
//! policy_violation`).

use super::kind::{Kind, Rule, RuleStore};
use super::{Policy, Scope};
use crate::auth::Principal;
use crate::protocol::Event;
use crate::protocol::event::run_error;
use crate::protocol::hooks::EventFilter;
use base64::Engine;
use ipnet::{Ipv4Net, Ipv6Net};
use serde::Deserialize;
use serde_json::Value;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// The `limits` kind.
pub const KIND: Kind = Kind::new("limits", compile);

fn compile(mut rule: Rule, store: &mut RuleStore) -> Result<(), String> {
    let mut limits: LimitRule = rule.fields()?;
    limits.scope = rule.scope_with_when();
    limits.name = rule.name;
    store.push(limits);
    Ok(())
}

/// A compiled limits rule: its keys are the rule's own (every limit is
/// optional), read as they are.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitRule {
    #[serde(skip)]
    pub name: String,
    #[serde(skip)]
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
        .rules::<LimitRule>()
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
        .rules::<LimitRule>()
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
    // An internal host as WHATWG reads it is named as such, whatever else
    // is wrong with the URL (`https://2130706433/` is 127.0.0.1).
    if let Some(host) = reqwest::Url::parse(raw)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .filter(|h| is_internal_host(h))
    {
        return Err(refuse(
            rule,
            false,
            format!("URL host '{host}' is internal (SSRF guard)"),
        ));
    }
    // Then read as every HTTP client reads it, or refused: the agent
    // fetching it must not see another host than the one checked here.
    let url = crate::protocol::url_host::parse(raw)
        .map_err(|e| refuse(rule, false, format!("source URL {e}")))?;
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

/// Whether a URL host names this machine or a network that is not globally
/// reachable (the SSRF guard): `localhost`, `*.localhost` and the usual
/// `/etc/hosts` loopback aliases, with any trailing dots; and IP literals in
/// any form (dotted, decimal, hex, octal, shorthand, bracketed IPv6) that
/// [`is_internal_ip`] refuses. The WHATWG URL parser has already normalized
/// most IPv4 forms; the loose parse here covers callers that did not.
pub fn is_internal_host(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    // An IPv6 zone (`fe80::1%eth0`) names an interface, not another address.
    let host = host.split('%').next().unwrap_or_default();
    // `localhost.` is `localhost` (a fully qualified name): strip the root.
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if matches!(
        host.as_str(),
        "localhost" | "localhost.localdomain" | "ip6-localhost" | "ip6-loopback"
    ) || host.ends_with(".localhost")
    {
        return true;
    }
    match host.parse::<IpAddr>() {
        Ok(ip) => is_internal_ip(ip),
        Err(_) => parse_loose_ipv4(&host).is_some_and(|v4| is_internal_ip(IpAddr::V4(v4))),
    }
}

/// Whether `ip` must not be fetched on a user's behalf: it is in a block of
/// the IANA special-purpose address registries that is not globally
/// reachable, or multicast, or (IPv6) outside global unicast, or an IPv6
/// address that embeds such an IPv4 address.
///
/// The tables encode, as of 2025:
/// - the IANA IPv4 Special-Purpose Address Registry
///   (<https://www.iana.org/assignments/iana-ipv4-special-registry/>, RFC 6890):
///   every entry whose "Globally Reachable" is False, see [`V4_NOT_GLOBAL`];
/// - the IANA IPv6 Special-Purpose Address Registry
///   (<https://www.iana.org/assignments/iana-ipv6-special-registry/>):
///   likewise, see [`V6_NOT_GLOBAL`];
/// - the multicast blocks of the IPv4 and IPv6 multicast address registries
///   (224.0.0.0/4, ff00::/8);
/// - the IPv6 Address Space registry: only 2000::/3 is global unicast, so
///   anything else not already classified (reserved space) is refused.
///
/// Where a registry entry is not globally reachable but a more specific one
/// is (the PCP/TURN anycast /32s in 192.0.0.0/24 and 2001:1::/48, ORCHIDv2,
/// AMT, DETs), the whole block is refused: those are protocol service
/// addresses, never an image or document host.
///
/// IPv6 forms that carry an IPv4 address are judged as that address
/// ([`embedded_v4`]): IPv4-mapped, IPv4-compatible, IPv4-translated, NAT64
/// (64:ff9b::/96), 6to4 (2002::/16) and Teredo (2001::/32, server or client).
pub fn is_internal_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => internal_v4(v4),
        IpAddr::V6(v6) => internal_v6(v6),
    }
}

/// IPv4 Special-Purpose Address Registry entries that are not globally
/// reachable (plus the deprecated 6to4 relay anycast block, RFC 7526), and
/// multicast. Kept in registry order so it can be checked against it.
pub const V4_NOT_GLOBAL: &[Ipv4Net] = &[
    v4(0, 0, 0, 0, 8),       // "this network" (RFC 791); 0.0.0.0/32 "this host"
    v4(10, 0, 0, 0, 8),      // private-use (RFC 1918)
    v4(100, 64, 0, 0, 10),   // shared address space, carrier-grade NAT (RFC 6598)
    v4(127, 0, 0, 0, 8),     // loopback (RFC 1122)
    v4(169, 254, 0, 0, 16),  // link local (RFC 3927), cloud metadata services
    v4(172, 16, 0, 0, 12),   // private-use (RFC 1918)
    v4(192, 0, 0, 0, 24),    // IETF protocol assignments (RFC 6890)
    v4(192, 0, 2, 0, 24),    // documentation TEST-NET-1 (RFC 5737)
    v4(192, 88, 99, 0, 24),  // deprecated 6to4 relay anycast (RFC 7526)
    v4(192, 168, 0, 0, 16),  // private-use (RFC 1918)
    v4(198, 18, 0, 0, 15),   // benchmarking (RFC 2544)
    v4(198, 51, 100, 0, 24), // documentation TEST-NET-2 (RFC 5737)
    v4(203, 0, 113, 0, 24),  // documentation TEST-NET-3 (RFC 5737)
    v4(224, 0, 0, 0, 4),     // multicast (RFC 5771)
    v4(240, 0, 0, 0, 4),     // reserved (RFC 1112), and 255.255.255.255 broadcast
];

/// IPv6 Special-Purpose Address Registry entries that are not globally
/// reachable, plus multicast and the deprecated site-local block. The
/// embedded-IPv4 forms are judged by [`embedded_v4`] first.
pub const V6_NOT_GLOBAL: &[Ipv6Net] = &[
    v6([0, 0, 0, 0, 0, 0, 0, 1], 128),         // loopback (RFC 4291)
    v6([0, 0, 0, 0, 0, 0, 0, 0], 128),         // unspecified (RFC 4291)
    v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48),  // IPv4-IPv6 translation, local use (RFC 8215)
    v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64),      // discard-only (RFC 6666)
    v6([0x100, 0, 0, 1, 0, 0, 0, 0], 64),      // dummy prefix (RFC 9780)
    v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 23),     // IETF protocol assignments (RFC 2928)
    v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32), // documentation (RFC 3849)
    v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20),     // documentation (RFC 9637)
    v6([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16),     // segment routing SIDs (RFC 9602)
    v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7),      // unique local (RFC 4193)
    v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10),     // link-local unicast (RFC 4291)
    v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10),     // site-local, deprecated (RFC 3879)
    v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8),      // multicast (RFC 4291)
];

/// Global unicast (IPv6 Address Space registry): the only space from which
/// an address can be globally reachable.
const V6_GLOBAL_UNICAST: Ipv6Net = v6([0x2000, 0, 0, 0, 0, 0, 0, 0], 3);

const fn v4(a: u8, b: u8, c: u8, d: u8, len: u8) -> Ipv4Net {
    Ipv4Net::new_assert(Ipv4Addr::new(a, b, c, d), len)
}

const fn v6(s: [u16; 8], len: u8) -> Ipv6Net {
    Ipv6Net::new_assert(
        Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]),
        len,
    )
}

fn internal_v4(ip: Ipv4Addr) -> bool {
    V4_NOT_GLOBAL.iter().any(|n| n.contains(&ip))
}

fn internal_v6(ip: Ipv6Addr) -> bool {
    if ip.is_loopback() || ip.is_unspecified() {
        return true;
    }
    let embedded = embedded_v4(ip);
    if !embedded.is_empty() {
        return embedded.into_iter().any(internal_v4);
    }
    V6_NOT_GLOBAL.iter().any(|n| n.contains(&ip)) || !V6_GLOBAL_UNICAST.contains(&ip)
}

/// The IPv4 addresses an IPv6 address stands for, if it is one of the
/// forms that carry one; empty otherwise. Teredo gives two (its server and,
/// stored inverted, its client), and is refused if either is internal.
pub fn embedded_v4(ip: Ipv6Addr) -> Vec<Ipv4Addr> {
    let bits = u128::from(ip);
    let low = Ipv4Addr::from(bits as u32);
    let prefix = |net: Ipv6Net| net.contains(&ip);
    if prefix(v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96)) // IPv4-mapped (RFC 4291)
        || prefix(v6([0, 0, 0, 0, 0, 0, 0, 0], 96)) // IPv4-compatible, deprecated (RFC 4291)
        || prefix(v6([0, 0, 0, 0, 0xffff, 0, 0, 0], 96)) // IPv4-translated (RFC 2765)
        || prefix(v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96))
    // NAT64 well-known prefix (RFC 6052)
    {
        return vec![low];
    }
    if prefix(v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16)) {
        // 6to4 (RFC 3056): the IPv4 address follows the prefix.
        return vec![Ipv4Addr::from((bits >> 80) as u32)];
    }
    if prefix(v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 32)) {
        // Teredo (RFC 4380): server in bits 32..64, client inverted in the last 32.
        return vec![
            Ipv4Addr::from((bits >> 64) as u32),
            Ipv4Addr::from(!(bits as u32)),
        ];
    }
    Vec::new()
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
            .rules::<LimitRule>()
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
            .rules::<LimitRule>()
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

    /// Every block of the IANA special-purpose registries that is not
    /// globally reachable, multicast, the embedded-IPv4 forms (classified as
    /// the address they embed) and the `localhost` names, trailing dots
    /// included.
    #[test]
    fn special_purpose_addresses_and_names_are_internal() {
        for h in [
            // names
            "localhost.",
            "LOCALHOST",
            "localhost..",
            "app.localhost",
            "app.localhost.",
            "ip6-localhost",
            "fe80::1%eth0",
            "127.0.0.1.",
            "0x7f.1",
            // IPv4 registry
            "0.0.0.0",
            "0.1.2.3",
            "0",
            "10.0.0.1",
            "100.127.255.254",
            "127.255.0.1",
            "169.254.1.1",
            "172.31.0.1",
            "192.0.0.1",
            "192.0.0.8",
            "192.0.0.170",
            "192.0.2.10",
            "192.88.99.1",
            "192.168.1.1",
            "198.18.0.1",
            "198.19.255.255",
            "198.51.100.7",
            "203.0.113.9",
            "240.0.0.1",
            "255.255.255.255",
            // IPv4 multicast
            "224.0.0.1",
            "239.255.255.250",
            // IPv6 registry
            "::",
            "::1",
            "[::1]",
            "64:ff9b:1::1",
            "100::1",
            "100:0:0:1::1",
            "2001:2::1",
            "2001:db8::1",
            "2001:10::1",
            "3fff::1",
            "5f00::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "febf::1",
            "fec0::1",
            // IPv6 multicast
            "ff02::1",
            "ff05::1:3",
            "ff0e::1",
            // outside global unicast (2000::/3)
            "4000::1",
            "e000::1",
            // embedded IPv4, classified as the address embedded
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:0.0.0.0",
            "::ffff:0:7f00:1",
            "::7f00:1",
            "::a9fe:a9fe",
            "64:ff9b::7f00:1",
            "64:ff9b::169.254.169.254",
            "64:ff9b::c612:1",
            "2002:7f00:1::1",
            "2002:a00:1::",
            "2002:c0a8:101::1",
            "2002:e000:1::",
            // Teredo: client 127.0.0.1 (stored inverted), server 10.0.0.1
            "2001:0:4136:e378:8000:63bf:80ff:fffe",
            "2001:0:a00:1:8000:63bf:f7f7:f7f7",
        ] {
            assert!(is_internal_host(h), "{h} must be refused");
        }
        for h in [
            "8.8.8.8",
            "1.1.1.1",
            "93.184.216.34",
            "cdn.example.com",
            "localhost.example.com",
            "mylocalhost",
            "2606:4700:4700::1111",
            "2001:4860:4860::8888",
            "64:ff9b::808:808",
            "2002:808:808::1",
            "2001:0:4136:e378:8000:63bf:f7f7:f7f7",
        ] {
            assert!(!is_internal_host(h), "{h} is public");
        }
    }

    #[test]
    fn ssrf_urls_in_every_form_are_refused() {
        for url in [
            "https://localhost./a.png",
            "https://app.localhost./a.png",
            "https://127.0.0.1./a.png",
            "https://0.0.0.0/a.png",
            "https://0.1.2.3/a.png",
            "https://198.18.0.1/a.png",
            "https://224.0.0.1/a.png",
            "https://[ff02::1]/a.png",
            "https://[64:ff9b::7f00:1]/a.png",
            "https://[2002:7f00:1::1]/a.png",
            "https://[::ffff:7f00:1]/a.png",
        ] {
            let e = check(json!([{"type": "image", "source": {"type": "url", "value": url, "mimeType": "image/png"}}])).unwrap_err();
            assert!(e.message.contains("SSRF"), "{url}: {e:?}");
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
            // WHATWG reads cdn.example.com, Python clients 169.254.169.254.
            ("https://cdn.example.com\\@169.254.169.254/x", "backslash"),
            ("https://169.254.169.254@cdn.example.com/x", "userinfo"),
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
