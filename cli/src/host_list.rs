//! The hosts file of `shoal up --hosts FILE`: one server host a line, as
//! `HOST [ADDR]`, server ids in line order. HOST is the name the launcher
//! is given (`ssh HOST`, `srun -w HOST`); ADDR, where the server listens
//! and clients connect, is an IP address with or without a port (the
//! port defaults to `--port`), or absent: HOST's address as this machine
//! resolves it. `#` starts a comment; blank lines are skipped. Slurm's
//! `scontrol show hostnames` prints such a file.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::Path;

use shoal_proto::error::{Result, ShoalError};

#[derive(Debug, PartialEq)]
pub struct ServerHost {
    pub host: String,
    pub addr: SocketAddr,
}

/// The server hosts listed in `path`.
pub fn read(path: &Path, port: u16) -> Result<Vec<ServerHost>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ShoalError::from(e).context(format!("hosts file {}", path.display())))?;
    let hosts = parse(&text, port, resolve)
        .map_err(|e| ShoalError::invalid(format!("hosts file {}, {e}", path.display())))?;
    if hosts.is_empty() {
        return Err(ShoalError::invalid(format!(
            "hosts file {} lists no host",
            path.display()
        )));
    }
    Ok(hosts)
}

/// HOST's first IPv4 address (else any), as this machine resolves it.
fn resolve(host: &str, port: u16) -> std::result::Result<SocketAddr, String> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}; give its address"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| format!("{host} has no address; give one"))
}

/// The hosts of a hosts file's `text`; an error names the line.
fn parse(
    text: &str,
    port: u16,
    resolve: impl Fn(&str, u16) -> std::result::Result<SocketAddr, String>,
) -> std::result::Result<Vec<ServerHost>, String> {
    let mut hosts: Vec<ServerHost> = Vec::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let at = |why: String| format!("line {}: {raw:?}: {why}", n + 1);
        let words: Vec<&str> = line.split_whitespace().collect();
        let addr = match words[..] {
            [host] => resolve(host, port).map_err(at)?,
            [_, addr] => addr
                .parse::<SocketAddr>()
                .or_else(|_| addr.parse::<IpAddr>().map(|ip| SocketAddr::new(ip, port)))
                .map_err(|_| {
                    at(format!(
                        "{addr:?} is not an IP address (with or without :PORT)"
                    ))
                })?,
            _ => return Err(at("expected HOST [ADDR]".to_string())),
        };
        if let Some(twice) = hosts.iter().find(|h| h.addr == addr) {
            return Err(at(format!("{addr} is {}'s address too", twice.host)));
        }
        hosts.push(ServerHost {
            host: words[0].to_string(),
            addr,
        });
    }
    Ok(hosts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_dns(host: &str, _: u16) -> std::result::Result<SocketAddr, String> {
        Err(format!("cannot resolve {host}"))
    }

    #[test]
    fn hosts_with_and_without_addresses_and_ports() {
        let text = "# servers\nn1 10.0.0.1\n\nn2 10.0.0.2:7100  # its own port\nn3\n";
        let hosts = parse(text, 7070, |h, p| {
            assert_eq!(h, "n3");
            Ok(SocketAddr::from(([10, 0, 0, 3], p)))
        })
        .unwrap();
        let addrs: Vec<String> = hosts
            .iter()
            .map(|h| format!("{} {}", h.host, h.addr))
            .collect();
        assert_eq!(
            addrs,
            ["n1 10.0.0.1:7070", "n2 10.0.0.2:7100", "n3 10.0.0.3:7070"]
        );
    }

    #[test]
    fn a_line_that_does_not_parse_is_named() {
        let cases = [
            (
                "n1 10.0.0.1\nn2 not-an-ip\n",
                "line 2: \"n2 not-an-ip\": \"not-an-ip\" is not an IP",
            ),
            (
                "n1 10.0.0.1 extra\n",
                "line 1: \"n1 10.0.0.1 extra\": expected HOST [ADDR]",
            ),
            (
                "n1 10.0.0.1\nn2 10.0.0.1\n",
                "line 2: \"n2 10.0.0.1\": 10.0.0.1:7070 is n1's",
            ),
            ("nowhere\n", "line 1: \"nowhere\": cannot resolve nowhere"),
        ];
        for (text, want) in cases {
            let err = parse(text, 7070, no_dns).unwrap_err();
            assert!(err.starts_with(want), "{text:?}: {err}");
        }
    }
}
