//! `[store]`: where journals live (memory, SQLite, Redis), with its checks.

use super::*;

/// Which journal backend, and how it commits.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct StoreConfig {
    /// `sqlite` (default, durable), `memory` (lost on exit), `redis`
    /// (several nodes sharing one Redis or Valkey) or `redis-cluster`
    /// (several nodes on a Redis Cluster: journals and fan-out sharded).
    pub kind: StoreKind,
    /// Redis URL (`redis://host:port/db`), for `kind = "redis"`; `${VAR}`
    /// is expanded, so a password can stay in the environment.
    pub url: Option<String>,
    /// Seed nodes of a Redis Cluster (`redis://host:port` or `rediss://`,
    /// user and password in the URL as for `url`), for
    /// `kind = "redis-cluster"`: any reachable one tells the rest.
    pub urls: Vec<String>,
    /// Redis Cluster: how many slot groups the threads are spread over.
    /// Every key of a thread, and its group's share of the thread listing
    /// and of the running set, carry the group's hash tag (one slot), so
    /// no script crosses slots; a listing or a sweep reads every group.
    /// At least 16 per master keeps the masters evenly loaded.
    pub cluster_groups: u16,
    /// TLS to Redis (`rediss://` URLs): the CAs to trust and a client
    /// certificate. Without it a `rediss://` server is checked against the
    /// system's CAs and no client certificate is sent.
    pub tls: Option<StoreTlsConfig>,
    /// Prefix of every Redis key (several deployments can share a Redis).
    pub prefix: String,
    /// This node's name on the bus (default: host name and process id).
    pub node: Option<String>,
    /// Within how long a dead node's runs are closed by another node with
    /// `RUN_ERROR gateway_node_lost` (Redis): its leases live ⅔ of this past
    /// their last renewal, and every node looks for expired ones every ¼.
    #[serde(with = "duration")]
    #[schemars(with = "duration::Text")]
    pub lease_ttl: Duration,
    /// SQLite file (relative to the config file's folder).
    pub path: PathBuf,
    /// SQLite `synchronous`: `normal` (survives a process crash), `full`
    /// (also survives power loss, one fsync per group commit), `off` or `extra`.
    pub synchronous: String,
    /// Most events in one group commit.
    pub max_batch_events: usize,
    /// SQLite: when the write-ahead log passes this many bytes, the writer
    /// checkpoints it completely and truncates it (between two group
    /// commits), so it stays bounded under any sustained load.
    pub max_wal_bytes: u64,
}

/// `[store.tls]`: the PEM files a `rediss://` connection uses (paths
/// relative to the config file), read at start-up and by `check-config`.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StoreTlsConfig {
    /// The CAs that sign the Redis servers' certificates, trusted instead
    /// of the system's (a private CA).
    pub ca: Option<PathBuf>,
    /// A client certificate chain, for servers that ask for one
    /// (`tls-auth-clients yes`); with `key`.
    pub cert: Option<PathBuf>,
    /// The client certificate's private key; with `cert`.
    pub key: Option<PathBuf>,
}

/// Journal backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema, Default)]
#[serde(rename_all = "lowercase")]
pub enum StoreKind {
    #[default]
    Sqlite,
    Memory,
    Redis,
    /// A Redis Cluster (`urls` are seed nodes).
    #[serde(rename = "redis-cluster")]
    RedisCluster,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            kind: StoreKind::Sqlite,
            url: None,
            urls: Vec::new(),
            cluster_groups: 128,
            tls: None,
            prefix: "agui".into(),
            node: None,
            lease_ttl: Duration::from_secs(10),
            path: PathBuf::from("data/agui-gateway.db"),
            synchronous: "normal".into(),
            max_batch_events: 4096,
            max_wal_bytes: 64 << 20,
        }
    }
}

impl StoreConfig {
    /// Checks of `[store]`.
    pub(super) fn check(&self, bad: &mut impl FnMut(String, String)) {
        if !matches!(
            self.synchronous.as_str(),
            "off" | "normal" | "full" | "extra"
        ) {
            bad(
                "store.synchronous".into(),
                format!("'{}' is not off, normal, full or extra", self.synchronous),
            );
        }
        if self.kind == StoreKind::RedisCluster {
            self.check_cluster(bad);
        }
        if matches!(self.kind, StoreKind::Redis | StoreKind::RedisCluster)
            && (self.prefix.contains('{') || self.prefix.contains('}'))
        {
            bad(
                "store.prefix".into(),
                "must not contain '{' or '}' (the gateway places the hash tags)".into(),
            );
        }
        if self.kind == StoreKind::Redis {
            match &self.url {
                None => bad(
                    "store.url".into(),
                    "kind = \"redis\" needs url = \"redis://host:port\"".into(),
                ),
                Some(u) if !u.starts_with("redis://") && !u.starts_with("rediss://") => bad(
                    "store.url".into(),
                    format!("'{u}' is not a redis:// or rediss:// URL"),
                ),
                Some(u) => {
                    if let Err(var) = expand_env(u) {
                        bad(
                            "store.url".into(),
                            format!("references unset environment variable {var}"),
                        );
                    }
                }
            }
        }
        if self.tls.is_some() {
            self.check_tls(bad);
        }
        if matches!(self.kind, StoreKind::Redis | StoreKind::RedisCluster)
            && self.lease_ttl < Duration::from_secs(1)
        {
            bad("store.lease_ttl".into(), "must be at least 1s".into());
        }
        if self.max_wal_bytes < 1 << 20 {
            bad(
                "store.max_wal_bytes".into(),
                "must be at least 1048576 (1 MiB)".into(),
            );
        }
    }

    /// Checks of `[store.tls]`: it is for `rediss://` URLs only, so a plain
    /// `redis://` beside it is a mistake (the operator meant TLS), not
    /// something to ignore. Its files are read by the start-up checks.
    fn check_tls(&self, bad: &mut impl FnMut(String, String)) {
        // Named by key, not shown: a URL may carry a password.
        let urls: Vec<(String, &String)> = match self.kind {
            StoreKind::Redis => self.url.iter().map(|u| ("store.url".into(), u)).collect(),
            StoreKind::RedisCluster => (self.urls.iter().enumerate())
                .map(|(i, u)| (format!("store.urls[{i}]"), u))
                .collect(),
            StoreKind::Sqlite | StoreKind::Memory => {
                bad(
                    "store.tls".into(),
                    "is for kind = \"redis\" or \"redis-cluster\" only".into(),
                );
                return;
            }
        };
        for (key, _) in urls.iter().filter(|(_, u)| !u.starts_with("rediss://")) {
            bad(
                "store.tls".into(),
                format!("{key} is not a rediss:// URL: [store.tls] is for TLS connections"),
            );
        }
    }

    /// Checks of `kind = "redis-cluster"`.
    fn check_cluster(&self, bad: &mut impl FnMut(String, String)) {
        if self.urls.is_empty() {
            bad(
                "store.urls".into(),
                "kind = \"redis-cluster\" needs urls = [\"redis://host:port\", …] (seed nodes)"
                    .into(),
            );
        }
        for u in &self.urls {
            if !u.starts_with("redis://") && !u.starts_with("rediss://") {
                bad(
                    "store.urls".into(),
                    format!("'{u}' is not a redis:// or rediss:// URL"),
                );
            } else if let Err(var) = expand_env(u) {
                bad(
                    "store.urls".into(),
                    format!("references unset environment variable {var}"),
                );
            }
        }
        if !(1..=16384).contains(&self.cluster_groups) {
            bad(
                "store.cluster_groups".into(),
                "must be between 1 and 16384".into(),
            );
        }
    }
}
