//! An upstream's `input_required` answer (SEP-2322: `tools/call`,
//! `prompts/get`, `resources/read` of a 2026-07-28 upstream asking for
//! elicitation, sampling or roots) on its way to the agent, and back.
//!
//! - A 2026-07-28 agent gets `input_required` itself, with a `requestState`
//!   of Gatehouse's own: the upstream's sealed inside, bound to the
//!   credential (or its thread), the upstream, and the tool (with its
//!   arguments and definition), prompt (with its arguments) or URI. Its retry
//!   is opened here ([`open_tool_round`], checked by the gate; [`get_prompt`],
//!   [`read_resource`]) and the answers and the upstream's own state go back
//!   to the upstream.
//! - A 2025-11-25 agent is asked each input request as an ordinary
//!   server→client request on its call's stream, and the call is retried at
//!   the upstream with the answers, up to [`MAX_ROUNDS`] rounds.
//!
//! What an upstream asks is data from a server that may be malicious: its
//! number, size and `requestState` are bounded per round, and only the three
//! request kinds SEP-2322 allows parse at all ([`InputRequest`]).
//!
//! A tool call's state is good for one retry: the gate spends it in the
//! database before the round runs (`gate::upstream_round`).
//!
//! Gatehouse's own gate also answers with `requestState` (a paused call,
//! the gate's `input_required` mode). The two never open as each other:
//! this one is prefixed with [`PREFIX`] (which routes a retry), sealed with
//! associated data of its own domain, and carries a tagged payload.

// Sampling and roots are deprecated by SEP-2577 but are what SEP-2322 asks for.
#![allow(deprecated)]

use std::time::Duration;

use gatehouse_core::approvals::digest;
use gatehouse_core::credentials::Credential;
use rmcp::model::{
    CallToolResponse, ClientCapabilities, ClientResult, ErrorData, GetPromptRequestParams, GetPromptResponse,
    InputRequest, InputRequests, InputRequiredResult, InputResponses, ReadResourceRequestParams, ReadResourceResponse,
    SealOptions, ServerRequest,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Upstreams;
use super::agent_streams::Delivery;
use super::link::Link;
use super::mcp_session::Origin;
use super::merged::UpstreamTool;
use super::relay::Asked;
use crate::mcp::McpState;
use crate::mcp::tools::Caller;
use crate::tool_error::invalid_request_state;

/// Most rounds of input one request may go through (rmcp's own client default).
pub const MAX_ROUNDS: usize = rmcp::model::DEFAULT_MRTR_MAX_ROUNDS;
/// Most input requests an upstream may ask in one round.
pub const MAX_INPUT_REQUESTS: usize = 16;
/// Most bytes (as JSON) of one round's input requests.
pub const MAX_INPUT_BYTES: usize = 256 * 1024;
/// Longest key of one input request.
pub const MAX_KEY_BYTES: usize = 256;
/// Longest `requestState` an upstream may hand back.
pub const MAX_STATE_BYTES: usize = 64 * 1024;
/// How long a `requestState` Gatehouse hands an agent for an upstream's
/// input request stays good (a person may be answering an elicitation).
pub const STATE_TTL: Duration = Duration::from_secs(15 * 60);
/// What begins every `requestState` wrapping an upstream's.
pub const PREFIX: &str = "gh-upstream.";
/// The sealed states' associated-data domain (the gate's own differs).
const DOMAIN: &str = "gatehouse/upstream-input/v1";
/// The payload's tag.
const TAG: &str = "upstream_input";

/// What a retry carries back to the upstream.
#[derive(Debug, Default)]
pub struct Continuation {
    /// The answers to the upstream's input requests, by key.
    pub input_responses: Option<InputResponses>,
    /// The upstream's own `requestState`, as it gave it.
    pub request_state: Option<String>,
}

/// What one `input_required` from the upstream comes to.
pub(super) enum Round {
    /// For a 2026-07-28 agent: its own to answer (checked, the upstream's state unsealed).
    ToAgent(InputRequiredResult),
    /// For a 2025-11-25 agent: answered by it; send this to the upstream.
    Answered(Continuation),
}

/// Rounds so far of one request driven for a 2025-11-25 agent.
#[derive(Default)]
pub(super) struct Rounds {
    all: usize,
    /// Rounds in a row with a state and no question (the upstream says "ask again").
    state_only: usize,
}

/// An upstream's `input_required`, checked against the bounds (its `_meta`
/// dropped: nothing of it is Gatehouse's to pass on).
fn checked(asked: InputRequiredResult) -> Result<InputRequiredResult, String> {
    let requests = asked.input_requests.unwrap_or_default();
    if requests.is_empty() && asked.request_state.is_none() {
        return Err("the upstream answered input_required with neither input requests nor a requestState".into());
    }
    check_input_requests(&requests)?;
    if let Some(state) = &asked.request_state
        && state.len() > MAX_STATE_BYTES
    {
        return Err(format!(
            "the upstream's requestState is {} bytes; at most {MAX_STATE_BYTES} are passed on",
            state.len()
        ));
    }
    let requests = (!requests.is_empty()).then_some(requests);
    Ok(InputRequiredResult::new(requests, asked.request_state))
}

/// An upstream's input requests (of an `input_required` answer, or of a
/// task waiting for input, [`super::tasks`]) against the bounds: how many,
/// their keys' length, their size.
pub(super) fn check_input_requests(requests: &InputRequests) -> Result<(), String> {
    if requests.len() > MAX_INPUT_REQUESTS {
        return Err(format!(
            "the upstream asked {} input requests at once; at most {MAX_INPUT_REQUESTS} are passed on",
            requests.len()
        ));
    }
    if let Some(key) = requests.keys().find(|k| k.len() > MAX_KEY_BYTES) {
        return Err(format!("the upstream's input request key of {} bytes is over {MAX_KEY_BYTES}", key.len()));
    }
    let size = serde_json::to_vec(requests).map(|v| v.len()).unwrap_or(usize::MAX);
    if size > MAX_INPUT_BYTES {
        return Err(format!("the upstream's input requests are {size} bytes; at most {MAX_INPUT_BYTES} are passed on"));
    }
    Ok(())
}

impl Upstreams {
    /// One `input_required` from the upstream on `link` for `origin`: checked,
    /// then the agent's own (2026-07-28) or asked of it now (2025-11-25).
    pub(super) async fn input_round(
        &self,
        link: &Link,
        origin: &Origin,
        asked: InputRequiredResult,
        rounds: &mut Rounds,
    ) -> Result<Round, String> {
        let asked = checked(asked)?;
        if origin.modern {
            return Ok(Round::ToAgent(asked));
        }
        rounds.all += 1;
        if rounds.all > MAX_ROUNDS {
            return Err(format!("the upstream asked for input more than {MAX_ROUNDS} times"));
        }
        let requests = asked.input_requests.unwrap_or_default();
        if requests.is_empty() {
            // "Ask again later": back off a little more each time, as rmcp's own client does.
            let wait = Duration::from_millis(50 * (1 + rounds.state_only.min(4)) as u64);
            rounds.state_only += 1;
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = origin.ct.cancelled() => return Err("cancelled by the agent".into()),
            }
        } else {
            rounds.state_only = 0;
        }
        let asking = requests
            .into_iter()
            .map(|(key, request)| async move { ask_agent(link, origin, request).await.map(|answer| (key, answer)) });
        let answers: InputResponses = futures::future::try_join_all(asking).await?.into_iter().collect();
        Ok(Round::Answered(Continuation {
            input_responses: (!answers.is_empty()).then_some(answers),
            request_state: asked.request_state,
        }))
    }
}

/// Asks the 2025-11-25 agent of `origin` one input request, on its call's
/// stream (as the relay asks an upstream's own server→client requests).
async fn ask_agent(link: &Link, origin: &Origin, request: InputRequest) -> Result<Value, String> {
    if !origin.downstream.stateful() {
        // Nothing would carry its answer back: no session, no 2026-07-28 retry.
        return Err("the agent's request has no MCP session to answer the upstream's input requests on".into());
    }
    type Declared = fn(&ClientCapabilities) -> bool;
    let (request, what, declared): (ServerRequest, &str, Declared) = match request {
        InputRequest::CreateMessage(r) => {
            (ServerRequest::CreateMessageRequest(r), "sampling/createMessage", |c| c.sampling.is_some())
        }
        InputRequest::Elicitation(r) => {
            (ServerRequest::ElicitRequest(r), "elicitation/create", |c| c.elicitation.is_some())
        }
        InputRequest::ListRoots(r) => (ServerRequest::ListRootsRequest(r), "roots/list", |c| c.roots.is_some()),
        _ => return Err("the upstream asked for input of a kind Gatehouse does not pass on".into()),
    };
    let id = origin.request_id.clone();
    let target = Asked {
        downstream: origin.downstream.clone(),
        request_id: Some(id.clone()),
        witnesses: vec![Delivery::Request(id)],
    };
    let answer = link
        .relay
        .deliver(target, request, origin.ct.clone(), what, declared)
        .await
        .map_err(|e| e.message.to_string())?;
    let value = match answer {
        ClientResult::CreateMessageResult(r) => serde_json::to_value(r),
        ClientResult::ElicitResult(r) => serde_json::to_value(r),
        ClientResult::ListRootsResult(r) => serde_json::to_value(r),
        _ => return Err(format!("the agent answered {what} with an unexpected result")),
    };
    value.map_err(|e| format!("the agent's answer to {what}: {e}"))
}

/// What a wrapped state is about.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Subject {
    /// A `tools/call` of the exposed tool `exposed`.
    Tool {
        exposed: String,
        /// The arguments' digest.
        digest: String,
        /// The exact definition the call was allowed (or approved) for.
        tool_digest: String,
        /// The approved execution it continues (none: allowed by policy or a grant).
        execution: Option<String>,
        /// An approved call's arguments: its retry may come through `resume`,
        /// which does not carry them.
        arguments: Option<Value>,
    },
    /// A `prompts/get` of the exposed prompt `exposed`.
    Prompt { exposed: String, digest: String },
    /// A `resources/read` of `uri` (normalised).
    Resource { uri: String },
}

/// The payload sealed into Gatehouse's `requestState`.
#[derive(Debug, Serialize, Deserialize)]
struct Wrapped {
    /// Always [`TAG`]: this is an upstream's input request, not a paused call.
    t: String,
    /// The upstream that asked.
    upstream: String,
    /// What it is called there (tool, prompt) or its spelling there (URI).
    name: String,
    subject: Subject,
    /// Rounds so far.
    round: usize,
    /// The upstream's own `requestState`.
    state: Option<String>,
}

/// The associated data a wrapped state is sealed with: this domain and who
/// may retry (the credential, or its thread's line: a re-issued credential
/// continues its predecessor's calls, as with the gate's own states).
fn binding(credential: &Credential) -> Vec<u8> {
    format!("{DOMAIN}|{}", credential.principal()).into_bytes()
}

/// Whether `request_state` is one of these (else it may be the gate's own).
pub fn is_wrapped(request_state: &str) -> bool {
    request_state.starts_with(PREFIX)
}

/// The agent's `input_required`: the upstream's input requests, and its
/// `requestState` sealed into Gatehouse's.
fn wrap(
    state: &McpState,
    credential: &Credential,
    wrapped: &Wrapped,
    asked: InputRequiredResult,
) -> InputRequiredResult {
    let payload = serde_json::to_vec(wrapped).unwrap_or_default();
    let sealed =
        state.codec.seal_with(&payload, &SealOptions::new().associated_data(&binding(credential)).ttl(STATE_TTL));
    InputRequiredResult::new(asked.input_requests, Some(format!("{PREFIX}{sealed}")))
}

/// Opens a wrapped state for `credential`: refused if it was altered, is
/// another credential's, has expired or is not one of these.
fn open(state: &McpState, credential: &Credential, request_state: &str) -> Result<Wrapped, String> {
    let sealed = request_state.strip_prefix(PREFIX).ok_or("it is not one Gatehouse gave for an upstream's input")?;
    let payload = state.codec.open_with(sealed, &binding(credential)).map_err(|e| e.to_string())?;
    let wrapped: Wrapped = serde_json::from_slice(&payload).map_err(|_| "its payload is not Gatehouse's")?;
    if wrapped.t != TAG {
        return Err("its payload is not Gatehouse's".into());
    }
    if wrapped.round >= MAX_ROUNDS {
        return Err(format!("the upstream asked for input more than {MAX_ROUNDS} times"));
    }
    Ok(wrapped)
}

/// A refused `requestState`, logged.
fn refused_state(credential: &Credential, why: &str) -> String {
    tracing::warn!(agent = %credential.agent, credential = %credential.id, why, "refused an upstream requestState");
    format!("the requestState was refused ({why}); make the request again without it")
}

/// The answer to a `tools/call` of `tool` for a 2026-07-28 agent: an
/// upstream's `input_required` gets Gatehouse's state, bound to this call
/// (`execution`: the approved execution it runs, if it was gated); an
/// upstream's task gets Gatehouse's id ([`super::task_ids::seal`]).
pub fn seal_call_answer(
    state: &McpState,
    caller: &Caller,
    tool: &UpstreamTool,
    arguments: &Value,
    execution: Option<String>,
    round: usize,
    answer: CallToolResponse,
) -> CallToolResponse {
    let asked = match answer {
        CallToolResponse::InputRequired(asked) => asked,
        CallToolResponse::Task(created) => {
            return CallToolResponse::Task(super::task_ids::seal(state, &caller.credential, &tool.upstream, created));
        }
        answer => return answer,
    };
    let wrapped = Wrapped {
        t: TAG.into(),
        upstream: tool.upstream.clone(),
        name: tool.name.clone(),
        subject: Subject::Tool {
            exposed: tool.tool.name.to_string(),
            digest: digest(arguments),
            tool_digest: super::merged::tool_digest(&tool.tool, &tool.tool.name),
            arguments: execution.is_some().then(|| arguments.clone()),
            execution,
        },
        round,
        state: asked.request_state.clone(),
    };
    CallToolResponse::InputRequired(wrap(state, &caller.credential, &wrapped, asked))
}

/// A tool call's wrapped state, opened for the gate's checks before its
/// retry goes upstream (the gate's retry of an upstream round).
#[derive(Debug)]
pub struct ToolRound {
    /// The exposed tool it was given for.
    pub exposed: String,
    /// The arguments' digest then.
    pub digest: String,
    /// The exact definition the call was allowed (or approved) for.
    pub tool_digest: String,
    /// The approved execution it continues (none: allowed by policy or a grant).
    pub execution: Option<String>,
    /// An approved call's arguments (its retry may come through `resume`).
    pub arguments: Option<Value>,
    /// The upstream that asked.
    pub upstream: String,
    /// The tool's name there.
    pub name: String,
    /// Rounds so far.
    pub round: usize,
    /// The upstream's own `requestState`.
    pub state: Option<String>,
}

/// Opens `request_state` ([`is_wrapped`]) as a tool call's round for
/// `credential`: refused (logged, [`invalid_request_state`]) if it was
/// altered, is another credential's, has expired or belongs to a prompt or
/// resource.
pub fn open_tool_round(state: &McpState, credential: &Credential, request_state: &str) -> Result<ToolRound, ErrorData> {
    let wrapped = open(state, credential, request_state).map_err(|why| refused(credential, &why))?;
    let Subject::Tool { exposed, digest, tool_digest, execution, arguments } = wrapped.subject else {
        return Err(refused(credential, "it belongs to another request"));
    };
    let Wrapped { upstream, name, round, state, .. } = wrapped;
    Ok(ToolRound { exposed, digest, tool_digest, execution, arguments, upstream, name, round, state })
}

/// `prompts/get` for the agent request `origin` (policy already checked): a
/// retry's state opened and checked, the upstream's `input_required` wrapped.
pub async fn get_prompt(
    state: &McpState,
    credential: &Credential,
    request: GetPromptRequestParams,
    origin: &Origin,
) -> Result<GetPromptResponse, ErrorData> {
    let arguments_digest = digest(&request.arguments.clone().map(Value::Object).unwrap_or_default());
    let owner = state.upstreams.prompt_owner(&request.name);
    let (round, answers) = match &request.request_state {
        None => (0, Continuation::default()),
        Some(token) => {
            let wrapped = open(state, credential, token).map_err(|why| refused(credential, &why))?;
            let same = matches!(&wrapped.subject, Subject::Prompt { exposed, digest }
                if *exposed == request.name && *digest == arguments_digest);
            if !same || owner.as_ref() != Some(&(wrapped.upstream.clone(), wrapped.name.clone())) {
                return Err(refused(credential, "it belongs to another request"));
            }
            (wrapped.round, Continuation { input_responses: request.input_responses, request_state: wrapped.state })
        }
    };
    let answer = state.upstreams.get_prompt(&request.name, request.arguments, origin, answers).await?;
    let GetPromptResponse::InputRequired(asked) = answer else { return Ok(answer) };
    let Some((upstream, name)) = owner else { return Ok(GetPromptResponse::InputRequired(asked)) };
    let subject = Subject::Prompt { exposed: request.name, digest: arguments_digest };
    let wrapped =
        Wrapped { t: TAG.into(), upstream, name, subject, round: round + 1, state: asked.request_state.clone() };
    Ok(GetPromptResponse::InputRequired(wrap(state, credential, &wrapped, asked)))
}

/// `resources/read` of `uri` (normalised; policy already checked) for the
/// agent request `origin`: as [`get_prompt`].
pub async fn read_resource(
    state: &McpState,
    credential: &Credential,
    uri: &str,
    request: ReadResourceRequestParams,
    origin: &Origin,
) -> Result<ReadResourceResponse, ErrorData> {
    let route = state.upstreams.resource_route(uri);
    let (round, answers) = match &request.request_state {
        None => (0, Continuation::default()),
        Some(token) => {
            let wrapped = open(state, credential, token).map_err(|why| refused(credential, &why))?;
            let same = matches!(&wrapped.subject, Subject::Resource { uri: sealed } if sealed == uri);
            if !same || route.as_ref() != Some(&(wrapped.upstream.clone(), wrapped.name.clone())) {
                return Err(refused(credential, "it belongs to another request"));
            }
            (wrapped.round, Continuation { input_responses: request.input_responses, request_state: wrapped.state })
        }
    };
    let answer = state.upstreams.read_resource(uri, origin, answers).await?;
    let ReadResourceResponse::InputRequired(asked) = answer else { return Ok(answer) };
    let Some((upstream, name)) = route else { return Ok(ReadResourceResponse::InputRequired(asked)) };
    let subject = Subject::Resource { uri: uri.to_string() };
    let wrapped =
        Wrapped { t: TAG.into(), upstream, name, subject, round: round + 1, state: asked.request_state.clone() };
    Ok(ReadResourceResponse::InputRequired(wrap(state, credential, &wrapped, asked)))
}

/// A refused `requestState` (of a tool call, prompt or resource request),
/// logged.
pub fn refused(credential: &Credential, why: &str) -> ErrorData {
    invalid_request_state(refused_state(credential, why))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::InputRequests;
    use serde_json::json;

    fn asked(n: usize, state: Option<&str>) -> InputRequiredResult {
        let request: InputRequest = serde_json::from_value(json!({"method": "roots/list"})).unwrap();
        let requests: InputRequests = (0..n).map(|i| (format!("k{i}"), request.clone())).collect();
        InputRequiredResult::new(Some(requests), state.map(String::from))
    }

    #[test]
    fn an_upstreams_input_requests_are_bounded() {
        assert!(checked(asked(3, Some("s"))).is_ok());
        assert!(checked(asked(MAX_INPUT_REQUESTS + 1, None)).unwrap_err().contains("at most 16"));
        assert!(checked(asked(0, None)).unwrap_err().contains("neither"));
        let long = "x".repeat(MAX_STATE_BYTES + 1);
        assert!(checked(asked(1, Some(&long))).unwrap_err().contains("requestState"));
        let mut one = asked(1, None);
        let request = one.input_requests.as_mut().unwrap().remove("k0").unwrap();
        one.input_requests.as_mut().unwrap().insert("k".repeat(MAX_KEY_BYTES + 1), request);
        assert!(checked(one).unwrap_err().contains("key"));
    }

    #[test]
    fn only_the_three_input_request_kinds_parse() {
        let ping = serde_json::from_value::<InputRequest>(json!({"method": "ping"}));
        assert!(ping.is_err());
        let tools = serde_json::from_value::<InputRequest>(json!({"method": "tools/call", "params": {"name": "x"}}));
        assert!(tools.is_err());
    }
}
