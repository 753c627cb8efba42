//! CEL conditions (`when = "…"`), compiled once at load.
//!
//! Evaluation sees `principal` (`sub`, `roles`, `tenant`, `claims`), `agent`,
//! `thread` and, for tool rules, `tool` (`name`, `args`: the parsed
//! arguments). Anything but a boolean `true`/`false` — a runtime error, a
//! missing field, a non-boolean — is an error, and callers fail closed.

use crate::auth::Principal;
use cel_interpreter::{Context, Program, Value as Cel};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// A compiled condition with its source (for logs).
pub struct Condition {
    pub source: String,
    program: Program,
}

impl std::fmt::Debug for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Condition({})", self.source)
    }
}

/// What a condition is evaluated against.
pub struct Facts<'a> {
    pub principal: &'a Principal,
    pub agent: &'a str,
    pub thread: &'a str,
    /// `(name, args)` for tool rules.
    pub tool: Option<(&'a str, &'a Value)>,
    /// The run's input, for conditions that route it (`input.forwardedProps…`).
    pub input: Option<&'a Value>,
}

impl Condition {
    /// Compiles `source`; `Err` carries the parser's message.
    ///
    /// The CEL parser panics on some malformed input (seen: `&& &&`), so the
    /// call is isolated: operator input must never take the gateway down.
    pub fn compile(source: &str) -> Result<Condition, String> {
        let program = std::panic::catch_unwind(|| Program::compile(source))
            .map_err(|_| "the expression does not parse".to_owned())?
            .map_err(|e| e.to_string())?;
        Ok(Condition {
            source: source.to_owned(),
            program,
        })
    }

    /// Evaluates to `Ok(bool)`, or `Err` (callers deny).
    pub fn eval(&self, facts: &Facts<'_>) -> Result<bool, String> {
        let mut ctx = Context::default();
        let p = facts.principal;
        let principal = to_cel(&serde_json::json!({
            "sub": p.subject,
            "roles": p.roles,
            "tenant": p.tenant,
            "claims": p.claims,
        }));
        ctx.add_variable_from_value("principal", principal);
        ctx.add_variable_from_value("agent", Cel::String(Arc::new(facts.agent.to_owned())));
        ctx.add_variable_from_value("thread", Cel::String(Arc::new(facts.thread.to_owned())));
        if let Some(input) = facts.input {
            ctx.add_variable_from_value("input", to_cel(input));
        }
        if let Some((name, args)) = facts.tool {
            ctx.add_variable_from_value(
                "tool",
                to_cel(&serde_json::json!({"name": name, "args": args})),
            );
        }
        // Isolated like compilation: the parser is known to panic, and a
        // panic on a path of the evaluator not probed here (the tests probe
        // overflow, division by zero, bad regexes and conversions: all
        // errors) must fail the rule closed, not take the gateway down.
        let result =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.program.execute(&ctx)))
                .map_err(|_| "the condition failed while evaluating".to_owned())?;
        match result {
            Ok(Cel::Bool(b)) => Ok(b),
            Ok(other) => Err(format!("condition returned {other:?}, not a boolean")),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// JSON → CEL, with integers as `int` (so `args.amount < 10000` compares like with like).
fn to_cel(v: &Value) -> Cel {
    match v {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Cel::Int(i),
            None => Cel::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(a) => Cel::List(Arc::new(a.iter().map(to_cel).collect())),
        Value::Object(m) => {
            let map: HashMap<String, Cel> = m.iter().map(|(k, v)| (k.clone(), to_cel(v))).collect();
            Cel::from(map)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn who(roles: &[&str]) -> Principal {
        Principal::for_test("u", roles)
    }

    fn eval(src: &str, roles: &[&str], args: Value) -> Result<bool, String> {
        let c = Condition::compile(src).unwrap();
        let p = who(roles);
        c.eval(&Facts {
            principal: &p,
            agent: "fin",
            thread: "th",
            tool: Some(("transfer_funds", &args)),
            input: None,
        })
    }

    #[test]
    fn evaluation_failures_are_errors_so_rules_fail_closed() {
        for src in [
            "9223372036854775807 + tool.args.n > 0",
            "-9223372036854775807 - 2 - tool.args.n < 0",
            "9223372036854775807 * 2 > tool.args.n",
            "tool.args.n / 0 == 1",
            "tool.args.n % 0 == 1",
            "tool.name.matches('[')",
            "timestamp('x') == tool.args.n",
            "duration('x') == tool.args.n",
            "size(tool.args.n) == 1",
            "tool.name.startsWith()",
            "tool.args.n.x.y == 1",
            "string(tool) == ''",
            "int('99999999999999999999') == 1",
            "double('x') == 1.0",
            "tool.args.missing.startsWith('a')",
        ] {
            let r = eval(src, &[], json!({"n": 1}));
            assert!(r.is_err(), "{src}: {r:?}");
        }
    }

    #[test]
    fn roles_and_args() {
        let src = r#""treasurer" in principal.roles && tool.args.amount < 10000"#;
        assert_eq!(eval(src, &["treasurer"], json!({"amount": 500})), Ok(true));
        assert_eq!(
            eval(src, &["treasurer"], json!({"amount": 50000})),
            Ok(false)
        );
        assert_eq!(eval(src, &["clerk"], json!({"amount": 5})), Ok(false));
        assert_eq!(
            eval(
                r#"agent == "fin" && tool.name.startsWith("transfer_")"#,
                &[],
                json!({})
            ),
            Ok(true)
        );
    }

    #[test]
    fn errors_and_non_booleans_are_errors() {
        assert!(eval("tool.args.missing < 3", &[], json!({})).is_err());
        assert!(eval("tool.args.amount", &[], json!({"amount": 1})).is_err());
        assert!(Condition::compile("&& nope").is_err());
        assert!(
            Condition::compile("&& &&").is_err(),
            "a parser panic becomes an error"
        );
    }
}
