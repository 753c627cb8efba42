//! Sizes in bytes written the way operators write them (`"512MiB"`,
//! `"64 KiB"`, `"1GB"`, or a bare number of bytes), for the limits that
//! bound memory and disk by bytes rather than counts. Parsing is the
//! `bytesize` crate's (binary and decimal units, case-insensitive); this
//! module only adapts it to serde and the configuration's JSON schema.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserializer, Serializer, de};
use std::borrow::Cow;

/// Parses `text`: a size with a unit, or a whole number of bytes.
pub fn parse(text: &str) -> Result<u64, String> {
    let t = text.trim();
    if let Ok(n) = t.parse::<u64>() {
        return Ok(n);
    }
    t.parse::<bytesize::ByteSize>()
        .map(|b| b.as_u64())
        .map_err(|e| {
            format!("'{text}' is not a size ({e}): write e.g. 512MiB, 64KiB, 1GB, or whole bytes")
        })
}

/// The shortest exact text for `n` bytes (`512MiB`, `1500B`).
pub fn format(n: u64) -> String {
    for (unit, shift) in [("GiB", 30), ("MiB", 20), ("KiB", 10)] {
        if n >= 1 << shift && n.is_multiple_of(1 << shift) {
            return format!("{}{unit}", n >> shift);
        }
    }
    format!("{n}B")
}

/// For `#[serde(with = "byte_size")]`.
pub fn serialize<S: Serializer>(n: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format(*n))
}

/// For `#[serde(with = "byte_size")]`: text or whole bytes.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    struct Visitor;
    impl de::Visitor<'_> for Visitor {
        type Value = u64;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a size such as \"512MiB\", \"64KiB\", or whole bytes")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
            parse(v).map_err(E::custom)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| E::custom("a size cannot be negative"))
        }
    }
    d.deserialize_any(Visitor)
}

/// For `#[serde(with = "byte_size::option")]`: a size, or nothing (the
/// key's documented default, worked out at start).
pub mod option {
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(n: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match n {
            Some(n) => super::serialize(n, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        super::deserialize(d).map(Some)
    }
}

/// The schema of a size: text with a unit, or whole bytes.
pub struct Text;

impl JsonSchema for Text {
    fn schema_name() -> Cow<'static, str> {
        "ByteSize".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A size in bytes: whole bytes, or a number with a unit (B, KiB, MiB, GiB, KB, MB, GB).",
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": r"^\s*[0-9]+(\.[0-9]+)?\s*[a-zA-Z]*\s*$"}
            ]
        })
    }
}

/// What a node may hold in memory by default: a quarter of what its
/// machine (or its cgroup, when that is smaller) has, at least 64 MiB. A
/// gateway usually shares its host with the agents it fronts; a quarter
/// leaves them the rest, and operators set `threads.memory_budget` for
/// anything else.
pub fn default_memory_budget() -> u64 {
    let total = machine_memory().unwrap_or(4 << 30);
    (total / 4).max(64 << 20)
}

/// The machine's memory (`/proc/meminfo`), capped by the cgroup's limit.
fn machine_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    let machine = kib * 1024;
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok());
    Some(cgroup.map_or(machine, |c| c.min(machine)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_read_as_operators_write_them() {
        assert_eq!(super::parse("512MiB"), Ok(512 << 20));
        assert_eq!(super::parse(" 64 KiB "), Ok(64 << 10));
        assert_eq!(super::parse("1GB"), Ok(1_000_000_000));
        assert_eq!(super::parse("4096"), Ok(4096));
        assert!(super::parse("lots").unwrap_err().contains("not a size"));
        for n in [512 << 20, 64 << 10, 1500, 0, 3 << 30] {
            assert_eq!(super::parse(&super::format(n)), Ok(n), "{n}");
        }
    }

    #[test]
    fn the_default_budget_is_a_share_of_the_machine() {
        let budget = super::default_memory_budget();
        assert!(budget >= 64 << 20);
        assert!(budget <= super::machine_memory().unwrap_or(u64::MAX));
    }
}
