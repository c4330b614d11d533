package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// The program runs: it enqueues a job, works it and prints its result.
func TestHelloRuns(t *testing.T) {
	url := pgtasktest.NewDatabase(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runErr := run(ctx, url)
	os.Stdout = stdout
	w.Close()
	out, _ := io.ReadAll(r)
	if runErr != nil {
		t.Fatal(runErr)
	}
	if string(out) != "Hello, world!\n" {
		t.Fatalf("printed %q, want %q", out, "Hello, world!\n")
	}
}

// The README shows this program whole: its two files must appear there as
// they are here, so the README's program is one that compiles and runs.
func TestREADMEShowsThisProgram(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"tasks/tasks.go", "main.go"} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		block := "```go\n" + string(src) + "```\n"
		if !bytes.Contains(readme, []byte(block)) {
			t.Errorf("README.md does not show examples/hello/%s as it is; copy the file into its code block", file)
		}
		if !strings.HasSuffix(string(src), "\n") {
			t.Errorf("%s does not end with a newline", file)
		}
	}
}
