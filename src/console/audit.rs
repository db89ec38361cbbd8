//! The audit log: every write through the console — allowed or refused — with who, when, what
//! and the result, appended to a bounded Redis stream (`console.audit_max_entries`, the oldest
//! trimmed first); on the memory store, a bounded list in this process.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::config::Settings;
use crate::store::{RedisStore, StoreError};

/// One audited write.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct AuditEntry {
    /// Unix ms.
    pub at: u64,
    pub who: String,
    pub role: String,
    /// `dead_letter.replay`, `dead_letter.delete`, …
    pub action: String,
    /// What it acted on: `route/id`.
    pub target: String,
    /// `ok: …`, or why it was refused or failed.
    pub result: String,
}

/// Where audit entries go.
pub struct Audit {
    store: Option<RedisStore>,
    key: String,
    max: u64,
    local: Mutex<VecDeque<AuditEntry>>,
}

impl Audit {
    pub fn new(store: Option<RedisStore>, key_prefix: &str, max: u64) -> Self {
        Self {
            store,
            key: format!("{key_prefix}:{{console}}:audit"),
            max,
            local: Mutex::new(VecDeque::new()),
        }
    }

    /// Appends one entry. A store failure is logged and returned; the write it describes has
    /// already happened or been refused.
    pub async fn append(&self, mut entry: AuditEntry) -> Result<(), StoreError> {
        entry.at = now_ms();
        tracing::info!(
            message = "Audited write.",
            who = entry.who,
            role = entry.role,
            action = entry.action,
            target = entry.target,
            result = entry.result
        );
        let Some(store) = &self.store else {
            let mut local = self.local.lock().unwrap_or_else(|e| e.into_inner());
            local.push_front(entry);
            local.truncate(self.max as usize);
            return Ok(());
        };
        let fields = [
            ("at", entry.at.to_string()),
            ("who", entry.who),
            ("role", entry.role),
            ("action", entry.action),
            ("target", entry.target),
            ("result", entry.result),
        ];
        let result = store.append_capped(&self.key, self.max, &fields).await;
        if let Err(error) = &result {
            tracing::warn!(message = "Cannot append to the console's audit log.", %error);
        }
        result.map(|_| ())
    }

    /// The newest `count` entries, newest first.
    pub async fn newest(&self, count: usize) -> Result<Vec<AuditEntry>, StoreError> {
        let Some(store) = &self.store else {
            let local = self.local.lock().unwrap_or_else(|e| e.into_inner());
            return Ok(local.iter().take(count).cloned().collect());
        };
        let entries = store.rev_range(&self.key, "+", "-", count).await?;
        Ok(entries
            .iter()
            .map(|e| AuditEntry {
                at: e.text("at").parse().unwrap_or(0),
                who: e.text("who"),
                role: e.text("role"),
                action: e.text("action"),
                target: e.text("target"),
                result: e.text("result"),
            })
            .collect())
    }
}

/// Appends a write made with the command line (`dlq replay`, `dlq drop`, `redeliver`,
/// `forget`) to the audit log the console shows, named `cli:$USER`. A failure to append is
/// returned for the command to report; the write itself is done.
pub async fn record_cli(
    settings: &Settings,
    store: &RedisStore,
    action: &str,
    target: String,
    result: String,
) -> Result<(), StoreError> {
    let who = match std::env::var("USER") {
        Ok(user) if !user.is_empty() => format!("cli:{user}"),
        _ => "cli".to_owned(),
    };
    let audit = Audit::new(
        Some(store.clone()),
        &settings.store.key_prefix,
        settings.console.audit_max_entries,
    );
    let entry = AuditEntry {
        at: 0,
        who,
        role: "cli".to_owned(),
        action: action.to_owned(),
        target,
        result,
    };
    audit.append(entry).await
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
