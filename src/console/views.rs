//! The console's pages as askama templates (src/console/templates), compiled into the binary
//! with HTML escaping on: every value from a payload, a header or an ID is escaped in text and
//! in attributes alike. Charts are SVG drawn here, from numbers only.

use askama::Template;

use super::audit::AuditEntry;
use super::keys::KeyState;
use super::overview::{MinuteCounts, Overview};
use super::reads::{EventDetail, EventsPage};
use crate::relay::dlq::DeadLetter;

/// What every page's header shows: who is logged in, and the CSRF token of the logout form.
#[derive(Debug, Clone, Default)]
pub struct Nav {
    pub who: String,
    pub role: String,
    pub csrf: String,
    /// A notice above the page (the result of a write).
    pub notice: String,
}

#[derive(Template)]
#[template(path = "login.html")]
pub struct LoginPage {
    pub failed: bool,
}

#[derive(Template)]
#[template(path = "error.html")]
pub struct ErrorPage {
    pub nav: Nav,
    pub status: u16,
    pub message: String,
}

#[derive(Template)]
#[template(path = "overview.html")]
pub struct OverviewPage {
    pub nav: Nav,
    pub overview: Overview,
    pub charts: Vec<Chart>,
}

#[derive(Template)]
#[template(path = "events.html")]
pub struct EventsView {
    pub nav: Nav,
    pub sources: Vec<String>,
    pub page: EventsPage,
    pub searched: String,
}

#[derive(Template)]
#[template(path = "event.html")]
pub struct EventView {
    pub nav: Nav,
    pub event: EventDetail,
}

#[derive(Template)]
#[template(path = "dead_letters.html")]
pub struct DeadLettersView {
    pub nav: Nav,
    pub routes: Vec<String>,
    pub route: String,
    pub letters: Vec<DeadLetter>,
}

#[derive(Template)]
#[template(path = "replay_preview.html")]
pub struct ReplayPreview {
    pub nav: Nav,
    pub route: String,
    pub source: String,
    pub event_type: String,
    pub count: usize,
}

#[derive(Template)]
#[template(path = "keys.html")]
pub struct KeysView {
    pub nav: Nav,
    pub proxies: Vec<String>,
    pub form: KeyFormView,
    pub looked_up: bool,
    pub found: Option<KeyState>,
}

/// What the keys form shows again (the principal's headers included: it is the user's own).
#[derive(Debug, Clone, Default)]
pub struct KeyFormView {
    pub proxy: String,
    pub method: String,
    pub path: String,
    pub key: String,
    pub principal: String,
}

#[derive(Template)]
#[template(path = "audit.html")]
pub struct AuditView {
    pub nav: Nav,
    pub entries: Vec<AuditEntry>,
}

/// One bar of a chart, in SVG user units.
#[derive(Debug, Clone)]
pub struct Bar {
    pub x: u32,
    pub y: u32,
    pub height: u32,
    /// `forwarded`, `duplicate` or `rejected`: the CSS class that colours it.
    pub kind: &'static str,
    pub title: String,
}

/// A source's last hour, minute by minute, as stacked bars.
#[derive(Debug, Clone)]
pub struct Chart {
    pub source: String,
    pub bars: Vec<Bar>,
    pub peak: u64,
}

pub const CHART_HEIGHT: u32 = 80;
pub const BAR_WIDTH: u32 = 8;

impl Chart {
    pub fn of(source: &str, minutes: &[MinuteCounts]) -> Self {
        let peak = minutes
            .iter()
            .map(|m| m.forwarded + m.duplicates + m.rejected)
            .max()
            .unwrap_or(0);
        let scale = |n: u64| ((n * u64::from(CHART_HEIGHT)).div_ceil(peak.max(1))) as u32;
        let mut bars = Vec::new();
        for (i, m) in minutes.iter().enumerate() {
            let x = i as u32 * (BAR_WIDTH + 2);
            let mut top = CHART_HEIGHT;
            for (kind, n) in [
                ("forwarded", m.forwarded),
                ("duplicate", m.duplicates),
                ("rejected", m.rejected),
            ] {
                if n == 0 {
                    continue;
                }
                let height = scale(n).min(top);
                top -= height;
                bars.push(Bar {
                    x,
                    y: top,
                    height,
                    kind,
                    title: format!("{} min ago: {n} {kind}", minutes.len() - 1 - i),
                });
            }
        }
        Self {
            source: source.to_owned(),
            bars,
            peak,
        }
    }

    pub fn width(&self) -> u32 {
        60 * (BAR_WIDTH + 2)
    }
}

/// Unix ms as `YYYY-MM-DD HH:MM:SS.mmm UTC`.
pub fn time(ms: &u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(*ms);
    humantime::format_rfc3339_millis(at).to_string()
}

/// A duration in ms as an operator reads it (`3h 2m`), rounded to the second.
pub fn span(ms: &u64) -> String {
    humantime::format_duration(std::time::Duration::from_secs(ms / 1000)).to_string()
}

/// Text of a unix-ms string field (dead letters keep theirs as text).
pub fn time_text(ms: &str) -> String {
    ms.parse()
        .map(|ms| time(&ms))
        .unwrap_or_else(|_| ms.to_owned())
}

/// A 0–1 rate as a percentage.
pub fn percent(rate: &f64) -> String {
    format!("{:.1}%", rate * 100.0)
}
