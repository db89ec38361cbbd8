//! The HTML pages over HTTP: a login opens a session cookie (HttpOnly, SameSite=Strict, not
//! Secure on loopback), every answer carries the CSP and its companions, a form write without
//! its session's CSRF token is refused (403) and audited, and an attacker's payload is escaped.

use super::*;
use crate::support::now;

/// Logs in with `token`; the session cookie (`name=value`).
async fn login(app: &TestApp, token: &str) -> String {
    let response = client()
        .post(url(app, "/login"))
        .form(&[("token", token)])
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 303, "login with a valid token");
    let cookie = response.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_owned();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    assert!(!cookie.contains("Secure"), "loopback: {cookie}");
    cookie.split(';').next().unwrap().to_owned()
}

async fn page(app: &TestApp, cookie: &str, path: &str) -> (u16, String) {
    let response = client()
        .get(url(app, path))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    assert_eq!(
        headers["content-security-policy"].to_str().unwrap(),
        hookonce::console::CSP
    );
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(headers["referrer-policy"], "no-referrer");
    (status, response.text().await.unwrap())
}

fn csrf(html: &str) -> String {
    let at = html.find("name=\"csrf\" value=\"").expect("a CSRF field") + 19;
    html[at..].split('"').next().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_need_a_login_and_writes_need_the_csrf_token() {
    let worker = RelayWorker::start().await;
    let app = start(&worker).await;
    let anonymous = client().get(url(&app, "/")).send().await.unwrap();
    assert_eq!(anonymous.status(), 303);
    assert_eq!(anonymous.headers()["location"], "/login");
    let wrong = client()
        .post(url(&app, "/login"))
        .form(&[("token", "nope")])
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    assert!(wrong.headers().get("set-cookie").is_none());

    let letter = dead_letter(&app, &worker, "evt_page_dead").await;
    let operator = login(&app, OPERATOR).await;
    let (status, html) = page(&app, &operator, "/dead-letters?route=billing").await;
    assert_eq!(status, 200);
    assert!(html.contains("evt_page_dead"), "{html}");
    let token = csrf(&html);
    let action = url(&app, &format!("/dead-letters/billing/{letter}/replay"));
    for form in [vec![], vec![("csrf", "0123456789abcdef0123456789abcdef")]] {
        let refused = client()
            .post(&action)
            .header("cookie", &operator)
            .form(&form)
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 403, "{form:?}");
    }
    // A viewer's session and token are its own: the operator's CSRF token is not the viewer's.
    let viewer = login(&app, VIEWER).await;
    let (_, viewer_html) = page(&app, &viewer, "/dead-letters?route=billing").await;
    let viewer_csrf = csrf(&viewer_html);
    assert_ne!(viewer_csrf, token);
    let refused = client()
        .post(&action)
        .header("cookie", &viewer)
        .form(&[("csrf", viewer_csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);
    assert!(refused
        .text()
        .await
        .unwrap()
        .contains("viewers may not write"));
    let redis = app.redis.as_ref().unwrap();
    assert_eq!(
        crate::relay::xlen(redis, &dead_letters("stripe", "billing")),
        1
    );

    worker.heal("billing", "evt_page_dead");
    let replayed = client()
        .post(&action)
        .header("cookie", &operator)
        .form(&[("csrf", token.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(replayed.status(), 200);
    assert!(replayed.text().await.unwrap().contains("replayed"));
    worker
        .wait_acknowledged("billing", &["evt_page_dead".to_owned()], 10)
        .await;
    let (_, audit) = page(&app, &viewer, "/audit").await;
    assert_eq!(
        audit.matches("missing or wrong CSRF token").count(),
        2,
        "{audit}"
    );
    assert!(audit.contains("viewers may not write"), "{audit}");
    assert!(
        !audit.contains(OPERATOR) && !audit.contains(VIEWER),
        "{audit}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_are_shown_escaped_in_every_page() {
    let worker = RelayWorker::start().await;
    let app = start(&worker).await;
    let event_type = format!("{SCRIPT}{IMG}");
    let body = serde_json::json!({
        "id": "evt_xss",
        "object": "event",
        "type": event_type,
        "data": {"object": {"note": SCRIPT, "other": IMG}},
    })
    .to_string();
    assert_eq!(
        app.deliver("stripe", body.as_bytes(), &now())
            .await
            .status(),
        200
    );
    let viewer = login(&app, VIEWER).await;
    for path in [
        "/events?source=stripe",
        "/events?source=stripe&id=evt_xss",
        "/events/stripe/evt_xss",
        &format!("/events?source=stripe&id={}", urlencode(IMG)),
    ] {
        let (status, html) = page(&app, &viewer, path).await;
        assert_eq!(status, 200, "{path}");
        assert!(!html.contains("<script"), "{path}: {html}");
        assert!(!html.contains("<img"), "{path}: {html}");
        assert!(!html.contains("\"><"), "{path}: {html}");
    }
    let (_, html) = page(&app, &viewer, "/events/stripe/evt_xss").await;
    // askama writes numeric character references: `&#60;` for `<`, `&#34;` for `"`.
    assert!(html.contains("&#60;script&#62;document.title"), "{html}");
    assert!(
        html.contains("&#34;&#62;&#60;img src=x onerror=alert(1)&#62;"),
        "{html}"
    );
}

fn urlencode(text: &str) -> String {
    text.bytes().map(|b| format!("%{b:02X}")).collect()
}
