//! The gate holds at the connection (issue #9): a client that never
//! finishes its headers, says nothing, or opens more connections than
//! allowed is cut off, and HTTP/2 with prior knowledge is still served.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::helpers::*;

#[tokio::test]
async fn a_client_that_never_finishes_its_headers_is_cut_off() {
    let app = spawn_app_with(|c| c.header_read_timeout = Duration::from_millis(300)).await;
    let host = app.address.trim_start_matches("http://").to_string();
    let mut slow = tokio::net::TcpStream::connect(&host).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n").await.unwrap();
    let mut buf = [0u8; 1024];
    let read = tokio::time::timeout(Duration::from_secs(5), slow.read(&mut buf)).await;
    let closed = matches!(read, Ok(Ok(0)) | Ok(Err(_)))
        || matches!(read, Ok(Ok(n)) if String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 408"));
    assert!(closed, "the half-sent request was ended by the server: {read:?}");
    let ok = app.client.get(format!("{}/healthz", app.address)).send().await.unwrap();
    assert_eq!(ok.status(), 200, "and the server keeps serving");
}

#[tokio::test]
async fn a_client_that_says_nothing_or_half_a_preface_is_cut_off() {
    let app = spawn_app_with(|c| c.header_read_timeout = Duration::from_millis(300)).await;
    let host = app.address.trim_start_matches("http://").to_string();
    // Before: a silent connection held one of the server's places forever.
    for opening in [&b""[..], b"PRI * HTTP/2.0\r\n"] {
        let mut quiet = tokio::net::TcpStream::connect(&host).await.unwrap();
        quiet.write_all(opening).await.unwrap();
        let mut buf = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(5), quiet.read(&mut buf)).await;
        assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "closed after {opening:?}: {read:?}");
    }
    let ok = app.client.get(format!("{}/healthz", app.address)).send().await.unwrap();
    assert_eq!(ok.status(), 200, "and the server keeps serving");
}

#[tokio::test]
async fn http2_with_prior_knowledge_is_served_even_when_the_preface_comes_in_pieces() {
    let app = spawn_app().await;
    let h2 = reqwest::Client::builder().http2_prior_knowledge().build().unwrap();
    let ok = h2.get(format!("{}/healthz", app.address)).send().await.unwrap();
    assert_eq!((ok.status().as_u16(), ok.version()), (200, reqwest::Version::HTTP_2));

    // The preface split across two writes is still HTTP/2: the server answers
    // with its SETTINGS frame (type 4), not an HTTP/1 error.
    let host = app.address.trim_start_matches("http://").to_string();
    let mut slow = tokio::net::TcpStream::connect(&host).await.unwrap();
    slow.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    slow.write_all(b"\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00").await.unwrap();
    let mut frame = [0u8; 9];
    tokio::time::timeout(Duration::from_secs(5), slow.read_exact(&mut frame)).await.unwrap().unwrap();
    assert_eq!(frame[3], 4, "an HTTP/2 SETTINGS frame: {frame:?}");
}

#[tokio::test]
async fn connections_are_bounded() {
    let app = spawn_app_with(|c| c.max_connections = 2).await;
    let host = app.address.trim_start_matches("http://").to_string();
    // Two open keep-alive connections fill the server; a third request waits until one goes.
    let mut held = Vec::new();
    let mut buf = [0u8; 1024];
    for _ in 0..2 {
        let mut s = tokio::net::TcpStream::connect(&host).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await.unwrap();
        let n = s.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        held.push(s);
    }
    let fresh = || reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let waiting = fresh().get(format!("{}/healthz", app.address)).timeout(Duration::from_millis(500)).send().await;
    assert!(waiting.is_err(), "a third connection is not served while two are held");
    drop(held);
    let served = fresh().get(format!("{}/healthz", app.address)).timeout(Duration::from_secs(5)).send().await;
    assert_eq!(served.unwrap().status(), 200);
}

// ---------------------------------------------------------------------------
// 5. Requests other than tools/call are governed too.
