// Package schema holds pgtask's database schema: numbered migrations
// (NNNN_name.sql, from the baseline 0001_baseline.sql on) for types, tables
// and indexes, and functions/, the current bodies of pgtask's SQL
// functions, one file per topic. runtime.Migrate and `pgtask migrate` apply
// both; sqlc reads both to type the queries in queries/.
//
// A function file changes in place: edit it, raise the revision on its
// first line, and every database gets the new bodies with CREATE OR
// REPLACE the next time it is migrated. README.md in this folder has the
// rules for migrations and for a function whose arguments or result change,
// before and after the first release.
package schema

//go:generate go -C ../tools tool sqlc generate -f ../sqlc.yaml

import "embed"

// FS holds the migrations and, under functions/, the function files.
//
//go:embed *.sql functions/*.sql
var FS embed.FS
