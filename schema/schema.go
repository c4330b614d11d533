// Package schema holds pgtask's database schema: numbered migrations
// (NNNN_name.sql) for types, tables and indexes, and functions/, the current
// bodies of pgtask's SQL functions, one file per topic. runtime.Migrate and
// `pgtask migrate` apply both; sqlc reads both to type the queries in
// queries/.
//
// A migration, once released, never changes: a fix is a new migration. A
// function file changes in place: edit it, raise the revision on its first
// line, and every database gets the new bodies with CREATE OR REPLACE the
// next time it is migrated. A change of a function's arguments or result
// gets a new name (claim_jobs_v2), so that workers of the previous release
// keep calling the function they know during a rolling deploy; a later
// migration drops the old one.
package schema

//go:generate go -C ../tools tool sqlc generate -f ../sqlc.yaml

import "embed"

// FS holds the migrations and, under functions/, the function files.
//
//go:embed *.sql functions/*.sql
var FS embed.FS
