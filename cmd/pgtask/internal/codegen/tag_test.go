package codegen

import (
	"strings"
	"testing"
)

func TestNames(t *testing.T) {
	for in, want := range map[string][2]string{
		"SendEmail":   {"send_email", "sendEmail"},
		"HTTPRequest": {"http_request", "httpRequest"},
		"URL":         {"url", "url"},
		"ResizeV2":    {"resize_v2", "resizeV2"},
		"A":           {"a", "a"},
		"GetHTTPSURL": {"get_httpsurl", "getHTTPSURL"},
	} {
		if got := snakeCase(in); got != want[0] {
			t.Errorf("snakeCase(%q) = %q, want %q", in, got, want[0])
		}
		if got := lowerFirst(in); got != want[1] {
			t.Errorf("lowerFirst(%q) = %q, want %q", in, got, want[1])
		}
	}
}

func TestTagDefaultsAndKindForms(t *testing.T) {
	for tag, want := range map[string]string{
		"":                  "my_task",
		"queue=q":           "my_task",
		",queue=q":          "my_task",
		"custom":            "custom",
		"custom, queue = q": "custom",
	} {
		s, errs := parseTaskTag(tag, "MyTask")
		if len(errs) > 0 || s.Kind != want {
			t.Errorf("parseTaskTag(%q) kind = %q, %v; want %q", tag, s.Kind, errs, want)
		}
	}
}

func TestTagLimit(t *testing.T) {
	for tag, want := range map[string]int{
		"":                    0,
		"limit=1":             1,
		"q, limit = 7":        7,
		"limit=2147483647":    2147483647,
		"queue=q,limit=00012": 12,
	} {
		s, errs := parseTaskTag(tag, "MyTask")
		if len(errs) > 0 || s.Limit != want {
			t.Errorf("parseTaskTag(%q) limit = %d, %v; want %d", tag, s.Limit, errs, want)
		}
	}
	for tag, want := range map[string]string{
		"limit=0":           "option limit=0: want how many jobs of a limit key may run at once, a whole number from 1 to 2147483647",
		"limit=-1":          "option limit=-1: want how many",
		"limit=2147483648":  "option limit=2147483648: want how many",
		"limit=1.5":         "option limit=1.5: want how many",
		"limit=":            "option limit=: want how many",
		"limit=many":        "option limit=many: want how many",
		"k,limit":           `option "limit" has no value; write limit=...`,
		"limit=3,limit=4":   "option limit is given twice",
		"limit=3,limits=4":  "option limits=4: unknown option (known: queue, max_attempts, max_snoozes, priority, aging, timeout, backoff, on_fail, mode, limit,",
		"limit=9999999999x": "option limit=9999999999x: want how many",
	} {
		s, errs := parseTaskTag(tag, "MyTask")
		if len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), want) {
			t.Errorf("parseTaskTag(%q) = limit %d, errors %v; want one error starting %q", tag, s.Limit, errs, want)
		}
	}
}

func TestFieldTag(t *testing.T) {
	for tag, want := range map[string]fieldRoles{
		"group":              {group: true},
		"limit":              {limit: true},
		"unique":             {unique: true},
		"limit,unique":       {limit: true, unique: true},
		" unique , limit ":   {limit: true, unique: true},
		"group,limit,unique": {group: true, limit: true, unique: true},
	} {
		if got, ok := fieldTag(tag); !ok || got != want {
			t.Errorf("fieldTag(%q) = %+v, %v; want %+v", tag, got, ok, want)
		}
	}
	for _, tag := range []string{"", "limit,limit", "limit=3", "limits", "group,,limit"} {
		if got, ok := fieldTag(tag); ok {
			t.Errorf("fieldTag(%q) = %+v; want it refused", tag, got)
		}
	}
}

func TestTagFair(t *testing.T) {
	s, errs := parseTaskTag("k,queue=q,fair=on", "MyTask")
	if len(errs) > 0 || !s.Fair {
		t.Errorf("fair=on: fair %v, errors %v; want fair", s.Fair, errs)
	}
	for _, tag := range []string{"fair=off", "fair=", "fair=true", "k,fair"} {
		if s, errs := parseTaskTag(tag, "MyTask"); len(errs) != 1 || s.Fair {
			t.Errorf("parseTaskTag(%q) = fair %v, errors %v; want one error", tag, s.Fair, errs)
		}
	}
	if got, ok := fieldTag("tenant,limit"); !ok || got != (fieldRoles{tenant: true, limit: true}) {
		t.Errorf(`fieldTag("tenant,limit") = %+v, %v; want tenant and limit`, got, ok)
	}
}
