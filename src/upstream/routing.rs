//! The agent table: config entries resolved into ready-to-call agents.

use super::DEMO_URL;
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
    pub url: reqwest::Url,
    /// Configured headers with `${ENV}` expanded; marked sensitive so they
    /// never appear in `Debug` output or logs.
    pub headers: HeaderMap,
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
}

impl fmt::Debug for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Agent")
            .field("id", &self.id)
            .field("url", &self.url.as_str())
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Agent {
    /// Builds an agent from its config; `demo_addr` resolves `url = "demo:"`.
    pub fn from_config(cfg: &AgentConfig, demo_addr: Option<SocketAddr>) -> Result<Agent, String> {
        let url = if cfg.url == DEMO_URL {
            let addr = demo_addr.ok_or("url 'demo:' but the demo agent is not running")?;
            format!("http://{addr}/agent")
        } else {
            cfg.url.clone()
        };
        let url = crate::protocol::url_host::parse(&url)
            .map_err(|e| format!("agent {}: url {e}", cfg.id))?;
        let mut headers = HeaderMap::new();
        for (name, value) in &cfg.headers {
            let value = expand_env(value)
                .map_err(|v| format!("agent {}: header {name}: unset variable {v}", cfg.id))?;
            let mut value = HeaderValue::from_str(&value)
                .map_err(|_| format!("agent {}: header {name}: invalid value", cfg.id))?;
            value.set_sensitive(true);
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("agent {}: invalid header name {name}", cfg.id))?;
            headers.insert(name, value);
        }
        let http = reqwest::Client::builder()
            .connect_timeout(cfg.timeouts.connect)
            .pool_idle_timeout(std::time::Duration::from_secs(90))
            .tcp_nodelay(true)
            .build()
            .map_err(|e| format!("agent {}: HTTP client: {e}", cfg.id))?;
        Ok(Agent {
            id: cfg.id.clone(),
            description: cfg.description.clone(),
            url,
            headers,
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
        })
    }

    /// Whether `who` may start runs on this agent.
    pub fn allows(&self, who: &Principal) -> bool {
        who.has_any_role(&self.roles)
    }
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
        let mut reg = AgentRegistry::default();
        for cfg in agents {
            let agent = Agent::from_config(cfg, demo_addr)?;
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
