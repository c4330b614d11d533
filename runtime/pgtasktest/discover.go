package pgtasktest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/pgtasktest/internal/harnessdb"
)

// Source says how a server was found.
type Source string

// A Starter (see DiscoverOptions.Starters) names the Source of the servers
// it starts.
const (
	SourceEnv     Source = "env"       // a URL from an environment variable
	SourceLocal   Source = "localhost" // the server on 127.0.0.1:5432
	SourceCluster Source = "cluster"   // a throwaway cluster from local initdb/postgres binaries
)

// localURL is the server Discover tries when no environment variable is set:
// the default port and superuser, as a developer machine or a CI service
// container usually provides them.
const localURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// defaultEnvVars are the environment variables tests read, in order. The
// test-specific one comes first so that a developer can point tests at a
// scratch server while DATABASE_URL names another.
var defaultEnvVars = []string{"PGTASK_TEST_DATABASE_URL", "DATABASE_URL"}

// Server is a PostgreSQL server found or started by Discover.
type Server struct {
	// URL names a database on the server as a role that may CREATE DATABASE
	// (superuser or CREATEDB), so callers can give each test its own database.
	URL    string
	Source Source
	close  func() error
}

// NewServer describes a server that a Starter started: url as Server.URL
// says, source for Server.Source, and close, which Server.Close calls once,
// to stop the server and remove what it left.
func NewServer(url string, source Source, close func() error) *Server {
	return &Server{URL: url, Source: source, close: close}
}

// Close stops a server that Discover started (a cluster, or what a Starter
// started). It does nothing for servers Discover only found (SourceEnv,
// SourceLocal), because those are shared. Close is safe to call more than
// once.
func (s *Server) Close() error {
	if s == nil || s.close == nil {
		return nil
	}
	f := s.close
	s.close = nil
	return f()
}

// DiscoverOptions controls Discover. The zero value is what tests want.
type DiscoverOptions struct {
	// EnvVars are tried in order; the first one that is set wins. nil means
	// {"PGTASK_TEST_DATABASE_URL", "DATABASE_URL"}, for tests; examples pass
	// {"DATABASE_URL"}. An empty non-nil slice skips the environment.
	EnvVars []string

	// SkipLocal skips the server on 127.0.0.1:5432, for tests that must not
	// touch the shared server.
	SkipLocal bool

	// Starters are more ways to start a throwaway server, tried in order
	// after the server on 127.0.0.1:5432 and before a cluster from local
	// server binaries. The library brings none, so that its module does not
	// depend on a container runtime's client; the developer tools add one
	// that runs a Docker container (tools/internal/container).
	Starters []Starter

	// Logf, if set, receives progress output such as which server was chosen
	// and where a temporary cluster lives.
	Logf func(format string, args ...any)
}

// Starter is a way for Discover to start a throwaway server.
type Starter struct {
	// Name says what it starts, in Discover's logs and errors ("Docker").
	Name string

	// Start starts a server whose URL names a database as a role that may
	// CREATE DATABASE, and returns it made by NewServer with a close that
	// stops it. An error, including that this way is not available here
	// (no daemon answers), makes Discover note it and try the next way.
	// logf is DiscoverOptions.Logf, never nil.
	Start func(ctx context.Context, logf func(format string, args ...any)) (*Server, error)
}

// Timeouts for probing servers. The local probe is short because a missing
// server usually refuses at once, and Discover has more places to look; an
// explicitly configured URL may be remote, so it gets longer.
const (
	localProbeTimeout = 2 * time.Second
	envProbeTimeout   = 10 * time.Second
)

// Discover finds a PostgreSQL server, trying in order:
//
//  1. the first of opts.EnvVars that is set;
//  2. postgres://postgres@127.0.0.1:5432/postgres, unless opts.SkipLocal;
//  3. each of opts.Starters, until one starts a server;
//  4. a throwaway cluster from local initdb/postgres binaries.
//
// A URL that is set but does not work is an error rather than a reason to
// fall back: whoever set it expects it to be used. ctx bounds the search
// only: a server Discover starts runs until the caller closes the returned
// Server, which it must.
func Discover(ctx context.Context, opts DiscoverOptions) (*Server, error) {
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	envVars := opts.EnvVars
	if envVars == nil {
		envVars = defaultEnvVars
	}

	for _, name := range envVars {
		u := os.Getenv(name)
		if u == "" {
			continue
		}
		if err := probe(ctx, u, envProbeTimeout); err != nil {
			return nil, fmt.Errorf("pgtasktest: %s=%s: %w", name, redact(u), err)
		}
		logf("pgtasktest: using %s from %s", redact(u), name)
		return &Server{URL: u, Source: SourceEnv}, nil
	}

	// tried records why each step was passed over, for the final error.
	var tried []string
	if len(envVars) > 0 {
		tried = append(tried, strings.Join(envVars, ", ")+": not set")
	}

	if opts.SkipLocal {
		tried = append(tried, "localhost: skipped")
	} else if err := probe(ctx, localURL, localProbeTimeout); err != nil {
		logf("pgtasktest: no usable server at %s: %v", localURL, err)
		tried = append(tried, fmt.Sprintf("%s: %v", localURL, err))
	} else {
		logf("pgtasktest: using %s", localURL)
		return &Server{URL: localURL, Source: SourceLocal}, nil
	}

	for _, st := range opts.Starters {
		s, err := st.Start(ctx, logf)
		if err == nil {
			logf("pgtasktest: using %s from %s", redact(s.URL), st.Name)
			return s, nil
		}
		// Not available here, or it did not work (no network to pull an
		// image, say); the next way may still work.
		logf("pgtasktest: %s: %v", st.Name, err)
		tried = append(tried, fmt.Sprintf("%s: %v", st.Name, err))
	}

	c, err := StartCluster(ctx, ClusterOptions{Logf: logf})
	if err != nil {
		tried = append(tried, err.Error())
		if !errors.Is(err, errNoBinaries) {
			// The binaries exist but failed: that is the error to fix.
			return nil, fmt.Errorf("pgtasktest: %w", err)
		}
		return nil, noServerError(tried)
	}
	return &Server{URL: c.URL("postgres"), Source: SourceCluster, close: c.Close}, nil
}

func noServerError(tried []string) error {
	var b strings.Builder
	b.WriteString("pgtasktest: no PostgreSQL server available; tried:\n")
	for _, t := range tried {
		b.WriteString("  - " + t + "\n")
	}
	b.WriteString("to get one, do any of:\n" +
		"  - set PGTASK_TEST_DATABASE_URL (or DATABASE_URL) to a postgres:// URL of a role that may CREATE DATABASE\n" +
		"  - start a server on 127.0.0.1:5432 that lets user postgres in without a password\n" +
		"  - install the PostgreSQL server binaries (initdb, postgres), e.g. apt-get install postgresql\n" +
		"  - where Docker runs, start a server there on that port:\n" +
		"      docker run -d --rm -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres:15-alpine")
	return errors.New(b.String())
}

// probe connects to u and checks that the role may create databases, which
// is what callers of Discover rely on.
func probe(ctx context.Context, u string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		return err
	}
	defer func() {
		// A fresh context: closing politely is worth a moment even if ctx is done.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		conn.Close(ctx)
	}()
	ok, err := harnessdb.New(conn).MayCreateDatabases(ctx)
	if err != nil {
		return fmt.Errorf("check role: %w", err)
	}
	if !ok {
		return errors.New("role may not CREATE DATABASE (needs SUPERUSER or CREATEDB)")
	}
	return nil
}

// redact hides the passwords of a connection string so it can go into
// logs and errors.
func redact(s string) string {
	return runtime.RedactDSN(s)
}
