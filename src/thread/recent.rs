//! A bounded memory of recent keys, oldest forgotten first.
//!
//! A thread remembers idempotency keys of meta posts and the run ids it has
//! used (a reused run id is a conflict). A thread can live for years, so
//! both are capped: what falls off is what nobody plausibly repeats.

use std::collections::{HashMap, VecDeque};

/// Keys to values, at most `capacity` of them (first in, first forgotten).
#[derive(Debug, Clone)]
pub struct Recent<V> {
    map: HashMap<String, V>,
    order: VecDeque<String>,
    capacity: usize,
}

impl<V> Recent<V> {
    /// An empty memory of at most `capacity` keys.
    pub fn new(capacity: usize) -> Recent<V> {
        Recent {
            map: HashMap::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
        }
    }

    /// The value remembered for `key`.
    pub fn get(&self, key: &str) -> Option<&V> {
        self.map.get(key)
    }

    /// True when `key` is remembered.
    pub fn contains(&self, key: &str) -> bool {
        self.map.contains_key(key)
    }

    /// Remembers `key` (a known key keeps its place and gets `value`),
    /// forgetting the oldest keys past the capacity.
    pub fn insert(&mut self, key: String, value: V) {
        if let Some(v) = self.map.get_mut(&key) {
            *v = value;
            return;
        }
        self.order.push_back(key.clone());
        self.map.insert(key, value);
        while self.order.len() > self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.map.remove(&old);
            }
        }
    }

    /// Forgets `key` (a reservation that did not come true).
    pub fn forget(&mut self, key: &str) {
        if self.map.remove(key).is_some() {
            self.order.retain(|k| k != key);
        }
    }

    /// Remembered keys, oldest first.
    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.order.iter()
    }

    /// How many keys are remembered.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// True when nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_key_is_forgotten_past_the_capacity() {
        let mut r = Recent::new(3);
        for k in ["a", "b", "c"] {
            r.insert(k.to_owned(), k.len());
        }
        r.insert("b".into(), 7); // known: keeps its place
        r.insert("d".into(), 1);
        assert!(!r.contains("a"));
        assert_eq!(r.get("b"), Some(&7));
        assert_eq!(r.keys().cloned().collect::<Vec<_>>(), ["b", "c", "d"]);
        for i in 0..1000 {
            r.insert(format!("k{i}"), i);
        }
        assert_eq!(r.len(), 3, "bounded");
    }
}
