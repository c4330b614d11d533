// Package pgtasktest finds or starts a PostgreSQL server for tests and
// examples, and gives each test a database of its own with pgtask's schema.
//
// The server is found in one order everywhere: an explicit URL from the
// environment (PGTASK_TEST_DATABASE_URL, then DATABASE_URL), a server on
// localhost:5432, a throwaway server from the caller's Starters (the
// developer tools in tools/ add a Docker container; the library brings none,
// so its module needs no container client), a throwaway cluster from local
// PostgreSQL server binaries; else an error says how to get one.
//
//	func TestSomething(t *testing.T) {
//		t.Parallel()
//		pool := pgtasktest.NewPool(t) // a fresh, migrated database, dropped after the test
//		...
//	}
//
// Databases are copied from a template database, pgtask_template_<hash of
// the schema>, migrated once and kept across test processes: every process
// that uses it holds it while it runs, and one that builds a template drops
// the templates of other schemas that no process holds.
//
// Tests that restart or crash the database start a cluster of their own with
// StartCluster, so tests running in parallel are not disturbed.
package pgtasktest
