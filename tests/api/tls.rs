//! HTTPS on the listener (`tls_cert`, `tls_key`): HTTP/2 by ALPN and
//! HTTP/1.1 for clients that ask for it, what HTTPS turns on (HSTS,
//! `__Host-` session cookies, an `https` base URL), the certificate reloaded
//! when its files change (and kept when they change into something broken),
//! and a broken pair refused at start.

use std::path::{Path, PathBuf};
use std::time::Duration;

use gatehouse::config::Config;
use gatehouse::startup::Application;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::helpers::{TestApp, initialize_request, spawn_app_with, trusting};

/// A self-signed certificate for 127.0.0.1 and its key, as PEM.
struct Pair {
    cert: String,
    key: String,
}

fn pair() -> Pair {
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()]).unwrap();
    Pair { cert: made.cert.pem(), key: made.signing_key.serialize_pem() }
}

/// Writes `pair` into `dir`'s cert.pem and key.pem (replacing them); their paths.
fn write(dir: &Path, pair: &Pair) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, &pair.cert).unwrap();
    std::fs::write(&key, &pair.key).unwrap();
    (cert, key)
}

/// An app serving `pair` (written into `dir`) over HTTPS, configured further by `more`.
async fn spawn_https(dir: &Path, pair: &Pair, more: impl FnOnce(&mut Config)) -> TestApp {
    let (cert, key) = write(dir, pair);
    spawn_app_with(|c| {
        c.tls_cert = Some(cert);
        c.tls_key = Some(key);
        more(c);
    })
    .await
}

/// A client that trusts `pair`'s certificate alone.
fn client(pair: &Pair, http1_only: bool) -> reqwest::Client {
    let builder = trusting(reqwest::Client::builder().timeout(Duration::from_secs(10)), pair.cert.as_bytes());
    let builder = if http1_only { builder.http1_only() } else { builder };
    builder.build().unwrap()
}

#[tokio::test]
async fn https_speaks_http2_by_alpn_and_http1_to_those_who_ask_and_nothing_in_the_clear() {
    let files = tempfile::tempdir().unwrap();
    let served = pair();
    let app = spawn_https(files.path(), &served, |_| {}).await;
    assert!(app.address.starts_with("https://127.0.0.1:"), "{}", app.address);

    let h2 = client(&served, false).get(app.url("/healthz")).send().await.unwrap();
    assert_eq!((h2.status().as_u16(), h2.version()), (200, reqwest::Version::HTTP_2));
    let h1 = client(&served, true).get(app.url("/healthz")).send().await.unwrap();
    assert_eq!((h1.status().as_u16(), h1.version()), (200, reqwest::Version::HTTP_11));

    // An agent over HTTP/2: a session, and the base URL it is told is https.
    let token = app.issue("alpha", None);
    let initialized = app.mcp(&token).json(&initialize_request("2025-11-25")).send().await.unwrap();
    assert_eq!((initialized.status().as_u16(), initialized.version()), (200, reqwest::Version::HTTP_2));
    assert!(initialized.headers().contains_key("mcp-session-id"));
    assert!(app.state.mcp.base_url.starts_with("https://"), "{}", app.state.mcp.base_url);

    // Plain HTTP on the same port gets no answer, and a client that does not
    // trust the certificate gets no connection.
    let plain = reqwest::Client::new().get(app.url("/healthz").replace("https://", "http://")).send().await;
    assert!(plain.is_err(), "{plain:?}");
    let stranger = client(&pair(), false).get(app.url("/healthz")).send().await;
    assert!(stranger.is_err(), "{stranger:?}");
    // The server keeps serving after both.
    assert_eq!(app.client.get(app.url("/healthz")).send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn over_https_responses_carry_hsts_and_the_session_cookie_is_host_prefixed() {
    let files = tempfile::tempdir().unwrap();
    let app = spawn_https(files.path(), &pair(), |_| {}).await;
    app.add_user("ada", true).await;
    let signed_in = app.sign_in_with("ada", crate::helpers::PASSWORD).await;
    assert_eq!(signed_in.status(), 200);
    let cookie = signed_in.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(cookie.starts_with("__Host-gatehouse_session="), "{cookie}");
    assert!(cookie.contains("Secure"), "{cookie}");
    let page = app.client.get(app.url("/sign-in")).send().await.unwrap();
    assert_eq!(page.headers()["strict-transport-security"], "max-age=31536000");
}

/// Until `check` holds (10 s at most: the files are read every 2 s).
async fn until(what: &str, mut check: impl AsyncFnMut() -> bool) {
    for _ in 0..100 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{what}: not within 10 s");
}

#[tokio::test]
async fn a_renewed_certificate_is_served_to_new_connections_and_a_broken_one_is_not() {
    let files = tempfile::tempdir().unwrap();
    let first = pair();
    let app = spawn_https(files.path(), &first, |_| {}).await;
    let (cert, key) = (files.path().join("cert.pem"), files.path().join("key.pem"));
    let url = app.url("/healthz");
    assert_eq!(client(&first, false).get(&url).send().await.unwrap().status(), 200);

    // Renewed in place (as certbot or a mounted secret does): new
    // connections get the new certificate.
    let second = pair();
    write(files.path(), &second);
    until("the renewed certificate", async || client(&second, false).get(&url).send().await.is_ok()).await;
    assert!(client(&first, false).get(&url).send().await.is_err(), "the old certificate is no longer served");

    // Half-written (a certificate whose key is not yet there), then
    // garbage: the certificate in use stays.
    std::fs::write(&cert, pair().cert).unwrap();
    tokio::time::sleep(gatehouse::https::RELOAD_CHECK * 2).await;
    assert_eq!(client(&second, false).get(&url).send().await.unwrap().status(), 200);
    std::fs::write(&key, "not a key").unwrap();
    tokio::time::sleep(gatehouse::https::RELOAD_CHECK * 2).await;
    assert_eq!(client(&second, false).get(&url).send().await.unwrap().status(), 200);

    // Put right: served.
    let third = pair();
    write(files.path(), &third);
    until("the repaired certificate", async || client(&third, false).get(&url).send().await.is_ok()).await;
}

#[tokio::test]
async fn a_broken_pair_stops_the_start_naming_the_file() {
    let files = tempfile::tempdir().unwrap();
    let (cert, key) = write(files.path(), &pair());
    let start = async |cert: &Path, key: &Path| {
        let mut config = Config::default();
        config.listen = "127.0.0.1:0".parse().unwrap();
        config.data_dir = files.path().join("data");
        config.tls_cert = Some(cert.to_path_buf());
        config.tls_key = Some(key.to_path_buf());
        if config.database_url().is_none() {
            gatehouse_core::db::create_data_dir(&config.data_dir).unwrap();
            config.database.url = crate::helpers::test_database_url(&config.data_dir);
        }
        match Application::build(&config, CancellationToken::new()).await {
            Ok(_) => panic!("started with {cert:?} and {key:?}"),
            Err(e) => format!("{e:#}"),
        }
    };
    // Another certificate's key.
    let other = files.path().join("other-key.pem");
    std::fs::write(&other, pair().key).unwrap();
    let mismatch = start(&cert, &other).await;
    assert!(mismatch.contains("is not the key of the certificate"), "{mismatch}");
    // A key file where the certificate should be, and a missing file.
    let swapped = start(&key, &key).await;
    assert!(swapped.contains("holds no PEM certificate") && swapped.contains("key.pem"), "{swapped}");
    let missing = start(&files.path().join("nope.pem"), &key).await;
    assert!(missing.contains("cannot read") && missing.contains("nope.pem"), "{missing}");

    // Only one of the two keys is a configuration error, named.
    let half = gatehouse::config::FileConfig { tls_cert: Some(cert), ..Default::default() };
    let refused = Config::resolve(half, &Default::default()).unwrap_err().to_string();
    assert!(refused.contains("tls_key"), "{refused}");
}

#[tokio::test]
async fn a_client_that_never_finishes_its_handshake_loses_its_place() {
    let files = tempfile::tempdir().unwrap();
    let served = pair();
    let app = spawn_https(files.path(), &served, |c| {
        c.header_read_timeout = Duration::from_secs(1);
        c.max_connections = 2;
    })
    .await;
    let address = app.address.trim_start_matches("https://").to_string();
    // Both places taken: one connection silent, one that announces a
    // ClientHello and never sends it.
    let silent = tokio::net::TcpStream::connect(&address).await.unwrap();
    let mut partial = tokio::net::TcpStream::connect(&address).await.unwrap();
    partial.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]).await.unwrap();

    // A real client is still served (idle handshakes make room), and both
    // stalled connections are closed by the server.
    let answered = client(&served, false).get(app.url("/healthz")).send().await.unwrap();
    assert_eq!(answered.status(), 200);
    for (name, mut stalled) in [("silent", silent), ("partial", partial)] {
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(5), stalled.read(&mut buf)).await;
        assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{name}: {read:?}");
    }
}
