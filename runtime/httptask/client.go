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
	return fmt.Sprintf("refused to connect to %s, an address of a private network (loopback, private, link-local, shared or multicast): "+
		"set httptask.Config.AllowPrivate to call services on such networks", e.addr)
}

// sharedSpace is the carrier-grade NAT range (RFC 6598), which netip does
// not count as private.
var sharedSpace = netip.MustParsePrefix("100.64.0.0/10")

// thisNetwork is 0.0.0.0/8, which reaches the local host on some systems.
var thisNetwork = netip.MustParsePrefix("0.0.0.0/8")

// private reports whether addr belongs to a network a service's own
// machines use rather than the internet.
func private(addr netip.Addr) bool {
	addr = addr.Unmap()
	return addr.IsLoopback() || addr.IsPrivate() || addr.IsLinkLocalUnicast() || addr.IsLinkLocalMulticast() ||
		addr.IsInterfaceLocalMulticast() || addr.IsMulticast() || addr.IsUnspecified() ||
		sharedSpace.Contains(addr) || thisNetwork.Contains(addr)
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
		return &privateError{addr: ap.Addr().Unmap()}
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
