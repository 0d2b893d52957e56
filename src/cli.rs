//! The command line: `serve` (the default), `token`, `user`, `api-token`,
//! `migrate` and `backup`.
//! The CLI works on the same database whether or not a server is running.

use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use gatehouse_core::credentials::IssueRequest;

use tokio_util::sync::CancellationToken;
use url::Url;

use crate::config::{Config, Overrides};
use crate::startup::{Application, open_core};
use crate::telemetry::{self, LogFormat};
use gatehouse_core::credentials::IssuedCredential;

/// Gatehouse: an MCP gateway that makes AI agents ask a human before they act.
#[derive(Debug, Parser)]
#[command(name = "gatehouse", version, about)]
pub struct Cli {
    /// Address to listen on (port 0 picks a free one) [env: GATEHOUSE_LISTEN]
    #[arg(long, global = true, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Data directory holding the database [env: GATEHOUSE_DATA_DIR] [default: ./.gatehouse]
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// PostgreSQL shared by several replicas, `postgres://user@host/db`
    /// (default: SQLite in the data dir) [env: GATEHOUSE_DATABASE_URL]
    #[arg(long, global = true, value_name = "URL")]
    pub database_url: Option<String>,
    /// Configuration file (TOML)
    #[arg(long, global = true, value_name = "FILE", env = "GATEHOUSE_CONFIG")]
    pub config: Option<PathBuf>,
    /// The URL people and agents reach Gatehouse at [env: GATEHOUSE_PUBLIC_URL]
    #[arg(long, global = true, value_name = "URL")]
    pub public_url: Option<Url>,
    /// Log format [env: GATEHOUSE_LOG_FORMAT]
    #[arg(long, global = true, value_enum)]
    pub log_format: Option<LogFormat>,
    /// Also serve /metrics, without authentication, on this address [env: GATEHOUSE_METRICS_LISTEN]
    #[arg(long, global = true, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// What to do (default: serve)
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server (the default).
    Serve,
    /// Agent credentials for /mcp.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Browser users.
    #[command(subcommand)]
    User(UserCommand),
    /// Admin API tokens for orchestrators.
    #[command(subcommand, name = "api-token")]
    ApiToken(ApiTokenCommand),
    /// Migrate the database to this version's schema and exit (for deploy pipelines).
    Migrate {
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Copy the database to FILE while a server may be running (SQLite online backup).
    Backup {
        /// The backup file to create (owner-only).
        file: PathBuf,
        /// Replace FILE if it exists.
        #[arg(long)]
        force: bool,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
}

/// `gatehouse token …`
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Issue a credential (shown once).
    Issue {
        /// Agent name.
        #[arg(long)]
        agent: String,
        /// Orchestrator thread (re-issuing revokes the thread's earlier credentials).
        #[arg(long)]
        thread: Option<String>,
        /// Provider session it belongs to.
        #[arg(long)]
        provider: Option<String>,
        /// Owning user (approves its calls).
        #[arg(long)]
        owner: Option<String>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// List credentials (never their tokens).
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Revoke by id, thread, provider session, or all.
    Revoke(RevokeArgs),
}

/// What to revoke (exactly one).
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub struct RevokeArgs {
    /// Credential id.
    pub id: Option<String>,
    /// Every credential of this thread.
    #[arg(long)]
    pub thread: Option<String>,
    /// Every credential of this provider session.
    #[arg(long)]
    pub provider: Option<String>,
    /// Every credential.
    #[arg(long)]
    pub all: bool,
}

/// `gatehouse user …`
#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Add a user; the password is read from standard input.
    Add {
        /// Username.
        name: String,
        /// Make the user an admin.
        #[arg(long)]
        admin: bool,
        /// Read the password from standard input (required).
        #[arg(long, required = true)]
        password_stdin: bool,
    },
}

/// `gatehouse api-token …`
#[derive(Debug, Subcommand)]
pub enum ApiTokenCommand {
    /// Issue an admin API token (shown once).
    Issue {
        /// What it is for.
        #[arg(long)]
        name: String,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// List admin API tokens.
    List,
    /// Revoke an admin API token.
    Revoke {
        /// Token id.
        id: String,
    },
}

/// Runs the parsed command line.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    let overrides = Overrides {
        listen: cli.listen,
        data_dir: cli.data_dir.clone(),
        public_url: cli.public_url.clone(),
        database_url: cli.database_url.clone(),
        log_format: cli.log_format,
        metrics_listen: cli.metrics_listen,
    };
    let named = cli.config.is_some();
    let file = config_file(cli.config);
    let config = Config::load(file.as_deref(), &overrides)?;
    let command = cli.command.unwrap_or(Command::Serve);
    // A file picked up from the folder a command runs in decides where a
    // token's config points and which database it goes to: say so (the
    // server's banner says it too).
    if !named && file.is_some() && !matches!(command, Command::Serve) {
        eprintln!("gatehouse: reading ./{DEFAULT_CONFIG_FILE} from the working folder (--config names another)");
    }
    match command {
        Command::Serve => serve(config, file, overrides),
        Command::Token(cmd) => token(&config, cmd),
        Command::User(cmd) => user(&config, cmd),
        Command::ApiToken(cmd) => api_token(&config, cmd),
        Command::Migrate { json } => crate::operations::migrate(&config, json),
        Command::Backup { file, force, json } => crate::operations::backup(&config, &file, force, json),
    }
}

/// The file named by `--config` (or `GATEHOUSE_CONFIG`), else
/// `gatehouse.toml` in the working folder if there is one: a file left
/// there is what a newcomer expects to be read.
fn config_file(named: Option<PathBuf>) -> Option<PathBuf> {
    named.or_else(|| {
        let here = PathBuf::from(DEFAULT_CONFIG_FILE);
        here.is_file().then_some(here)
    })
}

/// The configuration file read from the working folder when none is named.
pub const DEFAULT_CONFIG_FILE: &str = "gatehouse.toml";

fn serve(config: Config, file: Option<PathBuf>, overrides: Overrides) -> anyhow::Result<()> {
    telemetry::init(config.log_format);
    match &file {
        Some(path) => tracing::info!(config = %path.display(), "configuration read"),
        None => tracing::info!("no configuration file: defaults, GATEHOUSE_* and flags"),
    }
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let shutdown = CancellationToken::new();
        let app = Application::build(&config, shutdown.clone()).await?;
        crate::shutdown::cancel_on_signal(shutdown.clone(), &app.state().mcp.tasks);
        // The file it was started from reloads on SIGHUP and when it changes.
        if let Some(path) = &file {
            let mcp = &app.state().mcp;
            let reloader = crate::reload::Reloader::new(path.clone(), overrides, app.state());
            crate::reload::watch(reloader, shutdown, &mcp.tasks);
        }
        let record = ServingAt::new(&config.data_dir);
        record.write(&app.state().mcp.base_url);
        print_banner(&config, file.as_deref(), &app)?;
        let served = app.run().await;
        record.remove();
        served
    })
}

/// Where a running server is reached, kept in its data folder
/// (`<data_dir>/serving-at`), so `gatehouse token issue` against the same
/// data prints the address agents must use, not the default port.
struct ServingAt(PathBuf);

impl ServingAt {
    fn new(data_dir: &Path) -> Self {
        Self(data_dir.join("serving-at"))
    }

    fn write(&self, base_url: &str) {
        if let Err(e) = std::fs::write(&self.0, base_url) {
            tracing::warn!(path = %self.0.display(), error = %e, "cannot record the address served at");
        }
    }

    fn remove(&self) {
        let _ = std::fs::remove_file(&self.0);
    }

    /// What a server on this data folder recorded, if one is running.
    fn read(data_dir: &Path) -> Option<String> {
        let text = std::fs::read_to_string(Self::new(data_dir).0).ok()?;
        let url = text.trim();
        url.starts_with("http").then(|| url.to_string())
    }
}

/// The base URL a credential minted here is used at: the public URL if
/// set, else what the server on this data folder recorded, else the
/// configured listen address.
fn endpoint_base(config: &Config) -> String {
    match config.public_url {
        Some(_) => config.base_url(config.listen),
        None => ServingAt::read(&config.data_dir).unwrap_or_else(|| config.base_url(config.listen)),
    }
}

fn print_banner(config: &Config, file: Option<&Path>, app: &Application) -> anyhow::Result<()> {
    let base = &app.state().mcp.base_url;
    let mut out = format!(
        "Gatehouse {} is listening on {}://{}\n  MCP endpoint: {base}/mcp\n  Console:      {base}/\n  Config:       {}\n",
        env!("CARGO_PKG_VERSION"),
        if config.tls().is_some() { "https" } else { "http" },
        app.address(),
        match file {
            Some(path) => path.display().to_string(),
            None => format!("none (no --config, no ./{DEFAULT_CONFIG_FILE}): defaults, GATEHOUSE_* and flags"),
        }
    );
    if let Some(metrics) = app.metrics_address() {
        out.push_str(&format!("  Metrics:      http://{metrics}/metrics (no authentication on this address)\n"));
    }
    if let Some(token) = app.state().core().users.new_setup_token()? {
        out.push_str(&format!(
            "\nFirst start: create the admin account with this one-time link\n(it works for 24 hours; restarting gatehouse prints a new one):\n  {base}/setup?token={token}\n"
        ));
    }
    let data_dir = config.data_dir.display();
    out.push_str(&format!(
        "\nMint a token for an agent on the Agents page ({base}/agents), or:\n  gatehouse --data-dir {data_dir} token issue --agent NAME\n\
         Either gives the token and ready-to-paste configs for Claude Code, Codex and Cursor.\n"
    ));
    println!("{out}");
    Ok(())
}

/// Paste-ready client configurations for a credential.
pub fn client_configs(endpoint: &str, authorization: &str) -> String {
    let json = |value: serde_json::Value| serde_json::to_string_pretty(&value).unwrap_or_default();
    let token = authorization.trim_start_matches("Bearer ");
    format!(
        "Claude Code (.mcp.json, or: claude mcp add --transport http gatehouse {endpoint} --header \"Authorization: {authorization}\"):\n{}\n\n\
         Cursor (~/.cursor/mcp.json):\n{}\n\n\
         Codex (~/.codex/config.toml; export GATEHOUSE_TOKEN={token}):\n[mcp_servers.gatehouse]\nurl = \"{endpoint}\"\nbearer_token_env_var = \"GATEHOUSE_TOKEN\"\n",
        json(
            serde_json::json!({"mcpServers": {"gatehouse": {"type": "http", "url": endpoint, "headers": {"Authorization": authorization}}}})
        ),
        json(
            serde_json::json!({"mcpServers": {"gatehouse": {"url": endpoint, "headers": {"Authorization": authorization}}}})
        ),
    )
}

/// The stores for one command; on PostgreSQL, what the command changes is
/// told to the running replicas (their pages and sweepers react at once).
fn cli_core(config: &Config) -> anyhow::Result<gatehouse_core::Core> {
    let core = open_core(config)?;
    if let Some(cluster) = gatehouse_core::cluster::Cluster::announcer(&core.db, core.clock.clone()) {
        core.live.relay_to(cluster);
    }
    Ok(core)
}

fn token(config: &Config, cmd: TokenCommand) -> anyhow::Result<()> {
    let core = cli_core(config)?;
    match cmd {
        TokenCommand::Issue { agent, thread, provider, owner, json } => {
            let issued = core.credentials.issue(IssueRequest {
                agent,
                thread,
                provider_session: provider,
                owner,
                via: gatehouse_core::credentials::IssuedVia::Cli,
                oauth_client: None,
            })?;
            let out = IssuedCredential::new(issued, &endpoint_base(config));
            if json {
                println!("{}", serde_json::to_string(&out)?);
            } else {
                println!(
                    "Issued {} for agent {:?} (shown once):\n  {}\n\n{}",
                    out.id,
                    out.agent,
                    out.token,
                    client_configs(&out.endpoint, &out.authorization)
                );
            }
        }
        TokenCommand::List { json } => {
            let all = core.credentials.list()?;
            if json {
                println!("{}", serde_json::to_string(&all)?);
            } else if all.is_empty() {
                println!("No credentials.");
            } else {
                println!("{:<38} {:<16} {:<16} {:<8} LAST SIGN OF LIFE", "ID", "AGENT", "THREAD", "STATUS");
                for c in all {
                    println!(
                        "{:<38} {:<16} {:<16} {:<8} {}",
                        c.id,
                        c.agent,
                        c.thread.as_deref().unwrap_or("-"),
                        c.status,
                        c.last_seen_at
                    );
                }
            }
        }
        TokenCommand::Revoke(RevokeArgs { id, thread, provider, all }) => {
            let n = if let Some(id) = id {
                if !core.credentials.revoke(&id)? {
                    bail!("no live credential {id:?}");
                }
                1
            } else if let Some(thread) = thread {
                core.credentials.revoke_thread(&thread)?
            } else if let Some(provider) = provider {
                core.credentials.revoke_provider_session(&provider)?
            } else if all {
                core.credentials.revoke_all()?
            } else {
                unreachable!("clap requires one of the revoke targets")
            };
            println!("Revoked {n} credential(s).");
        }
    }
    Ok(())
}

fn user(config: &Config, cmd: UserCommand) -> anyhow::Result<()> {
    let core = cli_core(config)?;
    match cmd {
        UserCommand::Add { name, admin, password_stdin: _ } => {
            let mut password = String::new();
            std::io::stdin().read_to_string(&mut password).context("cannot read the password from stdin")?;
            let password = password.trim_end_matches(['\r', '\n']);
            let user = core.users.add(&name, password, admin)?;
            println!("Added {}user {:?}.", if user.is_admin { "admin " } else { "" }, user.username);
        }
    }
    Ok(())
}

fn api_token(config: &Config, cmd: ApiTokenCommand) -> anyhow::Result<()> {
    let core = cli_core(config)?;
    match cmd {
        ApiTokenCommand::Issue { name, json } => {
            let issued = core.api_tokens.issue(&name)?;
            if json {
                println!("{}", serde_json::to_string(&issued)?);
            } else {
                println!("Issued admin API token {} ({:?}), shown once:\n  {}", issued.id, issued.name, issued.token);
            }
        }
        ApiTokenCommand::List => {
            for t in core.api_tokens.list()? {
                println!("{} {:?} {} {}", t.id, t.name, t.created_at, if t.revoked { "revoked" } else { "active" });
            }
        }
        ApiTokenCommand::Revoke { id } => {
            if !core.api_tokens.revoke(&id)? {
                bail!("no live API token {id:?}");
            }
            println!("Revoked {id}.");
        }
    }
    Ok(())
}
