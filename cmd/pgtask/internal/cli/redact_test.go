package cli

import (
	"testing"

	"github.com/pgtask/pgtask/runtime"
)

func TestRedact(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"postgres://u:s3cr3t@h:5432/db", "postgres://u:xxxxx@h:5432/db"},
		{"postgresql://u:s%40cr3t@h/db?sslmode=disable", "postgresql://u:xxxxx@h/db?sslmode=disable"},
		{"postgres://u@h/db", "postgres://u@h/db"},
		{"postgres://u@h/db?password=s3cr3t&sslmode=disable", "postgres://u@h/db?password=xxxxx&sslmode=disable"},
		{"postgres://u@h/db?sslmode=disable&password=s3cr3t", "postgres://u@h/db?sslmode=disable&password=xxxxx"},
		{"host=h user=u password=s3cr3t dbname=db", "host=h user=u password=xxxxx dbname=db"},
		{"host=h password = 's3 cr\\'et' dbname=db", "host=h password = xxxxx dbname=db"},
		{"host=h PASSWORD=s3cr3t", "host=h PASSWORD=xxxxx"},
		{"postgres://u@h/db?sslmode=verify-full&sslpassword=k3y", "postgres://u@h/db?sslmode=verify-full&sslpassword=xxxxx"},
		{"host=h sslpassword=k3y dbname=db", "host=h sslpassword=xxxxx dbname=db"},
		{"postgres://u:p@ss@h/db", "postgres://u:xxxxx@h/db"},
		{"cannot parse `host=h password=s3cr3t`: invalid port", "cannot parse `host=h password=xxxxx`: invalid port"},
		{`unexpected argument "postgres://u:s3cr3t@h/db"`, `unexpected argument "postgres://u:xxxxx@h/db"`},
		{"see http://localhost:8080/jobs?id=1", "see http://localhost:8080/jobs?id=1"},
		{"two: postgres://a:p1@h/x and postgres://b:p2@h/y", "two: postgres://a:xxxxx@h/x and postgres://b:xxxxx@h/y"},
	} {
		if got := redact(c.in); got != c.want {
			t.Errorf("redact(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	if got, want := runtime.RedactDSN("host=h password=s3\"cr`3t dbname=x"), "host=h password=xxxxx dbname=x"; got != want {
		t.Errorf("RedactDSN = %q, want %q", got, want)
	}
}
