//! The RabbitMQ sink's keys: `sink.url` as an AMQP URI, `sink.exchange` and the `sink.routing_key`
//! template, checked once here and parsed the same way by the sink when it connects.

use lapin::uri::AMQPUri;

use super::{redact_url, ConfigError};

/// The placeholders a routing-key template may use.
pub const ROUTING_KEY_FIELDS: &[&str] = &["{source}", "{event_type}"];

/// AMQP's short strings (exchange names, routing keys, message IDs) are at most 255 bytes.
pub const AMQP_SHORT_MAX: usize = 255;

/// Parses `sink.url` as lapin will dial it. The error never quotes the URL beyond its redaction.
///
/// amq-protocol-uri takes the host from `Url::domain`, which is `None` for an IP address, and then
/// falls back to `localhost`: `amqp://10.0.0.5` would dial the local machine. The host is put back
/// from `Url::host_str` (without an IPv6 literal's brackets), so that an address means itself.
pub fn parse_amqp_url(url: &str) -> Result<AMQPUri, ConfigError> {
    let invalid =
        |problem: &str| ConfigError::invalid("sink.url", format!("{} {problem}", redact_url(url)));
    if !(url.starts_with("amqp://") || url.starts_with("amqps://")) {
        return Err(invalid("must start with amqp:// or amqps://"));
    }
    let parsed = url::Url::parse(url).map_err(|_| invalid("is not a valid URL"))?;
    let host = parsed
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| invalid("has no host"))?;
    // lapin's own parse error may quote the whole URL, credentials included: it is not shown.
    let mut uri: AMQPUri = url.parse().map_err(|_| {
        invalid("is not a valid AMQP URI (scheme, percent-escapes, or a query parameter)")
    })?;
    uri.authority.host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    Ok(uri)
}

pub(super) fn check_url(url: &str) -> Result<(), ConfigError> {
    parse_amqp_url(url).map(|_| ())
}

pub(super) fn check_exchange(exchange: &str) -> Result<(), ConfigError> {
    if exchange.len() > AMQP_SHORT_MAX {
        return Err(ConfigError::invalid(
            "sink.exchange",
            format!("is longer than {AMQP_SHORT_MAX} bytes"),
        ));
    }
    // RabbitMQ's own rule for exchange names.
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':');
    if !exchange.chars().all(allowed) {
        return Err(ConfigError::invalid(
            "sink.exchange",
            "may hold only letters, digits, '-', '_', '.' and ':'",
        ));
    }
    Ok(())
}

/// A template holds literal text and the placeholders of [`ROUTING_KEY_FIELDS`], nothing else in
/// braces, and its literal part fits a short string.
pub(super) fn check_routing_key(template: &str) -> Result<(), ConfigError> {
    let mut literal = template.to_owned();
    for field in ROUTING_KEY_FIELDS {
        literal = literal.replace(field, "");
    }
    if literal.contains(['{', '}']) {
        return Err(ConfigError::invalid(
            "sink.routing_key",
            format!(
                "may use only the placeholders {} (a brace stands alone)",
                ROUTING_KEY_FIELDS.join(" and ")
            ),
        ));
    }
    if literal.len() > AMQP_SHORT_MAX {
        return Err(ConfigError::invalid(
            "sink.routing_key",
            format!("is longer than {AMQP_SHORT_MAX} bytes"),
        ));
    }
    Ok(())
}

/// The routing key of one event.
pub fn expand_routing_key(template: &str, source: &str, event_type: &str) -> String {
    template
        .replace("{source}", source)
        .replace("{event_type}", event_type)
}

#[cfg(test)]
mod tests {
    use super::super::from_toml;

    const BASE: &str = "[store]\nbackend = \"memory\"\n[sources.s]\nprovider = \"stripe\"\nsecrets = [\"whsec_x\"]\n[sink]\nkind = \"rabbitmq\"\n";
    const SECRET: &str = "Zq7amqpSecret";

    fn error(sink: &str) -> String {
        let text = format!("{BASE}{sink}\n");
        match from_toml(&text).and_then(|s| s.validate().map(|()| s)) {
            Ok(_) => String::new(),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn rabbitmq_keys_are_checked_naming_the_key_and_never_the_password() {
        let url = format!("url = \"amqp://hook:{SECRET}@mq.internal:5672/%2f\"");
        assert_eq!(error(&format!("{url}\nexchange = \"events\"")), "");
        assert_eq!(
            error(&format!(
                "{url}\nexchange = \"\"\nrouting_key = \"hooks.{{source}}.{{event_type}}\""
            )),
            ""
        );
        assert_eq!(
            error("url = \"amqps://mq:5671/prod\"\nexchange = \"x\""),
            ""
        );
        for (sink, key, problem) in [
            ("exchange = \"x\"", "sink.url", "required"),
            (url.as_str(), "sink.exchange", "required"),
            (
                &format!("url = \"http://u:{SECRET}@mq/\"\nexchange = \"x\""),
                "sink.url",
                "amqp:// or amqps://",
            ),
            (
                &format!("url = \"amqp://u:{SECRET}@mq:0/\"\nexchange = \"x\""),
                "sink.url",
                "outside 1-65535",
            ),
            (
                &format!("url = \"amqp://u:{SECRET}@mq/?heartbeat=often\"\nexchange = \"x\""),
                "sink.url",
                "not a valid AMQP URI",
            ),
            (
                &format!("{url}\nexchange = \"has space\""),
                "sink.exchange",
                "may hold only",
            ),
            (
                &format!("{url}\nexchange = \"x\"\nrouting_key = \"{{source}}.{{provider}}\""),
                "sink.routing_key",
                "placeholders",
            ),
            (
                &format!(
                    "{url}\nexchange = \"x\"\nrouting_key = \"{}\"",
                    "k".repeat(256)
                ),
                "sink.routing_key",
                "longer than 255",
            ),
            (
                &format!("{url}\nexchange = \"x\"\nsubject = \"s\""),
                "sink.subject",
                "not used by sink.kind = \"rabbitmq\"",
            ),
        ] {
            let message = error(sink);
            assert!(message.starts_with(key), "{sink}: {message}");
            assert!(message.contains(problem), "{sink}: {message}");
            assert!(!message.contains(SECRET), "{sink}: {message}");
        }
    }

    #[test]
    fn an_ip_address_host_is_dialled_as_itself() {
        let uri = super::parse_amqp_url("amqp://guest:guest@10.1.2.3:5673/%2f").unwrap();
        assert_eq!(uri.authority.host, "10.1.2.3");
        assert_eq!(uri.authority.port, 5673);
        assert_eq!(uri.vhost, "/");
        let v6 = super::parse_amqp_url("amqp://[::1]:5672/v").unwrap();
        assert_eq!(v6.authority.host, "::1");
    }

    #[test]
    fn routing_keys_expand_the_source_then_the_event_type() {
        assert_eq!(
            super::expand_routing_key("h.{source}.{event_type}", "gh", "{source}"),
            "h.gh.{source}"
        );
    }
}
