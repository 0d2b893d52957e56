//! IP addresses: which are on the public internet (for fetches a client can
//! name), and which address a request came from (behind trusted proxies).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use axum::http::HeaderMap;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};

const fn v4(a: u8, b: u8, c: u8, d: u8, len: u8) -> Ipv4Net {
    Ipv4Net::new_assert(Ipv4Addr::new(a, b, c, d), len)
}

const fn v6(s0: u16, s1: u16, s2: u16, s3: u16, len: u8) -> Ipv6Net {
    Ipv6Net::new_assert(Ipv6Addr::new(s0, s1, s2, s3, 0, 0, 0, 0), len)
}

/// The network an address is counted under by limits that key on where a
/// request came from: an IPv4 address itself, an IPv6 address by its first
/// `v6_prefix` bits (one host or site holds a whole /64 or /48 and could
/// otherwise rotate through it). IPv4-mapped IPv6 counts as IPv4.
pub fn network_key(ip: IpAddr, v6_prefix: u8) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Net::new(v6, v6_prefix.min(128)).map_or(v6, |net| net.network())),
        v4 => v4,
    }
}

/// Every block of the IANA IPv4 Special-Purpose Address Registry
/// (<https://www.iana.org/assignments/iana-ipv4-special-registry>, as of
/// 2025), plus multicast (224.0.0.0/4, not unicast at all). A metadata
/// document is never served from any of them, so even the few the registry
/// calls globally reachable (AS112, AMT) are refused.
pub const IPV4_SPECIAL: &[(Ipv4Net, &str)] = &[
    (v4(0, 0, 0, 0, 8), "\"this network\" (RFC 791)"),
    (v4(10, 0, 0, 0, 8), "private use (RFC 1918)"),
    (v4(100, 64, 0, 0, 10), "shared address space (RFC 6598)"),
    (v4(127, 0, 0, 0, 8), "loopback (RFC 1122)"),
    (v4(169, 254, 0, 0, 16), "link local (RFC 3927)"),
    (v4(172, 16, 0, 0, 12), "private use (RFC 1918)"),
    (v4(192, 0, 0, 0, 24), "IETF protocol assignments, incl. DS-Lite and NAT64 discovery (RFC 6890)"),
    (v4(192, 0, 2, 0, 24), "documentation TEST-NET-1 (RFC 5737)"),
    (v4(192, 31, 196, 0, 24), "AS112-v4 (RFC 7535)"),
    (v4(192, 52, 193, 0, 24), "AMT (RFC 7450)"),
    (v4(192, 88, 99, 0, 24), "deprecated 6to4 relay anycast (RFC 7526)"),
    (v4(192, 168, 0, 0, 16), "private use (RFC 1918)"),
    (v4(192, 175, 48, 0, 24), "direct delegation AS112 service (RFC 7534)"),
    (v4(198, 18, 0, 0, 15), "benchmarking (RFC 2544)"),
    (v4(198, 51, 100, 0, 24), "documentation TEST-NET-2 (RFC 5737)"),
    (v4(203, 0, 113, 0, 24), "documentation TEST-NET-3 (RFC 5737)"),
    (v4(224, 0, 0, 0, 4), "multicast (RFC 5771)"),
    (v4(240, 0, 0, 0, 4), "reserved, incl. limited broadcast (RFC 1112, RFC 919)"),
];

/// IPv6 global unicast: 2000::/3 (RFC 4291 §2.4). Everything outside it is
/// refused whatever it is: the unspecified and loopback addresses, IPv4-
/// compatible forms (`::a.b.c.d`, deprecated), NAT64 (64:ff9b::/96 and
/// 64:ff9b:1::/48), discard (100::/64), unique local (fc00::/7), link local
/// (fe80::/10), site local (fec0::/10, deprecated), multicast (ff00::/8) —
/// except IPv4-mapped addresses (`::ffff:a.b.c.d`), judged by their IPv4.
pub const IPV6_GLOBAL_UNICAST: Ipv6Net = v6(0x2000, 0, 0, 0, 3);

/// The blocks inside 2000::/3 in the IANA IPv6 Special-Purpose Address
/// Registry (<https://www.iana.org/assignments/iana-ipv6-special-registry>,
/// as of 2025); the ones outside it are covered by [`IPV6_GLOBAL_UNICAST`].
pub const IPV6_SPECIAL: &[(Ipv6Net, &str)] = &[
    (v6(0x2001, 0, 0, 0, 23), "IETF protocol assignments, incl. Teredo 2001::/32, benchmarking, ORCHID (RFC 2928)"),
    (v6(0x2001, 0x0db8, 0, 0, 32), "documentation (RFC 3849)"),
    (v6(0x2002, 0, 0, 0, 16), "6to4 (RFC 3056)"),
    (v6(0x2620, 0x004f, 0x8000, 0, 48), "direct delegation AS112 service (RFC 7534)"),
    (v6(0x3fff, 0, 0, 0, 20), "documentation (RFC 9637)"),
];

/// Why `ip` is not a public unicast address, or `None` if it is one.
pub fn not_public(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => IPV4_SPECIAL.iter().find(|(net, _)| net.contains(&v4)).map(|(_, why)| *why),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return not_public(IpAddr::V4(v4));
            }
            if !IPV6_GLOBAL_UNICAST.contains(&v6) {
                return Some("outside IPv6 global unicast 2000::/3 (RFC 4291)");
            }
            IPV6_SPECIAL.iter().find(|(net, _)| net.contains(&v6)).map(|(_, why)| *why)
        }
    }
}

/// Whether `ip` is a public unicast address, outside every special-purpose block.
pub fn is_public(ip: IpAddr) -> bool {
    not_public(ip).is_none()
}

/// The proxies whose `X-Forwarded-For` is believed (`trusted_proxies`).
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies(Arc<[IpNet]>);

impl TrustedProxies {
    /// Trusts `networks` (none: every request's address is its TCP peer).
    pub fn new(networks: Vec<IpNet>) -> Self {
        Self(networks.into())
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// The address a request came from: its TCP `peer`; when the peer is a
    /// trusted proxy, the last hop of `X-Forwarded-For` that is not one
    /// (read right to left, since each proxy appends the address it saw and
    /// anything to the left of a trusted proxy's entry may be forged). If
    /// every hop is trusted, the leftmost; an entry that is not an address
    /// stops the walk at the hop before it.
    pub fn client(&self, peer: Option<IpAddr>, headers: &HeaderMap) -> Option<IpAddr> {
        let mut client = peer?.to_canonical();
        if !self.trusts(client) {
            return Some(client);
        }
        let hops: Vec<&str> = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .collect();
        for hop in hops.iter().rev() {
            let Some(ip) = parse_hop(hop) else { break };
            client = ip;
            if !self.trusts(ip) {
                break;
            }
        }
        Some(client)
    }
}

/// One `X-Forwarded-For` entry: an address, perhaps with a port or brackets.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    let hop = hop.trim();
    if let Ok(ip) = hop.parse::<IpAddr>() {
        return Some(ip.to_canonical());
    }
    hop.parse::<std::net::SocketAddr>().ok().map(|a| a.ip().to_canonical())
}

/// Parses a `trusted_proxies` entry: a CIDR block or a single address.
pub fn parse_network(text: &str) -> Result<IpNet, String> {
    let text = text.trim();
    if let Ok(net) = text.parse::<IpNet>() {
        return Ok(net.trunc());
    }
    text.parse::<IpAddr>().map(IpNet::from).map_err(|_| format!("{text:?} is not an address or a CIDR block"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_keys_count_ipv6_by_prefix_and_mapped_addresses_as_ipv4() {
        let a: IpAddr = "2001:db8:1:2:3:4:5:6".parse().unwrap();
        let same64: IpAddr = "2001:db8:1:2:ffff::1".parse().unwrap();
        let other64_same48: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(network_key(a, 64), network_key(same64, 64));
        assert_ne!(network_key(a, 64), network_key(other64_same48, 64));
        assert_eq!(network_key(a, 48), network_key(other64_same48, 48));
        assert_eq!(network_key(a, 48).to_string(), "2001:db8:1::");
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(network_key(mapped, 48), IpAddr::from([10, 0, 0, 1]));
    }

    fn refused(text: &str) -> bool {
        !is_public(text.parse().unwrap())
    }

    #[test]
    fn every_special_purpose_ipv4_block_is_refused() {
        for (address, what) in [
            ("0.1.2.3", "this network"),
            ("10.1.2.3", "private"),
            ("100.64.0.1", "shared"),
            ("100.127.255.254", "shared"),
            ("127.0.0.1", "loopback"),
            ("169.254.169.254", "link local (cloud metadata)"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.0.0.1", "IETF assignments"),
            ("192.0.0.170", "NAT64 discovery"),
            ("192.0.2.1", "TEST-NET-1"),
            ("192.31.196.1", "AS112"),
            ("192.52.193.1", "AMT"),
            ("192.88.99.1", "6to4 relay"),
            ("192.168.1.1", "private"),
            ("192.175.48.1", "AS112 direct delegation"),
            ("198.18.0.1", "benchmarking"),
            ("198.19.255.255", "benchmarking"),
            ("198.51.100.1", "TEST-NET-2"),
            ("203.0.113.1", "TEST-NET-3"),
            ("224.0.0.1", "multicast"),
            ("239.255.255.250", "multicast"),
            ("240.0.0.1", "reserved"),
            ("255.255.255.255", "broadcast"),
        ] {
            assert!(refused(address), "{address} ({what}) is refused");
        }
    }

    #[test]
    fn every_special_purpose_ipv6_block_is_refused() {
        for (address, what) in [
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("::7f00:1", "IPv4-compatible 127.0.0.1"),
            ("::8.8.8.8", "IPv4-compatible, even of a public address (deprecated)"),
            ("::ffff:127.0.0.1", "IPv4-mapped loopback"),
            ("::ffff:10.0.0.1", "IPv4-mapped private"),
            ("::ffff:169.254.169.254", "IPv4-mapped link local"),
            ("64:ff9b::a9fe:a9fe", "NAT64 well-known prefix (169.254.169.254 inside)"),
            ("64:ff9b::808:808", "NAT64 well-known prefix (8.8.8.8 inside)"),
            ("64:ff9b:1::1", "NAT64 local-use"),
            ("100::1", "discard-only"),
            ("2001::1", "Teredo"),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
            ("2001:2::1", "benchmarking"),
            ("2001:10::1", "ORCHID"),
            ("2001:20::1", "ORCHIDv2"),
            ("2001:db8::1", "documentation"),
            ("2002:7f00:1::1", "6to4 of 127.0.0.1"),
            ("2002:808:808::1", "6to4 of 8.8.8.8"),
            ("2620:4f:8000::1", "AS112 direct delegation"),
            ("3fff::1", "documentation"),
            ("5f00::1", "SRv6 SIDs"),
            ("fc00::1", "unique local"),
            ("fd12:3456::1", "unique local"),
            ("fe80::1", "link local"),
            ("fec0::1", "site local"),
            ("feff::1", "site local"),
            ("ff02::1", "multicast"),
            ("4000::1", "not yet allocated, outside 2000::/3"),
        ] {
            assert!(refused(address), "{address} ({what}) is refused");
        }
    }

    #[test]
    fn public_unicast_addresses_pass() {
        for address in [
            "1.1.1.1",
            "8.8.8.8",
            "140.82.112.3",
            "::ffff:8.8.8.8",
            "2606:4700::1111",
            "2a00:1450:4001::1",
            "2001:200::1",
        ] {
            assert!(is_public(address.parse().unwrap()), "{address} is public");
        }
    }

    fn headers(xff: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in xff {
            h.append("x-forwarded-for", v.parse().unwrap());
        }
        h
    }

    #[test]
    fn the_client_is_the_peer_unless_the_peer_is_a_trusted_proxy() {
        let none = TrustedProxies::default();
        let proxies = TrustedProxies::new(vec![parse_network("10.0.0.0/8").unwrap(), parse_network("::1").unwrap()]);
        let peer: Option<IpAddr> = Some("10.0.0.5".parse().unwrap());
        let forged = headers(&["203.0.113.9, 198.51.100.7"]);
        // Nobody trusted: the header is ignored.
        assert_eq!(none.client(peer, &forged), peer);
        // An untrusted peer's header is ignored too.
        let stranger = Some("198.51.100.1".parse().unwrap());
        assert_eq!(proxies.client(stranger, &forged), stranger);
        // Behind a trusted proxy: the last hop it saw, not what the client wrote before it.
        assert_eq!(proxies.client(peer, &forged), Some("198.51.100.7".parse().unwrap()));
        // Several trusted proxies, several header lines: the last untrusted hop.
        let chain = headers(&["203.0.113.9", "198.51.100.7, 10.1.1.1"]);
        assert_eq!(proxies.client(peer, &chain), Some("198.51.100.7".parse().unwrap()));
        // Every hop trusted: the leftmost.
        assert_eq!(proxies.client(peer, &headers(&["10.2.2.2, 10.1.1.1"])), Some("10.2.2.2".parse().unwrap()));
        // No header: the proxy itself.
        assert_eq!(proxies.client(peer, &HeaderMap::new()), peer);
        // Garbage stops the walk at the hop before it.
        assert_eq!(proxies.client(peer, &headers(&["198.51.100.7, nonsense"])), peer);
        // Ports and IPv4-mapped peers.
        assert_eq!(proxies.client(peer, &headers(&["198.51.100.7:4711"])), Some("198.51.100.7".parse().unwrap()));
        let mapped = Some("::ffff:10.0.0.5".parse().unwrap());
        assert_eq!(proxies.client(mapped, &headers(&["[2001:db8::1]:80"])), Some("2001:db8::1".parse().unwrap()));
        assert!(parse_network("10.0.0.0/33").is_err());
        assert!(parse_network("proxy.internal").is_err());
        assert_eq!(parse_network("10.1.2.3/8").unwrap().to_string(), "10.0.0.0/8");
    }
}
