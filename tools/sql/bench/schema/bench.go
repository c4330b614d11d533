// Package schema holds the schema of pgtask-bench's own tables; sqlc reads it
// to type the queries in ../queries (see tools/sqlc.yaml).
package schema

import _ "embed"

// SQL creates pgtask-bench's tables; it is idempotent.
//
//go:embed bench.sql
var SQL string
