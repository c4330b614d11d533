package runtime

import (
	"encoding/json"
	"errors"
	"testing"
	"unicode/utf8"
)

// Whatever text a handler's error has, its entry in the error history is
// one jsonb can store, its text capped, so recording a failure cannot fail
// on its content. (FuzzPayloadCheck holds jsonbRefusal to the server's
// verdict.)
func FuzzErrorEntryIsStorable(f *testing.F) {
	for _, s := range []string{"", "plain", "nul \x00 byte", "bad \xff\xfe utf-8", "\xed\xa0\x80 surrogate", string(make([]byte, 5000))} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, text string, panicked bool) {
		err := errors.New(text)
		if panicked {
			err = &PanicError{Value: text, Stack: []byte(text + text)}
		}
		entry := outcome{err: err}.errorEntry()
		if refusal := jsonbRefusal(entry); refusal != nil {
			t.Fatalf("entry %.200q: %v", entry, refusal)
		}
		var e struct{ Error, Stack string }
		if err := json.Unmarshal(entry, &e); err != nil {
			t.Fatal(err)
		}
		if len(e.Error) > 4096 || len(e.Stack) > 8192 || !utf8.ValidString(e.Error) {
			t.Fatalf("error of %d bytes, stack of %d: over their caps, or not UTF-8", len(e.Error), len(e.Stack))
		}
	})
}
