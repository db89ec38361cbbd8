//! A console token read from a file is rotated by a reload: the old token is refused from then
//! on, the new one let in, and sessions opened before end.

use super::{config_file, hangup, replace};
use crate::support::daemon::Daemon;
use crate::support::redis::free_port;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_rotates_a_console_token_and_ends_the_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("operator-token");
    std::fs::write(&token, "op-token-before\n").unwrap();
    let console = format!("127.0.0.1:{}", free_port());
    let config = config_file(
        dir.path(),
        &format!(
            "[store]\nbackend = \"memory\"\n[sink]\nkind = \"stdout\"\n\
             [sources.gh]\nprovider = \"github\"\nsecrets = [\"s\"]\n\
             [console]\nlisten = \"{console}\"\noperator_tokens = [\"file:{}\"]\n",
            token.display()
        ),
    );
    let daemon = Daemon::spawn(&config, dir.path(), &[]).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let overview = |bearer: &'static str| {
        let request = http
            .get(format!("http://{console}/api/v1/overview"))
            .bearer_auth(bearer);
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(overview("op-token-before").await, 200);
    // A session opened with the old token.
    let login = http
        .post(format!("http://{console}/login"))
        .form(&[("token", "op-token-before")])
        .send()
        .await
        .unwrap();
    let cookie = login
        .headers()
        .get("set-cookie")
        .expect("a session cookie")
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let page = |cookie: String| {
        let request = http
            .get(format!("http://{console}/"))
            .header("cookie", cookie);
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(page(cookie.clone()).await, 200);

    replace(&token, "op-token-after\n");
    hangup(&daemon, "applied", 1.0).await;
    assert_eq!(overview("op-token-before").await, 401);
    assert_eq!(overview("op-token-after").await, 200);
    let after = page(cookie).await;
    assert_ne!(
        after, 200,
        "a session of the old token outlived the rotation"
    );
}
