package main

import (
	"context"
	"testing"
	"time"

	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// The README's first command, run as a test on a database of its own.
func TestQuickstartRuns(t *testing.T) {
	t.Setenv("DATABASE_URL", pgtasktest.NewDatabase(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx); err != nil {
		t.Fatal(err)
	}
}
