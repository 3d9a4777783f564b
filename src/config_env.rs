//! The process environment as the configuration reads it: `TOOLPLANE_*` variables set
//! settings, typed like the settings' defaults.

use std::os::unix::ffi::OsStrExt;

use std::path::Path;

use super::{ConfigError, ENV_PREFIX, ServerConfig};

impl ServerConfig {
    /// [`ServerConfig::load`] with this process's environment ([`process_environment`]), as
    /// `serve` and the `config` commands read it.
    pub fn load_from_process(file: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load(file, process_environment()?.into_iter())
    }
}

/// The process's environment variables, for [`super::ServerConfig::load`]. One that is not
/// UTF-8 text is left out, unless it is a `TOOLPLANE_*` one, which is refused naming it
/// (`std::env::vars` panics on any such variable, so one set for another program stopped the
/// server at its start).
pub fn process_environment() -> Result<Vec<(String, String)>, ConfigError> {
    let mut variables = Vec::new();
    for (key, value) in std::env::vars_os() {
        match (key.to_str(), value.to_str()) {
            (Some(key), Some(value)) => variables.push((key.to_owned(), value.to_owned())),
            _ if key.as_bytes().starts_with(ENV_PREFIX.as_bytes()) => {
                return Err(ConfigError::Invalid {
                    origin: "environment".to_owned(),
                    message: format!("{}: not UTF-8 text; set it as text", key.to_string_lossy()),
                });
            }
            _ => {}
        }
    }
    Ok(variables)
}

/// An environment value typed like the field's default (numbers stay numbers).
pub(super) fn env_value(value: &str, like: &toml::Value) -> toml::Value {
    match like {
        toml::Value::Integer(_) => value.trim().parse().map_or_else(
            |_| toml::Value::String(value.to_owned()),
            toml::Value::Integer,
        ),
        _ => toml::Value::String(value.to_owned()),
    }
}
