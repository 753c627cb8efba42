//! The command connection: to one Redis, or to a Redis Cluster (which
//! routes each command, script and single-slot pipeline to the master of
//! its slot and follows the cluster through failovers and resharding).

use ::redis::aio::{ConnectionLike, ConnectionManager};
use ::redis::cluster::ClusterClientBuilder;
use ::redis::cluster_async::ClusterConnection;
use ::redis::{Cmd, Pipeline, RedisFuture, Value};

/// One connection type for every part of the store.
#[derive(Clone)]
pub(super) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
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
    /// One Redis (`redis://host:port/db`).
    Single(String),
    /// A Redis Cluster: seed nodes, and the number of slot groups.
    Cluster(Vec<String>, u16),
}

/// A cluster client on `seeds`; `pushes`: RESP3 with pushes sent there (the
/// listening connection).
pub(super) fn cluster_client(
    seeds: &[String],
    pushes: Option<tokio::sync::mpsc::UnboundedSender<::redis::PushInfo>>,
) -> ::redis::RedisResult<::redis::cluster::ClusterClient> {
    let mut builder = ClusterClientBuilder::new(seeds.to_vec())
        .connection_timeout(std::time::Duration::from_secs(2))
        .response_timeout(super::RESPONSE_TIMEOUT)
        .retries(8)
        .max_retry_wait(1000);
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
