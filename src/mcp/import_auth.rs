//! How toolplane authenticates to an imported MCP server at a URL, from the
//! `bearer_token_env`, `bearer_token_file` and `oauth_client_credentials` settings of its
//! `[[mcp_imports]]` entry, checked. A server toolplane starts is given its credentials
//! through `env` or `pass_env` instead.

use std::path::PathBuf;
use std::time::Duration;

use super::client_credentials::ClientCredentials;
use super::import_config::{McpImportConfig, ReadFile, Secret};
use crate::client::{BearerToken, InvalidBearerToken};
use crate::registry::ServiceName;

/// How toolplane authenticates to an imported server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerAuth {
    /// With this bearer token (`bearer_token_env`).
    Bearer(Secret),
    /// With the bearer token in this file (`bearer_token_file`), read when a session opens,
    /// again once what was read is `every` old (`tls_reload_interval`; zero: never by age),
    /// on SIGHUP, and at once when the server refuses the token sent (answers 401), so a
    /// token rotated in the file is sent without a restart or a new session
    /// ([`crate::client::TokenFile`]).
    BearerFile {
        /// The file: its first line that is not blank is the token.
        path: PathBuf,
        /// How old a read may grow before the file is read again.
        every: Duration,
    },
    /// With access tokens got with these OAuth client credentials.
    ClientCredentials(ClientCredentials),
}

/// How `entry` (of `service`; `started`: a server toolplane starts) authenticates, its token
/// file read by `read_file` now and to be read again every `token_file_reread`; the error
/// names the setting to fix, never a token.
pub(super) fn checked_auth(
    entry: &McpImportConfig,
    service: &ServiceName,
    started: bool,
    token_file_reread: Duration,
    read_file: &ReadFile<'_>,
) -> Result<Option<ServerAuth>, String> {
    let set: Vec<&str> = [
        ("bearer_token_env", entry.bearer_token_env.is_some()),
        ("bearer_token_file", entry.bearer_token_file.is_some()),
        (
            "oauth_client_credentials",
            entry.oauth_client_credentials.is_some(),
        ),
    ]
    .into_iter()
    .filter_map(|(name, is_set)| is_set.then_some(name))
    .collect();
    match set.as_slice() {
        [] => return Ok(None),
        [_] => {}
        [first, second, ..] => {
            return Err(format!(
                "mcp_imports: service {service} sets both {first} and {second}; a server is \
                 sent one kind of token"
            ));
        }
    }
    if started {
        return Err(format!(
            "mcp_imports: {} of service {service} is for a server at a url, not one toolplane \
             starts (command): give that one its credentials with env or pass_env",
            set[0]
        ));
    }
    let bad_token = |setting: String| {
        move |problem: InvalidBearerToken| {
            format!("mcp_imports: {setting} of service {service}: {problem}")
        }
    };
    if let Some(variable) = &entry.bearer_token_env {
        let value = std::env::var(variable).map_err(|_| {
            format!(
                "mcp_imports: bearer_token_env of service {service} names {variable}, which is \
                 not set (or not UTF-8) in toolplane's environment"
            )
        })?;
        let token = BearerToken::new(&value)
            .map_err(bad_token(format!("bearer_token_env (variable {variable})")))?;
        return Ok(Some(ServerAuth::Bearer(Secret(token.secret().to_owned()))));
    }
    if let Some(path) = &entry.bearer_token_file {
        BearerToken::from_file_read_by(path, read_file)
            .map_err(bad_token("bearer_token_file".to_owned()))?;
        return Ok(Some(ServerAuth::BearerFile {
            path: path.clone(),
            every: token_file_reread,
        }));
    }
    let table = entry.oauth_client_credentials.as_ref();
    let credentials = (table.map(|table| table.check(service, read_file))).transpose()?;
    Ok(credentials.map(ServerAuth::ClientCredentials))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::client_credentials::ClientCredentialsConfig;
    use crate::mcp::import_config::read_from_disk;

    fn entry(url: &str) -> McpImportConfig {
        let toml = format!("service = \"github\"\nurl = \"{url}\"");
        toml::from_str(&toml).expect("an entry")
    }

    fn auth_of(entry: &McpImportConfig) -> Result<Option<ServerAuth>, String> {
        let service = ServiceName::parse(&entry.service).expect("a service name");
        let started = entry.url.is_empty();
        checked_auth(
            entry,
            &service,
            started,
            Duration::from_secs(5),
            &read_from_disk,
        )
    }

    #[test]
    fn a_token_file_is_read_as_the_entry_is_checked_and_named_by_its_errors() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("token");
        std::fs::write(&path, "\n s3cret \n").expect("write");
        let with_file = McpImportConfig {
            bearer_token_file: Some(path.clone()),
            ..entry("https://h/mcp")
        };
        assert_eq!(
            auth_of(&with_file),
            Ok(Some(ServerAuth::BearerFile {
                path: path.clone(),
                every: Duration::from_secs(5),
            }))
        );
        std::fs::write(&path, "two words\n").expect("write");
        let error = auth_of(&with_file).expect_err("a space");
        assert!(
            error.contains("bearer_token_file of service github") && !error.contains("words"),
            "{error}"
        );
        std::fs::remove_file(&path).expect("remove");
        let error = auth_of(&with_file).expect_err("missing");
        assert!(
            error.contains(&format!("{} cannot be read", path.display())),
            "{error}"
        );
    }

    #[test]
    fn one_kind_of_token_is_set_and_only_for_a_server_at_a_url() {
        let with_env = McpImportConfig {
            bearer_token_env: Some("PATH".into()),
            ..entry("https://h/mcp")
        };
        let path = std::env::var("PATH").expect("PATH is set");
        let sent = match auth_of(&with_env) {
            Ok(Some(ServerAuth::Bearer(Secret(token)))) => token,
            other => panic!("{other:?}"),
        };
        assert_eq!(sent, path.trim());
        let both = McpImportConfig {
            bearer_token_file: Some("/etc/token".into()),
            ..with_env.clone()
        };
        let error = auth_of(&both).expect_err("both");
        assert!(
            error.contains("sets both bearer_token_env and bearer_token_file"),
            "{error}"
        );
        let credentials: ClientCredentialsConfig =
            toml::from_str("client_id = \"toolplane\"\nclient_secret_env = \"PATH\"")
                .expect("a table");
        let all_three = McpImportConfig {
            oauth_client_credentials: Some(credentials),
            ..both
        };
        assert!(
            auth_of(&all_three)
                .expect_err("three")
                .contains("sets both")
        );
        let started = McpImportConfig {
            url: String::new(),
            command: vec!["server".into()],
            ..with_env
        };
        let error = auth_of(&started).expect_err("a started server");
        assert!(
            error.contains("bearer_token_env of service github is for a server at a url"),
            "{error}"
        );
        let unset = McpImportConfig {
            bearer_token_env: Some("TOOLPLANE_TEST_VARIABLE_NEVER_SET".into()),
            ..entry("https://h/mcp")
        };
        assert!(auth_of(&unset).expect_err("unset").contains("not set"));
        assert_eq!(auth_of(&entry("https://h/mcp")), Ok(None));
    }
}
