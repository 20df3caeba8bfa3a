//! Webhook rules that need no HTTP client: the Standard Webhooks signature and the policy on
//! which URLs and addresses a webhook may reach.
//!
//! - Signing ([`sign`], [`signature_header`]) follows <https://www.standardwebhooks.com/>: the
//!   signed content is `{msg_id}.{timestamp}.{body}`, the key is the base64 (standard
//!   alphabet) decoding of the secret after its `whsec_` prefix, the MAC is HMAC-SHA256, and a
//!   signature is `v1,` and the MAC in standard base64. A receiver verifies with any of the
//!   Standard Webhooks libraries.
//! - The address policy ([`ip_allowed`], [`check_url`], [`resolve`]) keeps webhooks off this
//!   machine, the VPC, the instance metadata service and every other address that is not
//!   public (server-side request forgery). [`check_url`] checks what the URL says at
//!   registration and before each call; the sender checks again what its host resolves to at
//!   each call, and connects only to the addresses it checked.
//!
//! Nothing here logs: a URL may carry a token in its path or query.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use rand::Rng;
use sha2::Sha256;
use url::{Host, Url};

/// The prefix of every signing secret.
pub const SECRET_PREFIX: &str = "whsec_";

/// The longest URL an endpoint may have, in characters.
pub const MAX_URL_CHARS: usize = 2048;

/// How long a host's lookup may take before the URL counts as unresolvable.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Bytes of randomness in a new secret's key (the HMAC-SHA256 block is 64; 32 is its output
/// size and what the Standard Webhooks libraries generate).
const SECRET_KEY_BYTES: usize = 32;

/// Why a signing secret cannot sign. Its text never quotes the secret.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("the endpoint has no signing secret")]
    Missing,
    #[error("the signing secret does not start with {SECRET_PREFIX}")]
    NoPrefix,
    #[error("the signing secret is not valid base64")]
    NotBase64(#[source] base64::DecodeError),
    #[error("the signing secret's key is empty")]
    EmptyKey,
}

/// A new signing secret: `whsec_` and the standard base64 of 32 bytes from the thread's
/// CSPRNG (ChaCha, seeded and reseeded from the operating system).
pub fn new_secret() -> String {
    let mut key = [0u8; SECRET_KEY_BYTES];
    rand::rng().fill(&mut key[..]);
    format!("{SECRET_PREFIX}{}", STANDARD.encode(key))
}

/// The key a secret holds: the base64 after its prefix, never empty.
fn secret_key(secret: &str) -> Result<Vec<u8>, SecretError> {
    let encoded = secret
        .strip_prefix(SECRET_PREFIX)
        .ok_or(SecretError::NoPrefix)?;
    let key = STANDARD.decode(encoded).map_err(SecretError::NotBase64)?;
    if key.is_empty() {
        return Err(SecretError::EmptyKey);
    }
    Ok(key)
}

/// The Standard Webhooks signature of one message: `v1,` and the standard base64 of
/// HMAC-SHA256 over `{msg_id}.{timestamp}.{body}`, keyed with the secret's key.
///
/// A secret without the `whsec_` prefix, whose rest is not base64, or whose key is empty is
/// an error, never a panic.
pub fn sign(secret: &str, msg_id: &str, timestamp: i64, body: &str) -> Result<String, SecretError> {
    let key = secret_key(secret)?;
    // HMAC takes a key of any length: this never fails, but an error is still no panic
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).map_err(|_| SecretError::EmptyKey)?;
    mac.update(msg_id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    Ok(format!(
        "v1,{}",
        STANDARD.encode(mac.finalize().into_bytes())
    ))
}

/// The `webhook-signature` header: one [`sign`] signature per secret, in the order given,
/// separated by spaces, so a receiver holding either the new or the old secret during a
/// rotation verifies the message.
///
/// No secret at all is an error ([`SecretError::Missing`]): an unsigned message is one no
/// receiver should accept, so it is not sent.
pub fn signature_header(
    secrets: &[String],
    msg_id: &str,
    timestamp: i64,
    body: &str,
) -> Result<String, SecretError> {
    if secrets.is_empty() {
        return Err(SecretError::Missing);
    }
    let signatures = secrets
        .iter()
        .map(|secret| sign(secret, msg_id, timestamp, body))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(signatures.join(" "))
}

/// Whether a webhook may connect to `ip`: only a public address may.
///
/// Refused IPv4: this network 0/8 (0.0.0.0 included), private 10/8, 172.16/12 and
/// 192.168/16, shared (carrier-grade NAT) 100.64/10, loopback 127/8, link-local 169.254/16
/// (the instance metadata service, 169.254.169.254), IETF protocol assignments 192.0.0/24,
/// the documentation nets 192.0.2/24, 198.51.100/24 and 203.0.113/24, benchmarking 198.18/15,
/// multicast 224/4, and reserved 240/4 (the broadcast address 255.255.255.255 included).
///
/// Refused IPv6: unspecified `::`, loopback `::1`, unique local fc00::/7, link-local
/// fe80::/10, site-local fec0::/10, multicast ff00::/8 and documentation 2001:db8::/32. An
/// address that carries an IPv4 address (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible
/// `::a.b.c.d`, NAT64 64:ff9b::/96 and 6to4 2002::/16) is judged by the IPv4 rules on the
/// address it carries, since that is where the packets end up.
pub fn ip_allowed(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => ipv4_allowed(v4),
        IpAddr::V6(v6) => ipv6_allowed(v6),
    }
}

fn ipv4_allowed(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    let refused = a == 0 // this network, 0.0.0.0 included
        || a == 10 // private
        || (a == 100 && (64..128).contains(&b)) // shared address space (CGNAT)
        || a == 127 // loopback
        || (a == 169 && b == 254) // link-local, the metadata service
        || (a == 172 && (16..32).contains(&b)) // private
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments
        || (a == 192 && b == 0 && c == 2) // documentation (TEST-NET-1)
        || (a == 192 && b == 168) // private
        || (a == 198 && (b == 18 || b == 19)) // benchmarking
        || (a == 198 && b == 51 && c == 100) // documentation (TEST-NET-2)
        || (a == 203 && b == 0 && c == 113) // documentation (TEST-NET-3)
        || a >= 224; // multicast 224/4, reserved 240/4, broadcast
    !refused
}

fn ipv6_allowed(ip: Ipv6Addr) -> bool {
    if let Some(v4) = embedded_ipv4(ip) {
        return ipv4_allowed(v4);
    }
    let s = ip.segments();
    let refused = ip.is_unspecified()
        || ip.is_loopback()
        || (s[0] & 0xfe00) == 0xfc00 // unique local fc00::/7
        || (s[0] & 0xffc0) == 0xfe80 // link-local fe80::/10
        || (s[0] & 0xffc0) == 0xfec0 // site-local fec0::/10 (deprecated, still routed locally)
        || (s[0] & 0xff00) == 0xff00 // multicast
        || (s[0] == 0x2001 && s[1] == 0x0db8); // documentation
    !refused
}

/// The IPv4 address an IPv6 address carries, for the forms that reach it: IPv4-mapped
/// (::ffff:0:0/96), IPv4-compatible (::/96, which holds `::` and `::1` as 0.0.0.0 and
/// 0.0.0.1, both refused), NAT64 (64:ff9b::/96) and 6to4 (2002::/16, the address in bits
/// 16 to 48).
fn embedded_ipv4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    match s {
        [0, 0, 0, 0, 0, 0xffff, hi, lo] | [0, 0, 0, 0, 0, 0, hi, lo] => Some(low(hi, lo)),
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(low(hi, lo)),
        [0x2002, hi, lo, ..] => Some(low(hi, lo)),
        _ => None,
    }
}

/// A URL [`check_url`] accepted, with the host (an IPv6 address without its brackets) and
/// the port (the scheme's default when the URL names none) to resolve and connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookUrl {
    pub url: Url,
    pub host: String,
    pub port: u16,
}

/// Why a webhook URL is refused. Its text is a sentence for the API caller; [`UrlRefusal::code`]
/// is the stable code beside it.
#[derive(Debug, thiserror::Error)]
pub enum UrlRefusal {
    #[error("the URL is longer than {MAX_URL_CHARS} characters")]
    TooLong,
    #[error("the URL is not valid: {0}")]
    Invalid(#[source] url::ParseError),
    #[error("the URL must use https://")]
    Insecure,
    #[error("the URL must use https://, not {scheme}://")]
    UnsupportedScheme { scheme: String },
    #[error("the URL must name a host")]
    NoHost,
    #[error("the URL must not carry a user name or password")]
    UserInfo,
    #[error("the URL must not have a fragment (#...)")]
    Fragment,
    #[error("the address {0} is not public: webhooks go to public addresses only")]
    Address(IpAddr),
    #[error("the host {0} is this machine: webhooks go to public addresses only")]
    LocalHost(String),
    #[error(
        "the host {host} resolves to {address}, which is not public: webhooks go to public \
         addresses only"
    )]
    ResolvesToAddress { host: String, address: IpAddr },
    #[error("the host {host} could not be resolved")]
    Unresolvable {
        host: String,
        #[source]
        source: Option<std::io::Error>,
    },
    #[error("the host {host} was not resolved within {} s", RESOLVE_TIMEOUT.as_secs())]
    ResolveTimeout { host: String },
}

impl UrlRefusal {
    /// The refusal's stable code: `invalid_url`, `insecure_url`, `address_not_allowed` or
    /// `unresolvable_host`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::TooLong
            | Self::Invalid(_)
            | Self::UnsupportedScheme { .. }
            | Self::NoHost
            | Self::UserInfo
            | Self::Fragment => "invalid_url",
            Self::Insecure => "insecure_url",
            Self::Address(_) | Self::LocalHost(_) | Self::ResolvesToAddress { .. } => {
                "address_not_allowed"
            }
            Self::Unresolvable { .. } | Self::ResolveTimeout { .. } => "unresolvable_host",
        }
    }
}

/// Checks what a webhook URL says, before any lookup: at most [`MAX_URL_CHARS`] characters,
/// a valid absolute URL, `https` (or `http` when `allow_private`), a host, no user name or
/// password, no fragment, and, unless `allow_private`, a literal IP host that
/// [`ip_allowed`] accepts and no host named `localhost` or `*.localhost` (RFC 6761: always
/// this machine, whatever the resolver says).
///
/// The URL parser normalizes the host first, so an IPv4 address written in another form
/// (`2130706433`, `0x7f.1`) is judged as the address it is.
pub fn check_url(raw: &str, allow_private: bool) -> Result<WebhookUrl, UrlRefusal> {
    if raw.chars().count() > MAX_URL_CHARS {
        return Err(UrlRefusal::TooLong);
    }
    let url = Url::parse(raw).map_err(UrlRefusal::Invalid)?;
    match url.scheme() {
        "https" => {}
        "http" if allow_private => {}
        "http" => return Err(UrlRefusal::Insecure),
        other => {
            return Err(UrlRefusal::UnsupportedScheme {
                scheme: other.to_owned(),
            });
        }
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(UrlRefusal::UserInfo);
    }
    if url.fragment().is_some() {
        return Err(UrlRefusal::Fragment);
    }
    let host = match url.host() {
        None => return Err(UrlRefusal::NoHost),
        Some(Host::Domain("")) => return Err(UrlRefusal::NoHost),
        Some(Host::Domain(name)) => {
            // the parser lowercases a special scheme's host; a trailing dot names the same host
            let bare = name.trim_end_matches('.');
            if !allow_private && (bare == "localhost" || bare.ends_with(".localhost")) {
                return Err(UrlRefusal::LocalHost(name.to_owned()));
            }
            name.to_owned()
        }
        Some(Host::Ipv4(ip)) => literal_host(IpAddr::V4(ip), allow_private)?,
        Some(Host::Ipv6(ip)) => literal_host(IpAddr::V6(ip), allow_private)?,
    };
    // http and https always have a default port; None would be a parser change, not a panic
    let port = url.port_or_known_default().ok_or(UrlRefusal::NoHost)?;
    Ok(WebhookUrl { url, host, port })
}

fn literal_host(ip: IpAddr, allow_private: bool) -> Result<String, UrlRefusal> {
    if !allow_private && !ip_allowed(ip) {
        return Err(UrlRefusal::Address(ip));
    }
    Ok(ip.to_string())
}

/// Every address `host` resolves to, each with `port`, looked up by the system's resolver
/// within [`RESOLVE_TIMEOUT`]. A failed lookup, one that found nothing and one that took
/// too long are [`UrlRefusal`]s coded `unresolvable_host`. No policy: see [`resolve`].
pub async fn lookup(host: &str, port: u16) -> Result<Vec<SocketAddr>, UrlRefusal> {
    let found = tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((host, port))).await;
    let addresses: Vec<SocketAddr> = match found {
        Err(_elapsed) => {
            return Err(UrlRefusal::ResolveTimeout {
                host: host.to_owned(),
            });
        }
        Ok(Err(source)) => {
            return Err(UrlRefusal::Unresolvable {
                host: host.to_owned(),
                source: Some(source),
            });
        }
        Ok(Ok(found)) => found.collect(),
    };
    if addresses.is_empty() {
        return Err(UrlRefusal::Unresolvable {
            host: host.to_owned(),
            source: None,
        });
    }
    Ok(addresses)
}

/// The addresses a checked URL's host resolves to ([`lookup`]). Unless `allow_private`, a
/// host with any address [`ip_allowed`] refuses is refused whole (`address_not_allowed`,
/// naming that address): a name that points at an internal address as well is not an
/// endpoint to register.
pub async fn resolve(url: &WebhookUrl, allow_private: bool) -> Result<Vec<SocketAddr>, UrlRefusal> {
    let addresses = lookup(&url.host, url.port).await?;
    if !allow_private
        && let Some(refused) = addresses.iter().find(|address| !ip_allowed(address.ip()))
    {
        return Err(UrlRefusal::ResolvesToAddress {
            host: url.host.clone(),
            address: refused.ip(),
        });
    }
    Ok(addresses)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const MSG_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const TIMESTAMP: i64 = 1614265330;
    const BODY: &str = r#"{"test": 2432232314}"#;
    const SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    #[test]
    fn sign_matches_the_standard_webhooks_reference_vector() {
        assert_eq!(sign(SECRET, MSG_ID, TIMESTAMP, BODY).unwrap(), SIGNATURE);
    }

    #[test]
    fn a_changed_id_timestamp_or_body_changes_the_signature() {
        assert_ne!(
            sign(SECRET, "msg_other", TIMESTAMP, BODY).unwrap(),
            SIGNATURE
        );
        assert_ne!(
            sign(SECRET, MSG_ID, TIMESTAMP + 1, BODY).unwrap(),
            SIGNATURE
        );
        assert_ne!(sign(SECRET, MSG_ID, TIMESTAMP, "{}").unwrap(), SIGNATURE);
    }

    #[test]
    fn the_header_holds_one_signature_per_secret_in_order() {
        let other = new_secret();
        let header =
            signature_header(&[SECRET.to_owned(), other.clone()], MSG_ID, TIMESTAMP, BODY).unwrap();
        let expected = format!(
            "{SIGNATURE} {}",
            sign(&other, MSG_ID, TIMESTAMP, BODY).unwrap()
        );
        assert_eq!(header, expected);
        assert_eq!(
            signature_header(&[SECRET.to_owned()], MSG_ID, TIMESTAMP, BODY).unwrap(),
            SIGNATURE
        );
    }

    #[test]
    fn bad_secrets_are_errors_never_panics() {
        let cases = [
            ("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "no prefix"),
            ("whsec_", "empty key"),
            ("whsec_not base64!", "not base64"),
            ("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS", "bad length"),
            ("", "empty"),
            ("whsec_é", "non-ASCII"),
        ];
        for (secret, why) in cases {
            let err = sign(secret, MSG_ID, TIMESTAMP, BODY).expect_err(why);
            assert!(
                !err.to_string().contains(secret) || secret.is_empty(),
                "{why}: the message quotes the secret"
            );
        }
        assert!(matches!(
            signature_header(&[], MSG_ID, TIMESTAMP, BODY),
            Err(SecretError::Missing)
        ));
        assert!(matches!(
            signature_header(
                &[SECRET.to_owned(), "whsec_".to_owned()],
                MSG_ID,
                TIMESTAMP,
                BODY
            ),
            Err(SecretError::EmptyKey)
        ));
    }

    #[test]
    fn new_secrets_are_prefixed_32_byte_keys_and_differ() {
        let (a, b) = (new_secret(), new_secret());
        assert_ne!(a, b);
        for secret in [&a, &b] {
            assert_eq!(secret_key(secret).unwrap().len(), 32, "{secret}");
            assert!(sign(secret, MSG_ID, TIMESTAMP, BODY).is_ok());
        }
    }

    #[test]
    fn ip_policy_table() {
        let refused = [
            // IPv4
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "this network 0/8"),
            ("10.0.0.1", "private 10/8"),
            ("10.255.255.255", "private 10/8, last"),
            ("100.64.0.1", "CGNAT 100.64/10"),
            ("100.127.255.254", "CGNAT 100.64/10, last"),
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback 127/8"),
            ("169.254.169.254", "metadata service"),
            ("169.254.0.1", "link-local"),
            ("172.16.0.1", "private 172.16/12"),
            ("172.31.255.255", "private 172.16/12, last"),
            ("192.0.0.8", "IETF assignments 192.0.0/24"),
            ("192.0.2.10", "TEST-NET-1"),
            ("192.168.1.1", "private 192.168/16"),
            ("198.18.0.1", "benchmarking 198.18/15"),
            ("198.19.255.255", "benchmarking 198.18/15, last"),
            ("198.51.100.7", "TEST-NET-2"),
            ("203.0.113.9", "TEST-NET-3"),
            ("224.0.0.1", "multicast"),
            ("239.255.255.250", "multicast, SSDP"),
            ("240.0.0.1", "reserved 240/4"),
            ("255.255.255.255", "broadcast"),
            // IPv6
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("fc00::1", "unique local fc00::/7"),
            ("fd12:3456:789a::1", "unique local fd"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local, last"),
            ("fec0::1", "site-local"),
            ("ff02::1", "multicast"),
            ("2001:db8::1", "documentation"),
            // IPv4 carried in IPv6
            ("::ffff:10.0.0.1", "mapped private"),
            ("::ffff:127.0.0.1", "mapped loopback"),
            ("::ffff:169.254.169.254", "mapped metadata service"),
            ("::ffff:0.0.0.0", "mapped unspecified"),
            ("::127.0.0.1", "compatible loopback"),
            ("::10.0.0.1", "compatible private"),
            ("64:ff9b::a9fe:a9fe", "NAT64 metadata service"),
            ("64:ff9b::192.168.0.1", "NAT64 private"),
            ("2002:7f00:1::", "6to4 loopback"),
            ("2002:a9fe:a9fe::1", "6to4 metadata service"),
            ("2002:c0a8:0101::", "6to4 private"),
        ];
        for (ip, why) in refused {
            let parsed: IpAddr = ip.parse().unwrap();
            assert!(!ip_allowed(parsed), "{ip} ({why}) is allowed");
        }
        let allowed = [
            ("93.184.216.34", "public IPv4"),
            ("8.8.8.8", "public IPv4"),
            ("1.1.1.1", "public IPv4"),
            ("100.63.255.255", "just below CGNAT"),
            ("100.128.0.0", "just above CGNAT"),
            ("172.15.255.255", "just below 172.16/12"),
            ("172.32.0.0", "just above 172.16/12"),
            ("169.253.255.255", "just below link-local"),
            ("192.0.1.1", "between 192.0.0/24 and 192.0.2/24"),
            ("198.17.255.255", "just below benchmarking"),
            ("198.20.0.0", "just above benchmarking"),
            ("223.255.255.255", "just below multicast"),
            ("2606:2800:220:1:248:1893:25c8:1946", "public IPv6"),
            ("2001:4860:4860::8888", "public IPv6"),
            ("::ffff:93.184.216.34", "mapped public"),
            ("64:ff9b::5db8:d822", "NAT64 public"),
            ("2002:5db8:d822::1", "6to4 public"),
        ];
        for (ip, why) in allowed {
            let parsed: IpAddr = ip.parse().unwrap();
            assert!(ip_allowed(parsed), "{ip} ({why}) is refused");
        }
    }

    #[test]
    fn url_policy_table() {
        // (url, allow_private, Ok or the refusal's code)
        let cases: &[(&str, bool, Result<(), &str>)] = &[
            ("https://example.com/hooks", false, Ok(())),
            ("https://example.com:8443/hooks?token=abc", false, Ok(())),
            ("https://93.184.216.34/hook", false, Ok(())),
            (
                "https://[2606:2800:220:1:248:1893:25c8:1946]/",
                false,
                Ok(()),
            ),
            ("http://example.com/hooks", false, Err("insecure_url")),
            ("http://example.com/hooks", true, Ok(())),
            ("http://127.0.0.1:8080/", true, Ok(())),
            ("https://localhost/", true, Ok(())),
            ("ftp://example.com/", false, Err("invalid_url")),
            ("file:///etc/passwd", true, Err("invalid_url")),
            ("https://127.0.0.1/", false, Err("address_not_allowed")),
            ("https://2130706433/", false, Err("address_not_allowed")),
            ("https://0x7f.1/", false, Err("address_not_allowed")),
            ("https://[::1]/", false, Err("address_not_allowed")),
            (
                "https://169.254.169.254/latest/meta-data",
                false,
                Err("address_not_allowed"),
            ),
            (
                "https://[::ffff:10.0.0.1]/",
                false,
                Err("address_not_allowed"),
            ),
            ("https://0.0.0.0/", false, Err("address_not_allowed")),
            ("https://localhost/", false, Err("address_not_allowed")),
            ("https://LOCALHOST./", false, Err("address_not_allowed")),
            (
                "https://api.localhost:8443/",
                false,
                Err("address_not_allowed"),
            ),
            ("https://user:pw@example.com/", false, Err("invalid_url")),
            ("https://user@example.com/", true, Err("invalid_url")),
            ("https://example.com/#frag", false, Err("invalid_url")),
            ("not a url", false, Err("invalid_url")),
            ("/relative/path", false, Err("invalid_url")),
            ("https://", false, Err("invalid_url")),
            ("", false, Err("invalid_url")),
        ];
        for (raw, allow_private, expected) in cases {
            let got = check_url(raw, *allow_private)
                .map(|_| ())
                .map_err(|e| e.code());
            assert_eq!(&got, expected, "{raw} (allow_private {allow_private})");
        }
        let long = format!("https://example.com/{}", "a".repeat(MAX_URL_CHARS));
        assert_eq!(check_url(&long, false).unwrap_err().code(), "invalid_url");
    }

    #[test]
    fn a_checked_url_names_its_host_and_port() {
        let url = check_url("https://example.com/hooks", false).unwrap();
        assert_eq!((url.host.as_str(), url.port), ("example.com", 443));
        let url = check_url("http://[::1]:8080/", true).unwrap();
        assert_eq!((url.host.as_str(), url.port), ("::1", 8080));
        let url = check_url("https://93.184.216.34:8443/", false).unwrap();
        assert_eq!((url.host.as_str(), url.port), ("93.184.216.34", 8443));
    }

    #[test]
    fn refusals_read_as_sentences() {
        assert_eq!(
            check_url("http://example.com/", false)
                .unwrap_err()
                .to_string(),
            "the URL must use https://"
        );
        assert_eq!(
            check_url("https://10.0.0.1/", false)
                .unwrap_err()
                .to_string(),
            "the address 10.0.0.1 is not public: webhooks go to public addresses only"
        );
    }

    fn localhost_url() -> WebhookUrl {
        WebhookUrl {
            url: Url::parse("https://localhost:8443/").unwrap(),
            host: "localhost".to_owned(),
            port: 8443,
        }
    }

    #[tokio::test]
    async fn resolve_refuses_a_host_resolving_to_loopback() {
        let err = resolve(&localhost_url(), false).await.unwrap_err();
        assert_eq!(err.code(), "address_not_allowed", "{err}");
        assert!(err.to_string().contains("localhost resolves to"), "{err}");
    }

    #[tokio::test]
    async fn resolve_returns_loopback_addresses_when_private_ones_are_allowed() {
        let addresses = resolve(&localhost_url(), true).await.unwrap();
        assert!(!addresses.is_empty());
        for address in addresses {
            assert!(address.ip().is_loopback(), "{address}");
            assert_eq!(address.port(), 8443);
        }
    }

    #[tokio::test]
    async fn an_unknown_host_is_unresolvable() {
        // .invalid never resolves (RFC 6761)
        let err = lookup("no-such-host.invalid", 443).await.unwrap_err();
        assert_eq!(err.code(), "unresolvable_host", "{err}");
    }
}
