//! A coalesced store call is one span, linked to the request span of every request it carried
//! (each request of its own trace), and each entry carries its own request's context.

use std::collections::BTreeSet;

use super::*;
use crate::support::settings::{ms, secs};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coalesced_call_is_one_span_linked_to_every_request_it_carried() {
    let collector = Collector::start().await;
    // A window: concurrent requests wait for company, so they share a call.
    // The window comes out of each request's store deadline: a timeout well above both.
    let app = TestApp::builder(crate::support::Backend::Redis)
        .store(|s| s.timeout = secs(5))
        .sink(|s| {
            s.coalesce = true;
            s.coalesce_window = Some(ms(100));
        })
        .telemetry(telemetry_to(collector.endpoint(), 1.0))
        .start()
        .await;
    let traces: Vec<String> = (0..3).map(|i| format!("{:032x}", 0xabc0 + i)).collect();
    let requests = traces.iter().enumerate().map(|(i, trace)| {
        let parent = format!("00-{trace}-{:016x}-01", 0x100 + i);
        let app = &app;
        async move { post_event(app, &format!("evt_c{i}"), &[("traceparent", &parent)]).await }
    });
    for response in futures_util::future::join_all(requests).await {
        assert_eq!(response.status(), 200);
    }
    let mut request_spans = BTreeSet::new();
    for trace in &traces {
        let span = span_of(&collector, "webhook", trace).await;
        request_spans.insert((trace.clone(), span.span_id));
    }
    eventually(10, "the store call spans", || {
        let calls = collector.named("redis forward");
        let linked: usize = calls.iter().map(|c| c.links.len()).sum();
        async move { linked == 3 }
    })
    .await;
    let calls = collector.named("redis forward");
    let shared = calls
        .iter()
        .find(|c| c.links.len() > 1)
        .unwrap_or_else(|| panic!("no call carried several requests: {calls:?}"));
    assert_eq!(
        shared.attribute("hookonce.requests"),
        Some(shared.links.len().to_string().as_str())
    );
    // Linked to each request it carried, and beneath the first of them.
    for link in &shared.links {
        assert!(request_spans.contains(link), "{link:?} is no request span");
    }
    assert_eq!(
        (shared.trace_id.clone(), shared.parent_span_id.clone()),
        shared.links[0]
    );
    // Each entry carries its own request's context.
    let mut stored: BTreeSet<String> = entry_traceparents(&app).into_iter().collect();
    for (trace, span) in &request_spans {
        assert!(stored.remove(&format!("00-{trace}-{span}-01")), "{trace}");
    }
}
