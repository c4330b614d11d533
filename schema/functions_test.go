package schema_test

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/pgtask/pgtask/schema"
)

var update = flag.Bool("update", false, "record the function files' current revisions and hashes in functions.sum")

// functions.sum records each function file's revision with the hash of its
// content. A database runs a file's new content only when its revision
// rises, so a change without a higher revision would never reach databases
// that have the file already; this test catches it.
func TestFunctionFileRevisionsRise(t *testing.T) {
	files, err := schema.FunctionFiles()
	if err != nil {
		t.Fatal(err)
	}
	var now strings.Builder
	for _, f := range files {
		fmt.Fprintf(&now, "%s %d %s\n", f.Name, f.Revision, f.SHA256)
	}
	if *update {
		if err := os.WriteFile("functions.sum", []byte(now.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	data, err := os.ReadFile("functions.sum")
	if err != nil {
		t.Fatalf("%v (go test ./schema -update records it)", err)
	}
	type record struct {
		revision int
		sha256   string
	}
	recorded := map[string]record{}
	for line := range strings.Lines(string(data)) {
		var name string
		var r record
		if _, err := fmt.Sscan(line, &name, &r.revision, &r.sha256); err != nil {
			t.Fatalf("functions.sum: bad line %q: %v", line, err)
		}
		recorded[name] = r
	}
	for _, f := range files {
		r, ok := recorded[f.Name]
		switch {
		case !ok:
			t.Errorf("functions/%s is not recorded in functions.sum: run go test ./schema -update", f.Name)
		case r.revision == f.Revision && r.sha256 != f.SHA256:
			t.Errorf("functions/%s changed but its revision is still %d: raise it to %d, then run go test ./schema -update",
				f.Name, f.Revision, f.Revision+1)
		case f.Revision < r.revision:
			t.Errorf("functions/%s has revision %d, lower than the recorded %d: revisions only rise", f.Name, f.Revision, r.revision)
		case f.Revision > r.revision:
			t.Errorf("functions/%s is at revision %d, recorded at %d: run go test ./schema -update", f.Name, f.Revision, r.revision)
		}
		delete(recorded, f.Name)
	}
	for name := range recorded {
		t.Errorf("functions.sum records %s, which no longer exists: run go test ./schema -update", name)
	}
}
