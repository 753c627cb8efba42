//! Redis over TLS with a password (`rediss://`, `[store.tls]`): one Redis
//! and a Redis Cluster, each a real `redis-server` that accepts TLS only,
//! requires a client certificate and a password. Two gateway nodes share a
//! thread through it, the password comes from the environment (`${VAR}`)
//! and never reaches a log, and a node that cannot verify the server says
//! so instead of serving.

mod common;

use common::*;
use serde_json::json;

/// A node on the secured Redis at `urls` (`url` for one Redis, `urls` for a
/// cluster), the password in `REDIS_PASSWORD`.
async fn node(store: &str, security: &RedisSecurity, name: &str, agent_url: &str) -> Gateway {
    Gateway::start_with_env(
        &format!(
            "{store}node = \"{name}\"\n{}[[agents]]\nid = \"ok\"\nurl = \"{agent_url}\"\n",
            security.store_tls()
        ),
        &[("REDIS_PASSWORD", &security.password)],
    )
    .await
}

/// A run on one node, watched live from the other, and read back whole
/// from the store by a late viewer there: every part of the store (the
/// command connection, the writer, the subscriptions) went through TLS.
async fn two_nodes_share_a_thread(store: &str, security: &RedisSecurity) {
    let py = PyAgent::start("scripted_agent.py").await;
    let a = node(store, security, "a", &py.url("ok")).await;
    let b = node(store, security, "b", &py.url("ok")).await;
    let t = token(json!({"sub": "alice"}));
    let (status, body) = post_run(&a.run_url("ok"), &t, &input("tls", "r1", "hi")).await;
    assert_eq!(status, 200, "{body}");
    let first = sse_events(&body).len() as u64;

    let mut live = subscribe(&b, &t, "tls", first).await;
    let mut second = input("tls", "r2", "again");
    second["messages"][0]["id"] = "u-2".into();
    let (status, body) = post_run(&a.run_url("ok"), &t, &second).await;
    assert_eq!(status, 200, "{body}");
    let seen = journal(&live.recv_until(is_terminal_frame).await);
    let sent = sse_events(&body);
    assert_eq!(seen.len(), sent.len(), "node B's viewer saw the whole run");
    assert_eq!(
        seen.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        (first + 1..=first + sent.len() as u64).collect::<Vec<_>>()
    );

    let mut late = subscribe(&b, &t, "tls", 0).await;
    let replay = journal(&late.recv_until(is_terminal_frame).await);
    assert_eq!(replay.len() as u64, first, "the first run, read back");
    let mut rest = journal(&late.recv_until(is_terminal_frame).await);
    rest.retain(|(s, _)| *s > first);
    assert_eq!(rest, seen, "the same journal, read back from the store");

    for gw in [&a, &b] {
        assert!(
            !gw.proc.stderr().contains(&security.password),
            "the password reached a log"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_share_a_thread_through_one_redis_over_tls_with_a_password() {
    let security = RedisSecurity::new();
    let redis = RedisServer::start_secured(&security).await;
    let store = format!(
        "[store]\nkind = \"redis\"\nurl = \"rediss://:${{REDIS_PASSWORD}}@127.0.0.1:{}\"\n",
        redis.port
    );
    two_nodes_share_a_thread(&store, &security).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_share_a_thread_through_a_redis_cluster_over_tls_with_a_password() {
    let security = RedisSecurity::new();
    let cluster = RedisCluster::start_secured(&security).await;
    let urls: Vec<String> = (cluster.nodes.iter().take(3))
        .map(|n| format!("\"rediss://:${{REDIS_PASSWORD}}@127.0.0.1:{}\"", n.port))
        .collect();
    let store = format!(
        "[store]\nkind = \"redis-cluster\"\nurls = [{}]\n",
        urls.join(", ")
    );
    two_nodes_share_a_thread(&store, &security).await;
}

/// A server whose certificate the node cannot verify (signed by another CA
/// than `[store.tls] ca`) is not served from: the node keeps retrying at
/// start-up and says why, naming the certificate, without the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_the_node_cannot_verify_is_named_and_not_served_from() {
    let security = RedisSecurity::new();
    let redis = RedisServer::start_secured(&security).await;
    let other = RedisSecurity::new();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[auth]\nhs_secret = \"{}\"\n[store]\nkind = \"redis\"\nurl = \"rediss://:${{REDIS_PASSWORD}}@127.0.0.1:{}\"\nnode = \"a\"\n[store.tls]\nca = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\n",
        SECRET,
        redis.port,
        other.ca.display(),
        security.cert.display(),
        security.key.display(),
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, config).unwrap();
    let mut cmd = tokio::process::Command::new(gateway_bin());
    cmd.arg("--config")
        .arg(&path)
        .arg("serve")
        .env("REDIS_PASSWORD", &security.password);
    let proc = Proc::spawn(cmd);
    proc.expect_stderr("redis unreachable at start-up").await;
    let log = proc.stderr();
    let line = log
        .lines()
        .find(|l| l.contains("redis unreachable at start-up"))
        .unwrap();
    assert!(
        line.to_lowercase().contains("certificate"),
        "the reason names the certificate: {line}"
    );
    assert!(!log.contains(&security.password), "{log}");
}

/// `check-config` reads `[store.tls]`'s files and refuses it beside a plain
/// `redis://` URL (TLS was meant), naming the key, never the URL.
#[tokio::test]
async fn check_config_names_bad_store_tls() {
    let dir = tempfile::tempdir().unwrap();
    let check = |store: &str| {
        let path = dir.path().join("gateway.toml");
        std::fs::write(&path, format!("[auth]\nhs_secret = \"{SECRET}\"\n{store}")).unwrap();
        let out = std::process::Command::new(gateway_bin())
            .arg("--config")
            .arg(&path)
            .arg("check-config")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = check(
        "[store]\nkind = \"redis\"\nurl = \"rediss://:hunter2@127.0.0.1:6390\"\n[store.tls]\nca = \"missing-ca.pem\"\n",
    );
    assert!(
        err.contains("gateway.toml: store.tls.ca: ") && err.contains("missing-ca.pem"),
        "{err}"
    );
    let err = check(
        "[store]\nkind = \"redis\"\nurl = \"redis://:hunter2@127.0.0.1:6390\"\n[store.tls]\n",
    );
    assert!(
        err.contains("store.tls: store.url is not a rediss:// URL"),
        "{err}"
    );
    assert!(
        !err.contains("hunter2"),
        "a URL's password in an error: {err}"
    );
    let security = RedisSecurity::new();
    let err = check(&format!(
        "[store]\nkind = \"redis\"\nurl = \"rediss://127.0.0.1:6390\"\n[store.tls]\ncert = \"{}\"\n",
        security.cert.display()
    ));
    assert!(
        err.contains("store.tls.key: cert is set without key"),
        "{err}"
    );
}
