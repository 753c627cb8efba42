//! A thread's run records, oldest first, each found by its id, and each id
//! held once: by its record.
//!
//! Why not a map from id to record beside a list of ids: that held every
//! run id three times (the list, the map's key, the record), and a thread
//! remembers up to [`super::lineage::RUNS_KEPT`] runs whose ids are usually
//! UUIDs: about 100 bytes a run of the roughly 1,000 a record cost
//! (docs/benchmarks.md, "Eleventh pass"). Here the records sit in order in
//! one deque and a table of places (hashes of their ids pointing at their
//! place) finds them.

use super::lineage::RunRecord;
use hashbrown::HashTable;
use std::collections::VecDeque;
use std::hash::BuildHasher;

/// Runs oldest first (see the module doc).
#[derive(Clone, Default)]
pub struct RunList {
    records: VecDeque<RunRecord>,
    /// Records dropped from the front so far: a place is `dropped + index`,
    /// so dropping the oldest does not move the others' places.
    dropped: u64,
    /// Each record's place, found by the hash of its id. The hash is keyed
    /// per process: run ids come from clients.
    places: HashTable<u64>,
    hasher: foldhash::fast::RandomState,
}

impl RunList {
    fn hash(&self, id: &str) -> u64 {
        self.hasher.hash_one(id)
    }

    fn index(&self, id: &str) -> Option<usize> {
        let (records, dropped) = (&self.records, self.dropped);
        self.places
            .find(self.hash(id), |&place| {
                records[(place - dropped) as usize].run_id == id
            })
            .map(|&place| (place - dropped) as usize)
    }

    pub fn get(&self, id: &str) -> Option<&RunRecord> {
        self.index(id).map(|i| &self.records[i])
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub fn back(&self) -> Option<&RunRecord> {
        self.records.back()
    }

    pub fn back_mut(&mut self) -> Option<&mut RunRecord> {
        self.records.back_mut()
    }

    pub fn iter(&self) -> std::collections::vec_deque::Iter<'_, RunRecord> {
        self.records.iter()
    }

    pub fn iter_mut(&mut self) -> std::collections::vec_deque::IterMut<'_, RunRecord> {
        self.records.iter_mut()
    }

    /// The index of the first record `pred` is false of, `pred` being
    /// true of a prefix (see [`VecDeque::partition_point`]).
    pub fn partition_point(&self, pred: impl FnMut(&RunRecord) -> bool) -> usize {
        self.records.partition_point(pred)
    }

    pub fn at(&self, index: usize) -> Option<&RunRecord> {
        self.records.get(index)
    }

    /// Appends `record` as the newest; a record with the same id leaves
    /// its place first (a run id started again is that run, moved to the
    /// end, as it was).
    pub fn push_back(&mut self, record: RunRecord) {
        if let Some(i) = self.index(&record.run_id) {
            self.records.remove(i);
            self.reindex();
        }
        let place = self.dropped + self.records.len() as u64;
        let hash = self.hash(&record.run_id);
        self.records.push_back(record);
        let (records, dropped, hasher) = (&self.records, self.dropped, &self.hasher);
        self.places.insert_unique(hash, place, |&p| {
            hasher.hash_one(&*records[(p - dropped) as usize].run_id)
        });
    }

    /// Drops the oldest record.
    pub fn pop_front(&mut self) -> Option<RunRecord> {
        let record = self.records.pop_front()?;
        let place = self.dropped;
        if let Ok(entry) = self
            .places
            .find_entry(self.hasher.hash_one(&*record.run_id), |&p| p == place)
        {
            entry.remove();
        }
        self.dropped += 1;
        Some(record)
    }

    /// Places anew after a record left from the middle (rare: a run id
    /// started twice).
    fn reindex(&mut self) {
        self.dropped = 0;
        self.places.clear();
        let (records, hasher) = (&self.records, &self.hasher);
        for (i, r) in records.iter().enumerate() {
            self.places
                .insert_unique(hasher.hash_one(&*r.run_id), i as u64, |&p| {
                    hasher.hash_one(&*records[p as usize].run_id)
                });
        }
    }

    /// Heap bytes of the list itself: the places and the records' slots
    /// (what a record points at, its ids and input, its owner counts).
    pub fn index_bytes(&self) -> usize {
        self.places.capacity() * (std::mem::size_of::<u64>() + 1)
            + self.records.capacity() * std::mem::size_of::<RunRecord>()
    }
}

/// Equal when the records are, in order (the places follow from them).
impl PartialEq for RunList {
    fn eq(&self, o: &Self) -> bool {
        self.records == o.records
    }
}

impl std::fmt::Debug for RunList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.records.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str) -> RunRecord {
        RunRecord::for_tests(id)
    }

    /// Finds every record by id through pushes, a restarted id and
    /// drops from the front, as a map beside a list did.
    #[test]
    fn finds_each_record_by_id_as_records_come_and_go() {
        let mut list = RunList::default();
        let mut model: Vec<String> = Vec::new();
        for step in 0..2_000u32 {
            let id = format!("r{}", (step * 7919) % 700);
            list.push_back(record(&id));
            model.retain(|m| *m != id);
            model.push(id);
            if step % 3 == 0 {
                let gone = list.pop_front().map(|r| r.run_id.clone());
                assert_eq!(gone, Some(model.remove(0)));
            }
            if step % 97 == 0 {
                let ids: Vec<&str> = list.iter().map(|r| r.run_id.as_str()).collect();
                assert_eq!(ids, model);
                for (i, id) in model.iter().enumerate() {
                    assert_eq!(list.get(id).map(|r| &r.run_id), Some(id));
                    assert_eq!(list.at(i).map(|r| &r.run_id), Some(id));
                }
                assert!(list.get("absent").is_none());
            }
        }
        assert_eq!(list.len(), model.len());
    }
}
