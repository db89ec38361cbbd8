//! `hookonce inspect` and `hookonce forget`: read or delete one dedup record in Redis — a
//! source's event (`inspect SOURCE EVENT_ID`) or a proxy's idempotency key
//! (`inspect --proxy NAME --method POST --path /v1/orders [--principal 'Authorization=…']… KEY`).
//!
//! An event of a partitioned source is looked up in its partition (by its ID), or, where the
//! payload picks the partition (`body_dedup`), in each partition in turn.
//!
//! A proxy key's record is found by deriving it exactly as the proxy does; the principal's
//! header values are hashed into it and never printed.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use hookonce::config::{Settings, StoreBackend};
use hookonce::forward::Partition;
use hookonce::proxy::{self, response::StoredResponse};
use hookonce::store::{Record, RedisStore};
use hookonce::webhooks;
use http::{HeaderMap, HeaderName, HeaderValue, Method};

use crate::runtime;

/// Which record: `SOURCE EVENT_ID`, or with `--proxy` the Idempotency-Key.
#[derive(clap::Args)]
pub(crate) struct Lookup {
    /// SOURCE EVENT_ID; with --proxy, the Idempotency-Key as a client sends it.
    #[arg(required = true, num_args = 1..=2, value_name = "SOURCE EVENT_ID | KEY")]
    args: Vec<String>,
    /// The configured proxy whose key this is.
    #[arg(long)]
    proxy: Option<String>,
    /// The request's method (with --proxy).
    #[arg(long, default_value = "POST", requires = "proxy")]
    method: String,
    /// The request's path, without the query (with --proxy).
    #[arg(long, requires = "proxy")]
    path: Option<String>,
    /// A scope header of the principal as `NAME=VALUE`, repeatable; absent headers are the
    /// anonymous principal's.
    #[arg(long = "principal", value_name = "NAME=VALUE", requires = "proxy")]
    principals: Vec<String>,
}

/// Whose record a key is, which decides how it is printed: an event's carries the partition
/// whose stream and body records go with it.
enum Kind {
    Event { partition: Box<Partition> },
    Proxy,
}

pub(crate) fn run(settings: &Settings, lookup: &Lookup, forget: bool) -> anyhow::Result<ExitCode> {
    if settings.store.backend != StoreBackend::Redis {
        bail!("the memory store keeps its records inside the running daemon; inspect and forget need store.backend = \"redis\"");
    }
    let candidates = locate(settings, lookup)?;
    runtime()?.block_on(async {
        let store = RedisStore::connect(&settings.store).await?;
        let keys: Vec<String> = candidates.iter().map(|(key, _)| key.clone()).collect();
        let Some((key, kind, record, ttl_ms)) = find(&store, candidates).await? else {
            let keys = keys.join(", ");
            let tail = if forget {
                ""
            } else {
                ": not seen within its window"
            };
            println!("no record at {keys}{tail}");
            return Ok(ExitCode::from(1));
        };
        if forget {
            // With body_dedup the event's payload has a record of its own; it goes too, or the
            // next delivery would be a duplicate of the forgotten one.
            let body_key = match &kind {
                Kind::Event { partition } => Record::parse(&record)
                    .and_then(|record| partition.body_key_of_record(record.fingerprint())),
                Kind::Proxy => None,
            };
            if let Some(body_key) = body_key {
                store.delete_record(&body_key).await?;
            }
            store.delete_record(&key).await?;
            println!("forgot {key}: the next delivery or request with this key runs again");
            let result = "forgotten".to_owned();
            let audited =
                hookonce::console::record_cli(settings, &store, "record.forget", key, result);
            if let Err(error) = audited.await {
                eprintln!("hookonce: the record is forgotten, but not in the audit log: {error}");
            }
            return Ok(ExitCode::SUCCESS);
        }
        println!("key:         {key}");
        match kind {
            _ if show_processing(&record) => {}
            Kind::Event { partition } => show_event_record(&record, &partition.stream),
            Kind::Proxy => show_proxy_record(&record),
        }
        let ttl = Duration::from_millis(ttl_ms.max(0) as u64);
        println!("expires_in:  {}", humantime::format_duration(ttl));
        Ok(ExitCode::SUCCESS)
    })
}

/// The first candidate key that holds a record, with the record and its time to live.
async fn find(
    store: &RedisStore,
    candidates: Vec<(String, Kind)>,
) -> anyhow::Result<Option<(String, Kind, String, i64)>> {
    for (key, kind) in candidates {
        if let Some((record, ttl_ms)) = store.get_record(&key).await? {
            return Ok(Some((key, kind, record, ttl_ms)));
        }
    }
    Ok(None)
}

/// The store keys that may hold the record the arguments name: one, or for a partitioned
/// source whose payload picks the partition (`body_dedup`), one per partition.
fn locate(settings: &Settings, lookup: &Lookup) -> anyhow::Result<Vec<(String, Kind)>> {
    match (&lookup.proxy, lookup.args.as_slice()) {
        (Some(name), [idempotency_key]) => {
            let Some(path) = &lookup.path else {
                bail!("--proxy needs --path (the request's path, e.g. /v1/orders)");
            };
            let method = Method::from_bytes(lookup.method.as_bytes()).context("--method")?;
            let principal = principal(&lookup.principals)?;
            let key =
                proxy::record_key_of(settings, name, &principal, &method, path, idempotency_key)?;
            Ok(vec![(key, Kind::Proxy)])
        }
        (Some(_), _) => bail!("with --proxy, give the Idempotency-Key only"),
        (None, [source, event_id]) => {
            let (_, target) = webhooks::source(settings, source)?;
            let candidates = target
                .partitions_for_id(event_id)
                .into_iter()
                .map(|partition| {
                    let key = partition.record_key(event_id);
                    let partition = Box::new(partition.clone());
                    (key, Kind::Event { partition })
                })
                .collect();
            Ok(candidates)
        }
        (None, _) => bail!("give SOURCE EVENT_ID, or --proxy NAME --path PATH KEY"),
    }
}

/// The principal's scope headers from `NAME=VALUE` arguments.
fn principal(pairs: &[String]) -> anyhow::Result<HeaderMap> {
    let mut headers = HeaderMap::new();
    for pair in pairs {
        let Some((name, value)) = pair.split_once('=') else {
            bail!("--principal takes NAME=VALUE, e.g. 'Authorization=Bearer …'");
        };
        // The value is a credential: no error message repeats it.
        let name = HeaderName::from_bytes(name.trim().as_bytes())
            .with_context(|| format!("--principal: {name:?} is not a header name"))?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| anyhow::anyhow!("--principal {name}: the value is not a header value"))?;
        headers.append(name, value);
    }
    Ok(headers)
}

/// Prints the lease of a record being processed, the same for events and proxy keys.
fn show_processing(record: &str) -> bool {
    let Some(Record::Processing {
        token, deadline_ms, ..
    }) = Record::parse(record)
    else {
        return false;
    };
    println!("state:       processing (claimed, not yet completed)");
    println!("token:       {token}");
    println!("lease_until: {deadline_ms} (unix ms)");
    true
}

fn show_event_record(record: &str, stream: &str) {
    let (entry, fingerprint) = match Record::parse(record) {
        Some(Record::Done { ack, fingerprint }) => (ack, fingerprint),
        _ => (record, ""),
    };
    println!("state:       done");
    println!("stream:      {stream}");
    println!("entry_id:    {entry}");
    println!("fingerprint: {fingerprint}");
}

fn show_proxy_record(record: &str) {
    let stored = match Record::parse(record) {
        Some(Record::Done { ack, .. }) => StoredResponse::decode(ack),
        _ => None,
    };
    let Some(stored) = stored else {
        println!("state:       unreadable ({} bytes)", record.len());
        return;
    };
    if stored.incomplete {
        println!(
            "state:       completed, answer incomplete (executed; retries get 502 until forgotten)"
        );
    } else {
        println!("state:       completed");
    }
    println!("status:      {}", stored.status.as_u16());
    println!("headers:     {}", stored.headers.len());
    if stored.incomplete {
        println!("stored_body: none (the upstream's body broke before it was complete)");
    } else if stored.truncated {
        println!("stored_body: none (over max_stored_body; replays answer an empty body)");
    } else {
        println!("stored_body: {} bytes", stored.body.len());
    }
}
