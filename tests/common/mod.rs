//! Shared harness for the integration tests: real processes on loopback.
//!
//! [`Gateway`] runs the `agui-gateway` binary with a generated config; [`PyAgent`]
//! runs one of the Python agents in `tests/agents/` (built with the real PyPI
//! AG-UI packages). Both pick free ports and report them on stdout, which the
//! harness reads: nothing here sleeps to wait for a process, it waits for the
//! line the process prints when it is ready.

#![allow(dead_code)]

pub mod soak;

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

/// The HS secret every test gateway uses.
pub const SECRET: &str = "integration-test-secret-0123456789abcdef";

/// How long any single wait in a test may take before it fails.
pub const WAIT: Duration = Duration::from_secs(20);

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The gateway binary: `$AGUI_TEST_GATEWAY_BIN` when set (e.g. a copy that
/// another checkout building into the same shared target folder cannot
/// replace mid-test), else the one cargo built for these tests.
pub fn gateway_bin() -> PathBuf {
    std::env::var_os("AGUI_TEST_GATEWAY_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_agui-gateway")))
}

/// The Python with the AG-UI packages: `$AGUI_TEST_PYTHON` or `.venv/bin/python`.
pub fn python() -> PathBuf {
    if let Ok(p) = std::env::var("AGUI_TEST_PYTHON") {
        return PathBuf::from(p);
    }
    let p = repo().join(".venv/bin/python");
    assert!(
        p.exists(),
        "{} is missing: run `bash .ci/run` once (it creates the test venv), or set AGUI_TEST_PYTHON",
        p.display()
    );
    p
}

/// A child process whose stdout lines arrive on a channel; killed on drop.
pub struct Proc {
    pub child: Child,
    lines: mpsc::UnboundedReceiver<String>,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
    /// Signalled whenever a stderr line arrives.
    stderr_grew: std::sync::Arc<tokio::sync::Notify>,
}

impl Proc {
    /// Spawns `cmd`, capturing stdout lines and all of stderr.
    pub fn spawn(mut cmd: Command) -> Proc {
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("spawn test process");
        let (tx, lines) = mpsc::unbounded_channel();
        let stdout = child.stdout.take().unwrap();
        tokio::spawn(async move {
            let mut r = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = r.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let stderr_grew = std::sync::Arc::new(tokio::sync::Notify::new());
        let (sink, grew) = (stderr.clone(), stderr_grew.clone());
        let err = child.stderr.take().unwrap();
        tokio::spawn(async move {
            let mut r = BufReader::new(err).lines();
            while let Ok(Some(line)) = r.next_line().await {
                {
                    let mut s = sink.lock().unwrap();
                    s.push_str(&line);
                    s.push('\n');
                }
                grew.notify_waiters();
            }
        });
        Proc {
            child,
            lines,
            stderr,
            stderr_grew,
        }
    }

    /// Waits for a stdout line containing `needle` and returns it.
    pub async fn expect_line_containing(&mut self, needle: &str) -> String {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(line)) if line.contains(needle) => return line,
                Ok(Some(_)) => continue,
                Ok(None) => panic!("process exited before printing {needle:?}"),
                Err(_) => panic!("no line with {needle:?} within {WAIT:?}"),
            }
        }
    }

    /// Waits for a stdout line starting with `prefix` and returns it.
    pub async fn expect_line(&mut self, prefix: &str) -> String {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(line)) if line.starts_with(prefix) => return line,
                Ok(Some(_)) => continue,
                Ok(None) => panic!(
                    "process exited before printing '{prefix}'; stderr:\n{}",
                    self.stderr()
                ),
                Err(_) => panic!(
                    "timed out waiting for '{prefix}'; stderr:\n{}",
                    self.stderr()
                ),
            }
        }
    }

    /// Waits until the process's stderr contains `needle` (a log line).
    pub async fn expect_stderr(&self, needle: &str) {
        self.expect_stderr_times(needle, 1).await
    }

    /// Waits until stderr contains `needle` at least `times` times.
    pub async fn expect_stderr_times(&self, needle: &str, times: usize) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let grew = self.stderr_grew.notified();
            if self.stderr().matches(needle).count() >= times {
                return;
            }
            if tokio::time::timeout_at(deadline, grew).await.is_err() {
                panic!(
                    "stderr never contained '{needle}' {times} times:\n{}",
                    self.stderr()
                );
            }
        }
    }

    /// Everything the process wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

/// A certificate for 127.0.0.1 and its key, written to `dir` under `name`,
/// issued by a CA of its own: (cert path, key path, the CA's PEM).
pub fn tls_certificate(
    dir: &std::path::Path,
    name: &str,
) -> (std::path::PathBuf, std::path::PathBuf, Vec<u8>) {
    let file = |ext: &str| dir.join(format!("{name}.{ext}"));
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("openssl");
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let ca_subject = format!("/CN={name}-ca");
    let (ca_key, ca_crt) = (format!("{name}-ca.key"), format!("{name}-ca.crt"));
    let mut ca = vec![
        "req",
        "-x509",
        "-days",
        "1",
        "-subj",
        &ca_subject,
        "-keyout",
        &ca_key,
        "-out",
        &ca_crt,
    ];
    ca.extend(ec);
    openssl(&ca);
    let (key, csr, crt, ext) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.crt"),
        format!("{name}.ext"),
    );
    let subject = format!("/CN={name}");
    let mut req = vec!["req", "-subj", &subject, "-keyout", &key, "-out", &csr];
    req.extend(ec);
    openssl(&req);
    std::fs::write(
        file("ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-days",
        "1",
        "-in",
        &csr,
        "-CA",
        &ca_crt,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-extfile",
        &ext,
        "-out",
        &crt,
    ]);
    let ca_pem = std::fs::read(dir.join(&ca_crt)).unwrap();
    (file("crt"), file("key"), ca_pem)
}

/// A real `redis-server` on a free loopback port, nothing persisted.
pub struct RedisServer {
    pub proc: Proc,
    pub port: u16,
    args: Vec<String>,
    /// What `redis-cli` needs besides the port (TLS files, the password).
    cli_args: Vec<String>,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts `redis-server` and waits until it accepts connections.
    pub async fn start() -> RedisServer {
        Self::start_with(&["--save", "", "--appendonly", "no", "--rdbcompression", "no"]).await
    }

    /// Like [`RedisServer::start`], writing every command to its
    /// append-only file before answering: a restart loses nothing.
    pub async fn start_persistent() -> RedisServer {
        Self::start_with(&[
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
        ])
        .await
    }

    async fn start_with(args: &[&str]) -> RedisServer {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        Self::start_on_a_free_port(|_| args.clone(), None).await
    }

    /// Like [`RedisServer::start`], over TLS only (client certificates
    /// required) and with a password: see [`RedisSecurity`].
    pub async fn start_secured(security: &RedisSecurity) -> RedisServer {
        let start = |port| {
            let mut args = ["--save", "", "--appendonly", "no"]
                .map(String::from)
                .to_vec();
            args.extend(security.server_args(port));
            args
        };
        Self::start_on_a_free_port(start, Some(security)).await
    }

    /// Starts a server with the arguments `args` gives for its port.
    async fn start_on_a_free_port(
        args: impl Fn(u16) -> Vec<String>,
        security: Option<&RedisSecurity>,
    ) -> RedisServer {
        let any_port = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        };
        let cli_args = security.map(RedisSecurity::cli_args).unwrap_or_default();
        Self::spawn_on_a_free_port(any_port, args, cli_args).await
    }

    /// Starts `redis-server` on `port`, panicking with what it printed if
    /// it exits before accepting connections.
    async fn spawn(port: u16, dir: &Path, args: &[String]) -> Proc {
        Self::try_spawn(port, dir, args)
            .await
            .unwrap_or_else(|printed| panic!("redis-server exited on port {port}:\n{printed}"))
    }

    /// Starts `redis-server` on `port`; what it printed if it exited before
    /// accepting connections. A port found free may be taken again before
    /// Redis binds it (by another test's server or an outgoing connection's
    /// local port, and for a cluster node the bus port too), so callers
    /// that chose the port retry on another one.
    async fn try_spawn(port: u16, dir: &Path, args: &[String]) -> Result<Proc, String> {
        let mut cmd = Command::new("redis-server");
        cmd.args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(args)
            .arg("--dir")
            .arg(dir);
        let mut proc = Proc::spawn(cmd);
        let mut printed = String::new();
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            match tokio::time::timeout_at(deadline, proc.lines.recv()).await {
                Ok(Some(line)) if line.contains("Ready to accept connections") => return Ok(proc),
                Ok(Some(line)) => {
                    printed.push_str(&line);
                    printed.push('\n');
                }
                Ok(None) => return Err(format!("{printed}{}", proc.stderr())),
                Err(_) => panic!("redis-server not ready within {WAIT:?}:\n{printed}"),
            }
        }
    }

    /// Starts a server on a port chosen by `port`, trying another port (and
    /// a fresh directory: a cluster node has written its `nodes.conf`) when
    /// the chosen one was taken before Redis bound it.
    async fn spawn_on_a_free_port(
        port: impl Fn() -> u16,
        args: impl Fn(u16) -> Vec<String>,
        cli_args: Vec<String>,
    ) -> RedisServer {
        let mut failures = Vec::new();
        for _ in 0..5 {
            let port = port();
            let args = args(port);
            let dir = tempfile::tempdir().unwrap();
            match Self::try_spawn(port, dir.path(), &args).await {
                Ok(proc) => {
                    return RedisServer {
                        proc,
                        port,
                        args,
                        cli_args,
                        _dir: dir,
                    };
                }
                Err(printed) => failures.push(format!("port {port}:\n{printed}")),
            }
        }
        panic!("redis-server did not start:\n{}", failures.join("\n"))
    }

    /// Everything Redis holds, as bytes (an uncompressed snapshot).
    pub fn snapshot_bytes(&self) -> Vec<u8> {
        let saved = std::process::Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(&self.cli_args)
            .arg("SAVE")
            .output()
            .expect("redis-cli");
        assert!(saved.status.success(), "{saved:?}");
        std::fs::read(self._dir.path().join("dump.rdb")).unwrap()
    }

    /// Where the server keeps its files (`dump.rdb`).
    pub fn data_dir(&self) -> &Path {
        self._dir.path()
    }

    /// Runs one `redis-cli` command against the server; its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = std::process::Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(&self.cli_args)
            .args(args)
            .output()
            .expect("redis-cli");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Like [`RedisServer::cli`], `None` when the command fails (the
    /// server is down).
    pub fn try_cli(&self, args: &[&str]) -> Option<String> {
        let out = std::process::Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(&self.cli_args)
            .args(args)
            .output()
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.success() && !text.starts_with("Could not connect")).then_some(text)
    }

    /// False once [`RedisServer::kill`]ed.
    pub fn is_running(&self) -> bool {
        self.proc.child.id().is_some()
    }

    /// Kills the server (SIGKILL) and waits until it is gone.
    pub async fn kill(&mut self) {
        self.proc.child.kill().await.unwrap();
    }

    /// Starts the server again on the same port and data directory.
    pub async fn start_again(&mut self) {
        self.proc = Self::spawn(self.port, self._dir.path(), &self.args).await;
    }

    /// `[store]` TOML for a gateway node named `node` on this Redis.
    pub fn store_config(&self, node: &str) -> String {
        format!(
            "[store]\nkind = \"redis\"\nurl = \"redis://127.0.0.1:{}\"\nnode = \"{node}\"\n",
            self.port
        )
    }
}

/// TLS and a password for a test Redis: a CA of its own, one certificate
/// for 127.0.0.1 that the servers present and clients present back (the
/// servers require client certificates), and a password.
pub struct RedisSecurity {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// The CA's certificate (PEM).
    pub ca: PathBuf,
    pub password: String,
    _dir: tempfile::TempDir,
}

impl RedisSecurity {
    pub fn new() -> RedisSecurity {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key, _) = tls_certificate(dir.path(), "redis");
        RedisSecurity {
            cert,
            key,
            ca: dir.path().join("redis-ca.crt"),
            password: format!(
                "pw-{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .subsec_nanos()
            ),
            _dir: dir,
        }
    }

    /// A server's arguments: TLS only on `port`, the password.
    fn server_args(&self, port: u16) -> Vec<String> {
        let (cert, key, ca) = self.paths();
        let port = port.to_string();
        let args = ["--port", "0", "--tls-port", &port, "--tls-cert-file", &cert];
        let more = ["--tls-key-file", &key, "--tls-ca-cert-file", &ca];
        let auth = ["--tls-auth-clients", "yes", "--requirepass", &self.password];
        [&args[..], &more, &auth]
            .concat()
            .into_iter()
            .map(String::from)
            .collect()
    }

    /// `redis-cli`'s arguments to reach such a server.
    fn cli_args(&self) -> Vec<String> {
        let (cert, key, ca) = self.paths();
        let tls = ["--tls", "--cacert", &ca, "--cert", &cert, "--key", &key];
        let auth = ["-a", &self.password, "--no-auth-warning"];
        [&tls[..], &auth]
            .concat()
            .into_iter()
            .map(String::from)
            .collect()
    }

    fn paths(&self) -> (String, String, String) {
        let path = |p: &PathBuf| p.display().to_string();
        (path(&self.cert), path(&self.key), path(&self.ca))
    }

    /// `[store.tls]` with the CA and the client certificate.
    pub fn store_tls(&self) -> String {
        format!(
            "[store.tls]\nca = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\n",
            self.ca.display(),
            self.cert.display(),
            self.key.display()
        )
    }
}

/// A real Redis Cluster on loopback: three masters and a replica of each
/// (`redis-server --cluster-enabled yes`, joined by `redis-cli --cluster
/// create`), nothing persisted, failing a dead master over within about a
/// second (`cluster-node-timeout` 1000 ms).
pub struct RedisCluster {
    /// Every node, masters first as created (roles change on failover).
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts six nodes, creates the cluster and waits until every node
    /// reports `cluster_state:ok`.
    pub async fn start() -> RedisCluster {
        Self::start_with(None).await
    }

    /// Like [`RedisCluster::start`], every node over TLS only (client
    /// certificates required, the cluster bus and replication too) and
    /// with a password: see [`RedisSecurity`].
    pub async fn start_secured(security: &RedisSecurity) -> RedisCluster {
        Self::start_with(Some(security)).await
    }

    async fn start_with(security: Option<&RedisSecurity>) -> RedisCluster {
        let args = |port| {
            let mut args: Vec<String> = [
                "--save",
                "",
                "--appendonly",
                "no",
                "--cluster-enabled",
                "yes",
                "--cluster-node-timeout",
                "1000",
                // A killed master's replica takes over however long it
                // was cut off (a replica just created may be mid-sync).
                "--cluster-replica-validity-factor",
                "0",
                "--cluster-config-file",
                "nodes.conf",
            ]
            .iter()
            .map(|a| a.to_string())
            .collect();
            if let Some(security) = security {
                args.extend(security.server_args(port));
                args.extend(["--tls-cluster", "yes", "--tls-replication", "yes"].map(String::from));
                args.extend(["--masterauth".into(), security.password.clone()]);
            }
            args
        };
        let cli_args = security.map(RedisSecurity::cli_args).unwrap_or_default();
        let mut nodes = Vec::new();
        for _ in 0..6 {
            nodes.push(
                RedisServer::spawn_on_a_free_port(cluster_port, args, cli_args.clone()).await,
            );
        }
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = std::process::Command::new("redis-cli")
            .args(&nodes[0].cli_args)
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create");
        assert!(out.status.success(), "{out:?}");
        let cluster = RedisCluster { nodes };
        cluster.wait_until_ok().await;
        cluster
    }

    /// Waits until every running node reports `cluster_state:ok` with three
    /// masters, and every running replica is in sync with its master (a
    /// replica whose master was killed, until it is promoted, is not).
    /// Polled: Redis announces neither.
    pub async fn wait_until_ok(&self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let ok = self.nodes.iter().filter(|n| n.is_running()).all(|n| {
                let info = n.try_cli(&["CLUSTER", "INFO"]).unwrap_or_default();
                let replication = n.try_cli(&["INFO", "replication"]).unwrap_or_default();
                info.contains("cluster_state:ok")
                    && info.contains("cluster_size:3")
                    && (replication.contains("role:master")
                        || replication.contains("master_link_status:up"))
            });
            if ok {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the Redis Cluster did not reach cluster_state:ok"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `[store]` TOML for a gateway node named `node` on this cluster.
    pub fn store_config(&self, node: &str) -> String {
        let urls: Vec<String> = self
            .nodes
            .iter()
            .take(3)
            .map(|n| format!("\"redis://127.0.0.1:{}\"", n.port))
            .collect();
        format!(
            "[store]\nkind = \"redis-cluster\"\nurls = [{}]\nnode = \"{node}\"\n",
            urls.join(", ")
        )
    }

    /// The node serving `key`'s slot as master now (`None` while none does:
    /// a failover in progress).
    pub fn master_of(&self, key: &str) -> Option<&RedisServer> {
        let any = self.nodes.iter().find(|n| n.is_running()).unwrap();
        let slot: u16 = any
            .cli(&["CLUSTER", "KEYSLOT", key])
            .trim()
            .parse()
            .unwrap();
        self.nodes.iter().filter(|n| n.is_running()).find(|n| {
            n.try_cli(&["CLUSTER", "NODES"])
                .unwrap_or_default()
                .lines()
                .any(|l| l.contains("myself") && l.contains("master") && owns_slot(l, slot))
        })
    }

    /// The replicas of `master` now.
    pub fn replicas_of(&self, master: &RedisServer) -> Vec<&RedisServer> {
        let id = master.cli(&["CLUSTER", "MYID"]).trim().to_owned();
        self.nodes
            .iter()
            .filter(|n| n.is_running())
            .filter(|n| {
                n.cli(&["CLUSTER", "NODES"])
                    .lines()
                    .any(|l| l.contains("myself") && l.contains("slave") && l.contains(&id))
            })
            .collect()
    }

    /// Runs `args` on every running master; their outputs.
    pub fn on_masters(&self, args: &[&str]) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| n.is_running())
            .filter(|n| n.cli(&["ROLE"]).starts_with("master"))
            .map(|n| n.cli(args))
            .collect()
    }
}

/// Whether a `CLUSTER NODES` line lists `slot` among its ranges.
fn owns_slot(line: &str, slot: u16) -> bool {
    line.split(' ').skip(8).any(|range| {
        let (a, b) = range.split_once('-').unwrap_or((range, range));
        match (a.parse::<u16>(), b.parse::<u16>()) {
            (Ok(a), Ok(b)) => a <= slot && slot <= b,
            _ => false,
        }
    })
}

/// A free loopback port whose cluster bus port (+10000) is free too.
fn cluster_port() -> u16 {
    loop {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        if port < 55000 && std::net::TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            return port;
        }
    }
}

/// True when `AGUI_TEST_REDIS=cluster`: the several-node harness runs its
/// nodes on a Redis Cluster instead of one Redis.
pub fn on_redis_cluster() -> bool {
    std::env::var("AGUI_TEST_REDIS").is_ok_and(|v| v == "cluster")
}

/// A Python AG-UI agent from `tests/agents/`.
pub struct PyAgent {
    pub proc: Proc,
    pub port: u16,
}

impl PyAgent {
    /// Starts `tests/agents/<script>` and waits until it listens.
    pub async fn start(script: &str) -> PyAgent {
        Self::start_args(script, &[]).await
    }

    /// Like [`PyAgent::start`], with command-line arguments for the script.
    pub async fn start_args(script: &str, args: &[&str]) -> PyAgent {
        let mut cmd = Command::new(python());
        cmd.arg(repo().join("tests/agents").join(script))
            .args(args)
            .env("PYTHONUNBUFFERED", "1")
            .current_dir(repo());
        let mut proc = Proc::spawn(cmd);
        let line = proc.expect_line("listening ").await;
        let port = line["listening ".len()..].trim().parse().unwrap();
        PyAgent { proc, port }
    }

    /// The URL of `path` on this agent.
    pub fn url(&self, path: &str) -> String {
        format!(
            "http://127.0.0.1:{}/{}",
            self.port,
            path.trim_start_matches('/')
        )
    }
}

/// A running `agui-gateway` process — or, with `AGUI_TEST_NODES=N` (N ≥ 2),
/// N processes on one real `redis-server`, which clients reach in turn
/// (each [`Gateway::url`] and each WebSocket goes to the next node), like a
/// load balancer without sticky sessions.
pub struct Gateway {
    /// The first node.
    pub proc: Proc,
    /// The first node's address.
    pub base: String,
    pub config_path: PathBuf,
    /// The other nodes (cluster mode).
    pub peers: Vec<(Proc, String)>,
    /// The Redis the nodes share (cluster mode).
    pub redis: Option<RedisServer>,
    /// The Redis Cluster the nodes share instead (`AGUI_TEST_REDIS=cluster`).
    pub redis_cluster: Option<RedisCluster>,
    turn: std::sync::atomic::AtomicUsize,
    _dir: tempfile::TempDir,
}

/// Nodes per [`Gateway`]: `AGUI_TEST_NODES` (default 1).
pub fn test_nodes() -> usize {
    std::env::var("AGUI_TEST_NODES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

/// True (and says why) when the calling test checks something of one
/// process (its own counters, its restart, its signals) and the suite runs
/// across several nodes: the test then returns early.
pub fn single_node_only(why: &str) -> bool {
    let many = test_nodes() > 1;
    if many {
        eprintln!("skipped with AGUI_TEST_NODES > 1: {why}");
    }
    many
}

impl Gateway {
    /// Starts the gateway with `extra` TOML appended to a base config (test
    /// secret, ephemeral port, demo agent off unless `extra` turns it on).
    pub async fn start(extra: &str) -> Gateway {
        Self::start_with_env(extra, &[]).await
    }

    /// Like [`Gateway::start`], with environment variables for the process.
    pub async fn start_with_env(extra: &str, env: &[(&str, &str)]) -> Gateway {
        let auth = format!(
            "[auth]\nalgorithms = [\"HS256\"]\nhs_secret = \"{SECRET}\"\nleeway = \"0s\"\n\n"
        );
        Self::start_config(&format!("{auth}{extra}"), env).await
    }

    /// Like [`Gateway::start`], in a process that may write files of at most
    /// `kib` KiB (`ulimit -f`, with SIGXFSZ ignored so a write past it fails
    /// with EFBIG instead of killing the process): a disk filling up mid-run.
    pub async fn start_with_file_limit(extra: &str, kib: u64) -> Gateway {
        let limit = kib.to_string();
        Self::start_with_env(extra, &[("AGUI_TEST_FILE_LIMIT_KIB", &limit)]).await
    }

    /// Lifts the file size limit of [`Gateway::start_with_file_limit`] from
    /// the running process: its disk has room again.
    pub fn lift_file_limit(&self) {
        let pid = self.proc.child.id().expect("the gateway is running");
        let status = std::process::Command::new("prlimit")
            .args(["--pid", &pid.to_string(), "--fsize=unlimited:"])
            .status()
            .expect("prlimit (util-linux) runs");
        assert!(status.success(), "prlimit --pid {pid} failed: {status}");
    }

    /// Like [`Gateway::start`], in a process that may hold at most `fds`
    /// open file descriptors (`ulimit -n`): a node near its fd limit.
    pub async fn start_with_fd_limit(extra: &str, fds: u64) -> Gateway {
        let limit = fds.to_string();
        Self::start_with_env(extra, &[("AGUI_TEST_FD_LIMIT", &limit)]).await
    }

    /// Starts the gateway with `config` (which must hold `[auth]`) after a
    /// `[server]` section on an ephemeral port.
    pub async fn start_config(config: &str, env: &[(&str, &str)]) -> Gateway {
        let dir = tempfile::tempdir().unwrap();
        let config_path = dir.path().join("gateway.toml");
        let server =
            "[server]\nlisten = \"127.0.0.1:0\"\nkeepalive = \"1s\"\nshutdown_grace = \"1s\"\n\n";
        let nodes = test_nodes();
        let clustered = nodes > 1 && !config.contains("[store]");
        let redis_cluster = if clustered && on_redis_cluster() {
            Some(RedisCluster::start().await)
        } else {
            None
        };
        let redis = if clustered && redis_cluster.is_none() {
            Some(RedisServer::start().await)
        } else {
            None
        };
        let store = redis
            .as_ref()
            .map(|r| r.store_config("n1"))
            .or(redis_cluster.as_ref().map(|c| c.store_config("n1")))
            .map(|s| s + "lease_ttl = \"2s\"\n")
            .unwrap_or_default();
        std::fs::write(&config_path, format!("{server}{config}\n{store}")).unwrap();
        let (proc, base) = Self::spawn(&config_path, env).await;
        let mut peers = Vec::new();
        for n in 2..=if clustered { nodes } else { 1 } {
            let name = format!("n{n}");
            let mut env = env.to_vec();
            env.push(("AGUI_GATEWAY__STORE__NODE", &name));
            peers.push(Self::spawn(&config_path, &env).await);
        }
        Gateway {
            proc,
            base,
            config_path,
            peers,
            redis,
            redis_cluster,
            turn: Default::default(),
            _dir: dir,
        }
    }

    /// Every byte the journal holds: the SQLite files, or a snapshot of the
    /// Redis the nodes share.
    pub fn journal_bytes(&self) -> Vec<u8> {
        if let Some(redis) = &self.redis {
            return redis.snapshot_bytes();
        }
        if let Some(cluster) = &self.redis_cluster {
            return cluster
                .nodes
                .iter()
                .filter(|n| n.is_running())
                .flat_map(|n| n.snapshot_bytes())
                .collect();
        }
        let data = self.config_path.parent().unwrap().join("data");
        let mut stored = Vec::new();
        for f in std::fs::read_dir(&data).unwrap() {
            stored.extend(std::fs::read(f.unwrap().path()).unwrap());
        }
        stored
    }

    /// Sends `signal` (`TERM`, `HUP`, `KILL`, …) to the first node.
    pub fn signal(&self, signal: &str) {
        let pid = self.proc.child.id().expect("running").to_string();
        let sent = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(&pid)
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{signal} {pid}");
    }

    /// The address of the node the next client goes to.
    pub fn next_base(&self) -> &str {
        let n =
            self.turn.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % (1 + self.peers.len());
        match n {
            0 => &self.base,
            n => &self.peers[n - 1].1,
        }
    }

    /// Starts one node on the config file at `path` as shipped (with `env`
    /// overrides); the file is read in place.
    pub async fn start_file(path: &Path, env: &[(&str, &str)]) -> Gateway {
        let dir = tempfile::tempdir().unwrap();
        let (proc, base) = Self::spawn(path, env).await;
        Gateway {
            proc,
            base,
            config_path: path.to_owned(),
            peers: Vec::new(),
            redis: None,
            redis_cluster: None,
            turn: Default::default(),
            _dir: dir,
        }
    }

    async fn spawn(config_path: &Path, env: &[(&str, &str)]) -> (Proc, String) {
        let binary = gateway_bin();
        let limit = |key: &str| env.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
        let mut limits = String::new();
        // bash: `ulimit -f` counts KiB; an ignored signal stays ignored across
        // exec. Only the soft limit, so the test can lift it again (the
        // operator freeing space): [`Gateway::lift_file_limit`].
        if let Some(kib) = limit("AGUI_TEST_FILE_LIMIT_KIB") {
            limits.push_str(&format!("ulimit -S -f {kib}; trap '' XFSZ; "));
        }
        if let Some(fds) = limit("AGUI_TEST_FD_LIMIT") {
            limits.push_str(&format!("ulimit -n {fds}; "));
        }
        let mut cmd = if limits.is_empty() {
            Command::new(binary)
        } else {
            let mut c = Command::new("bash");
            c.arg("-c")
                .arg(format!("{limits}exec \"$0\" \"$@\""))
                .arg(binary);
            c
        };
        cmd.arg("--config").arg(config_path).arg("serve");
        cmd.env("AGUI_GATEWAY_LOG", "info,agui_gateway=debug");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut proc = Proc::spawn(cmd);
        let line = proc.expect_line("agui-gateway listening on ").await;
        let base = line["agui-gateway listening on ".len()..].trim().to_owned();
        (proc, base)
    }

    /// Starts a new gateway process on the same config and data directory
    /// (the old process is killed if still running).
    pub async fn restart(self) -> Gateway {
        let Gateway {
            proc,
            config_path,
            peers,
            redis,
            redis_cluster,
            _dir,
            ..
        } = self;
        // Killed and reaped before the new process binds the same port: a
        // process killed but not yet gone still holds its listening socket.
        let mut proc = proc;
        let _ = proc.child.kill().await;
        let (proc, base) = Self::spawn(&config_path, &[]).await;
        let mut restarted = Vec::new();
        for (n, (mut peer, _)) in peers.into_iter().enumerate() {
            let _ = peer.child.kill().await;
            let name = format!("n{}", n + 2);
            restarted
                .push(Self::spawn(&config_path, &[("AGUI_GATEWAY__STORE__NODE", &name)]).await);
        }
        Gateway {
            proc,
            base,
            config_path,
            peers: restarted,
            redis,
            redis_cluster,
            turn: Default::default(),
            _dir,
        }
    }

    /// The URL of `path` on the gateway.
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.next_base(), path)
    }

    /// The `/metrics` text (of the first node: counters are per process).
    pub async fn metrics(&self) -> String {
        http()
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// The `/metrics` text of every node (one in single-node mode).
    pub async fn metrics_of_every_node(&self) -> Vec<String> {
        let mut out = Vec::new();
        for base in std::iter::once(&self.base).chain(self.peers.iter().map(|(_, b)| b)) {
            out.push(
                http()
                    .get(format!("{base}/metrics"))
                    .send()
                    .await
                    .unwrap()
                    .text()
                    .await
                    .unwrap(),
            );
        }
        out
    }

    /// The run endpoint of `agent`.
    pub fn run_url(&self, agent: &str) -> String {
        self.url(&format!("/v1/agents/{agent}/run"))
    }
}

/// A Python agent from `tests/agents/<script>` and a gateway whose agent `id`
/// is that process's `path`, with `agent_extra` TOML for the agent entry.
pub async fn agent_behind_gateway(
    script: &str,
    path: &str,
    id: &str,
    agent_extra: &str,
) -> (PyAgent, Gateway) {
    let py = PyAgent::start(script).await;
    let gw = Gateway::start(&format!(
        "[[agents]]\nid = \"{id}\"\nurl = \"{}\"\n{agent_extra}\n",
        py.url(path)
    ))
    .await;
    (py, gw)
}

/// Signs a test token with [`SECRET`]; `claims` are merged over a default
/// (`sub` = "alice", roles ["user"], exp in one hour).
pub fn token(claims: Value) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut c = json!({"sub": "alice", "roles": ["user"], "exp": now + 3600});
    for (k, v) in claims.as_object().unwrap() {
        c[k] = v.clone();
    }
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &c,
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

/// A minimal valid `RunAgentInput`.
pub fn input(thread: &str, run: &str, text: &str) -> Value {
    json!({
        "threadId": thread, "runId": run,
        "messages": [{"id": "u1", "role": "user", "content": text}],
        "tools": [], "context": []
    })
}

/// The HTTP client tests use.
pub fn http() -> reqwest::Client {
    reqwest::Client::builder().timeout(WAIT).build().unwrap()
}

/// Sends `request` and reads its body as JSON, whatever the status (tests
/// assert on the body; a body that is not JSON fails the test here).
pub async fn json_of(request: reqwest::RequestBuilder) -> Value {
    request.send().await.unwrap().json().await.unwrap()
}

/// POSTs a run and returns (status, raw body).
pub async fn post_run(url: &str, token: &str, body: &Value) -> (u16, String) {
    post_run_on(&http(), url, token, body).await
}

/// Like [`post_run`], with `client` (e.g. one without the tests' time limit).
pub async fn post_run_on(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    body: &Value,
) -> (u16, String) {
    let resp = client
        .post(url)
        .bearer_auth(token)
        .json(body)
        .send()
        .await
        .expect("request");
    let status = resp.status().as_u16();
    (status, resp.text().await.expect("body"))
}

/// Splits an SSE body the way the AG-UI client does (frames on `\n\n`, `data:`
/// lines joined), independently of the gateway's own decoder. Comments are
/// dropped.
pub fn sse_data(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter_map(|frame| {
            let data: Vec<&str> = frame
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|l| l.strip_prefix(' ').unwrap_or(l))
                .collect();
            (!data.is_empty()).then(|| data.join("\n"))
        })
        .collect()
}

/// The events of an SSE body as JSON values.
pub fn sse_events(body: &str) -> Vec<Value> {
    sse_data(body)
        .iter()
        .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("not JSON: {d}: {e}")))
        .collect()
}

/// The `type` of each event.
pub fn types(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or("?").to_owned())
        .collect()
}

/// Asserts the stream ends with exactly one terminal event, a `RUN_ERROR`
/// with `code`, and returns its message.
pub fn assert_run_error(events: &[Value], code: &str) -> String {
    let terminals: Vec<_> = events
        .iter()
        .filter(|e| matches!(e["type"].as_str(), Some("RUN_ERROR" | "RUN_FINISHED")))
        .collect();
    assert_eq!(
        terminals.len(),
        1,
        "exactly one terminal event: {events:#?}"
    );
    let last = events.last().unwrap();
    assert_eq!(last["type"], "RUN_ERROR", "{events:#?}");
    assert_eq!(last["code"], code, "{last}");
    last["message"].as_str().unwrap().to_owned()
}

/// Runs a stock-client script from `tests/interop` with Node and returns the
/// JSON line it prints.
pub async fn node_client(script: &str, args: &[&str]) -> Value {
    node_client_env(script, args, &[]).await
}

/// [`node_client`] with extra environment variables for the script.
pub async fn node_client_env(script: &str, args: &[&str], env: &[(&str, &str)]) -> Value {
    let dir = repo().join("tests/interop");
    assert!(
        dir.join("node_modules/@ag-ui/client").exists(),
        "tests/interop/node_modules missing: run `bash .ci/run` once (npm ci)"
    );
    let out = tokio::time::timeout(
        WAIT,
        Command::new("node")
            .arg(dir.join(script))
            .args(args)
            .envs(env.iter().copied())
            .current_dir(&dir)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("node {script} timed out"))
    .expect("node runs");
    assert!(
        out.status.success(),
        "node {script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("bad output {e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// Path of a captured fixture stream (`tests/fixtures/streams`).
pub fn fixture(name: &str) -> PathBuf {
    repo().join("tests/fixtures/streams").join(name)
}

/// True when `path` exists (for messages).
pub fn exists(path: &Path) -> bool {
    path.exists()
}

/// A WebSocket client for the tests (tokio-tungstenite).
pub struct Ws {
    pub stream: tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
}

/// How a WebSocket connection presents its token.
pub enum WsAuth<'a> {
    None,
    Header(&'a str),
    Subprotocol(&'a str),
    Query(&'a str),
}

impl Ws {
    /// Connects to the gateway's `/v1/ws`; `Err(status)` when the upgrade is refused.
    pub async fn connect(gw: &Gateway, auth: WsAuth<'_>) -> Result<Ws, u16> {
        Self::connect_with(gw, auth, None, None).await
    }

    /// Full control: an `Origin` header and a receive-buffer size (a small
    /// one makes a viewer that stops reading back up quickly).
    pub async fn connect_with(
        gw: &Gateway,
        auth: WsAuth<'_>,
        origin: Option<&str>,
        recv_buffer: Option<usize>,
    ) -> Result<Ws, u16> {
        Self::connect_at(gw.next_base(), auth, origin, recv_buffer).await
    }

    /// [`Ws::connect_with`] to the node at `base` (`http://ip:port`), for a
    /// task that does not hold the [`Gateway`].
    pub async fn connect_at(
        base: &str,
        auth: WsAuth<'_>,
        origin: Option<&str>,
        recv_buffer: Option<usize>,
    ) -> Result<Ws, u16> {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let addr = base.trim_start_matches("http://").to_owned();
        let mut url = format!("ws://{addr}/v1/ws");
        if let WsAuth::Query(t) = auth {
            url.push_str(&format!("?access_token={t}"));
        }
        let mut req = url.into_client_request().unwrap();
        let h = req.headers_mut();
        match auth {
            WsAuth::Header(t) => {
                h.insert("authorization", format!("Bearer {t}").parse().unwrap());
            }
            WsAuth::Subprotocol(t) => {
                h.insert(
                    "sec-websocket-protocol",
                    format!("agui-gateway.v1, bearer.{t}").parse().unwrap(),
                );
            }
            _ => {}
        }
        if let Some(o) = origin {
            h.insert("origin", o.parse().unwrap());
        }
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        if let Some(size) = recv_buffer {
            socket.set_recv_buffer_size(size as u32).unwrap();
        }
        let tcp = socket.connect(addr.parse().unwrap()).await.unwrap();
        match tokio_tungstenite::client_async(req, tcp).await {
            Ok((stream, resp)) => {
                if let WsAuth::Subprotocol(_) = auth {
                    assert_eq!(resp.headers()["sec-websocket-protocol"], "agui-gateway.v1");
                }
                Ok(Ws { stream })
            }
            Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => Err(resp.status().as_u16()),
            Err(e) => panic!("websocket connect: {e}"),
        }
    }

    /// Sends a JSON command.
    pub async fn send(&mut self, v: Value) {
        use futures::SinkExt;
        self.stream
            .send(tokio_tungstenite::tungstenite::Message::Text(
                v.to_string().into(),
            ))
            .await
            .unwrap();
    }

    /// The next JSON frame; a close arrives as `{"close": code, "reason": …}`.
    pub async fn recv(&mut self) -> Value {
        // One deadline for the frame, so pings in between cannot extend it.
        tokio::time::timeout(WAIT, self.recv_frame())
            .await
            .expect("timed out waiting for a websocket frame")
    }

    /// The next JSON frame, however long it takes (for a caller that
    /// bounds the wait itself); a close arrives as `{"close": code, …}`.
    pub async fn recv_frame(&mut self) -> Value {
        use futures::StreamExt;
        use tokio_tungstenite::tungstenite::Message;
        loop {
            match self.stream.next().await {
                Some(Ok(Message::Text(t))) => return serde_json::from_str(&t).unwrap(),
                Some(Ok(Message::Close(f))) => {
                    let (code, reason) = f
                        .map(|f| (u16::from(f.code), f.reason.to_string()))
                        .unwrap_or((1005, String::new()));
                    return json!({"close": code, "reason": reason});
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => return json!({"close": 1006, "reason": e.to_string()}),
                None => return json!({"close": 1006, "reason": "eof"}),
            }
        }
    }

    /// Frames until (and including) the first one matching `done`.
    pub async fn recv_until(&mut self, done: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut out = Vec::new();
        loop {
            let v = self.recv().await;
            let stop = done(&v) || v.get("close").is_some();
            out.push(v);
            if stop {
                return out;
            }
        }
    }

    /// The frames from a command `id` that starts run `run_id` through its
    /// answer and that run's terminal event, in arrival order; `Err(answer)`
    /// when the command was refused. On a thread the connection already
    /// watches, the run's events — its end too, for a quick run on a loaded
    /// machine — may come before the ack (docs/protocol.md), so the events
    /// read while waiting for the ack are kept, not dropped.
    pub async fn answer_and_run(&mut self, id: &str, run_id: &str) -> Result<Vec<Value>, Value> {
        let ends = |f: &Value| is_terminal_frame(f) && f["event"]["runId"] == run_id;
        let mut frames = self.recv_until(|f| f["id"] == id).await;
        let answer = frames.last().unwrap();
        if answer["type"] != "ack" {
            return Err(answer.clone());
        }
        if !frames.iter().any(ends) {
            frames.extend(self.recv_until(ends).await);
        }
        Ok(frames)
    }
}

/// True for an `event` frame carrying a terminal AG-UI event.
pub fn is_terminal_frame(v: &Value) -> bool {
    v["type"] == "event"
        && matches!(
            v["event"]["type"].as_str(),
            Some("RUN_FINISHED" | "RUN_ERROR")
        )
}

/// A WebSocket viewer of `thread` from `after`, its `ack` read.
pub async fn subscribe(gw: &Gateway, token: &str, thread: &str, after: u64) -> Ws {
    let mut ws = Ws::connect(gw, WsAuth::Header(token)).await.unwrap();
    ws.send(json!({"type": "subscribe", "id": "s", "threadId": thread, "after": after}))
        .await;
    let ack = ws.recv().await;
    assert_eq!(ack["type"], "ack", "{ack}");
    ws
}

/// `(seq, event type)` of a viewer's frames.
pub fn journal(frames: &[Value]) -> Vec<(u64, String)> {
    frames
        .iter()
        .filter(|f| f["type"] == "event")
        .map(|f| {
            (
                f["seq"].as_u64().unwrap(),
                f["event"]["type"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The `seq`s of the event frames in `frames`.
pub fn seqs(frames: &[Value]) -> Vec<u64> {
    frames
        .iter()
        .filter(|f| f["type"] == "event")
        .map(|f| f["seq"].as_u64().unwrap())
        .collect()
}

/// Runs `runs` runs of `agent` on `thread` back to back, each sent the
/// moment the previous run's terminal event reaches the connection that
/// sends it: run `i` goes through `conns[(i / 2) % conns.len()]` (so, with
/// two connections on two nodes, a run follows one on its own node and one
/// on the other). Every connection watches the thread and reads every run
/// to its end. Returns the commands' refusals (empty when every run was
/// taken).
pub async fn back_to_back_runs(
    conns: &mut [Ws],
    (agent, thread): (&str, &str),
    runs: usize,
) -> Vec<Value> {
    let mut refused = Vec::new();
    for i in 0..runs {
        let run = format!("b2b-{i}");
        // Two runs in a row through each connection, in turn.
        let count = conns.len();
        let sender_of = |run: usize| (run / 2) % count;
        let sender = sender_of(i);
        conns[sender]
            .send(json!({"type": "run", "id": run, "agent": agent, "threadId": thread,
                         "runId": run, "messages": [{"id": format!("u-{run}"), "role": "user", "content": "again"}]}))
            .await;
        // The answer and this run's end on the sender (in either order: it
        // watches the thread), then the end on every other connection.
        let frames = match conns[sender].answer_and_run(&run, &run).await {
            Ok(frames) => frames,
            Err(answer) => {
                refused.push(answer);
                continue;
            }
        };
        assert!(
            frames.last().is_some_and(is_terminal_frame),
            "{:?}",
            frames.last()
        );
        // The next sender last, so it sends the moment it has the end.
        let next = sender_of(i + 1);
        let order = (0..conns.len()).filter(|c| *c != next && *c != sender);
        let order = order.chain([next].into_iter().filter(|c| *c != sender));
        for c in order {
            let frames = conns[c]
                .recv_until(|f| is_terminal_frame(f) && f["event"]["runId"] == run.as_str())
                .await;
            assert!(
                frames.last().is_some_and(is_terminal_frame),
                "{:?}",
                frames.last()
            );
        }
    }
    refused
}

/// Polls `/readyz` until it answers `status` (the condition is awaited;
/// there is no event to wait on from outside the process).
pub async fn until_ready_is(gw: &Gateway, status: u16) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let got = http()
            .get(gw.url("/readyz"))
            .send()
            .await
            .map(|r| r.status().as_u16())
            .unwrap_or(0);
        if got == status {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "/readyz stayed {got}, expected {status}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Waits until `thread`'s journal no longer holds seq 1 (its compaction
/// follows a run's end): a join from `after: 1` is answered with a reset
/// snapshot. Panics after 10 s.
pub async fn until_compacted(gw: &Gateway, claims: &Value, thread: &str) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let mut probe = Ws::connect(gw, WsAuth::Header(&token(claims.clone())))
            .await
            .expect("upgrade");
        probe
            .send(json!({"type": "subscribe", "id": "p", "threadId": thread, "after": 1}))
            .await;
        let first = probe.recv_until(|f| f["type"] != "ack").await;
        if first.last().unwrap()["reset"] == true {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never compacted: {first:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
