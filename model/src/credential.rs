//! An agent credential as listed (never its token).

use crate::CredentialId;
use serde::{Deserialize, Serialize};

/// Whether a credential can still be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CredentialStatus {
    /// Usable: not revoked, and its agent showed life within the window.
    Active,
    /// Lapsed: no sign of life within the window.
    Expired,
    /// Revoked by a person, an orchestrator or a re-issue.
    Revoked,
}

impl CredentialStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            CredentialStatus::Active => "active",
            CredentialStatus::Expired => "expired",
            CredentialStatus::Revoked => "revoked",
        }
    }
}

impl std::fmt::Display for CredentialStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a credential came to be: minted as a bearer token (by the CLI, the
/// admin API or the console) or through an OAuth sign-in by an MCP client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum IssuedVia {
    /// A bearer token issued before the way was recorded.
    #[default]
    Token,
    /// `gatehouse token issue` on the command line.
    Cli,
    /// The admin API (`POST /api/credentials`).
    Api,
    /// Minted on the console's Agents page.
    Console,
    /// An MCP client's OAuth sign-in, approved by its owner.
    #[serde(rename = "oauth")]
    OAuth,
}

impl IssuedVia {
    /// The stored and wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            IssuedVia::Token => "token",
            IssuedVia::Cli => "cli",
            IssuedVia::Api => "api",
            IssuedVia::Console => "console",
            IssuedVia::OAuth => "oauth",
        }
    }

    /// From the stored name (unknown names read as [`IssuedVia::Token`]).
    pub fn parse(s: &str) -> Self {
        match s {
            "cli" => IssuedVia::Cli,
            "api" => IssuedVia::Api,
            "console" => IssuedVia::Console,
            "oauth" => IssuedVia::OAuth,
            _ => IssuedVia::Token,
        }
    }

    /// How a person reads it on the Agents page.
    pub fn label(self) -> &'static str {
        match self {
            IssuedVia::Token => "token",
            IssuedVia::Cli => "CLI token",
            IssuedVia::Api => "API token",
            IssuedVia::Console => "console token",
            IssuedVia::OAuth => "OAuth sign-in",
        }
    }
}

/// A credential with its liveness worked out against the window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialView {
    /// `cred_…`
    pub id: CredentialId,
    /// The agent's name.
    pub agent: String,
    /// The orchestrator's thread, if any.
    pub thread: Option<String>,
    /// The provider session, if any.
    pub provider_session: Option<String>,
    /// The owning user, if any.
    pub owner: Option<String>,
    /// The owning user's id: what access compares (`None`: owner-less, or
    /// the owner was removed).
    #[serde(default)]
    pub owner_id: Option<crate::UserId>,
    /// Why it was revoked (`revoked`, `reissued`, …).
    pub revoked_reason: Option<String>,
    /// How it was issued.
    pub issued_via: IssuedVia,
    /// The OAuth client's name, for credentials issued by OAuth.
    pub oauth_client: Option<String>,
    /// Whether an admin minted it (a rule's bare agent name matches only such agents).
    #[serde(default)]
    pub by_admin: bool,
    /// Active, expired or revoked.
    pub status: CredentialStatus,
    /// RFC 3339 issue time.
    pub created_at: String,
    /// RFC 3339 time of the last sign of life.
    pub last_seen_at: String,
    /// RFC 3339 time it lapses unless it shows life again.
    pub expires_at: String,
    /// Issue time (Unix ms), for relative times.
    pub created_ms: i64,
    /// Last sign of life (Unix ms), for relative times.
    pub last_seen_ms: i64,
    /// When it lapses (Unix ms), for relative times.
    pub expires_ms: i64,
}

/// What one revocation covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RevokeScope {
    /// One credential, by id.
    Credential,
    /// Every credential of a thread.
    Thread,
    /// Every credential of an agent (by name).
    Agent,
}

impl RevokeScope {
    /// The form value.
    pub fn as_str(self) -> &'static str {
        match self {
            RevokeScope::Credential => "credential",
            RevokeScope::Thread => "thread",
            RevokeScope::Agent => "agent",
        }
    }

    /// From a form value.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "credential" => RevokeScope::Credential,
            "thread" => RevokeScope::Thread,
            "agent" => RevokeScope::Agent,
            _ => return None,
        })
    }
}

/// A credential just minted in the browser: the one time its token is shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MintedCredential {
    /// `cred_…`
    pub id: CredentialId,
    /// The agent's name.
    pub agent: String,
    /// Its thread, if any.
    pub thread: Option<String>,
    /// Its owner.
    pub owner: Option<String>,
    /// The bearer token.
    pub token: String,
    /// The `/mcp` URL to connect to.
    pub endpoint: String,
}

/// A paste-ready configuration of one MCP client for a credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    /// The client (`Claude Code`, …).
    pub client: &'static str,
    /// Where it goes (a file, or a terminal).
    pub place: &'static str,
    /// What to paste.
    pub text: String,
}

impl MintedCredential {
    /// How to connect Claude Code, Cursor, Codex and VS Code with this token.
    pub fn client_configs(&self) -> Vec<ClientConfig> {
        let (url, token) = (&self.endpoint, &self.token);
        let json = |servers_key: &str, with_type: bool| {
            let mut server =
                serde_json::json!({ "url": url, "headers": { "Authorization": format!("Bearer {token}") } });
            if with_type {
                server["type"] = "http".into();
            }
            serde_json::to_string_pretty(&serde_json::json!({ servers_key: { "gatehouse": server } }))
                .unwrap_or_default()
        };
        vec![
            ClientConfig {
                client: "Claude Code",
                place: "a terminal, in your project",
                text: format!(
                    "claude mcp add --transport http gatehouse {url} --header \"Authorization: Bearer {token}\""
                ),
            },
            ClientConfig { client: "Claude Code (.mcp.json)", place: ".mcp.json", text: json("mcpServers", true) },
            ClientConfig { client: "Cursor", place: "~/.cursor/mcp.json", text: json("mcpServers", false) },
            ClientConfig {
                client: "Codex",
                place: "~/.codex/config.toml, with GATEHOUSE_TOKEN in Codex's environment",
                text: format!(
                    "# export GATEHOUSE_TOKEN={token}\n[mcp_servers.gatehouse]\nurl = \"{url}\"\nbearer_token_env_var = \"GATEHOUSE_TOKEN\""
                ),
            },
            ClientConfig { client: "VS Code", place: ".vscode/mcp.json", text: json("servers", true) },
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_configs_carry_the_endpoint_and_token_in_each_clients_shape() {
        let minted = MintedCredential {
            id: "cred_1".into(),
            agent: "a".into(),
            thread: None,
            owner: None,
            token: "gh_tok".into(),
            endpoint: "https://gh.example/mcp".into(),
        };
        let configs = minted.client_configs();
        assert_eq!(configs.len(), 5);
        let vscode: serde_json::Value = serde_json::from_str(&configs[4].text).unwrap();
        assert_eq!(vscode["servers"]["gatehouse"]["url"], "https://gh.example/mcp");
        assert_eq!(vscode["servers"]["gatehouse"]["headers"]["Authorization"], "Bearer gh_tok");
        let cursor: serde_json::Value = serde_json::from_str(&configs[2].text).unwrap();
        assert!(cursor["mcpServers"]["gatehouse"].get("type").is_none());
        assert!(configs[3].text.contains("bearer_token_env_var = \"GATEHOUSE_TOKEN\""));
        assert!(configs[0].text.starts_with("claude mcp add --transport http gatehouse https://gh.example/mcp"));
        assert_eq!(RevokeScope::parse("thread"), Some(RevokeScope::Thread));
    }
}
