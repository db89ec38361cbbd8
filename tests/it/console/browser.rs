//! The console in a real browser: Debian's chromium, headless, driven over WebDriver
//! (chromedriver, spawned on a free port) with fantoccini. An operator logs in, sees the
//! overview count what was sent, finds an event by its ID, opens it and sees its duplicate, sees
//! an attacker's `<script>` payload as text that never runs, and replays a dead letter that the
//! worker then receives; a viewer's replay is refused, and so is a form without its CSRF token.
//! With `HOOKONCE_SCREENSHOTS=DIR` the run saves its screenshots there (docs/img/ holds the
//! README's).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;

use super::*;
use crate::support::now;

/// A chromedriver process, killed when dropped, and the profile directory of its browsers.
struct Driver {
    child: Child,
    port: u16,
    profile: tempfile::TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn driver() -> Driver {
    let port = free_port();
    let child = Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver (Debian's chromium-driver; scripts/test installs it)");
    let driver = Driver {
        child,
        port,
        profile: tempfile::tempdir().unwrap(),
    };
    let status = format!("http://127.0.0.1:{port}/status");
    let client = reqwest::Client::new();
    eventually(20, "chromedriver to listen", || {
        let request = client.get(&status).send();
        async move { request.await.is_ok_and(|r| r.status().is_success()) }
    })
    .await;
    driver
}

/// A new headless chromium with a profile of its own (`name` below the driver's directory).
async fn browser(driver: &Driver, name: &str) -> Client {
    let profile = driver.profile.path().join(name);
    let args = [
        "--headless".to_owned(),
        "--no-sandbox".to_owned(),
        "--disable-gpu".to_owned(),
        "--disable-quic".to_owned(),
        "--no-first-run".to_owned(),
        "--disable-background-networking".to_owned(),
        "--disable-component-update".to_owned(),
        "--disable-sync".to_owned(),
        "--disable-dev-shm-usage".to_owned(),
        "--window-size=1200,800".to_owned(),
        format!("--user-data-dir={}", profile.display()),
    ];
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".to_owned(),
        serde_json::json!({ "binary": "/usr/bin/chromium", "args": args }),
    );
    ClientBuilder::new(HttpConnector::new())
        .capabilities(capabilities)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("a chromium session")
}

async fn login(browser: &Client, app: &TestApp, token: &str) {
    browser.goto(&url(app, "/login")).await.unwrap();
    let field = browser.find(Locator::Css("#token")).await.unwrap();
    field.send_keys(token).await.unwrap();
    browser
        .find(Locator::Css("#login"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    browser
        .wait()
        .for_element(Locator::Css("#who"))
        .await
        .unwrap();
}

/// The text of the element `css`, waiting for it to appear (a click's page may still load).
async fn text(browser: &Client, css: &str) -> String {
    browser
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"))
        .text()
        .await
        .unwrap()
}

async fn screenshot(browser: &Client, name: &str) {
    let Some(dir) = std::env::var_os("HOOKONCE_SCREENSHOTS") else {
        return;
    };
    let png = browser.screenshot().await.unwrap();
    let path = PathBuf::from(dir).join(format!("{name}.png"));
    std::fs::write(&path, png).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

/// Reloads `path` until the text of `css` is `want`, for at most `seconds`.
async fn until_text(browser: &Client, app: &TestApp, path: &str, css: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        browser.goto(&url(app, path)).await.unwrap();
        let now = text(browser, css).await;
        if now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{path} {css}: {now:?}, not {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// No dialog is open: a script that ran `alert` would have left one.
async fn no_alert(browser: &Client) {
    assert!(
        browser.get_alert_text().await.is_err(),
        "an alert is open: a payload ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_follows_an_event_and_replays_a_dead_letter_in_chromium() {
    let worker = RelayWorker::start().await;
    let app = start(&worker).await;
    for id in ["evt_browser_1", "evt_browser_2", "evt_browser_1"] {
        send(&app, id, "invoice.paid").await;
    }
    let hostile = serde_json::json!({
        "id": "evt_browser_xss",
        "object": "event",
        "type": format!("{SCRIPT}{IMG}"),
        "data": {"object": {"note": SCRIPT, "other": IMG}},
    })
    .to_string();
    let sent = app.deliver("stripe", hostile.as_bytes(), &now()).await;
    assert_eq!(sent.status(), 200);
    let letter = dead_letter(&app, &worker, "evt_browser_dead").await;
    worker.heal("billing", "evt_browser_dead");
    let driver = driver().await;

    let operator = browser(&driver, "operator").await;
    login(&operator, &app, OPERATOR).await;
    // Four events forwarded (the dead letter's included), one duplicate.
    let row = "#sources tr[data-source='stripe']";
    until_text(&operator, &app, "/", &format!("{row} .forwarded"), "4").await;
    assert_eq!(text(&operator, &format!("{row} .duplicates")).await, "1");
    screenshot(&operator, "console-overview").await;

    operator
        .goto(&url(&app, "/events?source=stripe"))
        .await
        .unwrap();
    let search = operator.find(Locator::Css("#id")).await.unwrap();
    search.send_keys("evt_browser_1").await.unwrap();
    operator
        .find(Locator::Css("#search"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    // The click loads another page: wait for it before reading its rows.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !operator
        .current_url()
        .await
        .unwrap()
        .as_str()
        .contains("id=evt_browser_1")
    {
        assert!(Instant::now() < deadline, "the search did not load");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rows = operator
        .find_all(Locator::Css("#events a.event"))
        .await
        .unwrap();
    assert_eq!(rows.len(), 1, "one event found by its ID");
    rows[0].click().await.unwrap();
    operator
        .wait()
        .for_element(Locator::Css("#duplicates"))
        .await
        .unwrap();
    assert_eq!(text(&operator, "#event-id").await, "evt_browser_1");
    assert!(text(&operator, "#duplicates")
        .await
        .starts_with("1, the last at"));
    screenshot(&operator, "console-event").await;

    let hostile_page = url(&app, "/events/stripe/evt_browser_xss");
    operator.goto(&hostile_page).await.unwrap();
    no_alert(&operator).await;
    assert_eq!(operator.title().await.unwrap(), "Event · hookonce console");
    assert!(text(&operator, "#event-type").await.contains(SCRIPT));
    assert!(text(&operator, "#body").await.contains(IMG));
    let images = operator.find_all(Locator::Css("main img")).await.unwrap();
    assert!(images.is_empty(), "the payload's <img> became an element");

    // A viewer sees the dead letter and is refused its replay.
    let viewer = browser(&driver, "viewer").await;
    login(&viewer, &app, VIEWER).await;
    viewer
        .goto(&url(&app, "/dead-letters?route=billing"))
        .await
        .unwrap();
    let replay = format!("tr[data-id='{letter}'] button.replay");
    viewer
        .find(Locator::Css(&replay))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let notice = text(&viewer, "#notice").await;
    assert!(notice.contains("viewers may not write"), "{notice}");
    viewer.close().await.unwrap();

    operator
        .goto(&url(&app, "/dead-letters?route=billing"))
        .await
        .unwrap();
    screenshot(&operator, "console-dead-letters").await;
    // A form whose CSRF token was taken out is refused, and the dead letter stays.
    operator
        .execute(
            "document.querySelectorAll('input[name=csrf]').forEach(e => e.remove())",
            vec![],
        )
        .await
        .unwrap();
    operator
        .find(Locator::Css(&replay))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let notice = text(&operator, "#notice").await;
    assert!(notice.contains("missing or wrong CSRF token"), "{notice}");
    operator
        .goto(&url(&app, "/dead-letters?route=billing"))
        .await
        .unwrap();
    operator
        .find(Locator::Css(&replay))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let notice = text(&operator, "#notice").await;
    assert_eq!(notice, format!("Dead letter {letter} replayed."));
    worker
        .wait_acknowledged("billing", &["evt_browser_dead".to_owned()], 10)
        .await;
    operator.goto(&url(&app, "/audit")).await.unwrap();
    let audit = text(&operator, "#audit").await;
    assert!(audit.contains("refused: viewers may not write"), "{audit}");
    assert!(
        audit.contains("refused: missing or wrong CSRF token"),
        "{audit}"
    );
    assert!(audit.contains("replayed"), "{audit}");
    screenshot(&operator, "console-audit").await;
    operator.close().await.unwrap();
}
