//! Choosing a backend for a run without affinity.
//!
//! Smooth weighted round robin (nginx's): each pick adds every candidate's
//! weight to its running credit, takes the candidate with the most credit
//! and charges it the candidates' total. Over any stretch of picks each
//! backend gets its weight's share, evenly interleaved, with no randomness
//! to drift from it. `least-in-flight` first narrows the candidates to
//! those with the fewest runs in flight for their weight, so a replica
//! slowed down by long runs gets fewer new ones, and shares ties by weight.

use crate::config::Balance;

/// A backend that may take the run: its index, weight and runs in flight.
#[derive(Debug, Clone, Copy)]
pub struct Candidate {
    pub index: usize,
    pub weight: u32,
    pub in_flight: usize,
}

/// The running credits of smooth weighted round robin, one per backend.
#[derive(Debug, Default)]
pub struct Balancer {
    credit: Vec<i64>,
}

impl Balancer {
    /// Picks one of `candidates` (none: `None`) for `backends` backends.
    pub fn pick(
        &mut self,
        how: Balance,
        backends: usize,
        candidates: &[Candidate],
    ) -> Option<usize> {
        self.credit.resize(backends, 0);
        let least = match how {
            Balance::Weighted => None,
            // Compared as in_flight/weight without division.
            Balance::LeastInFlight => candidates
                .iter()
                .map(|c| (c.in_flight as u64, u64::from(c.weight.max(1))))
                .min_by(|a, b| (a.0 * b.1).cmp(&(b.0 * a.1))),
        };
        let eligible = |c: &&Candidate| match least {
            None => true,
            Some((n, w)) => c.in_flight as u64 * w == n * u64::from(c.weight.max(1)),
        };
        let mut total = 0i64;
        let mut best: Option<usize> = None;
        for c in candidates.iter().filter(eligible) {
            let w = i64::from(c.weight.max(1));
            total += w;
            self.credit[c.index] += w;
            if best.is_none_or(|b| self.credit[c.index] > self.credit[b]) {
                best = Some(c.index);
            }
        }
        let chosen = best?;
        self.credit[chosen] -= total;
        Some(chosen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idle(weights: &[u32]) -> Vec<Candidate> {
        weights
            .iter()
            .enumerate()
            .map(|(index, &weight)| Candidate {
                index,
                weight,
                in_flight: 0,
            })
            .collect()
    }

    #[test]
    fn weights_hold_exactly_over_a_cycle() {
        let mut b = Balancer::default();
        let mut counts = [0; 3];
        for _ in 0..600 {
            counts[b
                .pick(Balance::LeastInFlight, 3, &idle(&[1, 2, 3]))
                .unwrap()] += 1;
        }
        assert_eq!(counts, [100, 200, 300]);
    }

    #[test]
    fn least_in_flight_prefers_the_least_loaded_for_its_weight() {
        let mut b = Balancer::default();
        let mut c = idle(&[1, 2]);
        c[0].in_flight = 1;
        c[1].in_flight = 1; // 1/2 < 1/1
        assert_eq!(b.pick(Balance::LeastInFlight, 2, &c), Some(1));
        c[1].in_flight = 2; // 2/2 == 1/1: a tie, shared by weight
        let picks: Vec<_> = (0..3)
            .map(|_| b.pick(Balance::LeastInFlight, 2, &c).unwrap())
            .collect();
        assert!(picks.contains(&0) && picks.contains(&1), "{picks:?}");
        assert_eq!(b.pick(Balance::LeastInFlight, 2, &[]), None);
    }
}
