package runtime_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
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
		{"the queue's configured lease mode", runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Mode: runtime.ModeLease}}},
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

// A worker claims only the kinds it has handlers for: in a rolling deploy,
// a worker of the release before a new kind leaves that kind's jobs to the
// workers that know it, instead of spending their attempts on failures.
// Alone, it leaves them queued with no attempt spent, and a group headed by
// such a job waits in order, in both modes.
func TestWorkerClaimsOnlyKindsItHandles(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ok := func(context.Context, *runtime.Job) error { return nil }
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		queue := string(mode)
		qc := runtime.QueueConfig{Mode: mode, Concurrency: 2}
		if mode == runtime.ModeHeld {
			qc.BatchSize = 5
		}
		cfg := runtime.Config{Queues: map[string]runtime.QueueConfig{queue: qc}}
		_, stopOld := newWorker(t, b.url, cfg, runtime.Registration{Kind: "old", Queue: queue, Handler: ok})
		var news, olds, behind []runtime.JobID
		for i := range 10 {
			news = append(news, enqueue(t, b.pool, "new", map[string]int{"i": i}, runtime.WithQueue(queue)))
			olds = append(olds, enqueue(t, b.pool, "old", map[string]int{"i": i}, runtime.WithQueue(queue)))
			// A group whose head is a new job, an old one behind it.
			group := runtime.WithGroup(fmt.Sprint("g", i))
			news = append(news, enqueue(t, b.pool, "new", map[string]int{}, runtime.WithQueue(queue), group))
			behind = append(behind, enqueue(t, b.pool, "old", map[string]int{}, runtime.WithQueue(queue), group))
		}
		for _, id := range olds {
			b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
		}
		time.Sleep(500 * time.Millisecond) // polls and claims go by
		for _, id := range news {
			if j := b.job(t, id); j.Status != testdb.PgtaskJobStatusQueued || j.Attempts != 0 {
				t.Fatalf("%s: new job %d is %s after %d attempts with only a worker that lacks its handler (errors %s)",
					mode, id, j.Status, j.Attempts, j.Errors)
			}
		}
		for _, id := range behind {
			if j := b.job(t, id); j.Status != testdb.PgtaskJobStatusQueued || j.Attempts != 0 {
				t.Fatalf("%s: job %d behind a new job in its group is %s after %d attempts", mode, id, j.Status, j.Attempts)
			}
		}
		// A worker that knows both kinds runs the new jobs, each in one
		// attempt, and the groups behind them; the old worker runs on.
		_, stopNew := newWorker(t, b.url, cfg, runtime.Registration{Kind: "old", Queue: queue, Handler: ok},
			runtime.Registration{Kind: "new", Queue: queue, Handler: ok})
		for _, j := range b.waitQueueDone(t, queue, 20*time.Second) {
			if j.Status != testdb.PgtaskJobStatusSucceeded || j.Attempts != 1 {
				t.Errorf("%s: job %d (%s) %s after %d attempts (errors %s)", mode, j.ID, j.Kind, j.Status, j.Attempts, j.Errors)
			}
		}
		stopNew()
		stopOld()
	}
}

// The runnable jobs of kinds no live worker handles are reported, by queue
// and kind: a worker records its kinds when it starts, and a worker that
// stopped counts no more.
func TestUnhandledKindsAreReported(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ok := func(context.Context, *runtime.Job) error { return nil }
	unhandled := func() string {
		t.Helper()
		kinds, err := runtime.UnhandledKinds(ctx, b.pool)
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, k := range kinds {
			if k.OldestWait < 0 {
				t.Errorf("%s/%s: oldest wait %s", k.Queue, k.Kind, k.OldestWait)
			}
			s = append(s, fmt.Sprintf("%s/%s:%d", k.Queue, k.Kind, k.Jobs))
		}
		return strings.Join(s, " ")
	}
	// Nobody works queue "elsewhere", so its jobs stay to be counted.
	for range 3 {
		enqueue(t, b.pool, "new", map[string]int{}, runtime.WithQueue("elsewhere"))
	}
	enqueue(t, b.pool, "old", map[string]int{}, runtime.WithQueue("elsewhere"))
	enqueue(t, b.pool, "old", map[string]int{}, runtime.WithQueue("other"))
	if got, want := unhandled(), "elsewhere/new:3 elsewhere/old:1 other/old:1"; got != want {
		t.Fatalf("with no worker: %q, want %q", got, want)
	}
	// A worker of kind old in queue elsewhere, claiming nothing: paused.
	if _, err := runtime.PauseQueue(ctx, b.pool, "elsewhere"); err != nil {
		t.Fatal(err)
	}
	w, stop := newWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{"elsewhere": {}}},
		runtime.Registration{Kind: "old", Handler: ok})
	waitFor(t, 5*time.Second, "the worker to record its kinds", func() bool {
		return unhandled() == "elsewhere/new:3 other/old:1"
	})
	stop()
	// Its sessions end a moment after it closed them.
	waitFor(t, 5*time.Second, fmt.Sprintf("worker %d's kinds to count no more once it stopped", w.ID()), func() bool {
		return unhandled() == "elsewhere/new:3 elsewhere/old:1 other/old:1"
	})
}

// A worker records its kinds again from time to time: rows a worker
// starting while this one's sessions were all gone (a database restart)
// deleted as a dead worker's come back.
func TestWorkerRecordsItsKindsAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	if _, err := runtime.PauseQueue(ctx, b.pool, "elsewhere"); err != nil {
		t.Fatal(err)
	}
	enqueue(t, b.pool, "old", map[string]int{}, runtime.WithQueue("elsewhere"))
	_, stop := newWorkerWith(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{"elsewhere": {}}}, func(w *runtime.Worker) error {
		w.RecordKindsEvery(200 * time.Millisecond)
		return w.Register(runtime.Registration{Kind: "old", Handler: func(context.Context, *runtime.Job) error { return nil }})
	})
	defer stop()
	handled := func() bool {
		kinds, err := runtime.UnhandledKinds(ctx, b.pool)
		if err != nil {
			t.Fatal(err)
		}
		return len(kinds) == 0
	}
	waitFor(t, 5*time.Second, "the worker to record its kinds", handled)
	if err := b.q.ForgetWorkerKinds(ctx); err != nil {
		t.Fatal(err)
	}
	if handled() {
		t.Fatal("the kind counts as handled with no row recording it")
	}
	waitFor(t, 5*time.Second, "the worker to record its kinds again", handled)
}
