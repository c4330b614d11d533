package schema

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strconv"
	"strings"
)

// FunctionFile is one file of functions/: the current bodies of a topic's
// functions, each created with CREATE OR REPLACE.
type FunctionFile struct {
	Name     string // the file's name, such as "work.sql"
	Revision int    // from the file's first line, "-- revision: N"
	SQL      string
	SHA256   string // of SQL, hex-encoded
}

var revisionLine = regexp.MustCompile(`^-- revision: ([1-9][0-9]*)$`)

// FunctionFiles returns the function files in name order, which is the
// order they are applied in.
func FunctionFiles() ([]FunctionFile, error) {
	entries, err := fs.ReadDir(FS, "functions")
	if err != nil {
		return nil, fmt.Errorf("read function files: %w", err)
	}
	var out []FunctionFile
	for _, e := range entries {
		body, err := fs.ReadFile(FS, path.Join("functions", e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read function file %s: %w", e.Name(), err)
		}
		first, _, _ := strings.Cut(string(body), "\n")
		m := revisionLine.FindStringSubmatch(first)
		if m == nil {
			return nil, fmt.Errorf("function file %s: the first line must be \"-- revision: N\", not %q", e.Name(), first)
		}
		rev, err := strconv.Atoi(m[1])
		if err != nil {
			return nil, fmt.Errorf("function file %s: revision: %w", e.Name(), err)
		}
		sum := sha256.Sum256(body)
		out = append(out, FunctionFile{Name: e.Name(), Revision: rev, SQL: string(body), SHA256: hex.EncodeToString(sum[:])})
	}
	return out, nil
}
