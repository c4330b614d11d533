// Package receipt is a result type from another package.
package receipt

type Receipt struct {
	ID    string
	Cents int64
}
