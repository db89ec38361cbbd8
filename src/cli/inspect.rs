//! `hookonce inspect` and `hookonce forget`: read or delete one event's dedup record in Redis.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::bail;
use hookonce::config::{Settings, StoreBackend};
use hookonce::store::{Record, RedisStore};
use hookonce::webhooks;

use crate::runtime;

pub(crate) fn run(
    settings: &Settings,
    source: &str,
    event_id: &str,
    forget: bool,
) -> anyhow::Result<ExitCode> {
    let (_, target) = webhooks::source(settings, source)?;
    if settings.store.backend != StoreBackend::Redis {
        bail!("the memory store keeps its records inside the running daemon; inspect and forget need store.backend = \"redis\"");
    }
    let key = target.record_key(event_id);
    runtime()?.block_on(async {
        let store = RedisStore::connect(&settings.store).await?;
        if forget {
            // With body_dedup the event's payload has a record of its own; it goes too, or the
            // next delivery would be a duplicate of the forgotten one.
            let record = store.get_record(&key).await?;
            let body_key = record.as_ref().and_then(|(record, _)| {
                target.body_key_of_record(Record::parse(record)?.fingerprint())
            });
            if let Some(body_key) = body_key {
                store.delete_record(&body_key).await?;
            }
            return Ok(if store.delete_record(&key).await? {
                println!("forgot {key}: the next delivery of this event is forwarded again");
                ExitCode::SUCCESS
            } else {
                println!("no record at {key}");
                ExitCode::from(1)
            });
        }
        let Some((record, ttl_ms)) = store.get_record(&key).await? else {
            println!("no record at {key}: the event was not seen within its dedup window");
            return Ok(ExitCode::from(1));
        };
        println!("key:         {key}");
        match Record::parse(&record) {
            Some(Record::Processing {
                token,
                fingerprint,
                deadline_ms,
            }) => {
                println!("state:       processing (claimed, not yet completed)");
                println!("token:       {token}");
                println!("fingerprint: {fingerprint}");
                println!("lease_until: {deadline_ms} (unix ms)");
            }
            parsed => {
                let (entry, fingerprint) = match parsed {
                    Some(Record::Done { ack, fingerprint }) => (ack, fingerprint),
                    _ => (record.as_str(), ""),
                };
                println!("state:       done");
                println!("stream:      {}", target.stream);
                println!("entry_id:    {entry}");
                println!("fingerprint: {fingerprint}");
            }
        }
        let ttl = Duration::from_millis(ttl_ms.max(0) as u64);
        println!("expires_in:  {}", humantime::format_duration(ttl));
        Ok(ExitCode::SUCCESS)
    })
}
