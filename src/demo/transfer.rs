//! The transfer the demo agent proposes, and remembers until it is answered.
//!
//! A newcomer who asks for "25 EUR to bob" must see the agent propose 25 to
//! bob, or the approval flow looks broken. So the amount and the recipient
//! are read from the person's message, loosely, as a person would write them
//! (`€1,200.50`, `25 EUR`, `to acct-7.`), with the demo's defaults for
//! whatever the message does not say.
//!
//! The answer comes in a later run, which may carry no history at all (a
//! `curl` with only `resume`: an HTTP run carries exactly the client's
//! messages). So the agent also remembers its open proposals by interrupt id,
//! as a real agent keeps its pending tool calls; a bounded memory, since
//! nothing obliges anyone to answer.

use serde_json::{Number, Value, json};
use std::collections::VecDeque;
use std::sync::Mutex;

/// Proposed when the message names no amount.
pub const DEFAULT_AMOUNT: u64 = 500;
/// Proposed when the message names no recipient.
pub const DEFAULT_TO: &str = "acct-9";

/// Open proposals remembered at most; the oldest is forgotten first (its
/// answer then falls back to the history the run carries, or the defaults).
const REMEMBERED: usize = 1024;

/// Largest amount read from a message; anything bigger is not an amount
/// (a phone number, an order id) and the default is proposed instead.
const MAX_AMOUNT: f64 = 1e12;

/// Longest recipient read from a message.
const MAX_RECIPIENT: usize = 64;

/// Words after "to" that are not whom the money goes to ("I want *to*
/// transfer", "*to* the account acct-7"): skipped.
const NOT_A_RECIPIENT: &[&str] = &[
    "the", "my", "our", "your", "his", "her", "their", "account", "transfer", "send", "pay",
    "move", "wire", "give", "delete", "approve", "make",
];

/// An amount and whom it goes to.
#[derive(Debug, Clone, PartialEq)]
pub struct Transfer {
    pub amount: Number,
    pub to: String,
}

impl Default for Transfer {
    fn default() -> Transfer {
        Transfer {
            amount: DEFAULT_AMOUNT.into(),
            to: DEFAULT_TO.to_owned(),
        }
    }
}

impl Transfer {
    /// The transfer `text` asks for: its first amount and the recipient
    /// after "to", each defaulted when absent or not recognisable.
    pub fn asked_in(text: &str) -> Transfer {
        let words: Vec<&str> = text.split_whitespace().collect();
        let recipient = recipient(&words);
        let amount = words
            .iter()
            .enumerate()
            .filter(|(i, _)| recipient.as_ref().is_none_or(|(at, _)| at != i))
            .find_map(|(_, w)| amount(w));
        let default = Transfer::default();
        Transfer {
            amount: amount.unwrap_or(default.amount),
            to: recipient.map_or(default.to, |(_, to)| to),
        }
    }

    /// A transfer written as `{"amount": …, "to": …}` (the proposal's tool
    /// call arguments), when both are there and sensible.
    pub fn from_json(v: &Value) -> Option<Transfer> {
        let amount = v.get("amount")?.as_number()?.clone();
        let to = v.get("to")?.as_str().filter(|t| valid_recipient(t))?;
        Some(Transfer {
            amount,
            to: to.to_owned(),
        })
    }

    /// `{"amount": …, "to": …}`: the tool call's arguments, the interrupt's
    /// metadata, and the names the answer uses to change either.
    pub fn to_json(&self) -> Value {
        json!({"amount": self.amount, "to": self.to})
    }
}

/// `word` as an amount: digits with an optional decimal part and thousands
/// commas, with currency signs and sentence punctuation around it ignored.
fn amount(word: &str) -> Option<Number> {
    let bare = word
        .trim_start_matches(['(', '"', '\''])
        .trim_end_matches(['.', ',', ';', ':', '!', '?', ')', '"', '\''])
        .trim_matches(['$', '€', '£', '¥']);
    let (whole, fraction) = match bare.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (bare, None),
    };
    let mut groups = whole.split(',');
    let first = groups.next()?;
    let grouped: Vec<&str> = groups.collect();
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let well_formed = digits(first)
        && (grouped.is_empty()
            || (first.len() <= 3 && grouped.iter().all(|g| g.len() == 3 && digits(g))))
        && fraction.is_none_or(digits);
    if !well_formed {
        return None;
    }
    let plain: String = bare.chars().filter(|c| *c != ',').collect();
    let value: f64 = plain.parse().ok()?;
    if !(value > 0.0 && value <= MAX_AMOUNT) {
        return None;
    }
    match fraction {
        None => plain.parse::<u64>().ok().map(Number::from),
        Some(_) => Number::from_f64(value),
    }
}

/// The recipient: the word after the first "to" that follows an amount,
/// else after any "to", skipping words that are not recipients; with its
/// index among `words`.
fn recipient(words: &[&str]) -> Option<(usize, String)> {
    let first_amount = words.iter().position(|w| amount(w).is_some());
    let after_to = |from: usize| {
        words
            .iter()
            .enumerate()
            .skip(from)
            .filter(|(_, w)| w.eq_ignore_ascii_case("to"))
            .find_map(|(i, _)| {
                words
                    .iter()
                    .enumerate()
                    .skip(i + 1)
                    .map(|(j, w)| (j, clean(w)))
                    .find(|(_, w)| !NOT_A_RECIPIENT.contains(&w.to_lowercase().as_str()))
                    .filter(|(_, w)| valid_recipient(w))
            })
    };
    first_amount
        .and_then(|at| after_to(at + 1))
        .or_else(|| after_to(0))
}

/// A word without the sentence's punctuation or quotes around it.
fn clean(word: &str) -> String {
    word.trim_matches(|c: char| {
        matches!(
            c,
            '.' | ',' | ';' | ':' | '!' | '?' | '(' | ')' | '"' | '\''
        )
    })
    .to_owned()
}

/// An account-like name: 1–64 of `A-Z a-z 0-9 . _ @ -`.
fn valid_recipient(to: &str) -> bool {
    (1..=MAX_RECIPIENT).contains(&to.len())
        && to
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'@' | b'-'))
}

/// Proposals waiting for an answer, by interrupt id, oldest first.
#[derive(Default)]
pub struct Pending {
    open: Mutex<VecDeque<(String, Transfer)>>,
}

impl Pending {
    /// Remembers what interrupt `id` proposed.
    pub fn remember(&self, id: &str, transfer: Transfer) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.len() == REMEMBERED {
            open.pop_front();
        }
        open.push_back((id.to_owned(), transfer));
    }

    /// What interrupt `id` proposed, forgotten from now on (it is answered).
    pub fn answered(&self, id: &str) -> Option<Transfer> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let at = open.iter().position(|(i, _)| i == id)?;
        open.remove(at).map(|(_, t)| t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(text: &str) -> (String, String) {
        let t = Transfer::asked_in(text);
        (t.amount.to_string(), t.to)
    }

    #[test]
    fn reads_what_people_write() {
        for (text, amount, to) in [
            ("please transfer 25 EUR to bob", "25", "bob"),
            ("I want to transfer 25 to bob", "25", "bob"),
            ("transfer €1,200.50 to acct-7.", "1200.5", "acct-7"),
            ("send $40 to the account acct-42 please", "40", "acct-42"),
            ("transfer to alice 75", "75", "alice"),
            ("Transfer 12 TO Carol!", "12", "Carol"),
            ("transfer 25 to bob to pay the rent", "25", "bob"),
            ("transfer 30 to 12345", "30", "12345"),
            ("pay (99.99) to \"dave\"", "99.99", "dave"),
        ] {
            assert_eq!(asked(text), (amount.to_owned(), to.to_owned()), "{text}");
        }
    }

    #[test]
    fn defaults_fill_what_the_message_does_not_say() {
        let default = ("500".to_owned(), "acct-9".to_owned());
        for text in [
            "please transfer",
            "transfer it",
            "",
            "transfer 0 to <script>",
            "transfer 1,00 to ",
            "transfer 99999999999999 now",
            "transfer -5",
        ] {
            assert_eq!(asked(text), default, "{text}");
        }
        assert_eq!(asked("transfer 25"), ("25".into(), "acct-9".into()));
        assert_eq!(asked("transfer to bob"), ("500".into(), "bob".into()));
    }

    #[test]
    fn pending_proposals_are_bounded_and_answered_once() {
        let pending = Pending::default();
        for i in 0..=REMEMBERED {
            pending.remember(
                &format!("int-{i}"),
                Transfer::asked_in(&format!("transfer {i}")),
            );
        }
        assert_eq!(pending.answered("int-0"), None, "the oldest was forgotten");
        let last = format!("int-{REMEMBERED}");
        assert_eq!(
            pending.answered(&last).map(|t| t.amount.to_string()),
            Some(REMEMBERED.to_string())
        );
        assert_eq!(pending.answered(&last), None, "an answer is given once");
    }
}
