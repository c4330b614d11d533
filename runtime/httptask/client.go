package httptask

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// privateError is a connection the default client refused to open.
type privateError struct{ addr netip.Addr }

func (e *privateError) Error() string {
	return fmt.Sprintf("refused to connect to %s, an address of a private network or a special-purpose range "+
		"(loopback, private, link-local, shared, multicast, reserved, or an IPv6 address embedding one of these): "+
		"set httptask.Config.AllowPrivate to call services on such networks", e.addr)
}

// specialIPv4 are the IPv4 ranges of the IANA special-purpose registry
// (RFC 6890 and its updates) that are not globally reachable, beyond those
// netip's methods name.
var specialIPv4 = prefixes(
	"0.0.0.0/8",       // "this network", which reaches the local host on some systems
	"100.64.0.0/10",   // shared address space, carrier-grade NAT (RFC 6598)
	"192.0.0.0/24",    // IETF protocol assignments
	"192.0.2.0/24",    // documentation
	"192.88.99.0/24",  // 6to4 relay anycast (deprecated)
	"198.18.0.0/15",   // benchmarking
	"198.51.100.0/24", // documentation
	"203.0.113.0/24",  // documentation
	"240.0.0.0/4",     // reserved, and the limited broadcast 255.255.255.255
)

// specialIPv6 are the IPv6 ranges that are not globally reachable, or
// that lead somewhere an embedded IPv4 address cannot be checked, beyond
// those netip's methods name.
var specialIPv6 = prefixes(
	"64:ff9b:1::/48", // local-use IPv4/IPv6 translation (RFC 8215), in any layout
	"100::/64",       // discard-only (RFC 6666)
	"2001::/23",      // IETF protocol assignments: benchmarking, ORCHID, … (Teredo is decoded first)
	"2001:db8::/32",  // documentation
	"3fff::/20",      // documentation (RFC 9637)
	"5f00::/16",      // SRv6 SIDs (RFC 9602)
	"fec0::/10",      // site-local (deprecated)
)

func prefixes(ss ...string) []netip.Prefix {
	ps := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		ps[i] = netip.MustParsePrefix(s)
	}
	return ps
}

// The IPv6 ranges whose addresses carry an IPv4 address, which the
// traffic reaches: a translator or relay sends it on there.
var (
	ipv4Compatible = netip.MustParsePrefix("::/96")           // deprecated (RFC 4291)
	ipv4Translated = netip.MustParsePrefix("::ffff:0:0:0/96") // SIIT (RFC 2765)
	nat64          = netip.MustParsePrefix("64:ff9b::/96")    // well-known NAT64 prefix (RFC 6052)
	sixToFour      = netip.MustParsePrefix("2002::/16")       // 6to4 (RFC 3056): bits 16-47
	teredo         = netip.MustParsePrefix("2001::/32")       // Teredo (RFC 4380): server in bits 32-63, client inverted in 96-127
)

// embeddedIPv4 returns the IPv4 addresses an IPv6 address leads to: the
// mapped, compatible, translated, NAT64 or 6to4 address, or a Teredo
// address's server and client. None for any other address.
func embeddedIPv4(addr netip.Addr) []netip.Addr {
	b := addr.As16()
	last := netip.AddrFrom4([4]byte(b[12:16]))
	switch {
	case addr.Is4In6(), ipv4Compatible.Contains(addr), ipv4Translated.Contains(addr), nat64.Contains(addr):
		return []netip.Addr{last}
	case sixToFour.Contains(addr):
		return []netip.Addr{netip.AddrFrom4([4]byte(b[2:6]))}
	case teredo.Contains(addr):
		client := [4]byte(b[12:16])
		for i := range client {
			client[i] ^= 0xff
		}
		return []netip.Addr{netip.AddrFrom4([4]byte(b[4:8])), netip.AddrFrom4(client)}
	}
	return nil
}

// private reports whether addr belongs to a network a service's own
// machines use rather than the internet, or to a range that is not
// globally reachable. An IPv6 address that carries an IPv4 address is
// private when that IPv4 address is.
func private(addr netip.Addr) bool {
	addr = addr.WithZone("") // a prefix never contains an address with a zone
	if addr.Is6() {
		if v4s := embeddedIPv4(addr); v4s != nil {
			for _, v4 := range v4s {
				if private(v4) {
					return true
				}
			}
			// The compatible range is deprecated and never routed.
			return ipv4Compatible.Contains(addr)
		}
	}
	if addr.IsLoopback() || addr.IsPrivate() || addr.IsLinkLocalUnicast() || addr.IsLinkLocalMulticast() ||
		addr.IsInterfaceLocalMulticast() || addr.IsMulticast() || addr.IsUnspecified() {
		return true
	}
	special := specialIPv6
	if addr.Is4() {
		special = specialIPv4
	}
	for _, p := range special {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// refusePrivate is a net.Dialer's ControlContext: it runs on the resolved
// address of every connection, so a name that resolves to a private
// address (or starts to, between two lookups) is refused too.
func refusePrivate(_ context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("httptask: unexpected dial address %q: %w", address, err)
	}
	if private(ap.Addr()) {
		return &privateError{addr: ap.Addr()}
	}
	return nil
}

// defaultClient is the client of a Config without one.
func defaultClient(allowPrivate bool) *http.Client {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if !allowPrivate {
		dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, ControlContext: refusePrivate}
		transport.DialContext = dialer.DialContext
		// Through a proxy the destination's address is the proxy's to
		// know, not the dialer's.
		transport.Proxy = nil
	}
	return &http.Client{Transport: transport}
}

// errTooManyRedirects stops a redirect chain longer than the handler follows.
var errTooManyRedirects = errors.New("too many redirects")

// secretHeadersKey carries a request's secret header names to its redirects.
type secretHeadersKey struct{}

// withRedirectPolicy returns a copy of c that follows at most limit
// redirects (none when limit is negative: the 3xx is the answer) and drops
// secret headers on a redirect to another host, then applies c's own
// CheckRedirect, if any.
func withRedirectPolicy(c *http.Client, limit int) *http.Client {
	own := *c
	next := c.CheckRedirect
	own.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if limit < 0 {
			return http.ErrUseLastResponse
		}
		if len(via) > limit {
			return fmt.Errorf("%w: stopped after %d", errTooManyRedirects, limit)
		}
		if req.URL.Host != via[0].URL.Host || req.URL.Scheme != via[0].URL.Scheme {
			names, _ := req.Context().Value(secretHeadersKey{}).([]string)
			for _, name := range names {
				req.Header.Del(name)
			}
		}
		if next != nil {
			return next(req, via)
		}
		return nil
	}
	return &own
}
