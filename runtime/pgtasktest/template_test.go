package pgtasktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/runtime/pgtasktest/internal/harnessdb"
)

// connectServer connects to the test server, closed when the test ends.
func connectServer(t *testing.T) (*Server, *pgx.Conn) {
	t.Helper()
	server, _, err := sharedServer(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(t.Context(), server.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return server, conn
}

// otherTemplate names a template of a schema that is not this one's, as
// a test's own.
func otherTemplate(t *testing.T) string {
	var b [4]byte
	rand.Read(b[:])
	return "pgtask_template_test_" + hex.EncodeToString(b[:])
}

// makeTemplate makes a template database name as a test process of
// another schema would leave it, dropped when the test ends if it is
// still there.
func makeTemplate(t *testing.T, admin *pgx.Conn, name string) {
	t.Helper()
	mustExec(t, admin, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" IS_TEMPLATE true")
	t.Cleanup(func() {
		ctx := context.Background()
		if exists, _ := harnessdb.New(admin).DatabaseExists(ctx, name); exists {
			admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{name}.Sanitize()+" IS_TEMPLATE false")
			admin.Exec(ctx, "DROP DATABASE "+pgx.Identifier{name}.Sanitize())
		}
	})
}

func databaseExists(t *testing.T, admin *pgx.Conn, name string) bool {
	t.Helper()
	exists, err := harnessdb.New(admin).DatabaseExists(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	return exists
}

// A template that no running test process uses, of a schema other than
// this one's, is dropped the next time a test process builds its own.
func TestStaleTemplatesAreDropped(t *testing.T) {
	server, admin := connectServer(t)
	stale := otherTemplate(t)
	makeTemplate(t, admin, stale)

	name, keeper, err := buildTemplate(t.Context(), server.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { keeper.Close(context.Background()) })
	if !databaseExists(t, admin, name) {
		t.Fatalf("this schema's template %s is gone", name)
	}
	if databaseExists(t, admin, stale) {
		t.Fatalf("the stale template %s is still there after %s was built", stale, name)
	}
}

// dropAtEnd drops the template name when the test ends, if it is still
// there.
func dropAtEnd(t *testing.T, admin *pgx.Conn, name string) {
	t.Cleanup(func() {
		ctx := context.Background()
		if exists, _ := harnessdb.New(admin).DatabaseExists(ctx, name); exists {
			if err := dropTemplate(ctx, admin, name); err != nil {
				t.Errorf("drop %s: %v", name, err)
			}
		}
	})
}

// Test processes of several schemas building their templates at once
// each keep theirs while they run, though each drops the stale ones; a
// template whose process ended is dropped by the next build.
func TestHeldTemplatesSurviveConcurrentBuilds(t *testing.T) {
	server, admin := connectServer(t)
	names := []string{otherTemplate(t), otherTemplate(t), otherTemplate(t)}
	keepers := make([]*pgx.Conn, len(names))
	errs := make([]error, len(names))
	for _, name := range names {
		dropAtEnd(t, admin, name)
	}
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() { keepers[i], errs[i] = prepareTemplate(t.Context(), server.URL, name) })
	}
	wg.Wait()
	for i, name := range names {
		if errs[i] != nil {
			t.Fatalf("prepare %s: %v", name, errs[i])
		}
		t.Cleanup(func() { keepers[i].Close(context.Background()) })
	}
	for _, name := range names {
		if !databaseExists(t, admin, name) {
			t.Fatalf("the template %s, held, was dropped by a concurrent build", name)
		}
	}

	// The first process ends; the next build drops its template only.
	if err := keepers[0].Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	next := otherTemplate(t)
	dropAtEnd(t, admin, next)
	keeper, err := prepareTemplate(t.Context(), server.URL, next)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { keeper.Close(context.Background()) })
	if databaseExists(t, admin, names[0]) {
		t.Errorf("the template %s, held no more, was kept", names[0])
	}
	for _, name := range append(names[1:], next) {
		if !databaseExists(t, admin, name) {
			t.Errorf("the template %s, held, was dropped", name)
		}
	}
}
