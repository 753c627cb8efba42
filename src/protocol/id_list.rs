//! A short list of message ids in one allocation.
//!
//! Why: every run record keeps the ids of the messages its run produced
//! (what a regenerate replaces, who produced a message), a handful per run
//! on up to [`super::lineage::RUNS_KEPT`] runs per thread. As a
//! `Vec<String>` each id was its own allocation plus a 24-byte string
//! header: about 70 bytes an id for a 40-byte id. Here the ids sit back to
//! back, each after its length: about 4 bytes over the id.

/// Ids in insertion order (see the module doc).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct IdList {
    /// Each id as its length (4 bytes, little-endian) then its bytes.
    bytes: Vec<u8>,
}

impl IdList {
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        let mut rest = &self.bytes[..];
        std::iter::from_fn(move || {
            let (len, tail) = rest.split_first_chunk::<4>()?;
            let (id, tail) = tail.split_at(u32::from_le_bytes(*len) as usize);
            rest = tail;
            // Only `push` writes, and it writes whole `str`s.
            Some(std::str::from_utf8(id).expect("an IdList holds whole strings"))
        })
    }

    pub fn contains(&self, id: &str) -> bool {
        self.iter().any(|i| i == id)
    }

    /// Appends `id` (longer than 4 GiB: not an id a message can have; such
    /// a message is refused by the frame limit long before).
    pub fn push(&mut self, id: &str) {
        let len = u32::try_from(id.len()).expect("an id under 4 GiB");
        self.bytes.extend_from_slice(&len.to_le_bytes());
        self.bytes.extend_from_slice(id.as_bytes());
    }

    /// Lets go of room kept for more ids (a run that ended adds none).
    pub fn shrink_to_fit(&mut self) {
        self.bytes.shrink_to_fit();
    }

    /// Bytes of the list's content (each id and 4 for its length), the
    /// same wherever it is held.
    pub fn len_bytes(&self) -> usize {
        self.bytes.len()
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.bytes.capacity()
    }
}

impl<'a> FromIterator<&'a str> for IdList {
    fn from_iter<I: IntoIterator<Item = &'a str>>(ids: I) -> IdList {
        let mut list = IdList::default();
        for id in ids {
            list.push(id);
        }
        list.shrink_to_fit();
        list
    }
}

impl std::fmt::Debug for IdList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl serde::Serialize for IdList {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_ids_in_order_whatever_they_hold() {
        let ids = [
            "",
            "a",
            "ünïcode-✓",
            "with\nnewline\0and nul",
            &"x".repeat(70_000),
        ];
        let mut list = IdList::default();
        for id in ids {
            assert!(!list.contains(id) || id.is_empty());
            list.push(id);
        }
        assert_eq!(list.iter().collect::<Vec<_>>(), ids);
        assert!(list.contains("a") && !list.contains("b"));
        assert_eq!(ids.iter().copied().collect::<IdList>(), list);
        assert_eq!(serde_json::to_value(&list).unwrap(), serde_json::json!(ids));
    }
}
