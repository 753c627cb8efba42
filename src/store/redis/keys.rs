//! Key names, and the hash tags that decide which slot each key lives in.
//!
//! One Redis has one keyspace: a thread's keys share the tag `{tenant/thread}`
//! and the structures that span threads are single keys (`prefix:running`,
//! `prefix:threads:<tenant>`). A Redis Cluster runs a script only when every
//! key it touches hashes to one slot, and the append script touches the
//! thread's keys, its tenant's listing and the running set at once. So on a
//! cluster the threads are spread over `store.cluster_groups` slot groups:
//! a thread's keys and its channel carry its group's tag `{prefix:<group>}`,
//! and every group has its own share of each listing and of the running
//! set, under the same tag. The scripts are the same on both; only the
//! names differ, and a listing or a sweep reads every group's share.
//!
//! What does not belong to a thread lives on keys of its own: rate budgets
//! (one key each), the store's identity, and the live nodes with the
//! connection counts (one tag, `{prefix:nodes}`: a count is checked
//! against the live nodes in one script).

use super::{ThreadKey, escape};

/// Names every key and channel of the store.
#[derive(Debug, Clone)]
pub(super) struct KeyNamer {
    prefix: String,
    /// `None`: one Redis. `Some(n)`: a cluster, threads in `n` slot groups.
    groups: Option<u16>,
}

/// The keys of one thread (one hash tag: they live in one slot).
pub(super) struct Keys {
    /// Every key of the thread starts with it.
    pub(super) tag: String,
    pub(super) events: String,
    pub(super) meta: String,
    /// Its tenant's listing (its group's share of it on a cluster).
    pub(super) index: String,
    /// The running set (its group's share of it on a cluster).
    pub(super) running: String,
    pub(super) lease: String,
    /// `tenant/thread`, escaped: its name in sets and publications.
    pub(super) member: String,
    /// Where its appends are published.
    pub(super) channel: String,
}

impl KeyNamer {
    /// The names on one Redis.
    pub(super) fn single(prefix: &str) -> KeyNamer {
        KeyNamer {
            prefix: prefix.to_owned(),
            groups: None,
        }
    }

    /// The names on a Redis Cluster, threads in `groups` slot groups.
    pub(super) fn cluster(prefix: &str, groups: u16) -> KeyNamer {
        KeyNamer {
            prefix: prefix.to_owned(),
            groups: Some(groups.max(1)),
        }
    }

    /// True on a cluster: publications are sharded (`SPUBLISH`).
    pub(super) fn sharded(&self) -> bool {
        self.groups.is_some()
    }

    /// The command the append script publishes with.
    pub(super) fn publish_command(&self) -> &'static str {
        if self.sharded() {
            "SPUBLISH"
        } else {
            "PUBLISH"
        }
    }

    /// The keys of `key`'s thread.
    pub(super) fn thread(&self, key: &ThreadKey) -> Keys {
        let member = super::member_of(key);
        let tenant = escape(&key.tenant);
        let prefix = &self.prefix;
        match self.groups {
            None => {
                let tag = format!("{prefix}:{{{member}}}");
                Keys {
                    events: format!("{tag}:ev"),
                    meta: format!("{tag}:meta"),
                    lease: format!("{tag}:lease"),
                    tag,
                    index: format!("{prefix}:threads:{tenant}"),
                    running: format!("{prefix}:running"),
                    channel: format!("{prefix}:pub:{member}"),
                    member,
                }
            }
            Some(groups) => {
                let group = self.group_tag(group_of(&member, groups));
                let tag = format!("{group}:{member}");
                Keys {
                    events: format!("{tag}:ev"),
                    meta: format!("{tag}:meta"),
                    lease: format!("{tag}:lease"),
                    tag,
                    index: format!("{group}:threads:{tenant}"),
                    running: format!("{group}:running"),
                    channel: format!("{group}:pub:{member}"),
                    member,
                }
            }
        }
    }

    /// `{prefix:<group>}`, the hash tag of a slot group.
    fn group_tag(&self, group: u16) -> String {
        format!("{{{}:{group}}}", self.prefix)
    }

    /// Every share of `tenant`'s thread listing.
    pub(super) fn indexes(&self, tenant: &str) -> Vec<String> {
        let tenant = escape(tenant);
        match self.groups {
            None => vec![format!("{}:threads:{tenant}", self.prefix)],
            Some(groups) => (0..groups)
                .map(|g| format!("{}:threads:{tenant}", self.group_tag(g)))
                .collect(),
        }
    }

    /// Every share of the running set.
    pub(super) fn running_sets(&self) -> Vec<String> {
        match self.groups {
            None => vec![format!("{}:running", self.prefix)],
            Some(groups) => (0..groups)
                .map(|g| format!("{}:running", self.group_tag(g)))
                .collect(),
        }
    }

    /// The live nodes (a sorted set of heartbeats).
    pub(super) fn nodes(&self) -> String {
        format!("{}:nodes", self.nodes_tag())
    }

    /// The connection counts under `key` (same slot as [`KeyNamer::nodes`]).
    pub(super) fn conns(&self, key: &str) -> String {
        format!("{}:conns:{key}", self.nodes_tag())
    }

    fn nodes_tag(&self) -> String {
        match self.groups {
            None => self.prefix.clone(),
            Some(_) => format!("{{{}:nodes}}", self.prefix),
        }
    }

    /// A rate budget (one key: any slot).
    pub(super) fn rate(&self, key: &str) -> String {
        format!("{}:rate:{key}", self.prefix)
    }

    /// The store's identity (see [`super::epochs`]).
    pub(super) fn identity(&self) -> String {
        format!("{}:store", self.prefix)
    }

    /// The channel of requests between nodes (plain pub/sub: every node
    /// hears it, on a cluster too; it carries a few messages per run).
    pub(super) fn control(&self) -> String {
        format!("{}:ctl", self.prefix)
    }

    /// Which slot group the heartbeat renews `lease` in: one script call
    /// per group. One Redis has a single group (with the live-nodes key).
    pub(super) fn lease_group<'a>(&self, lease: &'a str) -> &'a str {
        match self.groups {
            None => "",
            Some(_) => hash_tag(lease),
        }
    }
}

/// The part of `key` Redis Cluster hashes: between the first `{` and the
/// next `}` when not empty, else all of it.
pub(super) fn hash_tag(key: &str) -> &str {
    if let Some(open) = key.find('{')
        && let Some(len) = key[open + 1..].find('}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

/// The slot group of a thread: FNV-1a of its member, so every node and
/// every version agrees.
fn group_of(member: &str, groups: u16) -> u16 {
    let mut hash: u32 = 0x811c_9dc5;
    for b in member.bytes() {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    (hash % u32::from(groups)) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_redis_keeps_its_names_and_a_cluster_puts_a_thread_in_one_slot() {
        let key = ThreadKey::new("t", "th");
        let single = KeyNamer::single("agui").thread(&key);
        assert_eq!(single.events, "agui:{t/th}:ev");
        assert_eq!(single.index, "agui:threads:t");
        assert_eq!(single.running, "agui:running");
        assert_eq!(single.channel, "agui:pub:t/th");
        let namer = KeyNamer::cluster("agui", 128);
        let k = namer.thread(&key);
        let tag = hash_tag(&k.events);
        for name in [&k.meta, &k.index, &k.running, &k.lease, &k.channel, &k.tag] {
            assert_eq!(hash_tag(name), tag, "{name}");
        }
        assert!(namer.indexes("t").contains(&k.index));
        assert!(namer.running_sets().contains(&k.running));
        assert_eq!(namer.indexes("t").len(), 128);
        assert_eq!(hash_tag(&namer.nodes()), hash_tag(&namer.conns("x")));
        // Threads spread over every group.
        let groups: std::collections::HashSet<String> = (0..5000)
            .map(|i| hash_tag(&namer.thread(&ThreadKey::new("t", format!("{i}"))).meta).to_owned())
            .collect();
        assert_eq!(groups.len(), 128);
    }
}
