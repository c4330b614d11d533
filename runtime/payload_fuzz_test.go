package runtime_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/pgtask/pgtask/runtime"
)

// The payload check refuses exactly the JSON documents that decode to a
// string or key holding NUL, which jsonb cannot store.
func FuzzPayloadNULCheck(f *testing.F) {
	for _, seed := range []string{
		`{"a":"x\u0000y"}`, `{"path":"C:\\u0000dir"}`, `["\\\u0000"]`, `{"\u0000":1}`,
		`["u0000"]`, `{"a":"\\\\u0000"}`, `{"a":"\u00000"}`, `{}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		if !json.Valid([]byte(doc)) {
			return
		}
		var v any
		d := json.NewDecoder(strings.NewReader(doc))
		d.UseNumber() // numbers of any size
		if err := d.Decode(&v); err != nil {
			t.Fatal(err)
		}
		if got, want := runtime.HasNULEscape([]byte(doc)), holdsNUL(v); got != want {
			t.Fatalf("check says %v for %s, decoder says %v", got, doc, want)
		}
	})
}

func holdsNUL(v any) bool {
	switch v := v.(type) {
	case string:
		return strings.ContainsRune(v, 0)
	case []any:
		for _, e := range v {
			if holdsNUL(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range v {
			if strings.ContainsRune(k, 0) || holdsNUL(e) {
				return true
			}
		}
	}
	return false
}
