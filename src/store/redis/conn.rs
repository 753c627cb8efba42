//! The command connection: to one Redis, or to a Redis Cluster (which
//! routes each command, script and single-slot pipeline to the master of
//! its slot and follows the cluster through failovers and resharding).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use ::redis::aio::{ConnectionLike, ConnectionManager};
use ::redis::cluster::{ClusterClient, ClusterClientBuilder};
use ::redis::cluster_async::ClusterConnection;
use ::redis::{Cmd, Pipeline, RedisError, RedisFuture, RedisResult, TlsCertificates, Value};

/// One connection type for every part of the store.
#[derive(Clone)]
pub(super) enum Conn {
    Single(ConnectionManager),
    Cluster(Renewed),
}

/// How long commands may keep failing to reach a node before the cluster
/// connection is built anew: well inside a lease's life (1.33 s by
/// default is renewed every third of it, and a renewal that fails once is
/// retried), so a failover is followed before every lease lapses.
pub(super) const RENEW_AFTER: Duration = Duration::from_secs(1);

/// A cluster connection that is replaced by a new one, built from the
/// seeds, when commands keep failing to reach a node.
///
/// Why: redis 1.8's cluster client refreshes its slot map when a
/// connection is lost; if that refresh comes before the dead master's
/// replica is promoted, it keeps the dead address and then only
/// reconnects there (60-90 s here), so every command to those slots times
/// out. A new connection asks the live nodes again who holds each slot.
/// Clones share the swapped connection.
#[derive(Clone)]
pub(super) struct Renewed {
    client: Arc<ClusterClient>,
    state: Arc<Mutex<Renewal>>,
}

/// The current connection and how long commands have failed on it.
///
/// Failures are tracked as a streak, not reset by a success: with one
/// master dead and the others healthy, commands to the healthy ones keep
/// succeeding while every command to the dead one's slots fails, and a
/// success resetting the clock would never let the renewal happen. The
/// streak ends when no command has failed for [`RENEW_AFTER`].
struct Renewal {
    conn: ClusterConnection,
    streak: Streak,
    renewing: bool,
}

/// How long commands have been failing to reach a node.
#[derive(Default, Debug)]
struct Streak {
    /// When the current streak's first failing command was sent.
    failing_since: Option<Instant>,
    /// The streak's latest failure.
    last_failure: Option<Instant>,
}

impl Streak {
    /// A command sent at `sent` failed to reach its node at `now`; true
    /// when the streak has lasted [`RENEW_AFTER`].
    ///
    /// The streak counts from when the failing command was *sent*: a
    /// command to a dead master's slots is not answered "refused" but
    /// waits, the client reconnecting to the dead address until the
    /// response timeout (5 s), so its failure alone says the node has been
    /// unreachable for that long. Counted from its failure instead, the
    /// renewal waited for a second failure a second later, about 6 s after
    /// the master died; a run lease living 6.7 s (`lease_ttl = "10s"`) then
    /// lapsed before the renewed connection could renew it, and another
    /// node closed the run as `gateway_node_lost` (seen in CI,
    /// `redis_cluster::a_run_survives_the_loss_of_its_master`).
    fn failed(&mut self, sent: Instant, now: Instant) -> bool {
        if self.last_failure.is_none_or(|l| now - l >= RENEW_AFTER) {
            self.failing_since = Some(sent);
        }
        self.failing_since = self.failing_since.map(|f| f.min(sent));
        self.last_failure = Some(now);
        now - self.failing_since.unwrap_or(now) >= RENEW_AFTER
    }
}

impl Renewed {
    /// Connects to the cluster through `seeds`.
    pub(super) async fn connect(
        seeds: &[String],
        tls: Option<&TlsCertificates>,
    ) -> RedisResult<Renewed> {
        let client = cluster_client(seeds, tls, None)?;
        let conn = client.get_async_connection().await?;
        Ok(Renewed {
            client: Arc::new(client),
            state: Arc::new(Mutex::new(Renewal {
                conn,
                streak: Streak::default(),
                renewing: false,
            })),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Renewal> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The connection commands go to now.
    fn current(&self) -> ClusterConnection {
        self.lock().conn.clone()
    }

    /// Notes how a command ended; after [`RENEW_AFTER`] of failures to
    /// reach a node (a streak with no gap of that long between two of
    /// them), builds a new connection in the background (one at a time)
    /// and swaps it in.
    fn observe<T>(&self, result: &RedisResult<T>, sent: Instant) {
        let Err(e) = result else { return };
        if !unreachable(e) {
            return;
        }
        let mut state = self.lock();
        if !state.streak.failed(sent, Instant::now()) || state.renewing {
            return;
        }
        state.renewing = true;
        drop(state);
        tokio::spawn(self.clone().renew());
    }

    /// A command sent at `sent` got no answer within its caller's own
    /// deadline (the caller gave up on it): counted as a failure to reach
    /// its node, as the client's own timeout would be.
    fn unanswered(&self, sent: Instant) {
        let mut state = self.lock();
        if !state.streak.failed(sent, Instant::now()) || state.renewing {
            return;
        }
        state.renewing = true;
        drop(state);
        tokio::spawn(self.clone().renew());
    }

    /// Builds the new connection; on failure the next failing command
    /// tries again.
    async fn renew(self) {
        let built = self.client.get_async_connection().await;
        let mut state = self.lock();
        state.renewing = false;
        match built {
            Ok(conn) => {
                tracing::warn!("redis cluster connection renewed: a node stayed unreachable");
                state.conn = conn;
                state.streak = Streak::default();
            }
            Err(e) => tracing::warn!("redis cluster connection not renewed: {e}"),
        }
    }
}

/// Errors that say a node could not be reached (not a command's own).
pub(super) fn unreachable(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_cluster_error()
        || e.kind() == ::redis::ErrorKind::ClusterConnectionNotFound
}

impl ConnectionLike for Renewed {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let sent = Instant::now();
            let result = self.current().req_packed_command(cmd).await;
            self.observe(&result, sent);
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let sent = Instant::now();
            let mut conn = self.current();
            let result = conn.req_packed_commands(pipeline, offset, count).await;
            self.observe(&result, sent);
            result
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

impl Conn {
    /// A command sent at `sent` got no answer within its caller's deadline
    /// (a lease renewal, which cannot wait out the client's 5 s response
    /// timeout): on a cluster it counts toward building the connection
    /// anew, as a failure to reach a node does.
    pub(super) fn unanswered(&self, sent: Instant) {
        if let Conn::Cluster(c) = self {
            c.unanswered(sent);
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// Where a store connects.
#[derive(Debug, Clone)]
pub enum Target {
    /// One Redis (`redis://host:port/db`, `rediss://` for TLS).
    Single {
        url: String,
        /// For `rediss://`: the CAs to trust instead of the system's, and
        /// a client certificate; `None`: the system's CAs, no certificate.
        tls: Option<TlsCertificates>,
    },
    /// A Redis Cluster: seed nodes, and the number of slot groups.
    Cluster {
        seeds: Vec<String>,
        groups: u16,
        /// As for [`Target::Single`], for every node of the cluster.
        tls: Option<TlsCertificates>,
    },
}

impl Target {
    /// One Redis at `url`, with the system's CAs if it is `rediss://`.
    pub fn single(url: &str) -> Target {
        Target::Single {
            url: url.to_owned(),
            tls: None,
        }
    }
}

/// A client for one Redis at `url`, with `tls`'s certificates if given.
pub(super) fn single_client(
    url: &str,
    tls: Option<&TlsCertificates>,
) -> RedisResult<::redis::Client> {
    match tls {
        Some(tls) => ::redis::Client::build_with_tls(url, tls.clone()),
        None => ::redis::Client::open(url),
    }
}

/// A cluster client on `seeds`; `pushes`: RESP3 with pushes sent there (the
/// listening connection).
pub(super) fn cluster_client(
    seeds: &[String],
    tls: Option<&TlsCertificates>,
    pushes: Option<tokio::sync::mpsc::UnboundedSender<::redis::PushInfo>>,
) -> ::redis::RedisResult<::redis::cluster::ClusterClient> {
    let mut builder = ClusterClientBuilder::new(seeds.to_vec())
        .connection_timeout(std::time::Duration::from_secs(2))
        .response_timeout(super::RESPONSE_TIMEOUT)
        .retries(8)
        .max_retry_wait(1000);
    if let Some(tls) = tls {
        builder = builder.certs(tls.clone());
    }
    if let Some(pushes) = pushes {
        builder = builder
            .use_protocol(::redis::ProtocolVersion::RESP3)
            .push_sender(pushes);
    }
    builder.build()
}

/// The subscribe side of the listening connection.
#[derive(Clone)]
pub(super) enum Subscriber {
    /// One Redis: plain channels on the pub/sub connection.
    Single(::redis::aio::PubSubSink),
    /// A cluster: a thread's channel is a shard channel (`SSUBSCRIBE` on
    /// the master of its slot), so its publications reach only the nodes
    /// that hold it and no master carries every thread's.
    Cluster(ClusterConnection),
}

impl Subscriber {
    /// Starts hearing a thread's channel.
    pub(super) async fn subscribe(&mut self, channel: String) -> ::redis::RedisResult<()> {
        match self {
            Subscriber::Single(s) => s.subscribe(channel).await,
            Subscriber::Cluster(c) => c.ssubscribe(channel).await,
        }
    }

    /// Stops hearing a thread's channel.
    pub(super) async fn unsubscribe(&mut self, channel: String) -> ::redis::RedisResult<()> {
        match self {
            Subscriber::Single(s) => s.unsubscribe(channel).await,
            Subscriber::Cluster(c) => c.sunsubscribe(channel).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_command_that_waited_past_the_renewal_time_renews_at_once() {
        // A command to a dead master's slots waits out the response
        // timeout: its one failure is enough.
        let t0 = Instant::now();
        let mut streak = Streak::default();
        assert!(streak.failed(t0, t0 + 5000 * MS));
    }

    #[test]
    fn quick_failures_renew_once_they_have_lasted_the_renewal_time() {
        let t0 = Instant::now();
        let mut streak = Streak::default();
        assert!(!streak.failed(t0, t0 + MS), "one refusal is not a streak");
        assert!(!streak.failed(t0 + 500 * MS, t0 + 501 * MS));
        assert!(streak.failed(t0 + 1000 * MS, t0 + 1001 * MS));
        // A gap of the renewal time ends a streak; the next starts over.
        let t1 = t0 + 3000 * MS;
        assert!(!streak.failed(t1, t1 + MS));
        assert!(streak.failed(t1 + 1000 * MS, t1 + 1000 * MS));
    }
}
