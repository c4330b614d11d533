package runtime

import (
	"context"
	"time"
)

// recordKindsEvery is how often a worker records its kinds again.
const recordKindsEvery = 5 * time.Minute

// kindsRecorder records the worker's kinds again every `every` (see
// Worker.recordKinds): Run recorded them, but a worker that started while
// all of this one's sessions were gone (a database restart) deleted them as
// a dead worker's, and they come back within this.
type kindsRecorder struct {
	record func(ctx context.Context)
	every  time.Duration
	// at is when the next recording is due; zero before the first step.
	at time.Time
}

func (k *kindsRecorder) step(ctx context.Context) {
	if now := time.Now(); k.at.IsZero() {
		k.at = now.Add(k.every)
	} else if !now.Before(k.at) {
		k.record(ctx)
		k.at = now.Add(k.every)
	}
}
