package pgtasktest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// Tests that set the environment cannot run in parallel.

func TestDiscoverEnv(t *testing.T) {
	c := startTestCluster(t)
	u := c.URL("postgres")

	t.Run("test variable first", func(t *testing.T) {
		t.Setenv("PGTASK_TEST_DATABASE_URL", u)
		t.Setenv("DATABASE_URL", "postgres://postgres@127.0.0.1:1/nowhere?sslmode=disable")
		s, err := Discover(t.Context(), DiscoverOptions{Logf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		if s.Source != SourceEnv || s.URL != u {
			t.Fatalf("Discover = %s %s, want %s %s", s.Source, s.URL, SourceEnv, u)
		}
		// The server is not Discover's to stop.
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := probe(t.Context(), u, 5*time.Second); err != nil {
			t.Fatalf("server gone after Close of an env Server: %v", err)
		}
	})

	t.Run("DATABASE_URL", func(t *testing.T) {
		t.Setenv("PGTASK_TEST_DATABASE_URL", "")
		t.Setenv("DATABASE_URL", u)
		s, err := Discover(t.Context(), DiscoverOptions{Logf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		if s.Source != SourceEnv || s.URL != u {
			t.Fatalf("Discover = %s %s, want %s %s", s.Source, s.URL, SourceEnv, u)
		}
	})

	t.Run("role without CREATEDB", func(t *testing.T) {
		conn := connect(t, u)
		mustExec(t, conn, "CREATE ROLE plain LOGIN")
		t.Setenv("PGTASKTEST_URL", strings.Replace(u, "postgres@", "plain@", 1))
		_, err := Discover(t.Context(), DiscoverOptions{EnvVars: []string{"PGTASKTEST_URL"}})
		if err == nil || !strings.Contains(err.Error(), "PGTASKTEST_URL") || !strings.Contains(err.Error(), "CREATE DATABASE") {
			t.Fatalf("Discover with a role that cannot create databases: %v", err)
		}
	})
}

func TestDiscoverEnvUnreachable(t *testing.T) {
	// Port 1 refuses at once. A server on localhost must not be used
	// instead: the configured URL is what the user asked for.
	t.Setenv("PGTASK_TEST_DATABASE_URL", "postgres://postgres:hunter2@127.0.0.1:1/postgres?sslmode=disable")
	start := time.Now()
	s, err := Discover(t.Context(), DiscoverOptions{Logf: t.Logf})
	if err == nil {
		s.Close()
		t.Fatalf("Discover with an unreachable URL returned %s %s", s.Source, s.URL)
	}
	msg := err.Error()
	if !strings.Contains(msg, "PGTASK_TEST_DATABASE_URL") {
		t.Errorf("error does not name the variable: %v", err)
	}
	if strings.Contains(msg, "hunter2") {
		t.Errorf("error shows the password: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Discover took %v to fail", d)
	}
}

// A password in any place a connection string can hold one stays out of
// the error, and what is not a password stays in it to help.
func TestDiscoverEnvUnreachableHidesEveryPassword(t *testing.T) {
	for _, dsn := range []string{
		"postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&password=hunter2",
		"postgresql://postgres:hunter2@127.0.0.1:1/postgres?sslpassword=hunter2&sslmode=disable",
		"postgres://postgres:hun%40ter2@127.0.0.1:1/postgres?PassWord=hunter2&sslmode=disable",
		"host=127.0.0.1 port=1 user=postgres password='hunter2 with spaces' sslmode=disable",
		"host=127.0.0.1 port=1 user=postgres password=hunter2 sslmode=disable",
	} {
		t.Setenv("PGTASK_TEST_DATABASE_URL", dsn)
		s, err := Discover(t.Context(), DiscoverOptions{Logf: t.Logf})
		if err == nil {
			s.Close()
			t.Fatalf("Discover with an unreachable URL returned %s %s", s.Source, s.URL)
		}
		if msg := err.Error(); strings.Contains(msg, "hunter2") || strings.Contains(msg, "hun%40ter2") || !strings.Contains(msg, "127.0.0.1") {
			t.Errorf("Discover(%s): %v; want the host and no password", dsn, err)
		}
	}
}

func TestDiscoverFallback(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	want := SourceCluster
	if _, err := findBinDir(); err != nil {
		t.Skip(err)
	}

	s, err := Discover(ctx, DiscoverOptions{EnvVars: []string{}, SkipLocal: true, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if s.Source != want {
		t.Fatalf("Source = %s, want %s", s.Source, want)
	}
	if s.URL == localURL {
		t.Fatal("SkipLocal returned the local server")
	}

	// The URL must allow creating databases, as Server.URL promises.
	conn := connect(t, s.URL)
	mustExec(t, conn, "CREATE DATABASE discovered")
	mustExec(t, conn, "DROP DATABASE discovered")
	conn.Close(ctx)

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := probe(ctx, s.URL, time.Second); err == nil {
		t.Fatal("server still answers after Close")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// Starters come after the server on localhost and before a local cluster;
// one that fails is passed over, and a server one started is what Close stops.
func TestDiscoverStarters(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := startTestCluster(t) // stands for what a starter would start
	var closed int
	var order []string
	failing := Starter{Name: "nothing here", Start: func(context.Context, func(string, ...any)) (*Server, error) {
		order = append(order, "nothing here")
		return nil, errors.New("no daemon answers")
	}}
	working := Starter{Name: "test starter", Start: func(_ context.Context, logf func(string, ...any)) (*Server, error) {
		order = append(order, "test starter")
		logf("starting")
		return NewServer(c.URL("postgres"), "test", func() error { closed++; return nil }), nil
	}}
	unused := Starter{Name: "unused", Start: func(context.Context, func(string, ...any)) (*Server, error) {
		t.Error("a starter after the one that worked was tried")
		return nil, errors.New("unused")
	}}

	s, err := Discover(ctx, DiscoverOptions{EnvVars: []string{}, SkipLocal: true, Logf: t.Logf,
		Starters: []Starter{failing, working, unused}})
	if err != nil {
		t.Fatal(err)
	}
	if s.Source != "test" || s.URL != c.URL("postgres") {
		t.Fatalf("Discover = %s %s, want test %s", s.Source, s.URL, c.URL("postgres"))
	}
	if want := []string{"nothing here", "test starter"}; !slices.Equal(order, want) {
		t.Fatalf("starters tried: %q, want %q", order, want)
	}
	s.Close()
	s.Close()
	if closed != 1 {
		t.Fatalf("the starter's close ran %d times, want 1", closed)
	}

	// A server on localhost comes first.
	if probe(ctx, localURL, localProbeTimeout) == nil {
		s, err := Discover(ctx, DiscoverOptions{EnvVars: []string{}, Logf: t.Logf, Starters: []Starter{unused}})
		if err != nil {
			t.Fatal(err)
		}
		if s.Source != SourceLocal {
			t.Fatalf("Source = %s, want %s", s.Source, SourceLocal)
		}
	}
}

func TestDiscoverLocal(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	localUp := probe(ctx, localURL, localProbeTimeout) == nil

	s, err := Discover(ctx, DiscoverOptions{EnvVars: []string{}, Logf: t.Logf})
	if err != nil && !localUp {
		t.Skip(err) // no server of any kind on this machine
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if localUp != (s.Source == SourceLocal) {
		t.Fatalf("server on 127.0.0.1:5432 up: %v, but Discover chose %s", localUp, s.Source)
	}
	if localUp && s.URL != localURL {
		t.Fatalf("URL = %s, want %s", s.URL, localURL)
	}
}

func TestNoServerError(t *testing.T) {
	t.Parallel()
	err := noServerError([]string{"PGTASK_TEST_DATABASE_URL, DATABASE_URL: not set", "localhost: skipped"})
	for _, want := range []string{"PGTASK_TEST_DATABASE_URL", "DATABASE_URL", "127.0.0.1:5432", "initdb", "apt-get install postgresql", "docker run", "localhost: skipped"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}
