package runtime_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// The payload check refuses exactly the JSON documents the server's jsonb
// refuses: NUL characters, lone UTF-16 surrogate escapes, numbers too large
// for numeric, invalid UTF-8. The server itself is the oracle. (The check
// also refuses documents nested deeper than MaxJSONDepth, which the server
// parses while its stack lasts.)
//
//	go test ./runtime -run '^$' -fuzz FuzzPayloadCheck -fuzztime 60s
func FuzzPayloadCheck(f *testing.F) {
	pool, err := pgxpool.New(context.Background(), pgtasktest.NewDatabase(f))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(pool.Close)
	q := testdb.New(pool)
	for _, seed := range []string{
		`{"a":"x\u0000y"}`, `{"path":"C:\\u0000dir"}`, `["\\\u0000"]`, `{"\u0000":1}`,
		`["u0000"]`, `{"a":"\\\\u0000"}`, `{"a":"\u00000"}`, `{}`,
		`{"a":"\ud800"}`, `{"a":"\udc00"}`, `["\ud800\udc00"]`, `["\uD83D\uDE00"]`, `["\ud800\ud800"]`, `["\ud800x"]`,
		`[1e131071]`, `[1e131072]`, `[10e131071]`, `[0.5e131072]`, `[1e-16383]`, `[1e-16384]`, `[0e999999]`,
		`[0.0000e-99999]`, `[123.456e-16381]`, `[-1E+5]`, `[1e2147483647]`, `[1e-2147483648]`, `[0.1e-16382]`,
		"[\"\xff\"]", `[-0.0]`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		if !json.Valid([]byte(doc)) {
			return
		}
		check := runtime.JSONBRefusal([]byte(doc))
		if check != nil && strings.Contains(check.Error(), "nested more than") {
			// Deeper than MaxJSONDepth: refused before the server's stack
			// runs out, which happens only deeper still.
			return
		}
		_, server := q.ParseJSONB(context.Background(), doc)
		if (check == nil) != (server == nil) {
			t.Fatalf("%.200q: the check says %v, the server says %v", doc, check, server)
		}
	})
}
