package runtime_test

import (
	"context"
	"strings"
	"testing"

	"github.com/pgtask/pgtask/runtime"
)

// Every check of a registration that needs no database is made by Register
// (and so by a generated Handle function), where the program sees the
// error, and not only by Run, which programs start in a goroutine.
func TestRegisterRefusesAModeItsQueueCannotRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ok := func(context.Context, *runtime.Job) error { return nil }
	for _, c := range []struct {
		name string
		cfg  runtime.Config
		regs []runtime.Registration
		want string
	}{
		{"the queue's configured mode", runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Mode: runtime.ModeHeld}}},
			[]runtime.Registration{{Kind: "charge_card", Queue: runtime.DefaultQueue, Mode: runtime.ModeLease, Handler: ok}},
			"register charge_card: kind charge_card needs mode lease, but queue default runs in mode held (configured)"},
		{"the worker's mode", runtime.Config{Mode: runtime.ModeLease},
			[]runtime.Registration{{Kind: "charge_card", Queue: runtime.DefaultQueue, Mode: runtime.ModeHeld, Handler: ok}},
			"register charge_card: kind charge_card needs mode held, but queue default runs in mode lease (configured)"},
		{"another kind's mode", runtime.Config{},
			[]runtime.Registration{
				{Kind: "a", Queue: runtime.DefaultQueue, Mode: runtime.ModeLease, Handler: ok},
				{Kind: "b", Queue: runtime.DefaultQueue, Mode: runtime.ModeHeld, Handler: ok},
			},
			"register b: kind b needs mode held, but queue default runs in mode lease (kind a)"},
		{"an unknown mode", runtime.Config{},
			[]runtime.Registration{{Kind: "c", Mode: "fast", Handler: ok}},
			`register c: unknown mode "fast"`},
	} {
		w := idleWorker(t, b.url, c.cfg)
		var err error
		for _, r := range c.regs {
			if err = w.Register(r); err != nil {
				break
			}
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Register: %v, want %q", c.name, err, c.want)
		}
	}
}
