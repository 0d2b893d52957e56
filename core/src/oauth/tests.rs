use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::clock::ManualClock;
use crate::credentials::CredentialStatus;
use crate::{Core, Settings};
use gatehouse_model::UserId;

const RESOURCE: &str = "http://127.0.0.1:8080/mcp";
const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
const CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
const REDIRECT: &str = "http://127.0.0.1:5555/callback";

fn core() -> (Core, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let settings = Settings { liveness_window: Duration::from_secs(3600), ..Settings::default() };
    let core = Core::new(Db::for_tests().unwrap(), clock.clone(), settings).unwrap();
    core.users.add("ada", "correct horse battery", false).unwrap();
    (core, clock)
}

fn public_client(core: &Core) -> Client {
    let metadata =
        ClientMetadata::check(Some("Claude Code"), &[REDIRECT.to_string()], Some("none"), None, None).unwrap();
    core.oauth.register(metadata, "192.0.2.1").unwrap().client
}

fn consent(client: &Client) -> Consent {
    Consent {
        client_id: client.client_id.clone(),
        redirect_uri: REDIRECT.into(),
        code_challenge: CHALLENGE.into(),
        resource: RESOURCE.into(),
        owner: "ada".into(),
        agent: "laptop claude".into(),
    }
}

fn signed_in(core: &Core, client: &Client) -> Tokens {
    let code = core.oauth.create_code(&consent(client)).unwrap();
    core.oauth.exchange_code(client, &code, REDIRECT, VERIFIER, RESOURCE).unwrap()
}

fn code_of(e: OAuthError) -> &'static str {
    e.code()
}

#[test]
fn a_code_makes_a_credential_owned_by_the_approver_and_works_once() {
    let (core, _) = core();
    let client = public_client(&core);
    let code = core.oauth.create_code(&consent(&client)).unwrap();
    let tokens = core.oauth.exchange_code(&client, &code, REDIRECT, VERIFIER, RESOURCE).unwrap();
    assert!(tokens.access_token.starts_with(ACCESS_PREFIX) && tokens.refresh_token.starts_with(REFRESH_PREFIX));
    let credential = core.oauth.authenticate(&tokens.access_token, RESOURCE).unwrap().unwrap();
    assert_eq!(credential.owner.as_deref(), Some("ada"));
    assert_eq!(credential.agent, "laptop claude");
    assert_eq!(credential.issued_via, IssuedVia::OAuth);
    assert_eq!(credential.oauth_client.as_deref(), Some("Claude Code"));
    // Only hashes are stored.
    let stored: i64 = core
        .db
        .conn()
        .unwrap()
        .query_one(
            "SELECT COUNT(*) FROM oauth_tokens WHERE token_hash IN (?1, ?2)",
            args![tokens.access_token, tokens.refresh_token],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(stored, 0);
    // A second exchange fails and revokes what the first made.
    let again = core.oauth.exchange_code(&client, &code, REDIRECT, VERIFIER, RESOURCE).unwrap_err();
    assert_eq!(code_of(again), "invalid_grant");
    assert!(core.oauth.authenticate(&tokens.access_token, RESOURCE).unwrap().is_err());
    let view = core.credentials.view(core.credentials.get(&tokens.credential_id).unwrap().unwrap());
    assert_eq!(view.status, CredentialStatus::Revoked);
}

#[test]
fn a_wrong_verifier_redirect_client_resource_or_late_exchange_is_refused() {
    let (core, clock) = core();
    let client = public_client(&core);
    let other = public_client(&core);
    let code = core.oauth.create_code(&consent(&client)).unwrap();
    let wrong_verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXj";
    for (who, redirect, verifier, resource, expected) in [
        (&client, REDIRECT, wrong_verifier, RESOURCE, "invalid_grant"),
        (&client, "http://127.0.0.1:5555/other", VERIFIER, RESOURCE, "invalid_grant"),
        (&other, REDIRECT, VERIFIER, RESOURCE, "invalid_grant"),
        (&client, REDIRECT, VERIFIER, "https://elsewhere.example/mcp", "invalid_target"),
    ] {
        let e = core.oauth.exchange_code(who, &code, redirect, verifier, resource).unwrap_err();
        assert_eq!(e.code(), expected, "{e}");
    }
    // Failed attempts do not use the code up; time does.
    clock.advance(Duration::from_secs(121));
    let late = core.oauth.exchange_code(&client, &code, REDIRECT, VERIFIER, RESOURCE).unwrap_err();
    assert_eq!(late.code(), "invalid_grant");
    assert!(late.to_string().contains("expired"));
}

#[test]
fn refresh_rotates_and_a_reused_refresh_token_revokes_the_credential() {
    let (core, _) = core();
    let client = public_client(&core);
    let first = signed_in(&core, &client);
    let second = core.oauth.refresh(&client, &first.refresh_token, Some(RESOURCE)).unwrap();
    assert_ne!(second.refresh_token, first.refresh_token);
    assert_eq!(second.credential_id, first.credential_id);
    assert!(core.oauth.authenticate(&second.access_token, RESOURCE).unwrap().is_ok());
    // Another client cannot use it.
    let other = public_client(&core);
    assert_eq!(core.oauth.refresh(&other, &second.refresh_token, None).unwrap_err().code(), "invalid_grant");
    // The first refresh token again: it leaked, so the agent is cut off.
    assert_eq!(core.oauth.refresh(&client, &first.refresh_token, None).unwrap_err().code(), "invalid_grant");
    assert!(core.oauth.authenticate(&second.access_token, RESOURCE).unwrap().is_err());
    assert_eq!(core.oauth.refresh(&client, &second.refresh_token, None).unwrap_err().code(), "invalid_grant");
}

#[test]
fn tokens_die_with_their_credential_revoked_or_lapsed() {
    let (core, clock) = core();
    let client = public_client(&core);
    // Revoked in the console.
    let tokens = signed_in(&core, &client);
    assert!(core.credentials.revoke(&tokens.credential_id).unwrap());
    assert!(core.oauth.authenticate(&tokens.access_token, RESOURCE).unwrap().is_err());
    assert_eq!(core.oauth.refresh(&client, &tokens.refresh_token, None).unwrap_err().code(), "invalid_grant");
    // Lapsed: an hour (the window) without a sign of life; the refresh
    // token itself lives 30 days but cannot revive the credential.
    let tokens = signed_in(&core, &client);
    clock.advance(Duration::from_secs(3601));
    assert_eq!(core.oauth.refresh(&client, &tokens.refresh_token, None).unwrap_err().code(), "invalid_grant");
    // Traffic keeps it alive: refreshing every 50 minutes for 5 hours.
    let mut tokens = signed_in(&core, &client);
    for _ in 0..6 {
        clock.advance(Duration::from_secs(50 * 60));
        tokens = core.oauth.refresh(&client, &tokens.refresh_token, None).unwrap();
    }
    assert!(core.oauth.authenticate(&tokens.access_token, RESOURCE).unwrap().is_ok());
    // An access token expires on its own (15 minutes).
    clock.advance(Duration::from_secs(15 * 60 + 1));
    assert!(core.oauth.authenticate(&tokens.access_token, RESOURCE).unwrap().is_err());
    // And one for another resource is refused.
    let fresh = core.oauth.refresh(&client, &tokens.refresh_token, None).unwrap();
    assert!(core.oauth.authenticate(&fresh.access_token, "https://elsewhere.example/mcp").unwrap().is_err());
}

#[test]
fn revocation_is_the_clients_own_and_ends_the_credential() {
    let (core, _) = core();
    let client = public_client(&core);
    let other = public_client(&core);
    let tokens = signed_in(&core, &client);
    assert!(!core.oauth.revoke(&other, &tokens.refresh_token).unwrap(), "another client's token");
    assert!(!core.oauth.revoke(&client, "grt_unknown").unwrap());
    assert!(core.oauth.revoke(&client, &tokens.refresh_token).unwrap());
    assert!(core.oauth.authenticate(&tokens.access_token, RESOURCE).unwrap().is_err());
    assert_eq!(core.oauth.refresh(&client, &tokens.refresh_token, None).unwrap_err().code(), "invalid_grant");
}

#[test]
fn confidential_clients_must_prove_themselves_the_way_they_registered() {
    let (core, _) = core();
    let metadata =
        ClientMetadata::check(Some("web app"), &["https://app.example/cb".into()], None, None, None).unwrap();
    let registered = core.oauth.register(metadata, "192.0.2.1").unwrap();
    let id = registered.client.client_id.clone();
    let secret = registered.secret.expect("client_secret_basic by default");
    let auth = |s: Option<&str>, via| core.oauth.authenticate_client(&id, s, via).map(|c| c.client_id);
    assert_eq!(auth(Some(&secret), AuthMethod::ClientSecretBasic).unwrap(), id);
    assert_eq!(auth(Some("wrong"), AuthMethod::ClientSecretBasic).unwrap_err().code(), "invalid_client");
    assert_eq!(auth(None, AuthMethod::None).unwrap_err().code(), "invalid_client");
    assert_eq!(auth(Some(&secret), AuthMethod::ClientSecretPost).unwrap_err().code(), "invalid_client");
    assert_eq!(
        core.oauth.authenticate_client("client_nope", None, AuthMethod::None).unwrap_err().code(),
        "invalid_client"
    );
}

#[test]
fn registration_metadata_is_checked() {
    let uris = |u: &[&str]| u.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let check = |u: &[&str], m: Option<&str>, g: Option<&[String]>| {
        ClientMetadata::check(None, &uris(u), m, g, None).map(|m| m.name).map_err(|e| e.code())
    };
    assert_eq!(check(&[REDIRECT], Some("none"), None), Ok("Unnamed MCP client".into()));
    assert_eq!(check(&[], Some("none"), None), Err("invalid_redirect_uri"));
    assert_eq!(check(&["http://evil.example/cb"], Some("none"), None), Err("invalid_redirect_uri"));
    assert_eq!(check(&[REDIRECT], Some("private_key_jwt"), None), Err("invalid_client_metadata"));
    assert_eq!(check(&[REDIRECT], None, Some(&["implicit".to_string()])), Err("invalid_client_metadata"));
    let name = ClientMetadata::check(Some("  Evil\u{202e}\nName  "), &uris(&[REDIRECT]), None, None, None).unwrap();
    assert!(!name.name.chars().any(char::is_control), "{:?}", name.name);
}

#[test]
fn purge_forgets_unused_registrations_and_dead_tokens() {
    let (core, clock) = core();
    let unused = public_client(&core);
    let used = public_client(&core);
    let tokens = signed_in(&core, &used);
    clock.advance(Duration::from_secs(24 * 3600 + 1));
    assert!(core.oauth.purge().unwrap() >= 2, "the unused client and the expired access token");
    assert!(core.oauth.client(&unused.client_id).unwrap().is_none());
    assert!(core.oauth.client(&used.client_id).unwrap().is_some());
    assert!(core.oauth.authenticate(&tokens.access_token, RESOURCE).unwrap().is_err());
}

#[test]
fn registration_is_bounded_per_address_and_unused_ones_expire_quickly() {
    let (core, clock) = core();
    let register = |from: &str| {
        let metadata = ClientMetadata::check(Some("flood"), &[REDIRECT.to_string()], Some("none"), None, None).unwrap();
        core.oauth.register(metadata, from)
    };
    let per_address = Registration::default().per_address;
    let flood: Vec<_> = (0..per_address).map(|_| register("192.0.2.1").unwrap().client).collect();
    // All of them fresh: the next is refused, for less than FRESH_MS.
    let refused = register("192.0.2.1").unwrap_err();
    assert_eq!(refused.code(), "temporarily_unavailable");
    let (message, retry_after_secs) = match refused {
        OAuthError::TooManyRegistrations { message, retry_after_secs } => (message, retry_after_secs),
        other => panic!("{other:?}"),
    };
    assert!(message.contains("max_unused_registrations_per_address"), "{message}");
    assert!((1..=FRESH_MS / 1000).contains(&(retry_after_secs as i64)), "{retry_after_secs}");
    // Another address is not refused.
    let other = register("198.51.100.7").unwrap().client;

    // A minute on, the address's oldest unused registration makes room.
    clock.advance(Duration::from_millis(FRESH_MS as u64 + 1));
    let newcomer = register("192.0.2.1").unwrap().client;
    let left = flood.iter().filter(|c| core.oauth.client(&c.client_id).unwrap().is_some()).count();
    assert_eq!(left, per_address - 1, "one of the oldest made room");
    // Once a person has seen it on a consent page, no flood evicts it, and it
    // no longer counts: the address may hold as many unseen ones again.
    core.oauth.seen(&newcomer.client_id, UserId::from(1)).unwrap();
    clock.advance(Duration::from_millis(FRESH_MS as u64 + 1));
    for _ in 0..per_address {
        register("192.0.2.1").unwrap();
    }
    assert!(register("192.0.2.1").is_err(), "all unseen ones are fresh again");
    assert!(core.oauth.client(&newcomer.client_id).unwrap().is_some(), "a seen registration is never evicted");
    assert!(flood.iter().all(|c| core.oauth.client(&c.client_id).unwrap().is_none()), "the flood evicted itself");

    // A client known by its metadata document is neither counted nor evicted.
    let document = "https://client.example/meta.json";
    let metadata = ClientMetadata::check(Some("doc"), &[REDIRECT.to_string()], Some("none"), None, None).unwrap();
    core.oauth.save_document_client(document, metadata).unwrap();
    clock.advance(Duration::from_millis(FRESH_MS as u64 + 1));
    for _ in 0..per_address {
        register("192.0.2.1").unwrap();
    }
    assert!(core.oauth.client(document).unwrap().is_some());

    // A used registration no longer counts against its address.
    let code = core.oauth.create_code(&consent(&other)).unwrap();
    core.oauth.exchange_code(&other, &code, REDIRECT, VERIFIER, RESOURCE).unwrap();
    for _ in 0..per_address {
        register("198.51.100.7").unwrap();
    }
    assert!(register("198.51.100.7").is_err());

    // Unused ones expire after the TTL and housekeeping deletes them; a used
    // one stays, a seen one stays for a day.
    clock.advance(Registration::default().unused_ttl + Duration::from_secs(1));
    register("192.0.2.1").unwrap();
    assert!(core.oauth.purge().unwrap() >= 2 * per_address);
    assert!(core.oauth.client(&other.client_id).unwrap().is_some(), "a used client stays");
    assert!(core.oauth.client(&newcomer.client_id).unwrap().is_some(), "a seen client stays a while");
    clock.advance(Duration::from_millis(SEEN_UNUSED_MS as u64));
    core.oauth.purge().unwrap();
    assert!(core.oauth.client(&newcomer.client_id).unwrap().is_none(), "a seen client never used goes after a day");
    assert!(core.oauth.client(&other.client_id).unwrap().is_some(), "a used client stays");
}

#[test]
fn one_person_keeps_only_a_few_seen_registrations_out_of_the_count() {
    let (core, _clock) = core();
    let register = || {
        let metadata = ClientMetadata::check(Some("x"), &[REDIRECT.to_string()], Some("none"), None, None).unwrap();
        core.oauth.register(metadata, "192.0.2.9").unwrap().client
    };
    let clients: Vec<_> = (0..SEEN_PER_PERSON + 3).map(|_| register()).collect();
    for c in &clients {
        core.oauth.seen(&c.client_id, UserId::from(7)).unwrap();
    }
    // Past the fifth, a person's page no longer takes them out of the count:
    // the address still holds the rest against its bound.
    let per_address = Registration::default().per_address as i64;
    for _ in 0..(per_address - 3) {
        register();
    }
    let metadata = ClientMetadata::check(Some("x"), &[REDIRECT.to_string()], Some("none"), None, None).unwrap();
    assert!(core.oauth.register(metadata, "192.0.2.9").is_err(), "three seen past the cap still count");
}

#[test]
fn one_address_never_reaches_the_global_cap() {
    let huge = Registration { per_address: usize::MAX, ..Registration::default() };
    assert!(huge.effective_per_address() * 10 <= MAX_UNUSED_CLIENTS);
    assert_eq!(Registration { per_address: 0, ..Registration::default() }.effective_per_address(), 1);
}
