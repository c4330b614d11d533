package container

import (
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// Where Docker runs, Discover with the starter (and nothing before it) gets
// a container whose role may create databases, and Close removes it. Where
// it does not, the starter says so quickly and Discover goes on to a local
// cluster or to its error, which names Docker among what it tried.
func TestStarter(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	docker := dockerAvailable(ctx)
	start := time.Now()
	s, err := pgtasktest.Discover(ctx, pgtasktest.DiscoverOptions{
		EnvVars: []string{}, SkipLocal: true, Logf: t.Logf,
		Starters: []pgtasktest.Starter{Starter()},
	})
	if docker != nil {
		t.Logf("no Docker here (%v): checking that the starter is passed over", docker)
		if d := time.Since(start); d > 2*time.Minute {
			t.Errorf("Discover took %v", d)
		}
		if err != nil {
			if !strings.Contains(err.Error(), "Docker: not available") {
				t.Fatalf("Discover's error does not say Docker was tried: %v", err)
			}
			return
		}
		defer s.Close()
		if s.Source == Source {
			t.Fatalf("Source = %s without Docker", s.Source)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if s.Source != Source {
		t.Fatalf("Source = %s, want %s", s.Source, Source)
	}
	// The URL must allow creating databases, as Server.URL promises.
	db, err := pgtasktest.CreateDatabase(ctx, s.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := pgtasktest.DropDatabase(ctx, s.URL, db); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
