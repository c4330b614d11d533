// Package docs checks the README and the pages of docs/: every relative link
// leads to a file (and heading) that exists, and every code block that names
// its source shows that file, or a run of its lines, as it is.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// pages are the markdown files the tests read, relative to the repository's
// root.
func pages(t *testing.T) []string {
	t.Helper()
	found, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"README.md"}
	for _, f := range found {
		names = append(names, filepath.Join("docs", f))
	}
	return names
}

func read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// block is a fenced code block of a page.
type block struct {
	line   int    // of the opening fence, from 1
	lang   string // the fence's info string
	source string // the path a <!-- file: PATH --> comment before it names
	text   string // its lines, the fence's indentation removed, each ending in "\n"
}

var fileComment = regexp.MustCompile(`^<!-- file: (\S+) -->$`)

// blocks returns the fenced code blocks of a page, and its text with the
// blocks' lines left empty.
func blocks(page string) ([]block, string) {
	lines := strings.Split(page, "\n")
	var (
		out   []block
		prose []string
		open  *block
		fence string
	)
	source := "" // from a file comment on the last non-empty line of prose
	for i, l := range lines {
		trimmed := strings.TrimLeft(l, " ")
		if open == nil {
			if strings.HasPrefix(trimmed, "```") {
				fence = l[:len(l)-len(trimmed)]
				open = &block{line: i + 1, lang: strings.TrimPrefix(trimmed, "```"), source: source}
				prose = append(prose, "")
				continue
			}
			prose = append(prose, l)
			if m := fileComment.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
				source = m[1]
			} else if strings.TrimSpace(l) != "" {
				source = ""
			}
			continue
		}
		prose = append(prose, "")
		if trimmed == "```" {
			out = append(out, *open)
			open, source = nil, ""
			continue
		}
		open.text += strings.TrimPrefix(l, fence) + "\n"
	}
	return out, strings.Join(prose, "\n")
}
