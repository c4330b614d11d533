// Package bench holds the schema of pgtask-bench's own tables.
package bench

import _ "embed"

// SQL creates pgtask-bench's tables; it is idempotent.
//
//go:embed bench.sql
var SQL string
