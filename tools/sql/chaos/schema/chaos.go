// Package schema holds the tables pgtask-chaos records a run in: what the
// producer committed or rolled back, every attempt its handlers started and
// ended, the effects the handlers wrote in their job transactions, the
// worker processes that were killed or paused, and when the database was
// restarted and crashed. The program applies SQL to its own
// throwaway cluster after runtime.Migrate; sqlc reads it (with pgtask's
// schema) to type the queries in ../queries (see tools/sqlc.yaml).
package schema

import _ "embed"

// SQL creates the schema pgtask_chaos and its tables.
//
//go:embed chaos.sql
var SQL string
