// Package codegen generates a package's typed task functions: for every
// struct that embeds runtime.Task, Enqueue<T>, Enqueue<T>Many,
// Enqueue<T>Batch, Request<T>, Add<T>, Handle<T>, the kind constant and,
// for tasks with a result, Get<T>Result; no function that could only fail
// (see task.standalone, batchable, requestable). It reads the package with
// go/packages and go/types and never runs its code.
package codegen

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// DefaultOutput is the generated file's name in the package directory.
const DefaultOutput = "pgtask_gen.go"

// Generate returns the generated file for the package in dir. Problems in
// task declarations come back as Errors, every one found, with positions
// relative to the root of the package's module (so a report from go
// generate ./... says which package each is in); a package that does not
// compile comes back as a *CompileError.
func Generate(dir, outName string) ([]byte, error) {
	l, err := load(dir, outName)
	if err != nil {
		return nil, err
	}
	src, err := render(l)
	if err != nil {
		return nil, relative(l.Root, err)
	}
	return src, nil
}

// Write generates the file for the package in dir and writes it, unless it
// is unchanged. It reports whether it wrote.
func Write(dir, outName string) (bool, error) {
	src, err := Generate(dir, outName)
	if err != nil {
		return false, err
	}
	path := filepath.Join(dir, outName)
	if old, err := os.ReadFile(path); err == nil && string(old) == string(src) {
		return false, nil
	}
	if err := os.WriteFile(path, src, 0o644); err != nil {
		return false, fmt.Errorf("write %s: %w", path, err)
	}
	return true, nil
}

// relative rewrites error positions relative to root.
func relative(root string, err error) error {
	fix := func(e Error) Error {
		e.Pos.Filename = relativePath(root, e.Pos.Filename)
		return e
	}
	var es Errors
	if errors.As(err, &es) {
		out := make(Errors, len(es))
		for i, e := range es {
			out[i] = fix(e)
		}
		return out
	}
	var e Error
	if errors.As(err, &e) {
		return fix(e)
	}
	return err
}
