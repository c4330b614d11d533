package codegen

import (
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files with the generator's output")

func dirs(t *testing.T, pattern string) []string {
	t.Helper()
	matches, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range matches {
		if fi, err := os.Stat(m); err == nil && fi.IsDir() {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no test cases match %s", pattern)
	}
	return out
}

// Each testdata/golden/<case> is an input package with its expected
// generated file. go test -run Golden -update rewrites them. Each case is
// loaded once (the load type-checks the package and its imports, most of
// this package's time): rendered twice from it, and its names checked.
func TestGolden(t *testing.T) {
	for _, dir := range dirs(t, "testdata/golden/*") {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			l, err := load(dir, DefaultOutput)
			if err != nil {
				t.Fatal(err)
			}
			got, err := render(l)
			if err != nil {
				t.Fatal(relative(l.Root, err))
			}
			path := filepath.Join(dir, DefaultOutput)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -run Golden -update to create it)", err)
			}
			if string(got) != string(want) {
				t.Errorf("generated code differs from %s (run go test -run Golden -update to accept):\n%s", path, diff(string(want), string(got)))
			}
			again, err := render(l)
			if err != nil || string(again) != string(got) {
				t.Errorf("a second rendering gave different output (err %v)", err)
			}
			checkGeneratedNamesListed(t, l, got)
		})
	}
}

// generatedNames, which the check for clashing names reads, lists every
// package-level name the generated file src declares, and no other.
func checkGeneratedNamesListed(t *testing.T, l *loaded, src []byte) {
	t.Helper()
	file, err := parser.ParseFile(token.NewFileSet(), DefaultOutput, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	for _, decl := range file.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			declared[d.Name.Name] = true
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch sp := spec.(type) {
				case *ast.ValueSpec:
					for _, n := range sp.Names {
						declared[n.Name] = true
					}
				case *ast.TypeSpec:
					declared[sp.Name.Name] = true
				}
			}
		}
	}
	listed := map[string]bool{}
	for _, task := range l.Tasks {
		for _, n := range generatedNames(task) {
			listed[n.Name] = true
			if !declared[n.Name] {
				t.Errorf("%s: %s is listed but not generated", task.Name, n.Name)
			}
		}
	}
	for name := range declared {
		if !listed[name] {
			t.Errorf("%s is generated but not listed in generatedNames", name)
		}
	}
}

// The golden outputs must compile with their packages; go vet type-checks
// them, and is what catches dead imports and printf mistakes too.
func TestGoldenCompiles(t *testing.T) {
	args := []string{"vet"}
	for _, dir := range dirs(t, "testdata/golden/*") {
		args = append(args, "./"+dir)
	}
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// Each testdata/errors/<case> is a package with mistakes in its task
// declarations and want.txt, the exact report: file:line: message lines.
func TestDeclarationErrors(t *testing.T) {
	for _, dir := range dirs(t, "testdata/errors/*") {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join(dir, "want.txt"))
			if err != nil {
				t.Fatal(err)
			}
			_, err = Generate(dir, DefaultOutput)
			if err == nil {
				t.Fatal("generation succeeded; want errors")
			}
			if got := err.Error(); got != strings.TrimSpace(string(want)) {
				t.Errorf("errors:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// Misusing the generated API must not compile. Each
// testdata/compilefail/<case>/main.go says in a "// want:" line what the
// compiler must say.
func TestMisuseFailsToCompile(t *testing.T) {
	for _, dir := range dirs(t, "testdata/compilefail/*") {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			t.Parallel()
			src, err := os.ReadFile(filepath.Join(dir, "main.go"))
			if err != nil {
				t.Fatal(err)
			}
			var wants []string
			for _, line := range strings.Split(string(src), "\n") {
				if w, ok := strings.CutPrefix(strings.TrimSpace(line), "// want: "); ok {
					wants = append(wants, w)
				}
			}
			if len(wants) == 0 {
				t.Fatal("main.go has no // want: line")
			}
			out, err := exec.Command("go", "build", "-o", os.DevNull, "./"+dir).CombinedOutput()
			if err == nil {
				t.Fatal("the misuse compiled")
			}
			for _, w := range wants {
				if !strings.Contains(string(out), w) {
					t.Errorf("compiler output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// The committed generated code of the examples and of the library's own
// tasks (httptask) is what the generator makes now.
func TestExamplesAreCurrent(t *testing.T) {
	for _, dir := range []string{"../../../../examples/quickstart/tasks", "../../../../examples/ledger", "../../../../examples/tour/tasks",
		"../../../../examples/hello/tasks", "../../../../runtime/httptask"} {
		got, err := Generate(dir, DefaultOutput)
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(dir, DefaultOutput))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s is stale; run go generate ./... :\n%s", filepath.Join(dir, DefaultOutput), diff(string(want), string(got)))
		}
	}
}

// diff shows the first lines where want and got part.
func diff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return "line " + strconv.Itoa(i+1) + ":\n- " + wl + "\n+ " + gl
		}
	}
	return "(no difference in lines)"
}
