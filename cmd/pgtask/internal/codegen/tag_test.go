package codegen

import "testing"

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
