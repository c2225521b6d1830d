//! Which `Host` and `Origin` values the HTTP listener answers to (DESIGN §13).
//!
//! A web page the user visits must not be able to drive airlock: not through
//! DNS rebinding (a name the attacker controls, resolved to 127.0.0.1, so the
//! browser sends `Host: attacker.example`), and not through a cross-site
//! request (the browser sends `Origin: https://attacker.example`). The rules:
//!
//! - `Host` must name the listener: a loopback name (`localhost`,
//!   `*.localhost`) or address, the address it is bound to (any address when
//!   bound to all of them: an address is never a rebinding name), the
//!   `--public-url` host, or an entry of `http.allowed_hosts` (`name` for any
//!   port, `name:port` for one).
//! - `Origin`, when a browser sends it, must be the listener's own origin (the
//!   `Host` it was sent to, or the `--public-url` origin), or an entry of
//!   `http.allowed_origins`. `null` (sandboxed frames, files) counts as
//!   cross-origin unless listed.
//!
//! Everything here is pure: the HTTP face passes the header values in.
//!
//! ```
//! use airlock_core::origin::Listener;
//!
//! let listener = Listener::new("127.0.0.1:7420".parse().unwrap(), None, &[], &[]).unwrap();
//! assert!(listener.host_allowed("localhost:7420"));
//! assert!(!listener.host_allowed("attacker.example:7420"));
//! assert!(listener.origin_allowed("http://localhost:7420", "localhost:7420"));
//! assert!(!listener.origin_allowed("https://attacker.example", "localhost:7420"));
//! ```

use std::net::{IpAddr, SocketAddr};

/// A host, lowercased, without a trailing dot or IPv6 brackets, and its port
/// when one was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority {
    pub host: Host,
    pub port: Option<u16>,
}

/// A host name or an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    Name(String),
    Address(IpAddr),
}

/// A browser origin: `scheme://host:port`, the port filled in from the
/// scheme when left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    pub scheme: String,
    pub host: Host,
    pub port: u16,
}

/// The names a listener answers to.
#[derive(Debug, Clone)]
pub struct Listener {
    bound: SocketAddr,
    public: Option<Origin>,
    allowed_hosts: Vec<Authority>,
    allowed_origins: Vec<AllowedOrigin>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum AllowedOrigin {
    Null,
    Origin(Origin),
}

impl Listener {
    /// A listener bound to `bound`, reached as `public_url` (if given), with
    /// the configured extra hosts and origins. An entry that does not parse is
    /// an error naming it (the configuration is validated with
    /// [`parse_allowed_host`] and [`parse_allowed_origin`] first).
    pub fn new(
        bound: SocketAddr,
        public_url: Option<&str>,
        allowed_hosts: &[String],
        allowed_origins: &[String],
    ) -> Result<Listener, OriginError> {
        let public = match public_url {
            Some(url) => {
                Some(origin_of_url(url).ok_or_else(|| OriginError::NotAnHttpUrl(url.to_owned()))?)
            }
            None => None,
        };
        let allowed_hosts = allowed_hosts
            .iter()
            .map(|entry| parse_allowed_host(entry))
            .collect::<Result<_, _>>()?;
        let allowed_origins = allowed_origins
            .iter()
            .map(|entry| {
                if entry == "null" {
                    Ok(AllowedOrigin::Null)
                } else {
                    parse_allowed_origin(entry).map(AllowedOrigin::Origin)
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(Listener {
            bound,
            public,
            allowed_hosts,
            allowed_origins,
        })
    }

    /// Whether a request whose `Host` header is `value` was meant for this
    /// listener.
    pub fn host_allowed(&self, value: &str) -> bool {
        let Some(authority) = parse_authority(value) else {
            return false;
        };
        let builtin = match &authority.host {
            Host::Address(address) => {
                is_loopback(*address)
                    || *address == self.bound.ip()
                    || self.bound.ip().is_unspecified()
            }
            Host::Name(name) => name == "localhost" || name.ends_with(".localhost"),
        };
        builtin
            || self
                .public
                .as_ref()
                .is_some_and(|public| public.host == authority.host)
            || self.allowed_hosts.iter().any(|allowed| {
                allowed.host == authority.host
                    && allowed
                        .port
                        .is_none_or(|port| authority.port.unwrap_or(80) == port)
            })
    }

    /// Whether a browser request with `Origin: origin`, sent to `Host: host`,
    /// may be answered: the listener's own origin, or a listed one.
    pub fn origin_allowed(&self, origin: &str, host: &str) -> bool {
        let origin = origin.trim();
        if origin == "null" {
            return self.allowed_origins.contains(&AllowedOrigin::Null);
        }
        let Some(origin) = parse_origin(origin) else {
            return false;
        };
        let same_as_host = parse_authority(host).is_some_and(|host| {
            // The listener speaks plain HTTP; https reaches it only through a
            // proxy, whose origin is the public URL's.
            origin.scheme == "http"
                && host.host == origin.host
                && host.port.unwrap_or(80) == origin.port
        });
        same_as_host
            || self.public.as_ref() == Some(&origin)
            || self
                .allowed_origins
                .iter()
                .any(|allowed| *allowed == AllowedOrigin::Origin(origin.clone()))
    }
}

/// An `http.allowed_hosts` entry: `name`, `name:port`, an address, or
/// `[v6]:port`.
pub fn parse_allowed_host(entry: &str) -> Result<Authority, OriginError> {
    parse_authority(entry).ok_or_else(|| OriginError::NotAHost(entry.to_owned()))
}

/// Why a listener's name, URL or origin entry does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OriginError {
    #[error("`{0}` is not an http:// or https:// url")]
    NotAnHttpUrl(String),
    #[error("`{0}` is not a host name or address, optionally with :port")]
    NotAHost(String),
    #[error("`{0}` is not an origin (http://host[:port] or https://host[:port])")]
    NotAnOrigin(String),
}

/// An `http.allowed_origins` entry: `scheme://host[:port]`, http or https,
/// nothing after the authority.
pub fn parse_allowed_origin(entry: &str) -> Result<Origin, OriginError> {
    parse_origin(entry).ok_or_else(|| OriginError::NotAnOrigin(entry.to_owned()))
}

/// Parses a `Host` header value or an authority: `host[:port]`, `[v6][:port]`.
/// Refuses user info, paths, empty hosts and anything that is not a DNS name
/// or address.
pub fn parse_authority(text: &str) -> Option<Authority> {
    let text = text.trim();
    if text.is_empty() || text.len() > 300 {
        return None;
    }
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (address, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            after => Some(parse_port(after.strip_prefix(':')?)?),
        };
        let address: std::net::Ipv6Addr = address.parse().ok()?;
        return Some(Authority {
            host: Host::Address(IpAddr::V6(address)),
            port,
        });
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(parse_port(port)?)),
            None => (text, None),
        }
    };
    Some(Authority {
        host: parse_host(host)?,
        port,
    })
}

/// Parses an `Origin` value (or an origin-like URL without a path).
pub fn parse_origin(text: &str) -> Option<Origin> {
    let (scheme, rest) = text.trim().split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let default_port = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    let authority = parse_authority(rest)?;
    Some(Origin {
        scheme,
        host: authority.host,
        port: authority.port.unwrap_or(default_port),
    })
}

/// The origin of a URL such as `--public-url` (its path is dropped).
pub fn origin_of_url(url: &str) -> Option<Origin> {
    let (scheme, rest) = url.trim().split_once("://")?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    parse_origin(&format!("{scheme}://{}", &rest[..end]))
}

fn parse_port(text: &str) -> Option<u16> {
    if text.is_empty() || text.len() > 5 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn parse_host(text: &str) -> Option<Host> {
    if let Ok(address) = text.parse::<std::net::Ipv4Addr>() {
        return Some(Host::Address(IpAddr::V4(address)));
    }
    let name = text.strip_suffix('.').unwrap_or(text).to_ascii_lowercase();
    let valid = !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    valid.then_some(Host::Name(name))
}

fn is_loopback(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn listener(bound: &str, public: Option<&str>) -> Listener {
        Listener::new(
            bound.parse().unwrap(),
            public,
            &["ci.internal".to_owned(), "box.lan:9000".to_owned()],
            &["https://app.example".to_owned()],
        )
        .unwrap()
    }

    #[test]
    fn hosts() {
        let local = listener("127.0.0.1:7420", Some("https://airlock.example/ui"));
        let table = [
            ("localhost:7420", true),
            ("LOCALHOST", true),
            ("localhost.", true),
            ("app.localhost:7420", true),
            ("127.0.0.1:7420", true),
            ("127.9.9.9", true),
            ("[::1]:7420", true),
            ("[::ffff:127.0.0.1]", true),
            ("airlock.example", true),
            ("ci.internal:1234", true),
            ("box.lan:9000", true),
            ("box.lan:9001", false),
            ("box.lan", false),
            ("attacker.example:7420", false),
            ("localhost.attacker.example", false),
            ("192.168.1.5:7420", false),
            ("", false),
            ("user@localhost", false),
            ("localhost/x", false),
            ("localhost:", false),
            ("localhost:99999", false),
            ("[::1", false),
            ("local host", false),
        ];
        for (value, allowed) in table {
            assert_eq!(local.host_allowed(value), allowed, "{value:?}");
        }
        let all = listener("0.0.0.0:7420", None);
        assert!(all.host_allowed("192.168.1.5:7420"));
        assert!(!all.host_allowed("attacker.example"));
        let one = listener("192.168.1.5:7420", None);
        assert!(one.host_allowed("192.168.1.5:7420"));
        assert!(!one.host_allowed("192.168.1.6:7420"));
    }

    #[test]
    fn origins() {
        let local = listener("127.0.0.1:7420", Some("https://airlock.example/ui"));
        let table = [
            ("http://localhost:7420", "localhost:7420", true),
            ("http://LOCALHOST:7420", "localhost:7420", true),
            ("http://localhost", "localhost:80", true),
            ("http://localhost:7421", "localhost:7420", false),
            ("https://localhost:7420", "localhost:7420", false),
            ("http://127.0.0.1:7420", "localhost:7420", false),
            ("https://airlock.example", "127.0.0.1:7420", true),
            ("https://airlock.example:443", "127.0.0.1:7420", true),
            ("http://airlock.example", "127.0.0.1:7420", false),
            ("https://app.example", "localhost:7420", true),
            ("https://attacker.example", "localhost:7420", false),
            ("null", "localhost:7420", false),
            ("file://", "localhost:7420", false),
            ("http://localhost:7420/path", "localhost:7420", false),
            ("", "localhost:7420", false),
        ];
        for (origin, host, allowed) in table {
            assert_eq!(
                local.origin_allowed(origin, host),
                allowed,
                "{origin:?} to {host:?}"
            );
        }
        let with_null = Listener::new(
            "127.0.0.1:1".parse().unwrap(),
            None,
            &[],
            &["null".to_owned()],
        )
        .unwrap();
        assert!(with_null.origin_allowed("null", "localhost:1"));
    }
}
