//! Proxy keys: look up an Idempotency-Key's record, derived as the proxy derives it (proxy,
//! method, path, the principal's scope headers, the key), and forget it so that the next
//! request with the key executes again — `hookonce inspect --proxy` and `forget --proxy` in the
//! console, the forget audited.

use axum::http::{HeaderMap, Method, StatusCode};
use serde::Serialize;

use super::audit::AuditEntry;
use super::auth::{Principal, Role};
use super::state::Console;
use super::writes::Done;
use crate::proxy::{self, response::StoredResponse};
use crate::store::Record;

/// Which key: the request it would come with.
pub struct KeyQuery<'a> {
    pub proxy: &'a str,
    pub method: &'a str,
    pub path: &'a str,
    pub key: &'a str,
    /// The principal's scope headers.
    pub principal: HeaderMap,
}

/// A key's record as the console shows it; the record key is a digest, never the principal.
#[derive(Debug, Clone, Serialize)]
pub struct KeyState {
    pub proxy: String,
    pub record_key: String,
    /// `completed`, `incomplete` (executed, its answer broke), `processing` or `unreadable`.
    pub state: String,
    pub status: Option<u16>,
    pub stored_headers: Option<usize>,
    /// Bytes of the stored body; absent when none was stored.
    pub stored_body_bytes: Option<usize>,
    pub expires_in_ms: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{0}")]
    Invalid(String),
    #[error("proxy keys live in Redis; this daemon has no Redis store")]
    NoStore,
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

fn record_key(console: &Console, query: &KeyQuery<'_>) -> Result<String, KeyError> {
    let method = Method::from_bytes(query.method.as_bytes())
        .map_err(|_| KeyError::Invalid(format!("{:?} is not a method", query.method)))?;
    proxy::record_key_of(
        &console.settings,
        query.proxy,
        &query.principal,
        &method,
        query.path,
        query.key,
    )
    .map_err(|e| KeyError::Invalid(e.to_string()))
}

/// The key's record; `None` when there is none.
pub async fn look_up(
    console: &Console,
    query: &KeyQuery<'_>,
) -> Result<Option<KeyState>, KeyError> {
    let store = console.store.as_ref().ok_or(KeyError::NoStore)?;
    let key = record_key(console, query)?;
    let Some((record, ttl)) = store.get_record(&key).await? else {
        return Ok(None);
    };
    let mut out = KeyState {
        proxy: query.proxy.to_owned(),
        record_key: key,
        state: "unreadable".into(),
        status: None,
        stored_headers: None,
        stored_body_bytes: None,
        expires_in_ms: u64::try_from(ttl).ok(),
    };
    match Record::parse(&record) {
        Some(Record::Processing { .. }) => out.state = "processing".into(),
        Some(Record::Done { ack, .. }) => {
            if let Some(stored) = StoredResponse::decode(ack) {
                out.state = if stored.incomplete {
                    "incomplete"
                } else {
                    "completed"
                }
                .into();
                out.status = Some(stored.status.as_u16());
                out.stored_headers = Some(stored.headers.len());
                out.stored_body_bytes =
                    (!stored.incomplete && !stored.truncated).then_some(stored.body.len());
            }
        }
        None => {}
    }
    Ok(Some(out))
}

/// Forgets the key's record, for an operator; audited.
pub async fn forget(console: &Console, who: &Principal, query: &KeyQuery<'_>) -> Done {
    let target = format!("{} {} {}", query.proxy, query.method, query.path);
    let done = if who.role != Role::Operator {
        refused("viewers may not write")
    } else {
        match forget_record(console, query).await {
            Ok(true) => ok(
                "Forgotten: the next request with this key executes again.",
                1,
            ),
            Ok(false) => ok("Nothing to forget: there is no record of this key.", 0),
            Err(error) => Done {
                status: match error {
                    KeyError::Store(_) => StatusCode::SERVICE_UNAVAILABLE,
                    _ => StatusCode::BAD_REQUEST,
                },
                message: format!("Failed: {error}"),
                count: 0,
            },
        }
    };
    audit(console, who, target, done.message.clone()).await;
    done
}

/// Records a refused forget and answers 403.
pub async fn refuse(console: &Console, who: &Principal, query: &KeyQuery<'_>, why: &str) -> Done {
    let target = format!("{} {} {}", query.proxy, query.method, query.path);
    let done = refused(why);
    audit(console, who, target, done.message.clone()).await;
    done
}

async fn forget_record(console: &Console, query: &KeyQuery<'_>) -> Result<bool, KeyError> {
    let store = console.store.as_ref().ok_or(KeyError::NoStore)?;
    let key = record_key(console, query)?;
    Ok(store.delete_record(&key).await?)
}

fn ok(message: &str, count: u64) -> Done {
    Done {
        status: StatusCode::OK,
        message: message.to_owned(),
        count,
    }
}

fn refused(why: &str) -> Done {
    Done {
        status: StatusCode::FORBIDDEN,
        message: format!("Refused: {why}."),
        count: 0,
    }
}

async fn audit(console: &Console, who: &Principal, target: String, result: String) {
    let _ = console
        .audit
        .append(AuditEntry {
            at: 0,
            who: who.who.clone(),
            role: who.role.label().to_owned(),
            action: "proxy_key.forget".to_owned(),
            target,
            result,
        })
        .await;
}
