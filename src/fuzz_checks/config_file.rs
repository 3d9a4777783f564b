//! The reader of `toolplane.toml` and the `TOOLPLANE_*` variables.

use std::path::Path;

use crate::config::ServerConfig;

/// The configuration file's name in the check; any other file it names cannot be read.
const FILE: &str = "toolplane.toml";

/// A configuration as an operator writes it: the bytes are `TOML\0VARIABLES`, the variables
/// one `NAME=VALUE` per line (`TOOLPLANE_MAX_TTL=5m`). Reading it never panics, whatever it
/// holds: a configuration that cannot be used is refused with a message naming what is wrong
/// (the server then stops with exit 2 rather than a panic), and one that is accepted gives the
/// server's options. Files the configuration names (token files, key files) cannot be read
/// here, so no file is read or written; the variables an MCP import names (a bearer token's,
/// a client secret's) are looked up in the process's environment, as the server does.
pub fn config_file(data: &[u8]) {
    let (text, variables) = match data.iter().position(|&byte| byte == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &b""[..]),
    };
    let (Ok(text), Ok(variables)) = (std::str::from_utf8(text), std::str::from_utf8(variables))
    else {
        return;
    };
    let env = (variables.lines())
        .filter_map(|line| line.split_once('='))
        .map(|(name, value)| (name.to_owned(), value.to_owned()));
    let read = |path: &Path| {
        if path == Path::new(FILE) {
            Ok(text.to_owned())
        } else {
            Err(std::io::Error::from(std::io::ErrorKind::NotFound))
        }
    };
    match ServerConfig::load_read_by(Some(Path::new(FILE)), env, read) {
        Ok(config) => drop(config.server_options()),
        Err(error) => assert!(!error.to_string().is_empty()),
    }
}
