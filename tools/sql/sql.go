// Package sql holds the developer tools' own SQL: for each tool a schema/
// folder (its tables, created beside pgtask's in the tool's own database) and
// a queries/ folder, which sqlc turns into the tool's typed queries as
// tools/sqlc.yaml says.
package sql

//go:generate go tool sqlc generate -f ../sqlc.yaml
