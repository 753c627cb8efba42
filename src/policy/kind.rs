//! What a rule kind is, and where compiled rules live.
//!
//! A kind owns everything specific to it: the keys its rules may carry (a
//! `Fields` struct with `deny_unknown_fields`), their validation, the
//! compiled rule type, and optionally settings read from the gateway config
//! and live state carried across a reload. The loader in [`super`] knows
//! only the keys every rule shares and the table [`super::KINDS`], so a new
//! kind is one file exporting a [`Kind`] plus one line in that table; no
//! match, enum or field elsewhere has to learn about it.

use super::Scope;
use super::cel::Condition;
use crate::config::{Config, ConfigError};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

/// A rule kind, as registered in [`super::KINDS`].
pub struct Kind {
    /// The value of `kind` that selects it.
    pub name: &'static str,
    /// Compiles one rule of the policy file and puts the result in the
    /// store; the error (a sentence, no location) is reported with the
    /// file, line and rule name.
    pub compile: fn(Rule, &mut RuleStore) -> Result<(), String>,
    /// Settings the kind reads from the gateway config rather than the
    /// policy file (say, a key of each `[[agents]]` table), called by
    /// [`super::Policy::from_config`] after the file's rules are compiled.
    /// Errors name the config file and key, like the config's own.
    pub from_config: Option<FromConfig>,
    /// Hands live state (counters, not settings) from the rules of the
    /// policy being replaced on reload to their successors: `(new, old)`.
    pub carry_state: Option<fn(&mut RuleStore, &RuleStore)>,
}

impl Kind {
    /// A kind whose rules come from the policy file only and hold no live
    /// state; set the hooks with struct update syntax
    /// (`Kind { carry_state: Some(…), ..Kind::new(…) }`).
    pub const fn new(
        name: &'static str,
        compile: fn(Rule, &mut RuleStore) -> Result<(), String>,
    ) -> Kind {
        Kind {
            name,
            compile,
            from_config: None,
            carry_state: None,
        }
    }
}

/// A kind's [`Kind::from_config`] hook: reads `config`, adds to the store,
/// or says every problem found.
pub type FromConfig = fn(&Config, &mut RuleStore) -> Result<(), Vec<ConfigError>>;

/// One rule of the policy file, its common keys checked: what a kind's
/// [`Kind::compile`] receives.
pub struct Rule {
    pub name: String,
    /// The rule's globs; its condition is in `when`, not here.
    pub scope: Scope,
    /// The compiled `when`. Where it goes is the kind's call: most kinds
    /// restrict, and put it in the scope ([`Rule::scope_with_when`]) so
    /// that a failing condition applies the rule; a kind whose condition
    /// sees more facts (tools: the call's arguments) keeps it.
    pub when: Option<Condition>,
    /// Every key that is not common, for the kind to deserialize.
    pub(super) fields: Map<String, Value>,
}

impl Rule {
    /// The kind's own keys as `F`. Give `F` `#[serde(deny_unknown_fields)]`:
    /// the loader cannot tell a misspelt key from one of the kind's, so
    /// reporting unknown keys is the kind's job. The error names the key.
    pub fn fields<F: DeserializeOwned>(&self) -> Result<F, String> {
        serde_path_to_error::deserialize(Value::Object(self.fields.clone())).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            let inner = inner.to_string();
            // (an unknown field's message names it already)
            if path == "." || inner.contains(&format!("`{path}`")) {
                inner
            } else {
                format!("`{path}`: {inner}")
            }
        })
    }

    /// The scope with the condition in it (see [`Scope::applies_on`]).
    pub fn scope_with_when(&mut self) -> Scope {
        Scope {
            when: self.when.take().map(Arc::new),
            ..std::mem::take(&mut self.scope)
        }
    }
}

/// A vector of one kind's compiled rules, type-erased so the store needs no
/// field per kind (and can still be printed).
trait Rules: Any + Send + Sync + Debug {}

impl<R: Any + Send + Sync + Debug> Rules for Vec<R> {}

/// Compiled rules of every kind, each kind's in file order, found by their
/// type: `store.get::<tools::ToolRule>()`. Owned by no kind, so adding one
/// adds no field to [`super::Policy`].
#[derive(Default)]
pub struct RuleStore(HashMap<TypeId, Box<dyn Rules>>);

impl RuleStore {
    /// The rules of type `R`, in the order they were pushed (empty if none).
    pub fn get<R: Any + Send + Sync + Debug>(&self) -> &[R] {
        self.0
            .get(&TypeId::of::<R>())
            .and_then(|v| (v.as_ref() as &dyn Any).downcast_ref::<Vec<R>>())
            .map_or(&[], Vec::as_slice)
    }

    /// The rules of type `R`, mutable (for state carried over on reload).
    pub fn get_mut<R: Any + Send + Sync + Debug>(&mut self) -> &mut [R] {
        match self.0.get_mut(&TypeId::of::<R>()) {
            Some(v) => (v.as_mut() as &mut dyn Any)
                .downcast_mut::<Vec<R>>()
                .map_or(&mut [], Vec::as_mut_slice),
            None => &mut [],
        }
    }

    /// Appends a compiled rule.
    pub fn push<R: Any + Send + Sync + Debug>(&mut self, rule: R) {
        let rules = self
            .0
            .entry(TypeId::of::<R>())
            .or_insert_with(|| Box::new(Vec::<R>::new()));
        if let Some(rules) = (rules.as_mut() as &mut dyn Any).downcast_mut::<Vec<R>>() {
            rules.push(rule);
        }
    }
}

impl Debug for RuleStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.values()).finish()
    }
}

/// `a, b or c`, for messages listing the registered kinds.
pub(super) fn names(kinds: &[Kind]) -> String {
    let names: Vec<&str> = kinds.iter().map(|k| k.name).collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        Some((last, _)) => (*last).to_owned(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_keeps_each_type_apart_and_in_order() {
        let mut store = RuleStore::default();
        assert!(store.get::<u32>().is_empty());
        store.push(1u32);
        store.push("a");
        store.push(2u32);
        assert_eq!(store.get::<u32>(), &[1, 2]);
        assert_eq!(store.get::<&str>(), &["a"]);
        store.get_mut::<u32>()[0] = 3;
        assert_eq!(store.get::<u32>(), &[3, 2]);
        assert!(store.get_mut::<u64>().is_empty());
    }

    #[test]
    fn kind_names_read_as_a_list() {
        let kind = |name| Kind::new(name, |_, _| Ok(()));
        assert_eq!(names(&[kind("a")]), "a");
        assert_eq!(names(&[kind("a"), kind("b"), kind("c")]), "a, b or c");
    }
}
