//! Thread affinity: which backend a thread's runs belong on.
//!
//! Rendezvous (highest-random-weight) hashing: each backend scores the
//! thread's key and the highest score wins. Removing a backend moves only
//! the threads it held (every other thread's winner is unchanged), adding
//! one takes only the threads it now wins, and every node computes the same
//! answer from the same config, with no shared state — which is what keeps
//! a stateful agent's threads on the replica holding their state when
//! several gateway nodes share a Redis. Weights follow the logarithmic
//! method (Schindelhauer & Schomaker), so a backend of weight 2 holds about
//! twice the threads of one of weight 1.
//!
//! The hash is SHA-256 (a fixed algorithm: std's hasher may change between
//! Rust releases, and nodes of different builds must agree).

use sha2::{Digest, Sha256};

/// The affinity key of a thread: its tenant and id (a thread id is only
/// unique within its tenant).
pub fn key(tenant: &str, thread: &str) -> String {
    format!("{tenant}\u{0}{thread}")
}

/// A number in [0, 1) fixed for `key` and `salt`: which threads a canary
/// share takes (a thread below `percent / 100` is in; raising the share
/// keeps the threads it had).
pub fn unit(key: &str, salt: &str) -> f64 {
    let digest = Sha256::new()
        .chain_update(salt.as_bytes())
        .chain_update([0])
        .chain_update(key.as_bytes())
        .finalize();
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64
}

/// The score of `backend` (its stable name: the URL) of `weight` for `key`.
pub fn score(key: &str, backend: &str, weight: u32) -> f64 {
    let mut h = Sha256::new();
    h.update(key.as_bytes());
    h.update([0]);
    h.update(backend.as_bytes());
    let digest = h.finalize();
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    // A uniform number in (0, 1): 53 bits, never 0 (ln 0).
    let unit = ((u64::from_be_bytes(bytes) >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    -f64::from(weight.max(1)) / unit.ln()
}

/// The index of the backend `key` belongs on among `backends` (name,
/// weight), or `None` when there are none.
pub fn owner<'a>(
    key: &str,
    backends: impl IntoIterator<Item = (usize, &'a str, u32)>,
) -> Option<usize> {
    backends
        .into_iter()
        .map(|(i, name, w)| (i, score(key, name, w)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("http://10.0.0.{i}:8000/agent"))
            .collect()
    }

    #[test]
    fn removing_a_backend_moves_only_its_threads_and_weights_hold() {
        let all = names(4);
        let keys: Vec<String> = (0..4000).map(|i| key("acme", &format!("t{i}"))).collect();
        let weights = [1, 1, 2, 1];
        let before: Vec<usize> = keys
            .iter()
            .map(|k| {
                owner(
                    k,
                    all.iter()
                        .enumerate()
                        .map(|(i, n)| (i, n.as_str(), weights[i])),
                )
                .unwrap()
            })
            .collect();
        // Weight 2 holds about twice the share of weight 1 (2/5 vs 1/5).
        let share = before.iter().filter(|&&o| o == 2).count() as f64 / keys.len() as f64;
        assert!((share - 0.4).abs() < 0.04, "weight-2 share {share}");
        // Without backend 1: only its threads move.
        for (k, &was) in keys.iter().zip(&before) {
            let now = owner(
                k,
                all.iter()
                    .enumerate()
                    .filter(|(i, _)| *i != 1)
                    .map(|(i, n)| (i, n.as_str(), weights[i])),
            )
            .unwrap();
            if was != 1 {
                assert_eq!(now, was, "{k} moved though its backend stayed");
            }
        }
    }
}
