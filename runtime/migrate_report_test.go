package runtime_test

import (
	"fmt"
	"testing"

	"github.com/pgtask/pgtask/runtime"
)

// A MigrateReport prints as what it says, a line for each change, not as
// Go's dump of its fields.
func TestMigrateReportString(t *testing.T) {
	for _, c := range []struct {
		report *runtime.MigrateReport
		want   string
	}{
		{nil, "pgtask schema is up to date"},
		{&runtime.MigrateReport{}, "pgtask schema is up to date"},
		{&runtime.MigrateReport{
			Migrations: []int{1, 2},
			Functions:  []runtime.FunctionFileRevision{{Name: "work.sql", Revision: 3}},
			Grants:     []string{"GRANT a", "GRANT b"},
		}, "applied migration 0001\napplied migration 0002\napplied functions/work.sql (revision 3)\n" +
			"granted the recorded roles their privileges again (2 statements)"},
	} {
		if got := fmt.Sprint(c.report); got != c.want {
			t.Errorf("fmt.Sprint(%#v) = %q, want %q", c.report, got, c.want)
		}
	}
}
