package docs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// excerpt reports whether text is src whole or a run of its whole lines,
// which may be indented in src by a prefix of white space that text leaves
// out (a function's body shown without its indentation).
func excerpt(text, src string) bool {
	if text == src {
		return true
	}
	want := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	have := strings.Split(strings.TrimSuffix(src, "\n"), "\n")
	for start := 0; start+len(want) <= len(have); start++ {
		first := have[start]
		if !strings.HasSuffix(first, want[0]) {
			continue
		}
		indent := first[:len(first)-len(want[0])]
		if strings.TrimSpace(indent) != "" {
			continue
		}
		ok := true
		for j, w := range want {
			h := have[start+j]
			if w == "" {
				ok = strings.TrimSpace(h) == ""
			} else {
				ok = h == indent+w
			}
			if !ok {
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

func TestExcerpt(t *testing.T) {
	src := "package p\n\nfunc f() {\n\ta := 1\n\n\tb := a\n\t_ = b\n}\n"
	for text, want := range map[string]bool{
		src:                         true,
		"a := 1\n\nb := a\n":        true, // dedented
		"\ta := 1\n":                true,
		"func f() {\n\ta := 1\n":    true,
		"a := 1\nb := a\n":          false, // a line left out
		"a := 2\n":                  false,
		"a := 1\n\nb := a\n_ = c\n": false,
		"b := a\n_ = b\n}\nmore\n":  false, // runs past the end
		"  a := 1\n":                false, // another indentation
		"package p\n\nfunc f() {\n": true,
		"func f() {\na := 1\n":      false, // indented apart
		"ckage p\n":                 false, // not a whole line
	} {
		if got := excerpt(text, src); got != want {
			t.Errorf("excerpt(%q) = %v, want %v", text, got, want)
		}
	}
}

// Every Go block names the file it comes from, and shows that file, or a
// run of its lines, as it is: what the docs show compiles, and changes when
// the code does. Blocks of other languages that name a file are held to it
// too.
func TestCodeBlocksShowTheirFiles(t *testing.T) {
	checked := 0
	for _, name := range pages(t) {
		bs, _ := blocks(read(t, name))
		for _, b := range bs {
			if b.source == "" {
				if b.lang == "go" {
					t.Errorf("%s:%d: a Go block without a <!-- file: PATH --> comment before it naming the compiled file it shows", name, b.line)
				}
				continue
			}
			src, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(b.source)))
			if err != nil {
				t.Errorf("%s:%d: %v", name, b.line, err)
				continue
			}
			if !excerpt(b.text, string(src)) {
				t.Errorf("%s:%d: the block is not %s, nor a run of its lines, as it is now; copy them from the file", name, b.line, b.source)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no code block names its file")
	}
}
