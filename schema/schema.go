// Package schema holds pgtask's database schema as numbered migrations
// (NNNN_name.sql). runtime.Migrate and `pgtask migrate` apply them; sqlc reads
// them to type the queries in queries/.
package schema

//go:generate go -C ../tools tool sqlc generate -f ../sqlc.yaml

import "embed"

// FS holds the migration files.
//
//go:embed *.sql
var FS embed.FS
