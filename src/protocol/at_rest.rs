//! A value that can be put to rest: kept as a compressed blob of its
//! serialized form while nobody reads it, and rebuilt on first touch.
//!
//! Why: a thread somebody watches can never leave memory, and its fold
//! grows with every run (its finished messages, who wrote them, its run
//! records: about 2 KB a run). Under a node's memory budget that was the
//! one part nothing could shed, so a node with many watched threads grew
//! past its ceiling once their conversations alone filled it
//! (docs/benchmarks.md, "Seventh pass"). Between two runs nothing reads a
//! watched thread's conversation; at rest it costs its compressed text,
//! about a fifth of what it costs awake.
//!
//! Waking is transparent: reading through [`Deref`] rebuilds the value
//! (under the reader's borrow, so the first reader pays a decompression
//! and a parse, later ones nothing) and keeps the blob, which is still
//! exact; changing it through [`DerefMut`] drops the blob, which no longer
//! is. Putting a value that was only read back to rest is free: the blob
//! is still there.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, OnceLock};

/// A type with a form at rest: bytes it is rebuilt from exactly (as far as
/// anyone can tell from its methods).
pub trait Rest: Sized {
    /// Its form at rest (uncompressed).
    fn to_rest(&self) -> Vec<u8>;
    /// Rebuilds it from [`Rest::to_rest`]'s bytes.
    fn from_rest(bytes: &[u8]) -> Self;
}

/// A `T` that is awake (in memory as itself), at rest (a compressed blob),
/// or both for a while after a read woke it.
pub struct AtRest<T> {
    awake: OnceLock<T>,
    /// The compressed [`Rest::to_rest`] form, when it matches `awake` (or
    /// `awake` is empty).
    blob: Option<Arc<[u8]>>,
}

impl<T> AtRest<T> {
    pub fn new(value: T) -> AtRest<T> {
        AtRest {
            awake: OnceLock::from(value),
            blob: None,
        }
    }

    /// True while only the blob is in memory.
    pub fn is_resting(&self) -> bool {
        self.awake.get().is_none()
    }

    /// The value, if it is awake (never wakes it).
    pub fn awake(&self) -> Option<&T> {
        self.awake.get()
    }

    /// Bytes held: the blob's, plus `awake_bytes` of the value if it is
    /// awake. Never wakes it.
    pub fn held_bytes(&self, awake_bytes: impl FnOnce(&T) -> usize) -> usize {
        self.blob.as_ref().map_or(0, |b| b.len()) + self.awake.get().map_or(0, awake_bytes)
    }
}

impl<T: Rest> AtRest<T> {
    /// Puts the value to rest (serialized and compressed unless the blob
    /// of an unchanged value is still here). Returns the blob's bytes.
    pub fn rest(&mut self) -> usize {
        if let Some(value) = self.awake.take()
            && self.blob.is_none()
        {
            let text = value.to_rest();
            self.blob = Some(lz4_flex::block::compress_prepend_size(&text).into());
        }
        self.blob.as_ref().map_or(0, |b| b.len())
    }

    fn wake(&self) -> &T {
        self.awake.get_or_init(|| {
            let blob = self
                .blob
                .as_ref()
                .expect("a value at rest keeps its blob until it is awake");
            // Our own bytes, compressed a moment ago in this process:
            // failing here is a bug, not bad input.
            let text = lz4_flex::block::decompress_size_prepended(blob)
                .expect("a blob this process compressed decompresses");
            T::from_rest(&text)
        })
    }
}

impl<T: Rest> Deref for AtRest<T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.wake()
    }
}

impl<T: Rest> DerefMut for AtRest<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.wake();
        self.blob = None; // it changes: the blob no longer says it
        self.awake.get_mut().expect("woken just above")
    }
}

impl<T: Rest + Default> Default for AtRest<T> {
    fn default() -> Self {
        AtRest::new(T::default())
    }
}

impl<T: Rest + Clone> Clone for AtRest<T> {
    fn clone(&self) -> Self {
        AtRest {
            awake: self.awake.clone(),
            blob: self.blob.clone(),
        }
    }
}

impl<T: Rest + PartialEq> PartialEq for AtRest<T> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T: Rest + std::fmt::Debug> std::fmt::Debug for AtRest<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.awake.get() {
            Some(v) => v.fmt(f),
            None => write!(
                f,
                "AtRest({} bytes)",
                self.blob.as_ref().map_or(0, |b| b.len())
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq, Default)]
    struct Words(Vec<String>);

    impl Rest for Words {
        fn to_rest(&self) -> Vec<u8> {
            self.0.join(" ").into_bytes()
        }
        fn from_rest(bytes: &[u8]) -> Self {
            let s = std::str::from_utf8(bytes).unwrap();
            Words(s.split(' ').map(str::to_owned).collect())
        }
    }

    fn words(n: usize) -> Words {
        Words((0..n).map(|i| format!("word{}", i % 7)).collect())
    }

    #[test]
    fn a_value_at_rest_reads_and_changes_as_if_it_never_left() {
        let mut v = AtRest::new(words(1000));
        let awake_len = v.0.len();
        let blob = v.rest();
        assert!(v.is_resting());
        assert!(blob > 0 && blob < 1000 * 5 / 2, "compressed: {blob} bytes");
        assert_eq!(v.held_bytes(|_| unreachable!("asleep")), blob);
        // A read wakes it and keeps the blob (still exact).
        assert_eq!(v.0.len(), awake_len);
        assert_eq!(*v, words(1000));
        assert_eq!(v.held_bytes(|_| 1), blob + 1);
        // Back to rest without compressing again.
        assert_eq!(v.rest(), blob);
        // A change drops the blob; the next rest writes the new value.
        v.0.push("last".into());
        assert_eq!(v.held_bytes(|_| 0), 0);
        v.rest();
        assert_eq!(v.0.last().map(String::as_str), Some("last"));
        assert_eq!(v.0.len(), 1001);
    }

    #[test]
    fn a_clone_at_rest_wakes_on_its_own() {
        let mut v = AtRest::new(words(10));
        v.rest();
        let copy = v.clone();
        assert!(copy.is_resting());
        assert_eq!(*copy, words(10));
        assert!(v.is_resting(), "waking the copy leaves the original asleep");
        assert_eq!(v, copy);
    }
}
