package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

var (
	inlineCode = regexp.MustCompile("`[^`]*`")
	link       = regexp.MustCompile(`\]\(([^)\s]+)\)`)
)

// Every relative link of the README and the docs pages leads to a file or
// folder that exists, and a link to a heading (#anchor) to one the page has.
func TestLinksLeadSomewhere(t *testing.T) {
	anchors := map[string]map[string]bool{}
	anchorsOf := func(name string) map[string]bool {
		if a, ok := anchors[name]; ok {
			return a
		}
		_, prose := blocks(read(t, name))
		a := headingAnchors(prose)
		anchors[name] = a
		return a
	}
	checked := 0
	for _, name := range pages(t) {
		_, prose := blocks(read(t, name))
		for i, l := range strings.Split(prose, "\n") {
			for _, m := range link.FindAllStringSubmatch(inlineCode.ReplaceAllString(l, ""), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				where := fmt.Sprintf("%s:%d: link %s", name, i+1, target)
				path, anchor, _ := strings.Cut(target, "#")
				to := name
				if path != "" {
					to = filepath.ToSlash(filepath.Join(filepath.Dir(name), path))
					if strings.HasPrefix(to, "../") {
						t.Errorf("%s leads out of the repository", where)
						continue
					}
					if _, err := os.Stat(filepath.Join("..", filepath.FromSlash(to))); err != nil {
						t.Errorf("%s: no such file: %s", where, to)
						continue
					}
				}
				if anchor != "" {
					if !strings.HasSuffix(to, ".md") {
						t.Errorf("%s: an anchor in a file that is not markdown", where)
					} else if !anchorsOf(to)[anchor] {
						t.Errorf("%s: %s has no heading #%s", where, to, anchor)
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found")
	}
}

// headingAnchors returns the anchors GitHub gives a page's headings: the
// heading in lower case, without the characters other than letters,
// digits, spaces, hyphens and underscores, spaces turned into hyphens, and
// "-1", "-2" after the second and later of the same.
func headingAnchors(prose string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range strings.Split(prose, "\n") {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		heading := strings.TrimSpace(strings.TrimLeft(l, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(heading) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func TestHeadingAnchors(t *testing.T) {
	got := headingAnchors("# pgtask\n## What `go generate` produces\n## Modes: held transaction or lease\n## Two\n## Two\nnot # a heading\n")
	for _, want := range []string{"pgtask", "what-go-generate-produces", "modes-held-transaction-or-lease", "two", "two-1"} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if len(got) != 5 {
		t.Errorf("anchors %v, want 5", got)
	}
}
