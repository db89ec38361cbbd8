//! Replaying a filtered set of a route's dead letters: first how many match (the preview the
//! operator confirms), then the replay of those that match now, through `relay::dlq` like a
//! single replay, audited.

use super::audit::AuditEntry;
use super::auth::{Principal, Role};
use super::state::Console;
use super::writes::Done;
use crate::relay::dlq::{self, DlqError, Selection};
use crate::relay::route::glob_matches;

/// Dead letters looked at per preview or replay, at most.
pub const MAX_MATCHED: usize = 10_000;

/// Which dead letters of a route: of one source (all when `None`), of event types matching a
/// glob (`*`, `?`; all when empty).
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub source: Option<String>,
    pub event_type: String,
}

impl Filter {
    fn describe(&self) -> String {
        let source = self.source.as_deref().unwrap_or("*");
        let types = if self.event_type.is_empty() {
            "*"
        } else {
            &self.event_type
        };
        format!("source={source} event_type={types}")
    }
}

/// The (source, dead-letter ID) pairs of `route` that `filter` selects, oldest first.
pub async fn matching(
    console: &Console,
    route: &str,
    filter: &Filter,
) -> Result<Vec<(String, String)>, DlqError> {
    let Some(store) = &console.store else {
        return Ok(Vec::new());
    };
    let glob: Vec<char> = filter.event_type.chars().collect();
    let letters = dlq::list(
        &console.settings,
        store,
        Some(route),
        filter.source.as_deref(),
    )
    .await?;
    Ok(letters
        .into_iter()
        .map(|(_, letter)| letter)
        .filter(|l| {
            glob.is_empty() || glob_matches(&glob, &l.event_type.chars().collect::<Vec<_>>())
        })
        .take(MAX_MATCHED)
        .map(|l| (l.source, l.id))
        .collect())
}

/// Replays what `filter` selects now (the preview said `previewed`), for an operator; audited.
pub async fn replay_matching(
    console: &Console,
    who: &Principal,
    route: &str,
    filter: &Filter,
    previewed: usize,
) -> Done {
    if who.role != Role::Operator {
        return refuse(console, who, route, filter, "viewers may not write").await;
    }
    let target = format!("{route} ({})", filter.describe());
    let result = replay(console, route, filter).await;
    let done = match result {
        Ok(count) => Done {
            status: axum::http::StatusCode::OK,
            message: format!("Replayed {count} dead letters (the preview counted {previewed})."),
            count,
        },
        Err(error) => Done {
            status: axum::http::StatusCode::BAD_REQUEST,
            message: format!("Failed: {error}"),
            count: 0,
        },
    };
    audit(console, who, &target, done.message.clone()).await;
    done
}

/// Records a refused filtered replay and answers 403.
pub async fn refuse(
    console: &Console,
    who: &Principal,
    route: &str,
    filter: &Filter,
    why: &str,
) -> Done {
    let target = format!("{route} ({})", filter.describe());
    audit(console, who, &target, format!("refused: {why}")).await;
    Done {
        status: axum::http::StatusCode::FORBIDDEN,
        message: format!("Refused: {why}."),
        count: 0,
    }
}

async fn replay(console: &Console, route: &str, filter: &Filter) -> Result<u64, DlqError> {
    let Some(store) = &console.store else {
        return Ok(0);
    };
    let chosen = matching(console, route, filter).await?;
    let mut count = 0;
    let sources: std::collections::BTreeSet<&str> =
        chosen.iter().map(|(s, _)| s.as_str()).collect();
    for source in sources {
        let ids = chosen
            .iter()
            .filter(|(s, _)| s == source)
            .map(|(_, id)| id.clone())
            .collect();
        let n = dlq::replay(
            &console.settings,
            store,
            route,
            Some(source),
            Selection::Ids(ids),
        )
        .await?;
        count += n as u64;
    }
    Ok(count)
}

async fn audit(console: &Console, who: &Principal, target: &str, result: String) {
    let _ = console
        .audit
        .append(AuditEntry {
            at: 0,
            who: who.who.clone(),
            role: who.role.label().to_owned(),
            action: "dead_letter.replay_matching".to_owned(),
            target: target.to_owned(),
            result,
        })
        .await;
}
