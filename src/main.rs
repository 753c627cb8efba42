//! The `agui-gateway` binary: `serve` (default), `check-config`, `token`,
//! `config-schema`.

use agui_gateway::auth::{MintRequest, mint};
use agui_gateway::config::{Config, DEFAULT_PATH};
use agui_gateway::policy::Policy;
use agui_gateway::server::preflight;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// The binary's allocator: glibc's malloc unless built with `--features
/// mimalloc` or `jemalloc`. Measured side by side on the proxy bench
/// (docs/benchmarks.md, "Allocator"): neither was clearly faster than glibc
/// (their events/s and CPU per event fall within glibc's run-to-run
/// spread), and both held 2–3× the idle RSS and gave memory back far more
/// slowly after evicting busy threads, so glibc stays the default; the
/// features are kept to re-measure. Measured again with RSS under the node
/// budget as the criterion (docs/benchmarks.md, "Fourth pass: the allocator
/// under the budget"): every allocator, and glibc with two arenas or fixed
/// trim and mmap thresholds, ended within a fifth of the others under the
/// same load — what outgrew the budget was the heap, not the allocator's
/// retention — so glibc stays, untuned. The library leaves the choice to
/// the binary, and tests keep the system allocator.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(all(feature = "jemalloc", not(feature = "mimalloc")))]
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser)]
#[command(
    name = "agui-gateway",
    version,
    about = "Secure multi-viewer gateway for AG-UI agents"
)]
struct Cli {
    /// Configuration file (TOML or YAML). Without one, `config/gateway.toml`
    /// when it exists, else the compiled-in default configuration.
    #[arg(long, global = true, env = "AGUI_GATEWAY_CONFIG")]
    config: Option<PathBuf>,
    /// Log format: `text` or `json`.
    #[arg(
        long,
        global = true,
        env = "AGUI_GATEWAY_LOG_FORMAT",
        default_value = "text"
    )]
    log_format: String,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway (the default).
    Serve,
    /// Validate the configuration as start-up would (keys, policy, JWT keys,
    /// agents and headers, TLS files, store settings) and print every problem.
    CheckConfig {
        /// Evaluate a sample request against the policy and print what decides:
        /// a JSON file `{"claims": {…}, "agent": "…", "thread": "…",
        /// "tool": {"name": "…", "args": {…}}, "input": {messages, tools}}`.
        #[arg(long)]
        explain: Option<PathBuf>,
    },
    /// Mint a development JWT with the configured HS secret.
    Token {
        #[arg(long, default_value = "dev")]
        sub: String,
        /// Comma-separated role names.
        #[arg(long, default_value = "", value_delimiter = ',')]
        roles: Vec<String>,
        #[arg(long)]
        tenant: Option<String>,
        /// Lifetime: a duration like the config's (`1h`, `30m`, `90s`) or
        /// whole seconds.
        #[arg(long, default_value = "1h", value_parser = agui_gateway::config::duration::parse)]
        ttl: Duration,
        /// Thread grants as JSON, e.g. '{"team-7-*":["view","meta"]}'. On the
        /// public development secret the default is every thread of the tenant.
        #[arg(long)]
        threads: Option<String>,
    },
    /// Print the configuration file's JSON Schema (`config/schema.json`).
    ConfigSchema,
}

fn main() -> ExitCode {
    // Fault points named in FAILPOINTS (only with the `failpoints` feature).
    let _faults = agui_gateway::fault::setup();
    let cli = Cli::parse();
    if matches!(cli.command, Some(Command::ConfigSchema)) {
        print!("{}", agui_gateway::config::json_schema_text());
        return ExitCode::SUCCESS;
    }
    let loaded = match &cli.config {
        Some(path) => Config::load(path),
        None if std::path::Path::new(DEFAULT_PATH).exists() => {
            Config::load(std::path::Path::new(DEFAULT_PATH))
        }
        None => Config::embedded(),
    };
    let config = match loaded {
        Ok(c) => c,
        Err(problems) => {
            for p in &problems {
                eprintln!("config error: {p}");
            }
            return ExitCode::from(2);
        }
    };
    // The policy the config names is part of the configuration: every command
    // refuses a broken one, reported like the config's own problems.
    let policy = match Policy::from_config(&config) {
        Ok(p) => p,
        Err(problems) => {
            for p in &problems {
                eprintln!("config error: {p}");
            }
            return ExitCode::from(2);
        }
    };
    let command = cli.command.unwrap_or(Command::Serve);
    // Only a serving gateway exports traces.
    let telemetry = match init_logging(
        &cli.log_format,
        matches!(command, Command::Serve).then_some(&config.tracing),
    ) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("config error: {e}");
            return ExitCode::from(2);
        }
    };
    match command {
        Command::CheckConfig {
            explain: Some(sample),
        } => match explain(&config, policy, &sample) {
            Ok(report) => {
                print!("{report}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("explain: {e}");
                ExitCode::from(2)
            }
        },
        Command::CheckConfig { explain: None } => match preflight::check(&config) {
            Ok(_) => {
                println!("{}: ok ({} agents)", config.origin(), config.agents.len());
                ExitCode::SUCCESS
            }
            Err(problems) => {
                for p in &problems {
                    eprintln!("config error: {p}");
                }
                ExitCode::from(2)
            }
        },
        Command::ConfigSchema => unreachable!("handled before the config is read"),
        Command::Token {
            sub,
            roles,
            tenant,
            ttl,
            threads,
        } => {
            let threads = match threads.map(|t| serde_json::from_str(&t)).transpose() {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("--threads is not JSON: {e}");
                    return ExitCode::from(2);
                }
            };
            // On the public development secret, tokens share every thread
            // of their tenant unless `--threads` says otherwise.
            let dev = config.auth.hs_secret.as_deref() == Some(agui_gateway::config::DEV_SECRET);
            let threads = threads.or_else(|| dev.then(agui_gateway::auth::dev_thread_grants));
            let req = MintRequest {
                subject: sub,
                roles: roles.into_iter().filter(|r| !r.is_empty()).collect(),
                tenant,
                ttl_secs: ttl.as_secs(),
                threads,
            };
            match mint(&config.auth, &req) {
                Ok(token) => {
                    println!("{token}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("cannot mint a token: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Serve => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .expect("tokio runtime");
            let served = rt.block_on(agui_gateway::app::serve(config, policy));
            if let Err(e) = &served {
                tracing::error!("{e}");
                eprintln!("agui-gateway: {e}");
            }
            // The spans of the drained runs, and the rest still queued.
            if let Some(telemetry) = telemetry {
                telemetry.shutdown();
            }
            match served {
                Ok(()) => ExitCode::SUCCESS,
                Err(_) => ExitCode::FAILURE,
            }
        }
    }
}

/// The decision report behind `check-config --explain`.
fn explain(config: &Config, policy: Policy, sample: &std::path::Path) -> Result<String, String> {
    use agui_gateway::policy::tools::{ToolDecider, Verdict};
    use std::fmt::Write;
    let text = std::fs::read_to_string(sample).map_err(|e| format!("{}: {e}", sample.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", sample.display()))?;
    let claims = v
        .get("claims")
        .and_then(|c| c.as_object())
        .cloned()
        .unwrap_or_default();
    let who = agui_gateway::auth::Principal::from_claims(claims, &config.auth.claims)?;
    let agent = v.get("agent").and_then(|a| a.as_str()).unwrap_or("");
    let thread = v.get("thread").and_then(|a| a.as_str()).unwrap_or("sample");
    let policy = Arc::new(policy);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "principal {} (tenant {}, roles {:?}) on agent '{agent}', thread '{thread}'",
        who.subject, who.tenant, who.roles
    );
    let decider = ToolDecider::new(policy.clone(), &who, agent, thread);
    let verdict = |name: &str, args: Option<&serde_json::Value>| match decider.decide(name, args) {
        Verdict::Allowed => "allowed".to_owned(),
        Verdict::NeedsArgs => "decided when the call's arguments are known".to_owned(),
        Verdict::Denied {
            rule: Some(r),
            error,
        } => format!(
            "denied by rule '{r}'{}",
            if error { " (ends the run)" } else { "" }
        ),
        Verdict::Denied { rule: None, .. } => "denied: not on the allow-list".to_owned(),
    };
    if let Some(tool) = v.get("tool") {
        let name = tool.get("name").and_then(|n| n.as_str()).unwrap_or("");
        let _ = writeln!(
            out,
            "tool call {name}: {}",
            verdict(
                name,
                Some(tool.get("args").unwrap_or(&serde_json::json!({})))
            )
        );
    }
    if let Some(input) = v.get("input") {
        let messages = input
            .get("messages")
            .and_then(|m| m.as_array())
            .cloned()
            .unwrap_or_default();
        let tools = input
            .get("tools")
            .and_then(|m| m.as_array())
            .cloned()
            .unwrap_or_default();
        match agui_gateway::policy::limits::check_request(
            &policy, &who, agent, thread, &messages, &tools,
        ) {
            Ok(()) => {
                let _ = writeln!(out, "request: within limits");
            }
            Err(r) => {
                let _ = writeln!(
                    out,
                    "request: refused ({}): {}",
                    if r.too_large {
                        "too_large"
                    } else {
                        "forbidden"
                    },
                    r.message
                );
            }
        }
        for t in &tools {
            let name = t.get("name").and_then(|n| n.as_str()).unwrap_or("");
            let _ = writeln!(out, "offered tool {name}: {}", verdict(name, None));
        }
    }
    Ok(out)
}

/// The log subscriber (text or JSON on stderr, filtered by
/// `$AGUI_GATEWAY_LOG`), with the OpenTelemetry exporter's layer when
/// `tracing` sets an endpoint.
fn init_logging(
    format: &str,
    tracing: Option<&agui_gateway::config::TracingConfig>,
) -> Result<Option<agui_gateway::telemetry::Telemetry>, String> {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    type Boxed = Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync>;
    let filter = tracing_subscriber::EnvFilter::try_from_env("AGUI_GATEWAY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colours only for a person at a terminal: log files and journald get
    // plain text.
    let colours = std::io::IsTerminal::is_terminal(&std::io::stderr());
    // Through the escaping writer: client strings in a line never end it.
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(colours)
        .with_writer(agui_gateway::log_line::Escaping::new(
            std::io::stderr,
            colours,
        ));
    let fmt: Boxed = if format == "json" {
        fmt.json().boxed()
    } else {
        fmt.boxed()
    };
    let (otel, telemetry) = match tracing {
        Some(config) => match agui_gateway::telemetry::init(config)? {
            Some((layer, telemetry)) => (Some(layer), Some(telemetry)),
            None => (None, None),
        },
        None => (None, None),
    };
    tracing_subscriber::registry()
        .with(fmt)
        .with(otel)
        .with(filter)
        .init();
    Ok(telemetry)
}
