//! Durations in the config file and the `TOOLPLANE_*` environment, written as text (`30s`,
//! `500ms`, `5m`, `1h 30m`), for `#[serde(with = "crate::config_duration")]`.
//!
//! Written as `humantime_serde` is, with a message a person can act on: `humantime_serde`
//! refuses a value with "expected a duration" alone, without the value or why.

use std::fmt;
use std::time::Duration;

use serde::{Deserializer, Serializer, de};

/// How a duration is written, as an error names it.
const WRITTEN_AS: &str = "a duration written as text, such as \"30s\", \"500ms\" or \"5m\"";

/// Writes `duration` as text, as `humantime_serde` does.
pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    humantime_serde::serialize(duration, serializer)
}

/// Reads a duration written as text; a refusal names the value and why it is not one.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    deserializer.deserialize_str(DurationText)
}

struct DurationText;

impl de::Visitor<'_> for DurationText {
    type Value = Duration;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(WRITTEN_AS)
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Duration, E> {
        humantime::parse_duration(text).map_err(|problem| {
            E::custom(format!(
                "{} is not {WRITTEN_AS}: {problem}",
                crate::shown::shown(text)
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize, serde::Serialize)]
    struct Settings {
        #[serde(with = "super")]
        wait: Duration,
    }

    fn read(text: &str) -> Result<Duration, String> {
        toml::from_str::<Settings>(text)
            .map(|settings| settings.wait)
            .map_err(|error| error.message().to_owned())
    }

    #[test]
    fn durations_are_read_and_written_as_text() {
        assert_eq!(read(r#"wait = "1m 30s""#), Ok(Duration::from_secs(90)));
        assert_eq!(read(r#"wait = "250ms""#), Ok(Duration::from_millis(250)));
        let written = toml::to_string(&Settings {
            wait: Duration::from_millis(1500),
        })
        .expect("written");
        assert_eq!(written.trim(), r#"wait = "1s 500ms""#);
    }

    #[test]
    fn a_value_that_is_no_duration_is_named_with_why() {
        let error = read(r#"wait = "5 parsecs""#).expect_err("no unit of time");
        assert!(
            error.starts_with(&format!(
                "\"5 parsecs\" is not {WRITTEN_AS}: unknown time unit"
            )),
            "{error}"
        );
        let error = read("wait = 5").expect_err("a number");
        assert!(error.contains(WRITTEN_AS), "{error}");
    }
}
