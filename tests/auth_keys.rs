//! Asymmetric JWT verification against the real gateway: RS256 from a PEM
//! file, ES256 from a JWKS file, EdDSA from a JWKS URL (served by a real
//! `python -m http.server`), key rotation, the unknown-`kid` re-fetch limit,
//! and algorithm confusion. Keys are generated per test with `openssl`.

mod common;

use common::*;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use tokio::process::Command;

/// A fresh key pair: (private PEM path, public PEM path).
fn keypair(dir: &Path, name: &str, kind: &[&str]) -> (PathBuf, PathBuf) {
    let private = dir.join(format!("{name}.pem"));
    let public = dir.join(format!("{name}.pub.pem"));
    let ok = std::process::Command::new("openssl")
        .arg("genpkey")
        .args(kind)
        .arg("-out")
        .arg(&private)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl is installed (.ci/run installs it)");
    assert!(ok.success());
    let ok = std::process::Command::new("openssl")
        .args(["pkey", "-pubout", "-in"])
        .arg(&private)
        .arg("-out")
        .arg(&public)
        .status()
        .unwrap();
    assert!(ok.success());
    (private, public)
}

const RSA: &[&str] = &["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"];
const EC: &[&str] = &["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"];
const ED: &[&str] = &["-algorithm", "ed25519"];

fn encoding_key(alg: Algorithm, private: &Path) -> EncodingKey {
    let pem = std::fs::read(private).unwrap();
    match alg {
        Algorithm::RS256 => EncodingKey::from_rsa_pem(&pem).unwrap(),
        Algorithm::ES256 => EncodingKey::from_ec_pem(&pem).unwrap(),
        Algorithm::EdDSA => EncodingKey::from_ed_pem(&pem).unwrap(),
        _ => unreachable!(),
    }
}

fn sign(alg: Algorithm, key: &EncodingKey, kid: Option<&str>) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_owned);
    let exp = jsonwebtoken::get_current_timestamp() + 600;
    jsonwebtoken::encode(
        &header,
        &json!({"sub": "kim", "roles": ["user"], "exp": exp}),
        key,
    )
    .unwrap()
}

fn jwks(keys: &[(Algorithm, &EncodingKey, &str)]) -> String {
    let set = JwkSet {
        keys: keys
            .iter()
            .map(|(alg, key, kid)| {
                let mut jwk = Jwk::from_encoding_key(key, *alg).unwrap();
                jwk.common.key_id = Some((*kid).to_owned());
                jwk
            })
            .collect(),
    };
    serde_json::to_string(&set).unwrap()
}

/// GET /v1/agents with `token`: Ok(()) or the refusal's `reason`.
async fn check(gw: &Gateway, token: &str) -> Result<(), String> {
    check_with(&http(), gw, token).await
}

/// [`check`] on a client the caller keeps (building one costs more than a
/// request, which matters where a test times requests).
async fn check_with(client: &reqwest::Client, gw: &Gateway, token: &str) -> Result<(), String> {
    let resp = client
        .get(gw.url("/v1/agents"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    if resp.status() == 200 {
        return Ok(());
    }
    let v: Value = resp.json().await.unwrap();
    Err(v["error"]["reason"].as_str().unwrap_or("?").to_owned())
}

#[tokio::test]
async fn rs256_from_pem_and_algorithm_confusion_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (private, public) = keypair(dir.path(), "rsa", RSA);
    let key = encoding_key(Algorithm::RS256, &private);
    let gw = Gateway::start_config(
        &format!(
            "[auth]\nalgorithms = [\"RS256\", \"HS256\"]\nhs_secret = \"{SECRET}\"\npublic_key_pem = \"{}\"\n",
            public.display()
        ),
        &[],
    )
    .await;
    check(&gw, &sign(Algorithm::RS256, &key, None))
        .await
        .unwrap();
    // Classic confusion: HS256 "signed" with the public key as the HMAC secret.
    let public_pem = std::fs::read(&public).unwrap();
    let forged = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &json!({"sub": "mallory", "exp": jsonwebtoken::get_current_timestamp() + 600}),
        &EncodingKey::from_secret(&public_pem),
    )
    .unwrap();
    assert_eq!(check(&gw, &forged).await.unwrap_err(), "bad_signature");

    // With only RS256 enabled the HS token is refused before any key is tried.
    let gw = Gateway::start_config(
        &format!(
            "[auth]\nalgorithms = [\"RS256\"]\npublic_key_pem = \"{}\"\n",
            public.display()
        ),
        &[],
    )
    .await;
    assert_eq!(
        check(&gw, &forged).await.unwrap_err(),
        "algorithm_not_allowed"
    );
    // A token signed by another RSA key does not verify.
    let (other, _) = keypair(dir.path(), "other", RSA);
    let other = encoding_key(Algorithm::RS256, &other);
    assert_eq!(
        check(&gw, &sign(Algorithm::RS256, &other, None))
            .await
            .unwrap_err(),
        "bad_signature"
    );
}

#[tokio::test]
async fn es256_from_jwks_file_by_kid() {
    let dir = tempfile::tempdir().unwrap();
    let (p1, _) = keypair(dir.path(), "ec1", EC);
    let (p2, _) = keypair(dir.path(), "ec2", EC);
    let (k1, k2) = (
        encoding_key(Algorithm::ES256, &p1),
        encoding_key(Algorithm::ES256, &p2),
    );
    let file = dir.path().join("jwks.json");
    std::fs::write(
        &file,
        jwks(&[
            (Algorithm::ES256, &k1, "one"),
            (Algorithm::ES256, &k2, "two"),
        ]),
    )
    .unwrap();
    let gw = Gateway::start_config(
        &format!(
            "[auth]\nalgorithms = [\"ES256\"]\njwks_file = \"{}\"\n",
            file.display()
        ),
        &[],
    )
    .await;
    check(&gw, &sign(Algorithm::ES256, &k1, Some("one")))
        .await
        .unwrap();
    check(&gw, &sign(Algorithm::ES256, &k2, Some("two")))
        .await
        .unwrap();
    assert_eq!(
        check(&gw, &sign(Algorithm::ES256, &k1, Some("two")))
            .await
            .unwrap_err(),
        "bad_signature"
    );
    assert_eq!(
        check(&gw, &sign(Algorithm::ES256, &k1, Some("three")))
            .await
            .unwrap_err(),
        "unknown_key"
    );
    // Two keys and no kid: ambiguous, refused rather than guessed.
    assert_eq!(
        check(&gw, &sign(Algorithm::ES256, &k1, None))
            .await
            .unwrap_err(),
        "unknown_key"
    );
}

/// Serves `dir` with `python -m http.server`; returns the process and port.
async fn serve_dir(dir: &Path) -> (Proc, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cmd = Command::new(python());
    cmd.args([
        "-u",
        "-m",
        "http.server",
        "--bind",
        "127.0.0.1",
        &port.to_string(),
    ])
    .current_dir(dir);
    let mut proc = Proc::spawn(cmd);
    proc.expect_line("Serving HTTP").await;
    (proc, port)
}

fn fetches(proc: &Proc) -> usize {
    proc.stderr().matches("GET /jwks.json").count()
}

#[tokio::test]
async fn eddsa_from_jwks_url_with_rotation_and_bounded_refetch() {
    let dir = tempfile::tempdir().unwrap();
    let (p1, _) = keypair(dir.path(), "ed1", ED);
    let (p2, _) = keypair(dir.path(), "ed2", ED);
    let (k1, k2) = (
        encoding_key(Algorithm::EdDSA, &p1),
        encoding_key(Algorithm::EdDSA, &p2),
    );
    let web = dir.path().join("web");
    std::fs::create_dir(&web).unwrap();
    std::fs::write(
        web.join("jwks.json"),
        jwks(&[(Algorithm::EdDSA, &k1, "k1")]),
    )
    .unwrap();
    let (server, port) = serve_dir(&web).await;

    // Re-fetch for unknown kids allowed at once: rotation is picked up.
    let gw = Gateway::start_config(
        &format!(
            "[auth]\nalgorithms = [\"EdDSA\"]\njwks_url = \"http://127.0.0.1:{port}/jwks.json\"\n\
             jwks_unknown_kid_interval = \"0s\"\n"
        ),
        &[],
    )
    .await;
    check(&gw, &sign(Algorithm::EdDSA, &k1, Some("k1")))
        .await
        .unwrap();
    check(&gw, &sign(Algorithm::EdDSA, &k1, Some("k1")))
        .await
        .unwrap();
    assert_eq!(fetches(&server), 1, "cached between tokens");
    std::fs::write(
        web.join("jwks.json"),
        jwks(&[(Algorithm::EdDSA, &k2, "k2")]),
    )
    .unwrap();
    check(&gw, &sign(Algorithm::EdDSA, &k2, Some("k2")))
        .await
        .unwrap();
    assert_eq!(fetches(&server), 2, "one re-fetch for the new kid");

    // With a long interval, a flood of unknown kids causes no extra fetches.
    let gw2 = Gateway::start_config(
        &format!(
            "[auth]\nalgorithms = [\"EdDSA\"]\njwks_url = \"http://127.0.0.1:{port}/jwks.json\"\n\
             jwks_unknown_kid_interval = \"1h\"\n"
        ),
        &[],
    )
    .await;
    check(&gw2, &sign(Algorithm::EdDSA, &k2, Some("k2")))
        .await
        .unwrap();
    let before = fetches(&server);
    for i in 0..10 {
        let kid = format!("forged-{i}");
        assert_eq!(
            check(&gw2, &sign(Algorithm::EdDSA, &k1, Some(&kid)))
                .await
                .unwrap_err(),
            "unknown_key"
        );
    }
    assert_eq!(fetches(&server), before, "unknown kids are rate-limited");
}

/// How [`KeyServer`] answers.
#[derive(Clone, Copy, Debug, PartialEq)]
enum KeyMode {
    /// 200 with the JWKS.
    Serve,
    /// 500 to every request.
    Fail,
    /// Reads the request and never answers.
    Hang,
    /// The port is closed: connections are refused by the kernel.
    Closed,
}

/// A real HTTP key server on loopback whose failure mode the test switches,
/// counting the requests it receives. `Connection: close` on every answer,
/// so the gateway opens a connection per fetch and nothing is pooled.
struct KeyServer {
    port: u16,
    jwks: String,
    requests: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    mode: std::sync::Arc<std::sync::Mutex<KeyMode>>,
    accept: Option<tokio::task::JoinHandle<()>>,
}

impl KeyServer {
    async fn start(jwks: String) -> KeyServer {
        let mut server = KeyServer {
            port: 0,
            jwks,
            requests: Default::default(),
            mode: std::sync::Arc::new(std::sync::Mutex::new(KeyMode::Serve)),
            accept: None,
        };
        server.listen().await;
        server
    }

    async fn listen(&mut self) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let addr = format!("127.0.0.1:{}", self.port);
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        self.port = listener.local_addr().unwrap().port();
        let (jwks, requests, mode) = (self.jwks.clone(), self.requests.clone(), self.mode.clone());
        self.accept = Some(tokio::spawn(async move {
            loop {
                let (mut sock, _) = listener.accept().await.unwrap();
                let (jwks, requests, mode) = (jwks.clone(), requests.clone(), mode.clone());
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 1024];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match sock.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    requests.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let mode = *mode.lock().unwrap();
                    let (status, body) = match mode {
                        KeyMode::Serve => ("200 OK", jwks.as_str()),
                        KeyMode::Fail => ("500 Internal Server Error", "{}"),
                        KeyMode::Hang | KeyMode::Closed => {
                            // Held open until the gateway gives up.
                            let _ = sock.read(&mut chunk).await;
                            return;
                        }
                    };
                    let head = format!(
                        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = sock.write_all(head.as_bytes()).await;
                    let _ = sock.write_all(body.as_bytes()).await;
                });
            }
        }));
    }

    async fn set(&mut self, mode: KeyMode) {
        *self.mode.lock().unwrap() = mode;
        match (mode, &self.accept) {
            (KeyMode::Closed, Some(accept)) => {
                accept.abort();
                let _ = self.accept.take().unwrap().await;
            }
            (KeyMode::Closed, None) => {}
            (_, None) => self.listen().await,
            (_, Some(_)) => {}
        }
    }

    fn requests(&self) -> usize {
        self.requests.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// `agui_jwks_fetches_total{result="error"}` of `gw`.
async fn failed_fetches(gw: &Gateway) -> usize {
    let text = gw.metrics().await;
    text.lines()
        .find(|l| l.starts_with("agui_jwks_fetches_total{result=\"error\"}"))
        .and_then(|l| l.rsplit(' ').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// A key server that answers 500, hangs, or has its port closed: 200 tokens
/// with unknown kids cause a handful of fetches (single flight, backoff),
/// not one each; no authentication waits longer than `auth.jwks_timeout`
/// (plus scheduling slack); and a kid the gateway already knows keeps
/// working throughout, although the cached set has gone stale.
#[tokio::test]
async fn failing_key_server_is_backed_off_and_known_keys_keep_working() {
    let dir = tempfile::tempdir().unwrap();
    let (p1, _) = keypair(dir.path(), "ed1", ED);
    let k1 = encoding_key(Algorithm::EdDSA, &p1);
    let known = sign(Algorithm::EdDSA, &k1, Some("k1"));
    let bound = std::time::Duration::from_millis(500);
    let slack = std::time::Duration::from_millis(700);
    for mode in [KeyMode::Fail, KeyMode::Hang, KeyMode::Closed] {
        let mut server = KeyServer::start(jwks(&[(Algorithm::EdDSA, &k1, "k1")])).await;
        // Keys go stale after 1 s, so the flood below meets a stale set and
        // the known kid is checked on the path that refreshes it.
        let gw = Gateway::start_config(
            &format!(
                "[auth]\nalgorithms = [\"EdDSA\"]\njwks_url = \"http://127.0.0.1:{}/jwks.json\"\n\
                 jwks_min_refresh = \"1s\"\njwks_max_refresh = \"1s\"\njwks_timeout = \"{}ms\"\n",
                server.port,
                bound.as_millis()
            ),
            &[],
        )
        .await;
        check(&gw, &known).await.unwrap();
        assert_eq!(server.requests(), 1);
        server.set(mode).await;
        // Time, not an event, is what makes the cached set stale.
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;

        // Each authentication is timed on its own.
        let client = http();
        let timed = |token: String| {
            let (client, gw) = (&client, &gw);
            async move {
                let started = std::time::Instant::now();
                let result = check_with(client, gw, &token).await;
                (result, started.elapsed())
            }
        };
        let flood_started = std::time::Instant::now();
        let mut slowest = std::time::Duration::ZERO;
        for round in 0..8 {
            let forged = (0..25).map(|i| {
                timed(sign(
                    Algorithm::EdDSA,
                    &k1,
                    Some(&format!("forged-{round}-{i}")),
                ))
            });
            let ((known_result, took), forged) =
                tokio::join!(timed(known.clone()), futures::future::join_all(forged));
            slowest = slowest.max(took);
            assert_eq!(
                known_result,
                Ok(()),
                "{mode:?}: the known kid keeps working"
            );
            for (result, took) in forged {
                slowest = slowest.max(took);
                assert_eq!(result.unwrap_err(), "unknown_key", "{mode:?}");
            }
        }
        let flood = flood_started.elapsed();
        let failed = failed_fetches(&gw).await;
        let received = server.requests() - 1;
        eprintln!(
            "{mode:?}: 200 unknown kids in {flood:?} → {failed} failed fetches, {received} \
             requests at the key server; slowest authentication {slowest:?}"
        );
        // Backoff 1 s, 2 s, 4 s …: within `flood`, at most this many fetches.
        let allowed = 2 + flood.as_secs_f64().log2().max(0.0).floor() as usize;
        assert!(
            (1..=allowed).contains(&failed),
            "{mode:?}: {failed} fetches for 200 unknown kids in {flood:?}"
        );
        if mode != KeyMode::Closed {
            assert_eq!(
                received, failed,
                "{mode:?}: every failed fetch reached the server"
            );
        }
        assert!(
            slowest < bound + slack,
            "{mode:?}: an authentication took {slowest:?}"
        );
    }
}
