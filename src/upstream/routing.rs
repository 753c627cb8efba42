//! The agent table: config entries resolved into ready-to-call agents.

use super::DEMO_URL;
use super::backend::{Backend, BackendState};
use super::pool::Pool;
use crate::auth::Principal;
use crate::config::{AgentConfig, OnDisconnect, Strategy, Timeouts, VerifyMode, expand_env};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

/// One routable agent, with its own pooled HTTP client (so per-agent connect
/// timeouts hold and one slow agent's pool cannot starve another's).
pub struct Agent {
    pub id: String,
    pub description: String,
    /// Its backends (one for an agent with a `url`) and how runs use them;
    /// their headers are marked sensitive so they never appear in `Debug`
    /// output or logs.
    pub pool: Pool,
    pub roles: Vec<String>,
    pub verify: VerifyMode,
    pub timeouts: Timeouts,
    pub max_frame_bytes: usize,
    /// What a second run on a busy thread does, and whether requests may choose.
    pub strategy: Strategy,
    pub allow_strategy_override: bool,
    pub on_disconnect: OnDisconnect,
    /// Which interrupt shapes this agent's runs are normalized from.
    pub interrupts: crate::protocol::interrupts::InterruptStyle,
    /// How its runs may fork a thread.
    pub branching: crate::config::Branching,
    /// Whether a resume of LangGraph-shaped interrupts is also written to
    /// `forwardedProps.command.resume` (see [`AgentConfig`]).
    pub langgraph_resume_command: bool,
    /// Where the agent declares its own AG-UI capabilities, if anywhere.
    pub capabilities_url: Option<reqwest::Url>,
    pub http: reqwest::Client,
    /// `http`'s twin that keeps no idle connection: a request that met a
    /// kept-alive connection closing is sent again with it
    /// ([`super::keep_alive`]).
    pub http_fresh: reqwest::Client,
    /// What the agent speaks (`ag-ui` or `a2a`).
    pub protocol: crate::config::AgentProtocol,
    /// An A2A agent's cards, one per backend (empty for AG-UI agents).
    pub cards: Arc<super::a2a::card::Cards>,
}

impl fmt::Debug for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Agent")
            .field("id", &self.id)
            .field(
                "backends",
                &self
                    .pool
                    .backends
                    .iter()
                    .map(|b| &b.name)
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// Builds an agent from its config; `demo_addr` resolves `url = "demo:"`.
    pub fn from_config(cfg: &AgentConfig, demo_addr: Option<SocketAddr>) -> Result<Agent, String> {
        Self::from_config_after(cfg, demo_addr, None)
    }

    /// Like [`Agent::from_config`], carrying over what `previous` (the same
    /// agent before a reload) knows of the backends it keeps.
    pub fn from_config_after(
        cfg: &AgentConfig,
        demo_addr: Option<SocketAddr>,
        previous: Option<&Agent>,
    ) -> Result<Agent, String> {
        let agent_headers = header_map(&cfg.headers, &cfg.id, "header")?;
        let mut backends = Vec::new();
        for (j, b) in cfg.backend_list().iter().enumerate() {
            let which = if cfg.backends.is_empty() {
                "url".to_owned()
            } else {
                format!("backends[{j}].url")
            };
            let url = if b.url == DEMO_URL {
                let addr = demo_addr.ok_or("url 'demo:' but the demo agent is not running")?;
                format!("http://{addr}/agent")
            } else {
                b.url.clone()
            };
            let url = crate::protocol::url_host::parse(&url)
                .map_err(|e| format!("agent {}: {which} {e}", cfg.id))?;
            let mut headers = agent_headers.clone();
            headers.extend(header_map(
                &b.headers,
                &cfg.id,
                &format!("backends[{j}] header"),
            )?);
            let name = Backend::name_of(&url);
            let state = previous
                .and_then(|p| p.pool.state_of(&name))
                .unwrap_or_else(|| Arc::new(BackendState::new(&cfg.id, &name)));
            backends.push(Backend {
                url,
                name,
                headers,
                weight: b.weight,
                max_in_flight: b.max_in_flight,
                group: b.group.clone(),
                state,
            });
        }
        let shared = previous.map(|p| p.pool.shared.clone()).unwrap_or_default();
        let mut pool = Pool::new(&cfg.pool, cfg.affinity(), backends, shared);
        let (http, http_fresh) =
            super::keep_alive::clients(cfg.timeouts.connect, cfg.timeouts.keep_alive)
                .map_err(|e| format!("agent {}: HTTP client: {e}", cfg.id))?;
        if let Some(probe) = &cfg.pool.probe {
            let mut targets = Vec::new();
            for b in &pool.backends {
                let url = b
                    .url
                    .join(&probe.path)
                    .map_err(|e| format!("agent {}: pool.probe.path: {e}", cfg.id))?;
                targets.push((url, b.state.clone()));
            }
            pool.probing = super::probe::start(probe, http.clone(), targets, pool.ejection);
        }
        Ok(Agent::read_cards(Agent {
            id: cfg.id.clone(),
            description: cfg.description.clone(),
            pool,
            roles: cfg.roles.clone(),
            verify: cfg.verify,
            timeouts: cfg.timeouts.clone(),
            max_frame_bytes: cfg.max_frame_bytes,
            strategy: cfg.strategy,
            allow_strategy_override: cfg.allow_strategy_override,
            on_disconnect: cfg.on_disconnect,
            interrupts: cfg.interrupts,
            branching: cfg.branching.clone(),
            langgraph_resume_command: cfg.langgraph_resume_command,
            capabilities_url: cfg
                .capabilities_url
                .as_deref()
                .map(crate::protocol::url_host::parse)
                .transpose()
                .map_err(|e| format!("agent {}: capabilities_url {e}", cfg.id))?,
            http,
            http_fresh,
            protocol: cfg.protocol,
            cards: Default::default(),
        }))
    }

    /// An A2A agent's cards, read now in the background (at start and on
    /// every reload, since each builds the agent anew); a run that finds
    /// its backend's card missing reads it itself.
    fn read_cards(self) -> Agent {
        if self.protocol != crate::config::AgentProtocol::A2a {
            return self;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return self;
        };
        for b in &self.pool.backends {
            let (http, url, headers) = (self.http.clone(), b.url.clone(), b.headers.clone());
            let (cards, name, id) = (self.cards.clone(), b.name.clone(), self.id.clone());
            runtime.spawn(async move {
                match super::a2a::card::Card::fetch(&http, &url, &headers).await {
                    Ok(card) => {
                        cards.put(&name, card);
                    }
                    Err(e) => tracing::warn!(agent = %id, backend = %name, "{e}"),
                }
            });
        }
        self
    }

    /// The cards of an A2A agent's backends.
    pub fn a2a_cards(&self) -> &super::a2a::card::Cards {
        &self.cards
    }

    /// Whether `who` may start runs on this agent.
    pub fn allows(&self, who: &Principal) -> bool {
        who.has_any_role(&self.roles)
    }

    /// The agent as `GET /v1/agents` shows it to `who`: its backends and
    /// their health only to the pool's `admin_roles`.
    pub fn listing(&self, who: &Principal) -> serde_json::Value {
        let mut v = serde_json::json!({"id": self.id, "description": self.description});
        if self.protocol == crate::config::AgentProtocol::A2a {
            v["protocol"] = "a2a".into();
            if let Some(card) = self.cards.any() {
                if self.description.is_empty() {
                    v["description"] = card.description.clone().into();
                }
                v["a2a"] = card.listing();
            }
        }
        if who.has_any_role(&self.pool.admin_roles) {
            v["pool"] = self.pool.listing();
        }
        v
    }
}

/// Headers from config, `${ENV}` expanded and marked sensitive.
fn header_map(
    from: &std::collections::BTreeMap<String, String>,
    agent: &str,
    what: &str,
) -> Result<HeaderMap, String> {
    let mut headers = HeaderMap::new();
    for (name, value) in from {
        let value = expand_env(value)
            .map_err(|v| format!("agent {agent}: {what} {name}: unset variable {v}"))?;
        let mut value = HeaderValue::from_str(&value)
            .map_err(|_| format!("agent {agent}: {what} {name}: invalid value"))?;
        value.set_sensitive(true);
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("agent {agent}: invalid {what} name {name}"))?;
        headers.insert(name, value);
    }
    Ok(headers)
}

/// All configured agents by id.
#[derive(Debug, Default)]
pub struct AgentRegistry {
    agents: HashMap<String, Arc<Agent>>,
    order: Vec<String>,
}

impl AgentRegistry {
    /// Resolves every configured agent.
    pub fn from_config(
        agents: &[AgentConfig],
        demo_addr: Option<SocketAddr>,
    ) -> Result<AgentRegistry, String> {
        Self::from_config_after(agents, demo_addr, None)
    }

    /// Like [`AgentRegistry::from_config`] on a reload: each agent keeps
    /// what `previous` knew of its backends (runs in flight, ejections).
    pub fn from_config_after(
        agents: &[AgentConfig],
        demo_addr: Option<SocketAddr>,
        previous: Option<&AgentRegistry>,
    ) -> Result<AgentRegistry, String> {
        let mut reg = AgentRegistry::default();
        for cfg in agents {
            let before = previous.and_then(|p| p.agents.get(&cfg.id));
            let agent = Agent::from_config_after(cfg, demo_addr, before.map(|a| &**a))?;
            reg.order.push(agent.id.clone());
            reg.agents.insert(agent.id.clone(), Arc::new(agent));
        }
        Ok(reg)
    }

    /// The agent named `id`.
    pub fn get(&self, id: &str) -> Option<Arc<Agent>> {
        self.agents.get(id).cloned()
    }

    /// Agents `who` may run, in config order.
    pub fn visible_to<'a>(&'a self, who: &'a Principal) -> impl Iterator<Item = &'a Arc<Agent>> {
        self.order
            .iter()
            .filter_map(|id| self.agents.get(id))
            .filter(move |a| a.allows(who))
    }
}
