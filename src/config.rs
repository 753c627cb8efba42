//! Configuration: one TOML (or YAML) file plus `AGUI_GATEWAY__…` overrides.
//!
//! Everything is checked at start-up, and each error names the file and the
//! key, because an operator reading a failed deploy's log should not have to
//! guess which line to fix. `agui-gateway check-config` runs the same checks.
//!
//! This module is data only: the settings, their defaults, `${ENV}` expansion
//! and checks of its own fields. Each section owns its keys, their defaults
//! and their checks in a file of its own (`server`, `store`, `threads`,
//! `auth`, `agents`, `policy`, …); this file holds the whole, its loading
//! and the helpers the sections share. It imports none of the modules that act on
//! it, so it sits below all of them in the import graph; they read it
//! instead (the policy module loads the file `policy.path` names, auth applies
//! `[[grants]]`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub mod agents;
pub mod auth;
pub mod byte_size;
pub mod demo;
pub mod inspector;
pub mod policy;
pub mod server;
pub mod store;
pub mod telemetry;
pub mod threads;

pub use agents::*;
pub use auth::*;
pub use demo::*;
pub use inspector::*;
pub use policy::*;
pub use server::*;
pub use store::*;
pub use telemetry::*;
pub use threads::*;

/// The file `serve` reads when no `--config` is given (when it exists).
pub const DEFAULT_PATH: &str = "config/gateway.toml";

/// `config/gateway.toml`, compiled in: with no config file at hand the binary
/// still runs (demo agent, development secret with its warning, a writable
/// data directory from [`default_data_dir`]), so a bare binary is a working
/// embedded gateway.
pub const EMBEDDED_CONFIG: &str = include_str!("../config/gateway.toml");

/// The agent `url` that points at the built-in demo agent rather than an
/// HTTP endpoint; defined here because it is a value an operator writes.
pub const DEMO_URL: &str = "demo:";

/// Where the embedded configuration keeps its journal: systemd's
/// `$STATE_DIRECTORY`, else `$XDG_STATE_HOME/agui-gateway`, else
/// `~/.local/state/agui-gateway`, else `./agui-gateway-data`.
pub fn default_data_dir() -> PathBuf {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if let Some(dir) = env("STATE_DIRECTORY") {
        // systemd may list several, separated by ':'; the first is ours.
        let first = dir
            .to_string_lossy()
            .split(':')
            .next()
            .unwrap_or("")
            .to_owned();
        return PathBuf::from(first);
    }
    if let Some(dir) = env("XDG_STATE_HOME") {
        return dir.join("agui-gateway");
    }
    if let Some(home) = env("HOME") {
        return home.join(".local/state/agui-gateway");
    }
    PathBuf::from("agui-gateway-data")
}

/// The development secret shipped in `config/gateway.toml`; the gateway warns
/// loudly at start-up while it is in use.
pub const DEV_SECRET: &str = "agui-gateway-development-secret-change-me";

/// The whole configuration: one TOML or YAML file. Any key can be
/// overridden from the environment as `AGUI_GATEWAY__SECTION__KEY`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "agui-gateway configuration")]
pub struct Config {
    #[serde(default)]
    pub server: ServerConfig,
    pub auth: AuthConfig,
    #[serde(default)]
    pub demo: DemoConfig,
    #[serde(default)]
    pub inspector: InspectorConfig,
    #[serde(default)]
    pub agents: Vec<AgentConfig>,
    #[serde(default)]
    pub store: StoreConfig,
    #[serde(default)]
    pub threads: ThreadsConfig,
    #[serde(default)]
    pub ws: WsConfig,
    #[serde(default)]
    pub cors: CorsConfig,
    /// Role-wide thread permissions.
    #[serde(default)]
    pub grants: Vec<RoleGrant>,
    #[serde(default)]
    pub meta: MetaConfig,
    #[serde(default)]
    pub policy: PolicyConfig,
    #[serde(default)]
    pub tracing: TracingConfig,
    /// Where the file was read from (set by [`Config::load`]); empty for
    /// the embedded configuration.
    #[serde(skip)]
    pub source: PathBuf,
    /// True when this is the compiled-in [`EMBEDDED_CONFIG`] (no file to
    /// watch; with no `policy.path` the policy module uses its compiled-in
    /// default policy).
    #[serde(skip)]
    pub embedded: bool,
}

/// A configuration problem, naming file and key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {key}: {message}")]
pub struct ConfigError {
    pub file: String,
    pub key: String,
    pub message: String,
}

impl Config {
    /// Reads `path` (TOML or YAML by extension), applies `AGUI_GATEWAY__…`
    /// environment overrides, and validates. All problems are returned, not
    /// just the first.
    pub fn load(path: &Path) -> Result<Config, Vec<ConfigError>> {
        if !path.exists() {
            return Err(vec![ConfigError {
                file: path.display().to_string(),
                key: "-".into(),
                message: "file not found".into(),
            }]);
        }
        let file = config::Config::builder().add_source(config::File::from(path));
        Self::build(file, path, false)
    }

    /// The compiled-in default ([`EMBEDDED_CONFIG`]) with its journal in
    /// [`default_data_dir`]; environment overrides apply as for a file.
    pub fn embedded() -> Result<Config, Vec<ConfigError>> {
        let db = default_data_dir().join("agui-gateway.db");
        let store = format!(
            "[store]\npath = {}\n[policy]\npath = \"\"\n",
            toml::Value::from(db.display().to_string())
        );
        let sources = config::Config::builder()
            .add_source(config::File::from_str(
                EMBEDDED_CONFIG,
                config::FileFormat::Toml,
            ))
            .add_source(config::File::from_str(&store, config::FileFormat::Toml));
        Self::build(sources, Path::new(""), true)
    }

    /// What the configuration was read from, for messages.
    pub fn origin(&self) -> String {
        if self.embedded {
            "<embedded config/gateway.toml>".into()
        } else {
            self.source.display().to_string()
        }
    }

    /// Adds the environment overrides to `sources`, deserializes and validates.
    fn build(
        sources: config::builder::ConfigBuilder<config::builder::DefaultState>,
        path: &Path,
        embedded: bool,
    ) -> Result<Config, Vec<ConfigError>> {
        let file = if embedded {
            "<embedded config/gateway.toml>".to_owned()
        } else {
            path.display().to_string()
        };
        let err = |key: &str, message: String| ConfigError {
            file: file.clone(),
            key: key.into(),
            message,
        };
        let built = sources
            .add_source(
                config::Environment::with_prefix("AGUI_GATEWAY")
                    .prefix_separator("__")
                    .separator("__")
                    .try_parsing(true),
            )
            .build()
            .map_err(|e| vec![err("-", e.to_string())])?;
        let mut cfg: Config = serde_path_to_error::deserialize(built).map_err(|e| {
            let key = e.path().to_string();
            vec![err(
                if key == "." { "-" } else { &key },
                e.into_inner().to_string(),
            )]
        })?;
        cfg.source = path.to_path_buf();
        cfg.embedded = embedded;
        if embedded
            && cfg
                .policy
                .path
                .as_ref()
                .is_some_and(|p| p.as_os_str().is_empty())
        {
            cfg.policy.path = None;
        }
        cfg.resolve_paths();
        let problems = cfg.validate();
        if problems.is_empty() {
            Ok(cfg)
        } else {
            Err(problems
                .into_iter()
                .map(|(key, message)| err(&key, message))
                .collect())
        }
    }

    /// Makes key-file paths relative to the config file's folder.
    fn resolve_paths(&mut self) {
        let base = self
            .source
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        for p in [&mut self.auth.public_key_pem, &mut self.auth.jwks_file]
            .into_iter()
            .flatten()
            .chain([&mut self.store.path])
            .chain(
                self.store
                    .tls
                    .iter_mut()
                    .flat_map(|t| [&mut t.ca, &mut t.cert, &mut t.key])
                    .flatten(),
            )
            .chain(self.policy.path.iter_mut())
            .chain(
                self.server
                    .tls
                    .iter_mut()
                    .flat_map(|t| [&mut t.cert, &mut t.key]),
            )
        {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
    }

    /// Every problem as (key, message). The policy file's contents are the
    /// policy module's to check (when it loads them), not this one's.
    pub fn validate(&self) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        let mut bad = |key: String, message: String| problems.push((key, message));
        // Each section checks its own keys (its file says what they mean).
        self.server.check(&mut bad);
        self.cors.check(&mut bad);
        self.demo.check(&mut bad);
        self.tracing.check(&mut bad);
        self.store.check(&mut bad);
        self.meta.check(&mut bad);
        self.threads.check(&mut bad);
        auth::check_grants(&self.grants, &mut bad);
        self.auth.check(&mut bad);
        self.check_agents(&mut bad);
        problems
    }
}

/// Durations, read the same way everywhere: config keys, their
/// `AGUI_GATEWAY__…` overrides and `agui-gateway token --ttl`. Either
/// humantime text (`250ms`, `30s`, `10m`, `1h`, `1h 30m`, `2days`) or a whole
/// number of seconds (`3600`).
pub mod duration {
    use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
    use serde::{Deserializer, Serializer, de};
    use std::borrow::Cow;
    use std::time::Duration;

    /// The pattern of a duration written as text (a bare number is seconds).
    pub const PATTERN: &str = r"^\s*[0-9]+\s*([a-zA-Zµ]+\s*([0-9]+\s*[a-zA-Zµ]+\s*)*)?$";

    /// Parses `text`: humantime, or a whole number of seconds.
    pub fn parse(text: &str) -> Result<Duration, String> {
        let t = text.trim();
        if let Ok(secs) = t.parse::<u64>() {
            return Ok(Duration::from_secs(secs));
        }
        humantime::parse_duration(t).map_err(|e| {
            format!(
                "'{text}' is not a duration ({e}): write e.g. 250ms, 30s, 10m, 1h, or whole seconds"
            )
        })
    }

    /// The shortest exact text for `d` (`250ms`, `90s`, `10m`, `24h`).
    pub fn format(d: Duration) -> String {
        let secs = d.as_secs();
        if !d.subsec_nanos().is_multiple_of(1_000_000) {
            humantime::format_duration(d).to_string()
        } else if d.subsec_millis() != 0 {
            format!("{}ms", d.as_millis())
        } else if secs == 0 {
            "0s".into()
        } else if secs.is_multiple_of(3600) {
            format!("{}h", secs / 3600)
        } else if secs.is_multiple_of(60) {
            format!("{}m", secs / 60)
        } else {
            format!("{secs}s")
        }
    }

    /// For `#[serde(with = "duration")]`.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format(*d))
    }

    /// For `#[serde(with = "duration")]`: text or whole seconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        struct Visitor;
        impl de::Visitor<'_> for Visitor {
            type Value = Duration;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a duration such as \"250ms\", \"30s\", \"1h\", or whole seconds")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
                parse(v).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
                Ok(Duration::from_secs(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
                u64::try_from(v)
                    .map(Duration::from_secs)
                    .map_err(|_| E::custom(format!("{v} is negative")))
            }
        }
        d.deserialize_any(Visitor)
    }

    /// The schema of a duration field (`#[schemars(with = "duration::Text")]`).
    pub struct Text;

    impl JsonSchema for Text {
        fn schema_name() -> Cow<'static, str> {
            "Duration".into()
        }
        fn json_schema(_: &mut SchemaGenerator) -> Schema {
            json_schema!({
                "description": "A duration: \"250ms\", \"30s\", \"10m\", \"1h\", \"1h 30m\", \"2days\", or a whole number of seconds.",
                "type": ["string", "integer"],
                "pattern": PATTERN,
                "minimum": 0
            })
        }
    }
}

/// Reports (through `bad`) why `raw` is not an http(s) URL that every HTTP
/// client reads with the same host ([`crate::protocol::url_host`]): the
/// gateway checks it with one parser, and the exporter or client library
/// that fetches it may use another.
fn check_http_url(raw: &str, bad: &mut impl FnMut(String)) {
    match crate::protocol::url_host::parse(raw) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => {}
        Ok(_) => bad(format!("'{raw}' is not an http(s) URL")),
        Err(e) => bad(format!("'{}' {e}", raw.escape_default())),
    }
}

/// The JSON Schema of the configuration file (draft 2020-12), generated
/// from these types: `agui-gateway config-schema` prints it, and
/// `config/schema.json` is a copy a test keeps current.
pub fn json_schema() -> serde_json::Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(Config)).expect("schema is JSON");
    // A section's default is the sum of its keys' defaults, each shown on
    // its key; repeating the whole object on the section is noise.
    fn drop_object_defaults(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(map) => {
                if map.get("default").is_some_and(|d| d.is_object())
                    && !map
                        .get("additionalProperties")
                        .is_some_and(|a| a.is_object())
                {
                    map.remove("default");
                }
                map.values_mut().for_each(drop_object_defaults);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(drop_object_defaults),
            _ => {}
        }
    }
    drop_object_defaults(&mut schema);
    schema
}

/// `json_schema()` as written to `config/schema.json`.
pub fn json_schema_text() -> String {
    let mut text = serde_json::to_string_pretty(&json_schema()).expect("schema is JSON");
    text.push('\n');
    text
}

/// Replaces `${NAME}` with the environment variable's value; `Err(NAME)` when unset.
pub fn expand_env(value: &str) -> Result<String, String> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return Ok(out);
        };
        let name = &after[..end];
        out.push_str(&std::env::var(name).map_err(|_| name.to_owned())?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &tempfile::TempDir, text: &str) -> PathBuf {
        let p = dir.path().join("g.toml");
        std::fs::write(&p, text).unwrap();
        p
    }

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn minimal_config_gets_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(&dir, &format!("[auth]\nhs_secret = \"{SECRET}\"\n"));
        let c = Config::load(&p).unwrap();
        assert_eq!(c.server.listen, "127.0.0.1:8080");
        assert_eq!(c.auth.algorithms, ["HS256"]);
        assert!(c.agents.is_empty());
    }

    #[test]
    fn errors_name_file_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            &dir,
            "[auth]\nhs_secret = \"short\"\nalgorithms=[\"HS256\",\"none\"]\n\
                 [[agents]]\nid=\"a\"\nurl=\"ftp://x\"\n[[agents]]\nid=\"a\"\nurl=\"http://x\"\n\
                 headers={Authorization=\"Bearer ${AGUI_TEST_UNSET_VAR}\"}\n",
        );
        let errs = Config::load(&p).unwrap_err();
        let text: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        let has = |s: &str| text.iter().any(|t| t.contains(s));
        assert!(has("auth.hs_secret: must be at least 32 bytes"), "{text:?}");
        assert!(has("auth.algorithms[1]: 'none'"), "{text:?}");
        assert!(has("agents[0].url"), "{text:?}");
        assert!(has("agents[1].id: duplicate"), "{text:?}");
        assert!(
            has(
                "agents[1].headers.Authorization: references unset environment variable AGUI_TEST_UNSET_VAR"
            ),
            "{text:?}"
        );
        assert!(text.iter().all(|t| t.starts_with(&p.display().to_string())));
    }

    #[test]
    fn backend_pools_are_checked_key_by_key() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            &dir,
            &format!(
                "[auth]\nhs_secret = \"{SECRET}\"\n\
                 [[agents]]\nid=\"both\"\nurl=\"http://a\"\nbackends=[{{url=\"http://b\"}}]\n\
                 [[agents]]\nid=\"none\"\n\
                 [[agents]]\nid=\"bad\"\nbackends=[{{url=\"http://b\", weight=0, max_in_flight=0}}, \
                 {{url=\"http://b\"}}, {{url=\"ftp://c\", headers={{\"X k\"=\"v\"}}}}]\n\
                 [agents.pool]\nattempts=0\neject_base=\"10s\"\neject_max=\"1s\"\n"
            ),
        );
        let errs = Config::load(&p).unwrap_err();
        let keys: Vec<String> = errs
            .iter()
            .map(|e| format!("{}: {}", e.key, e.message))
            .collect();
        for want in [
            "agents[0].backends: set either url (one backend) or backends, not both",
            "agents[1].url: missing: set url (one backend) or backends",
            "agents[2].backends[0].weight: must be at least 1",
            "agents[2].backends[0].max_in_flight: must be at least 1",
            "agents[2].backends[1].url: duplicate backend url 'http://b'",
            "agents[2].backends[2].url: 'ftp://c' is not an http(s) URL",
            "agents[2].backends[2].headers.X k: not a valid header name",
            "agents[2].pool.attempts: must be 1 to 10",
            "agents[2].pool.eject_max: must not be less than eject_base",
        ] {
            assert!(
                keys.iter().any(|k| k.starts_with(want)),
                "{want}: {keys:#?}"
            );
        }
        // `url` alone is one backend of weight 1; affinity follows `branching.mode`.
        let p = write(
            &dir,
            &format!(
                "[auth]\nhs_secret = \"{SECRET}\"\n[[agents]]\nid=\"a\"\nurl=\"http://a\"\n\
                 [agents.branching]\nmode=\"same-thread\"\n"
            ),
        );
        let c = Config::load(&p).unwrap();
        assert_eq!(c.agents[0].backend_list()[0].url, "http://a");
        assert!(c.agents[0].affinity());
    }

    #[test]
    fn unknown_and_mistyped_keys_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            &dir,
            &format!("[auth]\nhs_secret = \"{SECRET}\"\n[server]\nlisen = \"x\"\n"),
        );
        let e = &Config::load(&p).unwrap_err()[0];
        assert_eq!(e.key, "server.lisen", "{e}");
        let p = write(
            &dir,
            &format!("[auth]\nhs_secret = \"{SECRET}\"\n[server]\nmax_body_bytes = \"lots\"\n"),
        );
        let e = &Config::load(&p).unwrap_err()[0];
        assert_eq!(e.key, "server.max_body_bytes", "{e}");
    }

    #[test]
    fn expand_env_replaces_and_reports() {
        // SAFETY: no other test reads or writes this variable.
        unsafe { std::env::set_var("AGUI_TEST_SET_VAR", "v") };
        assert_eq!(expand_env("a ${AGUI_TEST_SET_VAR} b").unwrap(), "a v b");
        assert_eq!(expand_env("plain").unwrap(), "plain");
        assert_eq!(expand_env("${AGUI_NOPE_X}").unwrap_err(), "AGUI_NOPE_X");
    }

    /// Every key of the schema as a path (`server.listen`,
    /// `agents[].timeouts.connect`) with its schema (property level).
    fn schema_keys(schema: &serde_json::Value) -> Vec<(String, serde_json::Value)> {
        fn resolve<'a>(
            root: &'a serde_json::Value,
            s: &'a serde_json::Value,
        ) -> &'a serde_json::Value {
            if let Some(r) = s["$ref"].as_str() {
                return &root["$defs"][r.trim_start_matches("#/$defs/")];
            }
            for alt in ["anyOf", "oneOf"] {
                if let Some(r) = s[alt]
                    .as_array()
                    .and_then(|a| a.iter().find(|x| x.get("$ref").is_some()))
                {
                    return resolve(root, r);
                }
            }
            s
        }
        fn walk(
            root: &serde_json::Value,
            path: &str,
            s: &serde_json::Value,
            out: &mut Vec<(String, serde_json::Value)>,
        ) {
            let r = resolve(root, s);
            if let Some(props) = r["properties"].as_object() {
                for (k, v) in props {
                    let sub = if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    };
                    walk(root, &sub, v, out);
                }
            } else if r["items"].is_object() && resolve(root, &r["items"])["properties"].is_object()
            {
                walk(root, &format!("{path}[]"), &r["items"], out);
            } else {
                out.push((path.to_owned(), s.clone()));
            }
        }
        let mut out = Vec::new();
        walk(schema, "", schema, &mut out);
        out
    }

    fn is_duration(key_schema: &serde_json::Value) -> bool {
        key_schema["$ref"] == "#/$defs/Duration"
    }

    #[test]
    fn schema_file_is_current() {
        let committed = include_str!("../config/schema.json");
        assert!(
            committed == json_schema_text(),
            "config/schema.json is not what the config types generate; regenerate it with\n  \
             cargo run -- config-schema > config/schema.json\n(and document any new key in docs/configuration.md)"
        );
    }

    #[test]
    fn every_key_has_a_description() {
        let schema = json_schema();
        let keys = schema_keys(&schema);
        assert!(keys.len() > 60, "{}", keys.len());
        for (key, s) in &keys {
            let own = s["description"].as_str().unwrap_or("");
            assert!(!own.trim().is_empty(), "{key}: no doc comment");
        }
    }

    /// docs/configuration.md has a row `| `key` | default | meaning |` for
    /// every key of the schema, whose default (its first `code`, or none)
    /// is the schema's.
    #[test]
    fn every_key_is_documented_with_its_default() {
        let docs = include_str!("../docs/configuration.md");
        let rows: BTreeMap<&str, &str> = docs
            .lines()
            .filter_map(|l| {
                let mut cells = l.strip_prefix("| `")?.splitn(3, '|');
                let key = cells.next()?.trim().strip_suffix('`')?;
                Some((key, cells.next()?.trim()))
            })
            .collect();
        let schema = json_schema();
        let keys = schema_keys(&schema);
        let mut problems = Vec::new();
        for (key, s) in &keys {
            let Some(cell) = rows.get(key.as_str()) else {
                problems.push(format!("{key}: no row in docs/configuration.md"));
                continue;
            };
            let documented = cell
                .strip_prefix('`')
                .and_then(|c| c.split_once('`'))
                .map(|(d, _)| d);
            let expected = match &s["default"] {
                serde_json::Value::Null => None,
                serde_json::Value::String(d) if d.is_empty() => Some("\"\"".into()),
                serde_json::Value::String(d) => Some(d.clone()),
                other => Some(other.to_string()),
            };
            let same = match (&expected, documented) {
                (None, None) => true,
                (Some(e), Some(d)) if is_duration(s) => {
                    duration::parse(e).ok() == duration::parse(d).ok()
                }
                (Some(e), Some(d)) => e == d,
                _ => false,
            };
            if !same {
                problems.push(format!(
                    "{key}: docs/configuration.md says {documented:?}, the schema {expected:?}"
                ));
            }
        }
        for key in rows.keys() {
            if !keys.iter().any(|(k, _)| k == key) {
                problems.push(format!("{key}: documented but not a key"));
            }
        }
        assert!(problems.is_empty(), "{problems:#?}");
    }

    /// Every key the shipped files set is a key of the schema, and every
    /// duration in them matches the schema's pattern.
    #[test]
    fn shipped_files_use_schema_keys() {
        fn flatten(path: &str, v: &toml::Value, out: &mut Vec<(String, toml::Value)>) {
            match v {
                toml::Value::Table(t) => {
                    for (k, v) in t {
                        let sub = if path.is_empty() {
                            k.clone()
                        } else {
                            format!("{path}.{k}")
                        };
                        flatten(&sub, v, out);
                    }
                }
                toml::Value::Array(items)
                    if items.iter().all(|i| i.is_table()) && !items.is_empty() =>
                {
                    for i in items {
                        flatten(&format!("{path}[]"), i, out);
                    }
                }
                _ => out.push((path.to_owned(), v.clone())),
            }
        }
        let schema = json_schema();
        let keys: BTreeMap<String, serde_json::Value> = schema_keys(&schema).into_iter().collect();
        let top = schema["properties"].as_object().unwrap();
        let pattern = regex::Regex::new(duration::PATTERN).unwrap();
        for f in ["config/gateway.toml", "deploy/cluster.toml"] {
            let text =
                std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(f)).unwrap();
            let file: toml::Value = toml::from_str(&text).unwrap();
            for k in file.as_table().unwrap().keys() {
                assert!(top.contains_key(k), "{f}: [{k}] is not in the schema");
            }
            let mut set = Vec::new();
            flatten("", &file, &mut set);
            for (key, value) in set {
                // Keys under a map (`agents[].headers.Authorization`) are the map's.
                let known = keys.get(&key).or_else(|| {
                    keys.iter()
                        .find(|(k, s)| {
                            s["additionalProperties"].is_object()
                                && key.starts_with(&format!("{k}."))
                        })
                        .map(|(_, s)| s)
                });
                let s = known.unwrap_or_else(|| panic!("{f}: {key} is not in the schema"));
                if is_duration(s)
                    && let toml::Value::String(d) = &value
                {
                    assert!(
                        pattern.is_match(d),
                        "{f}: {key} = {d:?} does not match the pattern"
                    );
                    duration::parse(d).unwrap();
                }
            }
        }
    }

    #[test]
    fn durations_read_the_same_everywhere() {
        let p = |s: &str| duration::parse(s).unwrap();
        assert_eq!(p("1h"), Duration::from_secs(3600));
        assert_eq!(p("90"), Duration::from_secs(90));
        assert_eq!(p(" 1h 30m "), Duration::from_secs(5400));
        assert_eq!(p("250ms"), Duration::from_millis(250));
        assert!(
            duration::parse("1x")
                .unwrap_err()
                .contains("'1x' is not a duration")
        );
        assert!(duration::parse("-5").is_err());
        let pattern = regex::Regex::new(duration::PATTERN).unwrap();
        for s in ["1h", "90", "1h 30m", "250ms", "2days", "0s"] {
            assert!(pattern.is_match(s), "{s}");
            assert_eq!(p(&duration::format(p(s))), p(s), "{s}");
        }
        assert!(!pattern.is_match("soon"));
        for (d, text) in [
            (3600, "1h"),
            (86400, "24h"),
            (90, "90s"),
            (600, "10m"),
            (0, "0s"),
        ] {
            assert_eq!(duration::format(Duration::from_secs(d)), text);
        }
        // In the file: text or whole seconds.
        let dir = tempfile::tempdir().unwrap();
        let f = write(
            &dir,
            &format!(
                "[auth]\nhs_secret = \"{SECRET}\"\n[server]\nkeepalive = 7\nshutdown_grace = \"1m\"\n"
            ),
        );
        let c = Config::load(&f).unwrap();
        assert_eq!(c.server.keepalive, Duration::from_secs(7));
        assert_eq!(c.server.shutdown_grace, Duration::from_secs(60));
        let f = write(
            &dir,
            &format!("[auth]\nhs_secret = \"{SECRET}\"\n[server]\nkeepalive = \"soon\"\n"),
        );
        let e = &Config::load(&f).unwrap_err()[0];
        assert_eq!(e.key, "server.keepalive", "{e}");
        assert!(e.message.contains("'soon' is not a duration"), "{e}");
    }

    #[test]
    fn redis_settings_are_checked_with_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let f = write(
            &dir,
            &format!(
                "[auth]\nhs_secret = \"{SECRET}\"\n[store]\nkind = \"redis\"\n\
                 url = \"redis://:${{AGUI_TEST_UNSET_PW}}@localhost\"\nlease_ttl = \"500ms\"\n"
            ),
        );
        let text: Vec<String> = Config::load(&f)
            .unwrap_err()
            .iter()
            .map(|e| e.to_string())
            .collect();
        assert!(
            text.iter()
                .any(|t| t.ends_with("store.lease_ttl: must be at least 1s")),
            "{text:?}"
        );
        assert!(
            text.iter().any(|t| t
                .ends_with("store.url: references unset environment variable AGUI_TEST_UNSET_PW")),
            "{text:?}"
        );
    }

    #[test]
    fn shipped_configs_are_valid() {
        {
            let f = "config/gateway.toml";
            let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(f);
            Config::load(&p).unwrap_or_else(|e| panic!("{f}: {e:?}"));
        }
    }
}
