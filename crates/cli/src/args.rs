//! `elsa cli`'s command line, and where it says to connect.
//!
//! Owns the flags (named as redis-cli names them, so muscle memory works:
//! `-h host -p port -a password -n db`, plus `-u URL` and `-c "commands"`)
//! and their translation into a [`redis::ConnectionInfo`]. Because `-h` is
//! the host, clap's automatic `-h` for help is switched off and help is
//! `--help` only.

use clap::ArgAction;
use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisConnectionInfo};

/// Flags of `elsa cli`.
#[derive(clap::Args, Debug, Clone)]
#[command(disable_help_flag = true)]
pub struct CliArgs {
    /// Server host name or address.
    #[arg(short = 'h', long, default_value = "127.0.0.1")]
    pub host: String,

    /// Server port.
    #[arg(short = 'p', long, default_value_t = 6379)]
    pub port: u16,

    /// Password, sent with AUTH on every (re)connection.
    #[arg(short = 'a', long)]
    pub password: Option<String>,

    /// User name for AUTH (ACL servers); needs --password.
    #[arg(long, requires = "password")]
    pub user: Option<String>,

    /// Database number (SELECT), for servers that have several.
    #[arg(short = 'n', long)]
    pub db: Option<i64>,

    /// Connect with TLS (as `redis-cli --tls`); `rediss://` URLs imply it.
    #[arg(long)]
    pub tls: bool,

    /// CA certificate(s) to trust for the server's certificate (PEM);
    /// without it, the system's roots.
    #[arg(long, value_name = "FILE")]
    pub cacert: Option<std::path::PathBuf>,

    /// Client certificate for servers that require one (PEM); needs --key.
    #[arg(long, value_name = "FILE", requires = "key")]
    pub cert: Option<std::path::PathBuf>,

    /// Private key of --cert (PEM).
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub key: Option<std::path::PathBuf>,

    /// Server URL, instead of --host/--port: `redis://[[user]:password@]host[:port][/db]`.
    #[arg(short = 'u', long, conflicts_with_all = ["host", "port"])]
    pub url: Option<String>,

    /// Run these commands (`;` separates several) and exit instead of
    /// prompting: exit status 0 if all succeeded, 1 at the first error reply
    /// or refused command, 2 if the server cannot be reached.
    #[arg(short = 'c', long = "command", value_name = "COMMANDS")]
    pub command: Option<String>,

    /// A single command given as separate words (`elsa cli GET k`), sent
    /// as is: no quoting, no `;` splitting. Exits like `-c`.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        conflicts_with = "command",
        value_name = "COMMAND"
    )]
    pub words: Vec<String>,

    /// Print help.
    #[arg(long, action = ArgAction::Help)]
    help: Option<bool>,
}

impl CliArgs {
    /// Where and how to connect: `--url` if given (with `--password`,
    /// `--user` and `--db` overriding what it says), else host and port.
    pub fn connection_info(&self) -> Result<ConnectionInfo, String> {
        let mut info = match &self.url {
            Some(url) => url
                .as_str()
                .into_connection_info()
                .map_err(|e| format!("invalid --url {url:?}: {e}"))?,
            None if self.tls => ConnectionInfo {
                addr: ConnectionAddr::TcpTls {
                    host: self.host.clone(),
                    port: self.port,
                    insecure: false,
                    tls_params: None,
                },
                redis: RedisConnectionInfo::default(),
            },
            None => ConnectionInfo {
                addr: ConnectionAddr::Tcp(self.host.clone(), self.port),
                redis: RedisConnectionInfo::default(),
            },
        };
        if let ConnectionAddr::TcpTls { .. } = info.addr {
            info = self.with_tls_files(info)?;
        }
        if let Some(password) = &self.password {
            info.redis.password = Some(password.clone());
        }
        if let Some(user) = &self.user {
            info.redis.username = Some(user.clone());
        }
        if let Some(db) = self.db {
            info.redis.db = db;
        }
        Ok(info)
    }
}

impl CliArgs {
    /// The connection with --cacert/--cert/--key loaded into it.
    fn with_tls_files(&self, info: ConnectionInfo) -> Result<ConnectionInfo, String> {
        let read = |p: &std::path::PathBuf| {
            std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
        };
        let client_tls = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
                client_cert: read(cert)?,
                client_key: read(key)?,
            }),
            _ => None,
        };
        let root_cert = self.cacert.as_ref().map(read).transpose()?;
        let certs = redis::TlsCertificates {
            client_tls,
            root_cert,
        };
        let client = redis::Client::build_with_tls(info, certs)
            .map_err(|e| format!("TLS setup failed: {e}"))?;
        Ok(client.get_connection_info().clone())
    }
}

/// How the prompt and messages name the server: `host:port`, plus `[db]`
/// when not the default database, as redis-cli shows it.
pub fn label(info: &ConnectionInfo) -> String {
    let addr = match &info.addr {
        ConnectionAddr::Tcp(host, port) => format!("{host}:{port}"),
        ConnectionAddr::TcpTls { host, port, .. } => format!("{host}:{port}"),
        ConnectionAddr::Unix(path) => path.display().to_string(),
    };
    match info.redis.db {
        0 => addr,
        db => format!("{addr}[{db}]"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// Mirrors how the `elsa` binary mounts the flags: as a subcommand.
    #[derive(Parser)]
    struct Top {
        #[command(subcommand)]
        cmd: Sub,
    }

    #[derive(clap::Subcommand)]
    enum Sub {
        Cli(CliArgs),
    }

    fn parse(argv: &[&str]) -> Result<CliArgs, clap::Error> {
        let argv = ["elsa", "cli"].iter().chain(argv);
        Top::try_parse_from(argv).map(|t| match t.cmd {
            Sub::Cli(a) => a,
        })
    }

    #[test]
    fn defaults() {
        let a = parse(&[]).unwrap();
        assert_eq!(a.host, "127.0.0.1");
        assert_eq!(a.port, 6379);
        assert!(a.password.is_none() && a.url.is_none() && a.command.is_none());
        assert!(a.words.is_empty());
        assert_eq!(label(&a.connection_info().unwrap()), "127.0.0.1:6379");
    }

    #[test]
    fn redis_cli_style_short_flags() {
        let a = parse(&[
            "-h", "db1", "-p", "7000", "-a", "pw", "-n", "2", "-c", "GET k",
        ])
        .unwrap();
        let info = a.connection_info().unwrap();
        assert_eq!(label(&info), "db1:7000[2]");
        assert_eq!(info.redis.password.as_deref(), Some("pw"));
        assert_eq!(a.command.as_deref(), Some("GET k"));
    }

    #[test]
    fn long_help_still_works() {
        let err = parse(&["--help"]).err().unwrap();
        assert_eq!(err.kind(), clap::error::ErrorKind::DisplayHelp);
    }

    #[test]
    fn url_and_overrides() {
        let a = parse(&["-u", "redis://:secret@example.org:7001/3"]).unwrap();
        let info = a.connection_info().unwrap();
        assert_eq!(label(&info), "example.org:7001[3]");
        assert_eq!(info.redis.password.as_deref(), Some("secret"));
        let a = parse(&["-u", "redis://example.org", "-a", "other"]).unwrap();
        let info = a.connection_info().unwrap();
        assert_eq!(info.redis.password.as_deref(), Some("other"));
    }

    #[test]
    fn url_conflicts_with_host() {
        assert!(parse(&["-u", "redis://x", "-h", "y"]).is_err());
    }

    #[test]
    fn bad_url_is_an_error_not_a_panic() {
        let a = parse(&["-u", "not a url"]).unwrap();
        assert!(a.connection_info().is_err());
    }

    #[test]
    fn trailing_words_are_one_command() {
        let a = parse(&["-p", "1", "SET", "k", "-1"]).unwrap();
        assert_eq!(a.words, ["SET", "k", "-1"]);
        assert!(parse(&["-c", "GET k", "GET", "k"]).is_err());
    }
}
