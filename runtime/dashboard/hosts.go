package dashboard

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// hosts are the names the dashboard answers to besides the address it
// serves on (Options.AllowedHosts).
type hosts struct {
	any bool
	// names are allowed on any port, hostPorts on theirs only; both in
	// lower case, IPv6 addresses without brackets.
	names, hostPorts map[string]bool
}

func newHosts(allowed []string) hosts {
	h := hosts{names: map[string]bool{}, hostPorts: map[string]bool{}}
	for _, a := range allowed {
		if a == "*" {
			h.any = true
			continue
		}
		name, port, _ := splitHost(a)
		if port == "" {
			h.names[name] = true
		} else {
			h.hostPorts[net.JoinHostPort(name, port)] = true
		}
	}
	return h
}

// checkAllowedHost says what is wrong with an entry of AllowedHosts.
func checkAllowedHost(a string) error {
	if a == "*" {
		return nil
	}
	name, port, ok := splitHost(a)
	if !ok || name == "" || strings.ContainsAny(name, "/\\@?#%*[] \t\r\n") {
		return fmt.Errorf("AllowedHosts: %q is not a host such as jobs.example.com or jobs.example.com:8443", a)
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("AllowedHosts: %q has no valid port", a)
		}
	}
	return nil
}

// splitHost splits a Host header's value (or an entry of AllowedHosts)
// into its name in lower case, IPv6 addresses without brackets, and its
// port, "" when it has none.
func splitHost(hostport string) (name, port string, ok bool) {
	hostport = strings.ToLower(hostport)
	switch {
	case strings.HasPrefix(hostport, "["):
		end := strings.Index(hostport, "]")
		if end < 0 {
			return "", "", false
		}
		name, rest := hostport[1:end], hostport[end+1:]
		if rest == "" {
			return name, "", true
		}
		port, ok := strings.CutPrefix(rest, ":")
		return name, port, ok && port != ""
	case strings.Count(hostport, ":") == 1:
		name, port, err := net.SplitHostPort(hostport)
		return name, port, err == nil && port != ""
	case strings.Contains(hostport, ":"):
		return "", "", false // an IPv6 address needs its brackets
	}
	return hostport, "", true
}

// allowedHost reports whether r is addressed to this dashboard: to the
// address its connection came in on (with the port it came in on), to a
// loopback name or address when that address is a loopback one, or to a
// host of AllowedHosts. A page another site's name now resolves to (a DNS
// rebinding) has that name as its Host, and is refused.
func (h *handler) allowedHost(r *http.Request) bool {
	if h.hosts.any {
		return true
	}
	name, port, ok := splitHost(r.Host)
	if !ok || name == "" {
		return false
	}
	if h.hosts.names[name] || port != "" && h.hosts.hostPorts[net.JoinHostPort(name, port)] {
		return true
	}
	local, ok := r.Context().Value(http.LocalAddrContextKey).(*net.TCPAddr)
	if !ok {
		return false
	}
	if port == "" {
		port = "80"
		if r.TLS != nil {
			port = "443"
		}
	}
	if port != strconv.Itoa(local.Port) {
		return false
	}
	if ip := net.ParseIP(name); ip != nil {
		return ip.Equal(local.IP) || ip.IsLoopback() && local.IP.IsLoopback()
	}
	return name == "localhost" && local.IP.IsLoopback()
}

// refuseHost answers a request addressed to another host.
func refuseHost(w http.ResponseWriter, r *http.Request) {
	http.Error(w, fmt.Sprintf("421 Misdirected Request: this dashboard does not answer to the host %q: "+
		"it answers to the address it serves on; list another name it is reached by in its Options.AllowedHosts "+
		"(pgtask ui -allow-host)", r.Host), http.StatusMisdirectedRequest)
}
