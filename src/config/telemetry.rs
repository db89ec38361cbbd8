//! `[telemetry]`: where spans go (OTLP over HTTP/protobuf), under which service name, and how
//! many traces are kept.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// The `[telemetry]` section. Without `otlp_endpoint` nothing is traced: no exporter, no span.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetrySettings {
    /// The collector's OTLP/HTTP base URL (e.g. `http://collector:4318`); spans are posted to
    /// `{otlp_endpoint}/v1/traces`.
    pub otlp_endpoint: Option<String>,
    /// The `service.name` resource attribute of every span.
    pub service_name: String,
    /// The share of new traces kept, 0.0 to 1.0; a trace begun upstream (an inbound
    /// `traceparent`) follows its parent's decision.
    pub sample_ratio: f64,
    /// How often a batch of spans is sent (not documented as a key for operators to tune;
    /// tests shorten it so that spans arrive promptly).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub export_interval_ms: Option<u64>,
}

impl Default for TelemetrySettings {
    fn default() -> Self {
        Self {
            otlp_endpoint: None,
            service_name: "hookonce".to_owned(),
            sample_ratio: 1.0,
            export_interval_ms: None,
        }
    }
}

impl TelemetrySettings {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            return Err(ConfigError::invalid(
                "telemetry.sample_ratio",
                format!("{} is not between 0.0 and 1.0", self.sample_ratio),
            ));
        }
        if self.service_name.trim().is_empty() {
            return Err(ConfigError::invalid(
                "telemetry.service_name",
                "must not be empty",
            ));
        }
        if let Some(endpoint) = &self.otlp_endpoint {
            let problem = match url::Url::parse(endpoint) {
                Ok(url) if !matches!(url.scheme(), "http" | "https") => {
                    Some(format!("scheme {:?} is not http or https", url.scheme()))
                }
                Ok(url) if url.host_str().is_none_or(str::is_empty) => {
                    Some("has no host".to_owned())
                }
                Ok(url) if !url.username().is_empty() || url.password().is_some() => {
                    Some("must not carry credentials".to_owned())
                }
                Ok(url) if url.port() == Some(0) => Some("port 0 is not a port to dial".to_owned()),
                Ok(url) if url.query().is_some() || url.fragment().is_some() => {
                    Some("must not carry a query or a fragment".to_owned())
                }
                Ok(_) => None,
                Err(error) => Some(format!("is not a URL: {error}")),
            };
            if let Some(problem) = problem {
                return Err(ConfigError::invalid("telemetry.otlp_endpoint", problem));
            }
        }
        if self.export_interval_ms == Some(0) {
            return Err(ConfigError::invalid(
                "telemetry.export_interval_ms",
                "must be above zero",
            ));
        }
        Ok(())
    }

    /// Where spans are posted, when telemetry is on.
    pub fn traces_url(&self) -> Option<String> {
        let endpoint = self.otlp_endpoint.as_deref()?;
        Some(format!("{}/v1/traces", endpoint.trim_end_matches('/')))
    }

    /// How often a batch of spans is sent.
    pub fn export_interval(&self) -> Duration {
        Duration::from_millis(self.export_interval_ms.unwrap_or(1000))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(text: &str) -> Result<(), ConfigError> {
        let settings: TelemetrySettings = toml::from_str(text).expect("parses");
        settings.validate()
    }

    #[test]
    fn telemetry_keys_are_checked_by_name() {
        assert!(with("").is_ok());
        assert!(with("otlp_endpoint = \"http://collector:4318\"\nsample_ratio = 0.0").is_ok());
        let cases = [
            ("sample_ratio = 1.5", "telemetry.sample_ratio"),
            ("sample_ratio = -0.1", "telemetry.sample_ratio"),
            ("service_name = \" \"", "telemetry.service_name"),
            (
                "otlp_endpoint = \"collector:4318\"",
                "telemetry.otlp_endpoint",
            ),
            (
                "otlp_endpoint = \"ftp://c:4318\"",
                "telemetry.otlp_endpoint",
            ),
            (
                "otlp_endpoint = \"http://u:p@c:4318\"",
                "telemetry.otlp_endpoint",
            ),
            ("otlp_endpoint = \"http://c:0\"", "telemetry.otlp_endpoint"),
            ("export_interval_ms = 0", "telemetry.export_interval_ms"),
        ];
        for (text, key) in cases {
            let error = with(text).expect_err(text).to_string();
            assert!(error.contains(key), "{text}: {error}");
        }
    }

    #[test]
    fn traces_go_under_v1_traces() {
        let settings = TelemetrySettings {
            otlp_endpoint: Some("http://c:4318/".to_owned()),
            ..TelemetrySettings::default()
        };
        assert_eq!(
            settings.traces_url().as_deref(),
            Some("http://c:4318/v1/traces")
        );
    }
}
