package runtime_test

import (
	"testing"

	"github.com/pgtask/pgtask/runtime"
)

func TestRedactDSN(t *testing.T) {
	for _, c := range []struct{ dsn, want string }{
		// URLs.
		{"postgres://app:s3cret@db.example.com:5432/shop?sslmode=require", "postgres://app:xxxxx@db.example.com:5432/shop?sslmode=require"},
		{"postgresql://app@db/shop", "postgresql://app@db/shop"},
		{"postgres://db/shop", "postgres://db/shop"},
		{"postgres://app:@db/shop", "postgres://app:xxxxx@db/shop"},
		{"postgres://app:p%40ss%3Aw%2Frd@db/shop", "postgres://app:xxxxx@db/shop"},
		{"postgres://app:p@ss:w@rd@db/shop", "postgres://app:xxxxx@db/shop"}, // unescaped, as people write them
		{"postgres://app:s3cret@h1:5432,h2:5433/shop?target_session_attrs=read-write", "postgres://app:xxxxx@h1:5432,h2:5433/shop?target_session_attrs=read-write"},
		{"postgres://db/shop?password=s3cret&sslmode=disable", "postgres://db/shop?password=xxxxx&sslmode=disable"},
		{"postgres://db/shop?sslmode=verify-full&sslpassword=k3y%26pass&PassWord=x", "postgres://db/shop?sslmode=verify-full&sslpassword=xxxxx&PassWord=xxxxx"},
		{"postgres://db/shop?pass%77ord=s3cret", "postgres://db/shop?pass%77ord=xxxxx"},
		{"postgres://app:s3cret@db/shop#frag", "postgres://app:xxxxx@db/shop#frag"},
		{"postgres://[::1]:5432/shop?password=s3cret#x", "postgres://[::1]:5432/shop?password=xxxxx#x"},
		// Keyword/value.
		{"host=db user=app password=s3cret dbname=shop", "host=db user=app password=xxxxx dbname=shop"},
		{"host=db password = s3cret dbname=shop", "host=db password = xxxxx dbname=shop"},
		{"host=db password='s3 cr\\'et' dbname=shop", "host=db password='xxxxx' dbname=shop"},
		{"host=db password=s3\\ cret dbname=shop", "host=db password=xxxxx dbname=shop"},
		{"host=db PASSWORD=s3cret sslpassword='k3y' sslmode=require", "host=db PASSWORD=xxxxx sslpassword='xxxxx' sslmode=require"},
		{"host=db\tpassword=s3cret\n", "host=db\tpassword=xxxxx\n"},
		{"host=db password=", "host=db password=xxxxx"},
		{"host=db dbname=shop", "host=db dbname=shop"},
		{"", ""},
		// What cannot be read is hidden from there on.
		{"host=db password='s3cret dbname=shop", "host=db password=xxxxx"},
		{"host=db s3cret", "host=db xxxxx"},
		{"host=db =s3cret", "host=db xxxxx"},
	} {
		got := runtime.RedactDSN(c.dsn)
		if got != c.want {
			t.Errorf("RedactDSN(%q) = %q, want %q", c.dsn, got, c.want)
		}
	}
}
