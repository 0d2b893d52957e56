//! An upstream an admin added on the console: one definition, kept in the
//! database as JSON, read by the server (which starts it on every replica),
//! shown on the upstreams page and taken by its form. The config file's
//! `[[upstream]]` tables are the server's own and read-only on the page; a
//! name the file uses wins over a stored one.
//!
//! A stdio upstream names a command by its key in the config file's
//! `stdio_commands`, never a program: a stdio command runs on the host, so
//! the host's operator lists which ones may (with their arguments), and an
//! admin in the browser only picks one.

use serde::{Deserialize, Serialize};

/// Longest upstream name.
pub const MAX_UPSTREAM_NAME: usize = 64;
/// Longest tool-name prefix.
pub const MAX_PREFIX: usize = 64;
/// Most HTTP headers one upstream is sent.
pub const MAX_HEADERS: usize = 32;
/// Longest header value.
pub const MAX_HEADER_VALUE: usize = 8 * 1024;

/// One upstream as stored and edited.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamSpec {
    /// Unique name (letters, digits, `-`, `_`); the default tool prefix is `<name>__`.
    pub name: String,
    /// Where it is.
    pub transport: Transport,
    /// Prefix of its exposed tool names (default `<name>__`; may be `""`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// `false`: kept, not started.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// HTTP headers sent to it (Streamable HTTP only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<Header>,
}

fn yes() -> bool {
    true
}

/// What a test of an upstream found (the console's Test, before saving).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct UpstreamTested {
    /// The protocol revision it negotiated.
    pub protocol: Option<String>,
    /// Its tools' names as agents would see them.
    pub tools: Vec<String>,
    /// How many prompts it offers.
    pub prompts: usize,
    /// How many resources and templates it offers.
    pub resources: usize,
    /// What its listing refused or cut short.
    pub problems: Vec<String>,
}

impl UpstreamTested {
    /// The sentence the form shows for upstream `name`.
    pub fn said(&self, name: &str) -> String {
        const SHOWN: usize = 5;
        let tools = match self.tools.len() {
            0 => "no tools".to_string(),
            n => {
                let mut names = self.tools.iter().take(SHOWN).cloned().collect::<Vec<_>>().join(", ");
                if n > SHOWN {
                    names.push_str(&format!(" and {} more", n - SHOWN));
                }
                format!("{n} tool{} ({names})", if n == 1 { "" } else { "s" })
            }
        };
        let mut said = format!("Test passed: {name} answered");
        if let Some(protocol) = &self.protocol {
            said.push_str(&format!(" (protocol {protocol})"));
        }
        let count = |n: usize, one: &str| format!("{n} {one}{}", if n == 1 { "" } else { "s" });
        said.push_str(&format!(
            " with {tools}, {} and {}.",
            count(self.prompts, "prompt"),
            count(self.resources, "resource")
        ));
        if let Some(first) = self.problems.first() {
            said.push_str(&format!(" Some of it would not be listed: {first}."));
        }
        said.push_str(" Nothing was saved.");
        said
    }
}

/// Why a test of an upstream failed, in words (sanitized: no URL
/// credentials or queries).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum TestFailed {
    /// Another test runs on this replica: one at a time, since each may
    /// start a process on this host.
    #[error("another test is running; try again in a moment")]
    Busy,
    /// It did not start, or did not answer `initialize`.
    #[error("{0}")]
    Connect(String),
    /// It started but listing what it offers failed.
    #[error("it connected, but listing what it offers failed: {0}")]
    List(String),
}

/// How Gatehouse reaches an upstream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum Transport {
    /// A Streamable HTTP endpoint.
    Http {
        /// Its URL (`http` or `https`, with a host, no user name or password).
        url: String,
    },
    /// A stdio child: the key of a whole command in the config file's `stdio_commands`.
    Stdio {
        /// The key.
        command: String,
    },
}

impl Transport {
    /// `http` or `stdio`.
    pub fn kind(&self) -> &'static str {
        match self {
            Transport::Http { .. } => "http",
            Transport::Stdio { .. } => "stdio",
        }
    }
}

/// One HTTP header sent to an upstream. A secret one is write-only: pages
/// and the API get its name and "set", never its value.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    /// Its name (`Authorization`).
    pub name: String,
    /// Its value; `None` in what is shown of a secret header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Write-only.
    #[serde(default)]
    pub secret: bool,
}

// A secret header's value never reaches a log line or a debug print.
impl std::fmt::Debug for Header {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let value = if self.secret { self.value.as_ref().map(|_| "…") } else { self.value.as_deref() };
        f.debug_struct("Header").field("name", &self.name).field("value", &value).field("secret", &self.secret).finish()
    }
}

/// The origin (`scheme://host:port`, lowercased) of an HTTP transport: a
/// secret kept on an edit goes only where it went before.
pub fn origin(transport: &Transport) -> Option<String> {
    let Transport::Http { url } = transport else { return None };
    origin_of(url)
}

/// The origin (`scheme://host:port`, lowercased) of a URL: what a change
/// log may say of it (a path or query may hold a token).
pub fn origin_of(url: &str) -> Option<String> {
    let (scheme, rest) = url.trim().split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    Some(format!("{}://{}", scheme.to_ascii_lowercase(), authority.to_ascii_lowercase()))
}

/// Why a spec was refused: the form field it names and a plain sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SpecError {
    /// The form field (`name`, `url`, `command`, `prefix`, `headers`, `secret_headers`).
    pub field: &'static str,
    /// What is wrong, and what would do.
    pub message: String,
}

impl SpecError {
    /// A refusal of `field`.
    pub fn new(field: &'static str, message: impl Into<String>) -> Self {
        Self { field, message: message.into() }
    }

    /// Adds this refusal to `found` unless its field is refused already:
    /// a form says one sentence per field.
    pub fn add_to(self, found: &mut Vec<SpecError>) {
        if !found.iter().any(|f| f.field == self.field) {
            found.push(self);
        }
    }

    /// What a form's refusal says: one `invalid <field>: <message>` line
    /// per refused field (the page puts each beside its field).
    pub fn lines(problems: &[SpecError]) -> String {
        problems.iter().map(|p| format!("invalid {}: {}", p.field, p.message)).collect::<Vec<_>>().join("\n")
    }
}

/// Whether `name` may name an upstream (the config file's rule too).
pub fn valid_upstream_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_UPSTREAM_NAME
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl UpstreamSpec {
    /// Checks what can be checked without the server's configuration (the
    /// server adds: the command key exists, the name is not the file's):
    /// the first refusal ([`UpstreamSpec::problems`] has them all).
    pub fn check(&self) -> Result<(), SpecError> {
        match self.problems().into_iter().next() {
            Some(problem) => Err(problem),
            None => Ok(()),
        }
    }

    /// Every field's refusal, one per field, in the form's order.
    pub fn problems(&self) -> Vec<SpecError> {
        let mut found: Vec<SpecError> = Vec::new();
        for check in [Self::check_name, Self::check_transport, Self::check_headers] {
            if let Err(e) = check(self) {
                e.add_to(&mut found);
            }
        }
        found
    }

    fn check_name(&self) -> Result<(), SpecError> {
        if !valid_upstream_name(&self.name) {
            return Err(SpecError::new(
                "name",
                format!("A name is 1 to {MAX_UPSTREAM_NAME} letters, digits, '-' or '_'."),
            ));
        }
        if let Some(prefix) = &self.prefix
            && (prefix.len() > MAX_PREFIX
                || !prefix.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')))
        {
            return Err(SpecError::new(
                "prefix",
                format!("A prefix is at most {MAX_PREFIX} letters, digits, '_', '.' or '-'."),
            ));
        }
        Ok(())
    }

    fn check_transport(&self) -> Result<(), SpecError> {
        match &self.transport {
            Transport::Http { url } => check_url(url)?,
            Transport::Stdio { command } => {
                if command.trim().is_empty() {
                    return Err(SpecError::new("command", "Choose one of the commands the config file allows."));
                }
            }
        }
        Ok(())
    }

    fn check_headers(&self) -> Result<(), SpecError> {
        if matches!(self.transport, Transport::Stdio { .. }) && !self.headers.is_empty() {
            return Err(SpecError::new("headers", "Headers are sent over HTTP: a stdio upstream takes none."));
        }
        if self.headers.len() > MAX_HEADERS {
            return Err(SpecError::new("headers", format!("At most {MAX_HEADERS} headers.")));
        }
        let mut seen = std::collections::HashSet::new();
        for header in &self.headers {
            let field = if header.secret { "secret_headers" } else { "headers" };
            let name_ok = !header.name.is_empty()
                && header.name.len() <= 100
                && header.name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !name_ok {
                return Err(SpecError::new(field, format!("{:?} is not a header name.", header.name)));
            }
            if !seen.insert(header.name.to_ascii_lowercase()) {
                return Err(SpecError::new(field, format!("The header {} is given twice.", header.name)));
            }
            if matches!(
                header.name.to_ascii_lowercase().as_str(),
                "host"
                    | "content-length"
                    | "content-type"
                    | "accept"
                    | "mcp-session-id"
                    | "mcp-protocol-version"
                    | "transfer-encoding"
                    | "connection"
                    | "te"
                    | "upgrade"
            ) {
                return Err(SpecError::new(field, format!("{} is set by Gatehouse itself.", header.name)));
            }
            if let Some(value) = &header.value
                && (value.len() > MAX_HEADER_VALUE || value.chars().any(|c| c.is_control() && c != '\t'))
            {
                return Err(SpecError::new(
                    field,
                    format!("The value of {} must be one line, at most {MAX_HEADER_VALUE} bytes.", header.name),
                ));
            }
        }
        Ok(())
    }

    /// What pages and the API show: secret headers' values left out.
    pub fn shown(mut self) -> Self {
        for header in &mut self.headers {
            if header.secret {
                header.value = None;
            }
        }
        self
    }

    /// Fills what an edit left blank from `before` (the stored upstream of
    /// its name): a secret header given without a value keeps the value
    /// stored under its name (the form never shows it), only while the
    /// URL's origin is the same, so a kept token never follows a changed
    /// URL; one with no value to keep is refused. The switch is the stored
    /// one (Disable is its own action).
    pub fn keep_from(&mut self, before: Option<&UpstreamSpec>) -> Result<(), SpecError> {
        if let Some(before) = before {
            self.enabled = before.enabled;
        }
        let same_origin = before.is_some_and(|b| origin(&b.transport) == origin(&self.transport));
        for header in self.headers.iter_mut().filter(|h| h.secret) {
            if header.value.as_deref().is_none_or(str::is_empty) {
                let kept = before
                    .iter()
                    .filter(|_| same_origin)
                    .flat_map(|b| &b.headers)
                    .find(|h| h.secret && h.name.eq_ignore_ascii_case(&header.name))
                    .and_then(|h| h.value.clone());
                let Some(kept) = kept else {
                    let why = if before.is_some() && !same_origin {
                        format!("Give {}'s value again: the URL's host changed.", header.name)
                    } else {
                        format!("Give {}'s value.", header.name)
                    };
                    return Err(SpecError::new("secret_headers", why));
                };
                header.value = Some(kept);
            }
        }
        Ok(())
    }

    /// The prefix its tools are exposed under.
    pub fn prefix(&self) -> String {
        self.prefix.clone().unwrap_or_else(|| format!("{}__", self.name))
    }
}

/// An `http(s)` URL with a host and no user name or password (those go in a secret header).
pub(crate) fn check_url(url: &str) -> Result<(), SpecError> {
    let bad = |message: &str| Err(SpecError::new("url", message));
    let url = url.trim();
    let Some((scheme, rest)) = url.split_once("://") else {
        return bad("Give the server's whole URL, e.g. https://mcp.example.com/mcp.");
    };
    if !matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https") {
        return bad("The URL must start with http:// or https://.");
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.is_empty() {
        return bad("The URL needs a host.");
    }
    if authority.contains('@') {
        return bad("Put credentials in a secret header, not in the URL.");
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return bad("A URL has no spaces.");
    }
    // The HTTP client reads `\` as `/`: the origin shown (and kept secrets
    // compared by) would not be the one reached.
    if url.contains('\\') {
        return bad("A URL has no backslashes: write / instead.");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(url: &str) -> UpstreamSpec {
        UpstreamSpec {
            name: "search".into(),
            transport: Transport::Http { url: url.into() },
            prefix: None,
            enabled: true,
            headers: vec![Header { name: "Authorization".into(), value: Some("Bearer s3cret".into()), secret: true }],
        }
    }

    #[test]
    fn a_spec_is_checked_field_by_field() {
        assert_eq!(http("https://mcp.example.com/mcp").check(), Ok(()));
        assert_eq!(http("ftp://x/").check().unwrap_err().field, "url");
        assert_eq!(http("https://ada:pw@x/").check().unwrap_err().field, "url");
        assert_eq!(http("https:///mcp").check().unwrap_err().field, "url");
        assert_eq!(http("https://x.example\\y.example/mcp").check().unwrap_err().field, "url");
        let mut spec = http("https://x/");
        spec.name = "a b".into();
        assert_eq!(spec.check().unwrap_err().field, "name");
        let mut spec = http("https://x/");
        spec.headers[0].value = Some("a\r\nX-Injected: 1".into());
        assert_eq!(spec.check().unwrap_err().field, "secret_headers");
        let mut spec = http("https://x/");
        spec.headers.push(Header { name: "authorization".into(), value: Some("x".into()), secret: false });
        assert_eq!(spec.check().unwrap_err().field, "headers", "twice, whatever the case");
        let stdio = UpstreamSpec { transport: Transport::Stdio { command: "everything".into() }, ..http("") };
        assert_eq!(stdio.check().unwrap_err().field, "headers");
        let mut two = http("ftp://x/");
        two.name = "a b".into();
        let fields: Vec<&str> = two.problems().iter().map(|p| p.field).collect();
        assert_eq!(fields, ["name", "url"], "every bad field, once");
    }

    #[test]
    fn a_secret_header_is_never_shown() {
        let shown = http("https://x/").shown();
        assert_eq!(shown.headers[0].value, None);
        assert!(!serde_json::to_string(&shown).unwrap().contains("s3cret"));
        assert!(!format!("{:?}", http("https://x/")).contains("s3cret"), "nor in a debug print");
    }
}
