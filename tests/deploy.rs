//! The deploy files start as shipped. `deploy/Dockerfile`,
//! `deploy/agui-gateway.service` and `deploy/k8s/` are read the way their
//! runtimes read them and checked against the configs they carry (ports,
//! paths, probes, stop budgets); then the binary is started the way each
//! would start it: same arguments, environment and file layout, and, where
//! this machine allows a mount namespace, the config's own absolute data
//! path and a non-root uid. Building and running the image itself needs a
//! container engine that can pull base images: opt in with `AGUI_TEST_IMAGE=1`.

mod common;

use common::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

/// After the drain window, how long a node may still spend closing the runs
/// it cancelled (`AppState::drain` gives them 10 s).
const CANCEL_WAIT: Duration = Duration::from_secs(10);

/// The uid systemd's `DynamicUser=` might pick (its range is 61184–65519).
const DYNAMIC_UID: u32 = 61184;

fn deploy(name: &str) -> PathBuf {
    repo().join("deploy").join(name)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_agui-gateway")
}

/// `path` (absolute, as the image or unit names it) inside the install `root`.
fn under(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

// ---------------------------------------------------------------- configs

/// What the deploy files must agree with, read from a gateway config.
struct Settings {
    table: toml::Table,
    port: u16,
    drain: Duration,
    grace: Duration,
}

impl Settings {
    fn parse(text: &str) -> Settings {
        let table: toml::Table = text.parse().expect("config is TOML");
        let defaults = agui_gateway::config::ServerConfig::default();
        let server = |key: &str| {
            table
                .get("server")
                .and_then(|s| s.get(key))
                .and_then(|v| v.as_str())
                .map(str::to_owned)
        };
        let listen = server("listen").unwrap_or(defaults.listen);
        let duration = |key: &str, default: Duration| {
            server(key).map_or(default, |d| humantime::parse_duration(&d).unwrap())
        };
        Settings {
            port: listen.rsplit(':').next().unwrap().parse().unwrap(),
            drain: duration("drain_timeout", defaults.drain_timeout),
            grace: duration("shutdown_grace", defaults.shutdown_grace),
            table,
        }
    }

    fn load(path: &Path) -> Settings {
        Settings::parse(&read(path))
    }

    fn get(&self, section: &str, key: &str) -> Option<&toml::Value> {
        self.table.get(section).and_then(|s| s.get(key))
    }

    fn str(&self, section: &str, key: &str) -> Option<&str> {
        self.get(section, key).and_then(|v| v.as_str())
    }

    /// The longest a SIGTERM may take to end the process: the drain window,
    /// cancelled runs closing, then open streams.
    fn stop_budget(&self) -> Duration {
        self.drain + CANCEL_WAIT + self.grace
    }
}

// ------------------------------------------------------------- Dockerfile

/// `deploy/Dockerfile`, as instructions: continuation lines joined, comments dropped.
struct Dockerfile {
    stages: Vec<String>,
    /// The last stage's instructions (keyword upper-case, arguments).
    runtime: Vec<(String, String)>,
}

impl Dockerfile {
    fn load() -> Dockerfile {
        let mut instructions = Vec::new();
        let mut current = String::new();
        for line in read(&deploy("Dockerfile")).lines() {
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            match t.strip_suffix('\\') {
                Some(part) => {
                    current.push_str(part);
                    current.push(' ');
                }
                None => {
                    current.push_str(t);
                    instructions.push(std::mem::take(&mut current));
                }
            }
        }
        let mut stages = Vec::new();
        let mut runtime = Vec::new();
        for i in instructions {
            let (kw, rest) = i.split_once(' ').unwrap_or((&i, ""));
            let kw = kw.to_ascii_uppercase();
            if kw == "FROM" {
                stages.push(rest.trim().to_owned());
                runtime.clear();
            } else {
                runtime.push((kw, rest.trim().to_owned()));
            }
        }
        Dockerfile { stages, runtime }
    }

    fn all(&self, kw: &str) -> Vec<&str> {
        self.runtime
            .iter()
            .filter(|(k, _)| k == kw)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    fn one(&self, kw: &str) -> &str {
        let all = self.all(kw);
        assert_eq!(all.len(), 1, "one {kw} in the runtime stage: {all:?}");
        all[0]
    }

    fn exec_form(&self, kw: &str) -> Vec<String> {
        serde_json::from_str(self.one(kw)).unwrap_or_else(|e| panic!("{kw} in exec form: {e}"))
    }

    /// `ENV` as the container sees it.
    fn env(&self) -> Vec<(String, String)> {
        self.all("ENV")
            .iter()
            .map(|e| {
                let (k, v) = e.split_once('=').expect("ENV key=value");
                (k.to_owned(), v.trim_matches('"').to_owned())
            })
            .collect()
    }

    fn env_var(&self, key: &str) -> String {
        self.env()
            .into_iter()
            .find(|(k, _)| k == key)
            .unwrap_or_else(|| panic!("ENV {key}"))
            .1
    }

    /// `(source in the repository, path in the image)` of every COPY from the context.
    fn copies(&self) -> Vec<(String, String)> {
        self.all("COPY")
            .iter()
            .filter(|c| !c.starts_with("--from"))
            .map(|c| {
                let parts: Vec<&str> = c.split_whitespace().collect();
                assert_eq!(parts.len(), 2, "COPY src dest: {c}");
                (parts[0].to_owned(), parts[1].to_owned())
            })
            .collect()
    }

    /// The image's (numeric) user.
    fn uid(&self) -> u32 {
        let user = self.one("USER");
        user.split(':')
            .next()
            .unwrap()
            .parse()
            .unwrap_or_else(|_| panic!("USER {user} is not numeric"))
    }

    /// `HEALTHCHECK`'s options and command.
    fn healthcheck(&self) -> (String, Vec<String>) {
        let h = self.one("HEALTHCHECK");
        let (options, cmd) = h.split_once("CMD ").expect("HEALTHCHECK ... CMD [...]");
        (
            options.to_owned(),
            serde_json::from_str(cmd.trim()).expect("HEALTHCHECK CMD in exec form"),
        )
    }

    /// The command line the container runs by default.
    fn argv(&self) -> Vec<String> {
        let mut argv = self.exec_form("ENTRYPOINT");
        argv.extend(self.exec_form("CMD"));
        argv
    }

    /// The image's files laid out under a temporary root as its COPY lines
    /// put them, with its (empty) data volume.
    fn install(&self) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for (src, dest) in self.copies() {
            let to = under(root.path(), &dest);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(repo().join(&src), &to).unwrap_or_else(|e| panic!("{src}: {e}"));
        }
        std::fs::create_dir_all(under(root.path(), self.one("VOLUME"))).unwrap();
        root
    }
}

// ----------------------------------------------------------- systemd unit

/// `deploy/agui-gateway.service`: every `key=value` of its `[Service]` section.
fn unit_service() -> BTreeMap<String, Vec<String>> {
    let mut section = String::new();
    let mut service: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in read(&deploy("agui-gateway.service")).lines() {
        let t = line.trim();
        if t.starts_with('[') {
            section = t.to_owned();
        } else if section == "[Service]"
            && let Some((k, v)) = t.split_once('=')
            && !t.starts_with('#')
        {
            service
                .entry(k.trim().to_owned())
                .or_default()
                .push(v.trim().to_owned());
        }
    }
    service
}

fn unit_one(service: &BTreeMap<String, Vec<String>>, key: &str) -> String {
    match service.get(key).map(Vec::as_slice) {
        Some([v]) => v.clone(),
        other => panic!("one {key}= in the unit: {other:?}"),
    }
}

/// The unit's `Environment=` assignments.
fn unit_env(service: &BTreeMap<String, Vec<String>>) -> Vec<(String, String)> {
    service
        .get("Environment")
        .into_iter()
        .flatten()
        .flat_map(|e| e.split_whitespace())
        .map(|a| {
            let (k, v) = a.split_once('=').expect("Environment=KEY=value");
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

// ------------------------------------------------------------- Kubernetes

fn yaml_to_json(y: &yaml_rust2::Yaml) -> Value {
    use yaml_rust2::Yaml;
    match y {
        Yaml::Real(r) => Value::from(r.parse::<f64>().unwrap()),
        Yaml::Integer(i) => Value::from(*i),
        Yaml::String(s) => Value::from(s.as_str()),
        Yaml::Boolean(b) => Value::from(*b),
        Yaml::Array(a) => a.iter().map(yaml_to_json).collect(),
        Yaml::Hash(h) => Value::Object(
            h.iter()
                .map(|(k, v)| {
                    let key = k.as_str().expect("string keys").to_owned();
                    (key, yaml_to_json(v))
                })
                .collect(),
        ),
        Yaml::Null => Value::Null,
        other => panic!("unexpected YAML node {other:?}"),
    }
}

/// The `${VAR}`s a config's values name.
fn env_refs(v: &toml::Value) -> BTreeSet<String> {
    match v {
        toml::Value::String(s) => s
            .split("${")
            .skip(1)
            .map(|r| r.split('}').next().unwrap().to_owned())
            .collect(),
        toml::Value::Array(a) => a.iter().flat_map(env_refs).collect(),
        toml::Value::Table(t) => t.values().flat_map(env_refs).collect(),
        _ => BTreeSet::new(),
    }
}

/// Every document of every file in `deploy/k8s`, by file name.
fn manifests() -> BTreeMap<String, Vec<Value>> {
    let mut all = BTreeMap::new();
    for entry in std::fs::read_dir(deploy("k8s")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.ends_with(".yaml"), "only YAML in deploy/k8s: {name}");
        let docs = yaml_rust2::YamlLoader::load_from_str(&read(&path))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!docs.is_empty(), "{name} is empty");
        all.insert(name, docs.iter().map(yaml_to_json).collect());
    }
    all
}

/// The one resource of `kind`.
fn resource(all: &BTreeMap<String, Vec<Value>>, kind: &str) -> Value {
    let found: Vec<&Value> = all
        .values()
        .flatten()
        .filter(|d| d["kind"] == kind)
        .collect();
    assert_eq!(found.len(), 1, "one {kind} in deploy/k8s");
    found[0].clone()
}

/// Writes `files` into `dir` the way the kubelet projects a ConfigMap: a
/// fresh timestamped directory, `..data` pointing at it (swapped with a
/// rename, atomically), each key a symlink through `..data`.
fn project_configmap(dir: &Path, files: &BTreeMap<String, String>, generation: u32) {
    std::fs::create_dir_all(dir).unwrap();
    let stamp = format!("..2025_01_01_00_00_{generation:02}.000000000");
    std::fs::create_dir(dir.join(&stamp)).unwrap();
    for (key, text) in files {
        std::fs::write(dir.join(&stamp).join(key), text).unwrap();
    }
    std::os::unix::fs::symlink(&stamp, dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    for key in files.keys() {
        let link = dir.join(key);
        if link.symlink_metadata().is_err() {
            std::os::unix::fs::symlink(Path::new("..data").join(key), link).unwrap();
        }
    }
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.starts_with("..20") && name != stamp {
            std::fs::remove_dir_all(dir.join(name)).unwrap();
        }
    }
}

// ------------------------------------------------------- starting the binary

/// How this machine can stand in for the container runtime or systemd.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Isolation {
    /// Root: a private mount namespace puts the install root's `/var/lib`
    /// at `/var/lib`, and the gateway runs as the image's (or a dynamic) uid.
    MountAndUser,
    /// Unprivileged: the same mount in a user namespace, as mapped root.
    Mount,
    /// No namespaces: the store path is pointed into the install root.
    Plain,
}

fn isolation() -> Isolation {
    static PROBED: OnceLock<Isolation> = OnceLock::new();
    *PROBED.get_or_init(|| {
        let works = |program: &str, args: &[&str]| {
            std::process::Command::new(program)
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let is_root = std::process::Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
        // The unprivileged uid must be able to reach the binary too.
        let uid = DYNAMIC_UID.to_string();
        let as_user = [
            "--mount",
            "setpriv",
            "--reuid",
            &uid,
            "--regid",
            &uid,
            "--clear-groups",
            "test",
            "-x",
            binary(),
        ];
        let found = if is_root && works("unshare", &as_user) {
            Isolation::MountAndUser
        } else if works("unshare", &["--map-root-user", "--mount", "true"]) {
            Isolation::Mount
        } else {
            Isolation::Plain
        };
        if found != Isolation::MountAndUser {
            eprintln!(
                "note: {found:?}: {}",
                match found {
                    Isolation::Mount =>
                        "cannot switch to the image's uid here: the gateway runs as mapped root",
                    _ => "no mount namespace here: store.path is overridden into the install root",
                }
            );
        }
        found
    })
}

/// Starts `argv` (its first word the installed binary's path) with `env`
/// as a runtime would inside the install `root`: the config's own absolute
/// store path lands in `root`'s `/var/lib`, as user `uid` where possible.
/// Only the listen address is overridden (a free loopback port).
async fn start_installed(
    root: &Path,
    argv: &[String],
    env: &[(String, String)],
    uid: u32,
    store_path: &str,
) -> (Proc, String) {
    let how = isolation();
    let mut cmd = match how {
        Isolation::Plain => tokio::process::Command::new(binary()),
        _ => {
            let mut c = tokio::process::Command::new("unshare");
            let drop_to = format!("setpriv --reuid {uid} --regid {uid} --clear-groups ");
            let exec = if how == Isolation::MountAndUser {
                drop_to.as_str()
            } else {
                c.arg("--map-root-user");
                ""
            };
            c.args(["--mount", "sh", "-c"])
                .arg(format!("mount --bind \"$0\" /var/lib && exec {exec}\"$@\""))
                .arg(under(root, "/var/lib"))
                .arg(binary());
            c
        }
    };
    assert_eq!(argv[0], "/usr/local/bin/agui-gateway", "{argv:?}");
    cmd.args(&argv[1..]).env_clear().env(
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    );
    for (k, v) in env {
        let inside = v.starts_with("/etc/") || (how == Isolation::Plain && v.starts_with("/var/"));
        if inside {
            cmd.env(k, under(root, v));
        } else {
            cmd.env(k, v);
        }
    }
    if how == Isolation::Plain {
        cmd.env("AGUI_GATEWAY__STORE__PATH", under(root, store_path));
    }
    cmd.env("AGUI_GATEWAY__SERVER__LISTEN", "127.0.0.1:0");
    let mut proc = Proc::spawn(cmd);
    let line = proc.expect_line("agui-gateway listening on ").await;
    let base = line["agui-gateway listening on ".len()..].trim().to_owned();
    (proc, base)
}

/// Makes the install root usable by `uid`, as the image (`install -o`) and
/// systemd (`StateDirectory=`) do for theirs.
fn hand_over(root: &Path, data_dir: &str, uid: u32) {
    if isolation() != Isolation::MountAndUser {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(under(root, data_dir), Some(uid), Some(uid)).unwrap();
}

async fn get_status(url: &str) -> u16 {
    http().get(url).send().await.unwrap().status().as_u16()
}

fn signal(pid: u32, signal: &str) {
    let sent = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(sent.success(), "kill -{signal} {pid}");
}

/// Sends SIGTERM and expects a clean exit within `budget`.
async fn stop(proc: &mut Proc, budget: Duration) {
    signal(proc.child.id().unwrap(), "TERM");
    let status = tokio::time::timeout(budget, proc.child.wait())
        .await
        .unwrap_or_else(|_| panic!("still running {budget:?} after SIGTERM"))
        .unwrap();
    assert!(status.success(), "{status}; stderr:\n{}", proc.stderr());
}

// ------------------------------------------------------------------ tests

#[test]
fn the_shipped_configs_pass_check_config_and_refuse_to_run_without_a_secret() {
    let cm = resource(&manifests(), "ConfigMap");
    let k8s = tempfile::tempdir().unwrap();
    for key in ["gateway.toml", "policy.toml"] {
        std::fs::write(k8s.path().join(key), cm["data"][key].as_str().unwrap()).unwrap();
    }
    let image = Dockerfile::load().install();
    let etc = under(image.path(), "/etc/agui-gateway");
    for (config, agents) in [
        (etc.join("gateway.toml"), 0),
        (etc.join("demo.toml"), 1),
        (k8s.path().join("gateway.toml"), 0),
        (deploy("cluster.toml"), 1),
    ] {
        let check = |secret: Option<&str>| {
            let mut cmd = std::process::Command::new(binary());
            cmd.arg("check-config")
                .env_clear()
                .env("AGUI_GATEWAY_CONFIG", &config);
            if let Some(s) = secret {
                cmd.env("AGUI_HS_SECRET", s);
            }
            cmd.output().unwrap()
        };
        let ok = check(Some(SECRET));
        let out = String::from_utf8_lossy(&ok.stdout);
        assert!(
            ok.status.success() && out.contains(&format!("ok ({agents} agents)")),
            "{}: {out}{}",
            config.display(),
            String::from_utf8_lossy(&ok.stderr)
        );
        let refused = check(None);
        let err = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{}", config.display());
        assert!(
            err.contains("auth.hs_secret: references unset environment variable AGUI_HS_SECRET"),
            "{err}"
        );
    }
}

#[test]
fn the_image_carries_what_its_config_needs() {
    let df = Dockerfile::load();
    assert!(df.stages.len() >= 2, "multi-stage: {:?}", df.stages);
    // Fully qualified: podman resolves no short names by default.
    assert!(
        df.stages
            .iter()
            .all(|s| s.starts_with("docker.io/library/")),
        "{:?}",
        df.stages
    );
    assert!(
        df.stages
            .last()
            .unwrap()
            .starts_with("docker.io/library/debian:"),
        "{:?}",
        df.stages
    );
    assert!(
        df.all("RUN").iter().any(|r| r.contains("ca-certificates")),
        "the runtime installs CA certificates"
    );
    assert_ne!(df.uid(), 0, "runs as a non-root uid");

    // The config the image runs, and the policy that config names, are in it.
    let config = df.env_var("AGUI_GATEWAY_CONFIG");
    let copies = df.copies();
    let source_of = |dest: &str| {
        copies
            .iter()
            .find(|(_, d)| d == dest)
            .map(|(s, _)| s.clone())
            .unwrap_or_else(|| panic!("nothing copied to {dest}: {copies:?}"))
    };
    assert_eq!(source_of(&config), "deploy/gateway.toml");
    let etc = Path::new(&config).parent().unwrap();
    let cfg = Settings::load(&deploy("gateway.toml"));
    let policy = cfg
        .str("policy", "path")
        .expect("the config names a policy");
    assert_eq!(
        source_of(etc.join(policy).to_str().unwrap()),
        "config/policy.toml"
    );
    let demo = Settings::load(&deploy("demo.toml"));
    assert_eq!(
        source_of(etc.join("demo.toml").to_str().unwrap()),
        "deploy/demo.toml"
    );
    assert_eq!(demo.str("policy", "path"), Some(policy));

    // Data volume = where both configs keep the journal; port; health check.
    for c in [&cfg, &demo] {
        let store = Path::new(c.str("store", "path").unwrap());
        assert!(store.is_absolute(), "{store:?}");
        assert_eq!(store.parent().unwrap(), Path::new(df.one("VOLUME")));
        assert_eq!(c.port, cfg.port);
    }
    assert_eq!(df.one("EXPOSE"), cfg.port.to_string());
    let (_, check) = df.healthcheck();
    let script = check.join(" ");
    assert!(
        script.contains(&format!("/dev/tcp/127.0.0.1/{}", cfg.port)),
        "{script}"
    );
    assert!(script.contains("GET /readyz"), "{script}");
    // `docker stop` waits 10 s unless told: the documented run says longer.
    let text = read(&deploy("Dockerfile"));
    let wait: u64 = text
        .split("--stop-timeout ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|t| t.parse().ok())
        .expect("the run example sets --stop-timeout");
    assert!(Duration::from_secs(wait) > cfg.stop_budget());
    assert_eq!(df.argv()[0], "/usr/local/bin/agui-gateway");
    assert_eq!(df.argv().last().unwrap(), "serve");

    // Demo, inspector and development secret only when asked for.
    assert!(cfg.table.get("demo").is_none() && cfg.table.get("agents").is_none());
    assert!(
        cfg.table.get("inspector").is_none(),
        "the inspector is off by default"
    );
    assert_eq!(cfg.str("auth", "hs_secret"), Some("${AGUI_HS_SECRET}"));
    assert_eq!(
        demo.get("demo", "enabled").and_then(|v| v.as_bool()),
        Some(true)
    );

    // The build context: what cargo and the COPY lines read, nothing else.
    let ignore = read(&repo().join(".dockerignore"));
    let patterns: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(patterns[0], "*", "an allow-list: {patterns:?}");
    let allowed: BTreeSet<&str> = patterns[1..]
        .iter()
        .map(|p| p.strip_prefix('!').expect("only exceptions after '*'"))
        .map(|p| p.trim_end_matches('/'))
        .collect();
    // Cargo.toml names benches; src/ includes config/*.toml.
    let mut needed: BTreeSet<String> = ["Cargo.toml", "Cargo.lock", "src", "benches", "config"]
        .map(String::from)
        .into();
    needed.extend(
        copies
            .iter()
            .map(|(s, _)| s.split('/').next().unwrap().to_owned()),
    );
    for n in &needed {
        assert!(
            allowed.contains(n.as_str()),
            "{n} is not in the build context"
        );
    }
    for junk in ["target", ".git", ".venv", "tests", "data", "node_modules"] {
        assert!(!allowed.contains(junk), "{junk} is in the build context");
    }
}

#[test]
fn the_systemd_unit_matches_the_config() {
    let unit = unit_service();
    let df = Dockerfile::load();
    let env = unit_env(&unit);
    let config = &env
        .iter()
        .find(|(k, _)| k == "AGUI_GATEWAY_CONFIG")
        .expect("Environment=AGUI_GATEWAY_CONFIG")
        .1;
    // The same install layout as the image.
    assert_eq!(config, &df.env_var("AGUI_GATEWAY_CONFIG"));
    let cfg = Settings::load(&deploy("gateway.toml"));
    let state = format!("/var/lib/{}", unit_one(&unit, "StateDirectory"));
    assert_eq!(
        Path::new(cfg.str("store", "path").unwrap())
            .parent()
            .unwrap(),
        Path::new(&state),
        "the journal is in the unit's StateDirectory"
    );
    assert_eq!(unit_one(&unit, "DynamicUser"), "yes");
    assert_eq!(unit_one(&unit, "ProtectSystem"), "strict");
    let stop = humantime::parse_duration(&unit_one(&unit, "TimeoutStopSec")).unwrap();
    assert!(
        stop > cfg.stop_budget(),
        "TimeoutStopSec {stop:?} must outlast a drain ({:?})",
        cfg.stop_budget()
    );
    let reload = &unit["ExecReload"];
    assert_eq!(
        reload.last().unwrap(),
        "/bin/kill -HUP $MAINPID",
        "{reload:?}"
    );
    assert!(unit_one(&unit, "ExecStart").ends_with(" serve"));
}

#[test]
fn systemd_analyze_verifies_the_unit_and_rates_it_hardened() {
    if std::process::Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: systemd-analyze is not installed (Debian package `systemd`)");
        return;
    }
    // verify checks that ExecStart's binary exists: point it at the built one.
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join("agui-gateway.service");
    let text = read(&deploy("agui-gateway.service"));
    std::fs::write(&unit, text.replace("/usr/local/bin/agui-gateway", binary())).unwrap();
    let verify = std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&unit)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&verify.stdout),
        String::from_utf8_lossy(&verify.stderr)
    );
    // Unknown keys are only warnings: any output is a finding.
    assert!(verify.status.success() && said.trim().is_empty(), "{said}");
    // "OK" on systemd's exposure scale is below 2.0 (0 = fully locked down).
    let security = std::process::Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--threshold=20", "--no-pager"])
        .arg(&unit)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&security.stdout);
    assert!(security.status.success(), "{report}");
    let level: f64 = report
        .lines()
        .find_map(|l| {
            l.split("Overall exposure level for agui-gateway.service: ")
                .nth(1)
        })
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in:\n{report}"));
    assert!(level < 2.0, "exposure {level}:\n{report}");
}

#[test]
fn the_kubernetes_manifests_match_the_config_they_carry() {
    let all = manifests();
    let kustomization = &all["kustomization.yaml"][0];
    let listed: BTreeSet<String> = kustomization["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_owned())
        .collect();
    let files: BTreeSet<String> = all
        .keys()
        .filter(|k| *k != "kustomization.yaml")
        .cloned()
        .collect();
    assert_eq!(listed, files, "kustomization lists every manifest");
    for doc in all.values().flatten() {
        assert!(
            doc["apiVersion"].is_string() && doc["kind"].is_string(),
            "{doc}"
        );
    }

    let cm = resource(&all, "ConfigMap");
    let deployment = resource(&all, "Deployment");
    let service = resource(&all, "Service");
    let pdb = resource(&all, "PodDisruptionBudget");
    let df = Dockerfile::load();

    // The ConfigMap: deploy/gateway.toml on Redis, and the shipped policy.
    let text = |key: &str| cm["data"][key].as_str().unwrap().to_owned();
    let cfg = Settings::parse(&text("gateway.toml"));
    assert_eq!(cfg.str("store", "kind"), Some("redis"));
    let mut on_redis = cfg.table.clone();
    let mut single = Settings::load(&deploy("gateway.toml")).table;
    on_redis.remove("store");
    single.remove("store");
    assert_eq!(
        on_redis, single,
        "only [store] differs from deploy/gateway.toml"
    );
    assert_eq!(
        text("policy.toml"),
        read(&repo().join("config/policy.toml"))
    );

    // Mounted where the image looks, whole (no subPath: updates reach the pod).
    let spec = &deployment["spec"]["template"]["spec"];
    let containers = spec["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    assert!(
        c.get("command").is_none() && c.get("args").is_none(),
        "the image's own command"
    );
    let config = df.env_var("AGUI_GATEWAY_CONFIG");
    let etc = Path::new(&config).parent().unwrap();
    let volume = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["configMap"]["name"] == cm["metadata"]["name"])
        .expect("a volume of the ConfigMap");
    let mount = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == volume["name"])
        .expect("the ConfigMap mounted");
    assert_eq!(mount["mountPath"], etc.to_str().unwrap());
    assert!(mount.get("subPath").is_none());
    let keys: BTreeSet<&str> = cm["data"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let policy = cfg.str("policy", "path").unwrap();
    let wanted: BTreeSet<&str> = [
        Path::new(&config).file_name().unwrap().to_str().unwrap(),
        policy,
    ]
    .into();
    assert_eq!(keys, wanted);

    // Ports and probes.
    let ports = c["ports"].as_array().unwrap();
    let http_port = ports
        .iter()
        .find(|p| p["name"] == "http")
        .expect("port http");
    assert_eq!(http_port["containerPort"], cfg.port);
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], "http");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], "http");
    let sp = &service["spec"]["ports"][0];
    assert_eq!(sp["targetPort"], "http");
    assert_eq!(sp["port"], cfg.port);

    // Stopping: preStop, then the whole drain, inside the grace period.
    let pre_stop = c["lifecycle"]["preStop"]["exec"]["command"]
        .as_array()
        .unwrap();
    assert_eq!(pre_stop[0], "sleep", "{pre_stop:?}");
    let pause = Duration::from_secs(pre_stop[1].as_str().unwrap().parse().unwrap());
    let grace = Duration::from_secs(spec["terminationGracePeriodSeconds"].as_u64().unwrap());
    assert!(
        grace > pause + cfg.stop_budget(),
        "terminationGracePeriodSeconds {grace:?} < preStop {pause:?} + drain {:?}",
        cfg.stop_budget()
    );

    // Secrets: every ${VAR} the config names is set from a Secret.
    let env = c["env"].as_array().unwrap();
    let vars = env_refs(&toml::Value::Table(cfg.table.clone()));
    assert_eq!(vars, BTreeSet::from(["AGUI_HS_SECRET".to_owned()]));
    for var in &vars {
        let e = env.iter().find(|e| e["name"] == var.as_str()).expect(var);
        assert!(e["valueFrom"]["secretKeyRef"]["name"].is_string(), "{e}");
    }
    assert!(
        env.iter().any(|e| e["name"] == "AGUI_GATEWAY__STORE__NODE"
            && e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"),
        "each pod its own node name"
    );

    // The image's user, non-root; one selector for all three.
    let pod_security = &spec["securityContext"];
    assert_eq!(pod_security["runAsNonRoot"], true);
    assert_eq!(pod_security["runAsUser"], df.uid());
    let security = &c["securityContext"];
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"]["drop"], serde_json::json!(["ALL"]));
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    assert_eq!(&deployment["spec"]["selector"]["matchLabels"], labels);
    assert_eq!(&service["spec"]["selector"], labels);
    assert_eq!(&pdb["spec"]["selector"]["matchLabels"], labels);

    // Several replicas, and a budget that lets one go at a time.
    let replicas = deployment["spec"]["replicas"].as_i64().unwrap();
    let min_available = pdb["spec"]["minAvailable"].as_i64().unwrap();
    assert!(replicas >= 2 && (1..replicas).contains(&min_available));
    assert_eq!(
        deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
        0
    );
}

#[test]
fn the_kubernetes_manifests_validate_against_the_api_schemas() {
    let files: Vec<PathBuf> = manifests()
        .keys()
        .filter(|k| *k != "kustomization.yaml")
        .map(|k| deploy("k8s").join(k))
        .collect();
    // The test venv's (tests/agents/requirements.txt), else one on PATH.
    let venv = python().with_file_name("kubernetes-validate");
    let validator = if venv.exists() {
        venv
    } else {
        PathBuf::from("kubernetes-validate")
    };
    let run = std::process::Command::new(&validator)
        .arg("--strict")
        .args(&files)
        .output();
    let Ok(out) = run else {
        eprintln!(
            "skipped: kubernetes-validate is neither in the test venv nor on PATH \
             (pip install kubernetes-validate: the API schemas, offline)"
        );
        return;
    };
    let said = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    assert_eq!(
        said.matches(" passed for resource ").count(),
        files.len(),
        "{said}"
    );
}

#[test]
fn compose_waits_for_the_drain() {
    let compose = yaml_rust2::YamlLoader::load_from_str(&read(&deploy("compose.yaml"))).unwrap();
    let compose = yaml_to_json(&compose[0]);
    let node = Settings::load(&deploy("cluster.toml"));
    for name in ["gateway-a", "gateway-b"] {
        let service = &compose["services"][name];
        // `<<: *gateway` merges are not resolved by the parser: read the anchor.
        let grace = service["stop_grace_period"]
            .as_str()
            .or(compose["services"]["gateway-a"]["stop_grace_period"].as_str())
            .unwrap();
        let grace = humantime::parse_duration(grace).unwrap();
        assert!(grace > node.stop_budget(), "{name}: {grace:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_layout_starts_as_shipped_and_its_health_check_sees_it() {
    let df = Dockerfile::load();
    let root = df.install();
    let data = df.one("VOLUME").to_owned();
    hand_over(root.path(), &data, df.uid());
    let mut env = df.env();
    env.push(("AGUI_HS_SECRET".into(), SECRET.into()));
    let store = Settings::load(&deploy("gateway.toml"));
    let store = store.str("store", "path").unwrap().to_owned();
    let (mut gw, base) = start_installed(root.path(), &df.argv(), &env, df.uid(), &store).await;

    assert_eq!(get_status(&format!("{base}/readyz")).await, 200);
    assert_eq!(get_status(&format!("{base}/healthz")).await, 200);
    let journal = under(root.path(), &store);
    assert!(journal.exists(), "{} missing", journal.display());
    if isolation() == Isolation::MountAndUser {
        use std::os::unix::fs::MetadataExt;
        assert_eq!(std::fs::metadata(&journal).unwrap().uid(), df.uid());
    }
    // JSON logs, as the entrypoint asks.
    gw.expect_stderr("\"gateway listening\"").await;
    // `docker run IMAGE token --sub alice`: a token the running gateway takes.
    let mut mint = std::process::Command::new(binary());
    let entrypoint = df.exec_form("ENTRYPOINT");
    mint.args(&entrypoint[1..])
        .args(["token", "--sub", "alice"])
        .env_clear();
    for (k, v) in &env {
        mint.env(
            k,
            if v.starts_with("/etc/") {
                under(root.path(), v)
            } else {
                v.into()
            },
        );
    }
    let minted = mint.output().unwrap();
    assert!(minted.status.success(), "{minted:?}");
    let token = String::from_utf8(minted.stdout).unwrap();
    let agents = http()
        .get(format!("{base}/v1/agents"))
        .bearer_auth(token.trim())
        .send()
        .await
        .unwrap();
    assert_eq!(agents.status(), 200);

    // The HEALTHCHECK command, run as the container runtime would (on the
    // port the gateway got instead of the image's).
    let port = base.rsplit(':').next().unwrap();
    let exposed = format!("/127.0.0.1/{}", df.one("EXPOSE"));
    let check = |port: &str| {
        let cmd: Vec<String> = df
            .healthcheck()
            .1
            .iter()
            .map(|a| a.replace(&exposed, &format!("/127.0.0.1/{port}")))
            .collect();
        let mut c = tokio::process::Command::new(&cmd[0]);
        c.args(&cmd[1..])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        async move {
            tokio::time::timeout(Duration::from_secs(3), c.status())
                .await
                .is_ok_and(|s| s.unwrap().success())
        }
    };
    assert!(check(port).await, "HEALTHCHECK fails on a ready gateway");

    stop(
        &mut gw,
        Settings::load(&deploy("gateway.toml")).stop_budget(),
    )
    .await;
    assert!(!check(port).await, "HEALTHCHECK passes with no gateway");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_systemd_unit_starts_in_its_state_directory_reloads_and_stops() {
    let unit = unit_service();
    let root = Dockerfile::load().install();
    let state = format!("/var/lib/{}", unit_one(&unit, "StateDirectory"));
    std::fs::create_dir_all(under(root.path(), &state)).unwrap();
    hand_over(root.path(), &state, DYNAMIC_UID);
    // What systemd sets: Environment=, EnvironmentFile= (the secret), $STATE_DIRECTORY.
    let mut env = unit_env(&unit);
    env.push(("AGUI_HS_SECRET".into(), SECRET.into()));
    env.push(("STATE_DIRECTORY".into(), state.clone()));
    let argv: Vec<String> = unit_one(&unit, "ExecStart")
        .split_whitespace()
        .map(String::from)
        .collect();
    let cfg = Settings::load(&deploy("gateway.toml"));
    let store = cfg.str("store", "path").unwrap();
    let (mut gw, base) = start_installed(root.path(), &argv, &env, DYNAMIC_UID, store).await;
    assert_eq!(get_status(&format!("{base}/readyz")).await, 200);
    let journal = under(root.path(), store);
    assert!(journal.starts_with(under(root.path(), &state)) && journal.exists());

    // systemctl reload: each ExecReload= in turn, stopping at the first failure.
    let pid = gw.child.id().unwrap().to_string();
    let reload = || {
        for line in &unit["ExecReload"] {
            let words: Vec<String> = line
                .replace("$MAINPID", &pid)
                .replace("/usr/local/bin/agui-gateway", binary())
                .split_whitespace()
                .map(String::from)
                .collect();
            let mut c = std::process::Command::new(&words[0]);
            c.args(&words[1..]).env_clear();
            for (k, v) in &env {
                let v = if v.starts_with("/etc/") {
                    under(root.path(), v)
                } else {
                    v.into()
                };
                c.env(k, v);
            }
            let out = c.output().unwrap();
            if !out.status.success() {
                return Err(String::from_utf8_lossy(&out.stderr).into_owned());
            }
        }
        Ok(())
    };
    reload().expect("systemctl reload");
    gw.expect_stderr("configuration reloaded").await;

    // A broken policy: the reload fails where the operator sees it, and the
    // running gateway keeps its last good configuration.
    let policy = under(root.path(), "/etc/agui-gateway/policy.toml");
    let good = read(&policy);
    std::fs::write(&policy, "[[rules]]\nkind = \"no-such-kind\"\n").unwrap();
    let err = reload().expect_err("a broken policy must fail the reload");
    assert!(err.contains("policy.toml"), "{err}");
    assert_eq!(get_status(&format!("{base}/readyz")).await, 200);
    std::fs::write(&policy, good).unwrap();

    let budget = humantime::parse_duration(&unit_one(&unit, "TimeoutStopSec")).unwrap();
    stop(&mut gw, budget).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubernetes_pod_starts_on_its_configmap_answers_its_probes_and_reloads_updates() {
    if std::process::Command::new("redis-server")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: the pod's config needs Redis and redis-server is not installed");
        return;
    }
    let all = manifests();
    let cm = resource(&all, "ConfigMap");
    let deployment = resource(&all, "Deployment");
    let df = Dockerfile::load();
    let redis = RedisServer::start().await;
    let root = tempfile::tempdir().unwrap();
    let data = df.one("VOLUME");
    std::fs::create_dir_all(under(root.path(), data)).unwrap();
    hand_over(root.path(), data, df.uid());
    let c = &deployment["spec"]["template"]["spec"]["containers"][0];
    let mount = c["volumeMounts"][0]["mountPath"].as_str().unwrap();
    let mut files: BTreeMap<String, String> = cm["data"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
        .collect();
    project_configmap(&under(root.path(), mount), &files, 1);

    // The image's environment, then the container's (Secret and Downward API
    // values filled in), and the Redis of this test instead of the Service.
    let mut env = df.env();
    for e in c["env"].as_array().unwrap() {
        let name = e["name"].as_str().unwrap().to_owned();
        let value = if e["valueFrom"]["secretKeyRef"].is_object() {
            SECRET.to_owned()
        } else if e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name" {
            "agui-gateway-7d4b9-x2x8q".to_owned()
        } else {
            e["value"].as_str().unwrap().to_owned()
        };
        env.push((name, value));
    }
    env.push((
        "AGUI_GATEWAY__STORE__URL".into(),
        format!("redis://127.0.0.1:{}", redis.port),
    ));
    let (mut gw, base) = start_installed(root.path(), &df.argv(), &env, df.uid(), "").await;
    gw.expect_stderr("agui-gateway-7d4b9-x2x8q").await;
    for probe in ["readinessProbe", "livenessProbe"] {
        let path = c[probe]["httpGet"]["path"].as_str().unwrap();
        assert_eq!(get_status(&format!("{base}{path}")).await, 200, "{probe}");
    }

    // `kubectl apply` of a changed ConfigMap: the kubelet swaps `..data`.
    let policy = files.get_mut("policy.toml").unwrap();
    policy.push_str("\n[[rules]]\nname = \"added-later\"\nkind = \"tools\"\neffect = \"deny\"\ntools = [\"shell_*\"]\n");
    project_configmap(&under(root.path(), mount), &files, 2);
    gw.expect_stderr("configuration reloaded").await;

    let spec = &deployment["spec"]["template"]["spec"];
    let grace = Duration::from_secs(spec["terminationGracePeriodSeconds"].as_u64().unwrap());
    stop(&mut gw, grace).await;
}

/// Removes what the image test created, whatever happens.
struct Cleanup(&'static str, Vec<Vec<String>>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for args in &self.1 {
            let _ = std::process::Command::new(self.0)
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_builds_runs_as_shipped_and_drains_on_stop() {
    if std::env::var_os("AGUI_TEST_IMAGE").is_none() {
        eprintln!(
            "skipped: set AGUI_TEST_IMAGE=1 to build and run deploy/Dockerfile (a release build: minutes)"
        );
        return;
    }
    let works = |engine: &str| {
        std::process::Command::new(engine)
            .arg("info")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let Some(engine) = ["docker", "podman"].into_iter().find(|e| works(e)) else {
        eprintln!("skipped: neither `docker info` nor `podman info` works here (no daemon)");
        return;
    };
    let run = |args: &[&str]| {
        let out = std::process::Command::new(engine)
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let tag = "agui-gateway:deploy-test";
    let name = "agui-gateway-deploy-test";
    let volume = "agui-gateway-deploy-test-data";
    let _cleanup = Cleanup(
        engine,
        vec![
            vec!["rm".into(), "-f".into(), name.into()],
            vec!["volume".into(), "rm".into(), volume.into()],
        ],
    );
    // The base images must come from a registry: where none answers (this
    // project's sandbox reaches only package registries), say so and stop.
    let dockerfile = deploy("Dockerfile");
    for base in read(&dockerfile)
        .lines()
        .filter_map(|l| l.strip_prefix("FROM "))
        .filter_map(|l| l.split_whitespace().next())
    {
        let (code, _, err) = run(&["pull", base]);
        if code != Some(0) {
            eprintln!(
                "skipped: {engine} cannot pull the base image {base} here: {}",
                err.lines().last().unwrap_or_default()
            );
            return;
        }
    }
    // podman's default OCI format has no HEALTHCHECK.
    let context = repo();
    let mut build = vec!["build", "-f", dockerfile.to_str().unwrap(), "-t", tag];
    if engine == "podman" {
        build.extend(["--format", "docker"]);
    }
    build.push(context.to_str().unwrap());
    let (code, _, err) = run(&build);
    assert_eq!(code, Some(0), "{engine} build:\n{err}");

    // Without a secret it refuses; the demo config only when asked for.
    let (code, _, err) = run(&["run", "--rm", tag, "check-config"]);
    assert_eq!(code, Some(2), "{err}");
    let demo = "AGUI_GATEWAY_CONFIG=/etc/agui-gateway/demo.toml";
    let secret = format!("AGUI_HS_SECRET={SECRET}");
    let (code, out, err) = run(&[
        "run",
        "--rm",
        "-e",
        demo,
        "-e",
        &secret,
        tag,
        "check-config",
    ]);
    assert!(code == Some(0) && out.contains("(1 agents)"), "{out}{err}");

    let data = format!("{volume}:/var/lib/agui-gateway");
    let (code, _, err) = run(&[
        "run",
        "-d",
        "--name",
        name,
        "-p",
        "127.0.0.1::8080",
        "-e",
        &secret,
        "-v",
        &data,
        "--stop-timeout",
        "60",
        tag,
    ]);
    assert_eq!(code, Some(0), "{err}");
    let (_, port, _) = run(&["port", name, "8080"]);
    let base = format!("http://{}", port.lines().next().unwrap());
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let healthy = if engine == "podman" {
            run(&["healthcheck", "run", name]).0 == Some(0)
        } else {
            run(&["inspect", "-f", "{{.State.Health.Status}}", name]).1 == "healthy"
        };
        if healthy {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never healthy: {:?}",
            run(&["logs", name])
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(get_status(&format!("{base}/readyz")).await, 200);
    assert_eq!(run(&["exec", name, "id", "-u"]).1, "10001");
    let (_, listing, _) = run(&["exec", name, "ls", "/var/lib/agui-gateway"]);
    assert!(listing.contains("agui-gateway.db"), "{listing}");
    let (code, _, _) = run(&[
        "exec",
        name,
        "test",
        "-s",
        "/etc/ssl/certs/ca-certificates.crt",
    ]);
    assert_eq!(code, Some(0), "CA certificates");

    let (code, _, err) = run(&["stop", "-t", "60", name]);
    assert_eq!(code, Some(0), "{err}");
    let (_, exit, _) = run(&["inspect", "-f", "{{.State.ExitCode}}", name]);
    assert_eq!(exit, "0", "a clean exit after the drain");
}

/// The Redis Cluster variants of the multi-node files: each differs from
/// its one-Redis file only in `[store]` (on a cluster), passes
/// `check-config`, and the compose file starts and joins the cluster its
/// config names before any gateway starts.
#[test]
fn the_redis_cluster_variants_differ_only_in_their_store() {
    let overlay = deploy("k8s-redis-cluster");
    let kustomization =
        yaml_rust2::YamlLoader::load_from_str(&read(&overlay.join("kustomization.yaml"))).unwrap();
    let kustomization = yaml_to_json(&kustomization[0]);
    assert_eq!(kustomization["resources"], serde_json::json!(["../k8s"]));
    let patch_file = kustomization["patches"][0]["path"].as_str().unwrap();
    let patch = yaml_rust2::YamlLoader::load_from_str(&read(&overlay.join(patch_file))).unwrap();
    let patch = yaml_to_json(&patch[0]);
    let base_cm = resource(&manifests(), "ConfigMap");
    assert_eq!(patch["kind"], "ConfigMap");
    assert_eq!(patch["metadata"]["name"], base_cm["metadata"]["name"]);
    let patched = patch["data"]["gateway.toml"].as_str().unwrap();
    let k8s_dir = tempfile::tempdir().unwrap();
    std::fs::write(k8s_dir.path().join("gateway.toml"), patched).unwrap();
    std::fs::write(
        k8s_dir.path().join("policy.toml"),
        base_cm["data"]["policy.toml"].as_str().unwrap(),
    )
    .unwrap();
    let pairs = [
        (
            Settings::parse(patched),
            Settings::parse(base_cm["data"]["gateway.toml"].as_str().unwrap()),
            k8s_dir.path().join("gateway.toml"),
            0,
        ),
        (
            Settings::load(&deploy("redis-cluster.toml")),
            Settings::load(&deploy("cluster.toml")),
            deploy("redis-cluster.toml"),
            1,
        ),
    ];
    for (cluster, single, path, agents) in pairs {
        assert_eq!(cluster.str("store", "kind"), Some("redis-cluster"));
        let urls = cluster.get("store", "urls").unwrap().as_array().unwrap();
        assert!(urls.len() >= 3, "{}: seed nodes", path.display());
        let (mut a, mut b) = (cluster.table.clone(), single.table.clone());
        a.remove("store");
        b.remove("store");
        assert_eq!(a, b, "{}: only [store] differs", path.display());
        assert_eq!(
            env_refs(&toml::Value::Table(cluster.table.clone())),
            env_refs(&toml::Value::Table(single.table.clone())),
            "{}: the same secrets",
            path.display()
        );
        let ok = std::process::Command::new(binary())
            .arg("check-config")
            .env_clear()
            .env("AGUI_GATEWAY_CONFIG", &path)
            .env("AGUI_HS_SECRET", SECRET)
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&ok.stdout);
        assert!(
            ok.status.success() && out.contains(&format!("ok ({agents} agents)")),
            "{}: {out}{}",
            path.display(),
            String::from_utf8_lossy(&ok.stderr)
        );
    }

    // Compose: the cluster's nodes, joined once before the gateways start.
    let load = |name: &str| {
        let docs = yaml_rust2::YamlLoader::load_from_str(&read(&deploy(name))).unwrap();
        yaml_to_json(&docs[0])
    };
    let compose = load("compose.redis-cluster.yaml");
    let base = load("compose.yaml");
    let services = &compose["services"];
    let node = Settings::load(&deploy("redis-cluster.toml"));
    for url in node.get("store", "urls").unwrap().as_array().unwrap() {
        let host = url.as_str().unwrap().trim_start_matches("redis://");
        let service = host.split(':').next().unwrap();
        assert!(services[service].is_object(), "{service} is a service");
    }
    let redis = services["redis-1"]["command"].to_string();
    for flag in [
        "\"--cluster-enabled\",\"yes\"",
        "\"noeviction\"",
        "\"--appendonly\",\"yes\"",
    ] {
        assert!(redis.contains(flag), "redis-1: {flag} in {redis}");
    }
    for n in 2..=6 {
        assert!(services[format!("redis-{n}")].is_object(), "six nodes");
    }
    let init = services["redis-cluster-init"]["command"].to_string();
    assert!(init.contains("--cluster create") && init.contains("--cluster-replicas 1"));
    for n in 1..=6 {
        assert!(init.contains(&format!("redis-{n} ")) || init.contains(&format!("redis-{n};")));
    }
    let gateway = &services["gateway-a"];
    assert_eq!(
        gateway["depends_on"]["redis-cluster-init"]["condition"],
        "service_completed_successfully"
    );
    assert_eq!(
        gateway["volumes"][0],
        "./redis-cluster.toml:/etc/agui-gateway/gateway.toml:ro"
    );
    let grace = humantime::parse_duration(gateway["stop_grace_period"].as_str().unwrap()).unwrap();
    assert!(grace > node.stop_budget());
    assert_eq!(services["lb"], base["services"]["lb"], "the same balancer");
    assert_eq!(gateway["build"], base["services"]["gateway-a"]["build"]);
}
