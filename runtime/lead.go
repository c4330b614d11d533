package runtime

import (
	"context"
	"time"

	"github.com/pgtask/pgtask/gen"
)

// leadership is the leader's side of the maintenance loop, which runs it on
// the same connection between its own rounds: a worker uses one connection
// beside its running jobs.
type leadership struct {
	w *Worker
	q *gen.Queries
	// kindsAt is when the worker records its kinds again: Run recorded
	// them, but a worker that started while all of this one's sessions
	// were gone (a database restart) deleted them as a dead worker's.
	kindsAt time.Time
}

// step enqueues the periodic jobs' due ticks every electEveryTicks
// rounds while this worker leads, and runs the retention service. Every
// worker records its kinds again now and then.
func (l *leadership) step(ctx context.Context) {
	w := l.w
	w.maint.periodic.step(ctx)
	if now := time.Now(); l.kindsAt.IsZero() {
		l.kindsAt = now.Add(w.kindsEvery)
	} else if !now.Before(l.kindsAt) {
		w.recordKinds(ctx, l.q)
		l.kindsAt = now.Add(w.kindsEvery)
	}
	w.maint.retain.step(ctx)
}
