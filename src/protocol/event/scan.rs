//! The one pass over an event's text behind [`Event::parse`](super::Event::parse).
//!
//! Hand-written serde visitors rather than a derived struct, for three
//! reasons: a derived struct refuses a repeated key (a map keeps the last
//! value, so the gateway did too), it cannot say where a borrowed string lies
//! in the text, and skipping a value with `IgnoredAny` takes a shortcut past
//! number ranges and the nesting limit, so it would accept text the plain
//! `Value` parse refuses. Every value here goes through `deserialize_any`, the
//! path the plain parse takes, and nothing but a [`HEAD`](super::HEAD) string
//! with escapes is allocated.

use super::{HEAD, Span};
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;

/// A string as the parser handed it over.
pub(super) enum Text<'de> {
    /// Borrowed from the input (no escapes): a slice of the event's text.
    Borrowed(&'de str),
    /// Decoded (it had escapes).
    Owned(String),
}

/// One scanned field's value.
pub(super) enum Field<'de> {
    Null,
    /// Present, neither a string nor `null`.
    Other,
    Text(Text<'de>),
}

/// What the scan found in an object: the type, and each [`HEAD`] field's
/// [`Span`], written as its key is met (one pass, nothing held per field
/// but its four bytes).
pub(super) struct Found<'de> {
    pub kind: Option<Text<'de>>,
    pub spans: [Span; HEAD.len()],
    /// Decoded copies the spans point into (escaped strings).
    pub decoded: Vec<Box<str>>,
}

/// The top-level value.
// Lives on the stack for one parse; boxing the large variant would put an
// allocation back on every event.
#[allow(clippy::large_enum_variant)]
pub(super) enum Top<'de> {
    Object(Found<'de>),
    NotObject,
}

/// Visits the top-level value of the text at address `base`.
pub(super) struct TopVisitor {
    pub base: usize,
}

impl<'de> Visitor<'de> for TopVisitor {
    type Value = Top<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an AG-UI event object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top<'de>, A::Error> {
        let mut found = Found {
            kind: None,
            spans: [Span::ABSENT; HEAD.len()],
            decoded: Vec::new(),
        };
        while let Some(key) = map.next_key_seed(KeySeed)? {
            match key {
                Key::Type => {
                    // The last `type` wins, as it does in a map; a non-string
                    // one clears it (no type is the error then).
                    found.kind = match map.next_value_seed(FieldSeed)? {
                        Field::Text(t) => Some(t),
                        _ => None,
                    };
                }
                Key::Head(i) => {
                    let field = map.next_value_seed(FieldSeed)?;
                    found.spans[i] = Span::of(field, self.base, &mut found.decoded);
                }
                Key::Other => {
                    map.next_value::<Skip>()?;
                }
            }
        }
        Ok(Top::Object(found))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Top<'de>, A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(Top::NotObject)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Top<'de>, E> {
        Ok(Top::NotObject)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Top<'de>, E> {
        Ok(Top::NotObject)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Top<'de>, E> {
        Ok(Top::NotObject)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Top<'de>, E> {
        Ok(Top::NotObject)
    }
    fn visit_str<E>(self, _: &str) -> Result<Top<'de>, E> {
        Ok(Top::NotObject)
    }
    fn visit_unit<E>(self) -> Result<Top<'de>, E> {
        Ok(Top::NotObject)
    }
}

enum Key {
    Type,
    Head(usize),
    Other,
}

struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Key;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Key, D::Error> {
        d.deserialize_str(KeySeed)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Key;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_str<E>(self, key: &str) -> Result<Key, E> {
        Ok(match key {
            "type" => Key::Type,
            _ => super::head_index(key).map_or(Key::Other, Key::Head),
        })
    }
}

struct FieldSeed;

impl<'de> DeserializeSeed<'de> for FieldSeed {
    type Value = Field<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Field<'de>, D::Error> {
        d.deserialize_any(FieldSeed)
    }
}

impl<'de> Visitor<'de> for FieldSeed {
    type Value = Field<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Field<'de>, E> {
        Ok(Field::Text(Text::Borrowed(s)))
    }
    fn visit_str<E>(self, s: &str) -> Result<Field<'de>, E> {
        Ok(Field::Text(Text::Owned(s.to_owned())))
    }
    fn visit_string<E>(self, s: String) -> Result<Field<'de>, E> {
        Ok(Field::Text(Text::Owned(s)))
    }
    fn visit_unit<E>(self) -> Result<Field<'de>, E> {
        Ok(Field::Null)
    }
    fn visit_none<E>(self) -> Result<Field<'de>, E> {
        Ok(Field::Null)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Field<'de>, E> {
        Ok(Field::Other)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Field<'de>, E> {
        Ok(Field::Other)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Field<'de>, E> {
        Ok(Field::Other)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Field<'de>, E> {
        Ok(Field::Other)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Field<'de>, A::Error> {
        SkipVisitor.visit_map(map).map(|_| Field::Other)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Field<'de>, A::Error> {
        SkipVisitor.visit_seq(seq).map(|_| Field::Other)
    }
}

/// Any value, walked and dropped.
struct Skip;

impl<'de> de::Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Skip, D::Error> {
        d.deserialize_any(SkipVisitor)
    }
}

struct SkipVisitor;

impl<'de> Visitor<'de> for SkipVisitor {
    type Value = Skip;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_str<E>(self, _: &str) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_unit<E>(self) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_none<E>(self) -> Result<Skip, E> {
        Ok(Skip)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Skip, A::Error> {
        while map.next_key::<Skip>()?.is_some() {
            map.next_value::<Skip>()?;
        }
        Ok(Skip)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Skip, A::Error> {
        while seq.next_element::<Skip>()?.is_some() {}
        Ok(Skip)
    }
}
