//! The console's writes — replay or delete one dead letter — done through `relay::dlq` (the same
//! code as `hookonce dlq replay|drop`), and audited whatever their result, refusals included.
//!
//! Both are idempotent: a replay moves the dead letter to the route's replay stream and removes
//! it in one script, so a second click finds nothing to replay; a delete of a deleted letter
//! deletes nothing.

use axum::http::StatusCode;

use super::audit::AuditEntry;
use super::auth::{Principal, Role};
use super::state::Console;
use crate::relay::dlq::{self, DlqError, Selection};

/// A write on one dead letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Replay,
    Delete,
}

impl Action {
    fn label(self) -> &'static str {
        match self {
            Action::Replay => "dead_letter.replay",
            Action::Delete => "dead_letter.delete",
        }
    }
}

/// What was asked: the action, its route, the dead letter's ID and (for a route that reads
/// several sources) its source.
pub struct Write<'a> {
    pub action: Action,
    pub route: &'a str,
    pub id: &'a str,
    pub source: Option<&'a str>,
}

/// How a write ended: the status to answer and a sentence saying what happened.
pub struct Done {
    pub status: StatusCode,
    pub message: String,
    /// Dead letters replayed or deleted.
    pub count: u64,
}

/// Records a write refused before it was tried (no CSRF token, a viewer) and answers 403.
pub async fn refuse(console: &Console, who: &Principal, write: &Write<'_>, why: &str) -> Done {
    audit(console, who, write, format!("refused: {why}")).await;
    Done {
        status: StatusCode::FORBIDDEN,
        message: format!("Refused: {why}."),
        count: 0,
    }
}

/// Does `write` for `who` (refused with 403 unless an operator), and audits it.
pub async fn perform(console: &Console, who: &Principal, write: &Write<'_>) -> Done {
    if who.role != Role::Operator {
        return refuse(console, who, write, "viewers may not write").await;
    }
    let Some(store) = &console.store else {
        return Done {
            status: StatusCode::CONFLICT,
            message: "There are no dead letters without a Redis store.".into(),
            count: 0,
        };
    };
    let ids = Selection::Ids(vec![write.id.to_owned()]);
    let settings = &console.settings;
    let result = match write.action {
        Action::Replay => dlq::replay(settings, store, write.route, write.source, ids)
            .await
            .map(|n| n as u64),
        Action::Delete => dlq::drop(settings, store, write.route, write.source, ids).await,
    };
    let done = match result {
        Ok(count) => {
            let verb = match write.action {
                Action::Replay => "replayed",
                Action::Delete => "deleted",
            };
            let message = if count == 0 {
                format!(
                    "Nothing {verb}: dead letter {} is no longer there.",
                    write.id
                )
            } else {
                format!("Dead letter {} {verb}.", write.id)
            };
            Done {
                status: StatusCode::OK,
                message,
                count,
            }
        }
        Err(error) => Done {
            status: match error {
                DlqError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::BAD_REQUEST,
            },
            message: format!("Failed: {error}"),
            count: 0,
        },
    };
    audit(console, who, write, done.message.clone()).await;
    done
}

async fn audit(console: &Console, who: &Principal, write: &Write<'_>, result: String) {
    let target = match write.source {
        Some(source) => format!("{}/{} ({source})", write.route, write.id),
        None => format!("{}/{}", write.route, write.id),
    };
    // A failure to audit is logged by the audit log itself; the write's answer stands.
    let _ = console
        .audit
        .append(AuditEntry {
            at: 0,
            who: who.who.clone(),
            role: who.role.label().to_owned(),
            action: write.action.label().to_owned(),
            target,
            result,
        })
        .await;
}
