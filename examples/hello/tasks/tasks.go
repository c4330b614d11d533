// Package tasks declares the task of the hello example.
package tasks

import "github.com/pgtask/pgtask/runtime"

//go:generate go run github.com/pgtask/pgtask/cmd/pgtask gen

// Greet greets someone. Greetings to one name run one at a time, in order.
type Greet struct {
	runtime.TaskWithResult[Greeting] `task:"greet,max_attempts=3,timeout=10s"`
	Name                             string `json:"name" task:"group" validate:"required,max=100"`
}

// Greeting is what a Greet job returns.
type Greeting struct {
	Text string `json:"text"`
}
