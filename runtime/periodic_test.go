package runtime_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
)

type tickPayload struct {
	Tick time.Time `json:"tick"`
}

func enqueueTick(kind string) func(ctx context.Context, tx runtime.DB, tick time.Time) error {
	return func(ctx context.Context, tx runtime.DB, tick time.Time) error {
		payload, err := json.Marshal(tickPayload{Tick: tick})
		if err != nil {
			return err
		}
		_, err = runtime.Enqueue(ctx, tx, runtime.EnqueueRequest{Kind: kind, Payload: payload})
		return err
	}
}

// ticksOf reads the ticks of the jobs of a kind, in id order.
func ticksOf(t *testing.T, b *bundle, kind string) []time.Time {
	t.Helper()
	jobs, err := b.q.ListJobs(context.Background(), runtime.DefaultQueue)
	if err != nil {
		t.Fatal(err)
	}
	var ticks []time.Time
	for _, j := range jobs {
		if j.Kind != kind {
			continue
		}
		var p tickPayload
		if err := json.Unmarshal(j.Payload, &p); err != nil {
			t.Fatal(err)
		}
		ticks = append(ticks, p.Tick)
	}
	return ticks
}

// Three workers schedule one periodic job, and besides their leader's own
// rounds, 24 goroutines run scheduling rounds on all of them as fast as they
// can: each tick still gets exactly one job, with no tick left out. The job
// runs every missed tick (MissedRunAll): with the default policy a round
// that a loaded machine delays past the next tick rightly enqueues only the
// latest, which is not what this test is about.
func TestPeriodicJobGetsOneJobPerTick(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var workers []*runtime.Worker
	for range 3 {
		pc := runtime.Config{Queues: map[string]runtime.QueueConfig{"elsewhere": {}}} // the jobs stay to be read
		w, stop := newWorkerWith(t, b.url, pc, func(w *runtime.Worker) error {
			return w.RegisterPeriodic(runtime.PeriodicJob{Name: "every-second", Schedule: "@every 1s",
				Missed: runtime.MissedRunAll, Enqueue: enqueueTick("tick")})
		})
		t.Cleanup(stop)
		workers = append(workers, w)
	}
	rctx, cancel := context.WithTimeout(ctx, 3500*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for _, w := range workers {
		for range 8 {
			wg.Go(func() {
				for rctx.Err() == nil {
					w.SchedulePeriodic(rctx)
				}
			})
		}
	}
	wg.Wait()
	ticks := ticksOf(t, b, "tick")
	if len(ticks) < 3 {
		t.Fatalf("%d ticks in 3.5s of a schedule of every second: %v", len(ticks), ticks)
	}
	slices.SortFunc(ticks, func(a, b time.Time) int { return a.Compare(b) })
	for i := 1; i < len(ticks); i++ {
		if d := ticks[i].Sub(ticks[i-1]); d != time.Second {
			t.Fatalf("ticks %v and %v are %s apart: a tick enqueued twice or left out (%v)", ticks[i-1], ticks[i], d, ticks)
		}
	}
}

// Ticks missed while no worker ran: one job for the latest (MissedRunOnce),
// one for each (MissedRunAll), or none unless the latest is less than 30s
// late (MissedSkip).
func TestPeriodicMissedTicksFollowThePolicy(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// Away from the moments that would change what the test expects while
	// it runs: a new tick, and the latest tick turning late.
	var now, latest time.Time
	for {
		var err error
		if now, err = b.q.DatabaseNow(ctx); err != nil {
			t.Fatal(err)
		}
		latest = now.UTC().Truncate(5 * time.Minute)
		late, toNext := now.Sub(latest), latest.Add(5*time.Minute).Sub(now)
		if toNext > 15*time.Second && (late < 20*time.Second || late > 40*time.Second) {
			break
		}
		time.Sleep(5 * time.Second)
	}
	hourAgo := latest.Add(-time.Hour)
	policies := map[string]runtime.MissedTicks{"once": runtime.MissedRunOnce, "all": runtime.MissedRunAll, "skip": runtime.MissedSkip}
	for name := range policies {
		taken, err := b.gen.TakePeriodicTick(ctx, gen.TakePeriodicTickParams{Name: name, TickAt: hourAgo, KeepAfter: hourAgo})
		if err != nil || !taken {
			t.Fatalf("record the tick an hour ago: %v, %v", taken, err)
		}
	}
	w, stop := newWorkerWith(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{"elsewhere": {}}}, func(w *runtime.Worker) error {
		for name, missed := range policies {
			err := w.RegisterPeriodic(runtime.PeriodicJob{Name: name, Schedule: "*/5 * * * *", Missed: missed, Enqueue: enqueueTick(name)})
			if err != nil {
				return err
			}
		}
		return nil
	})
	defer stop()
	w.SchedulePeriodic(ctx)
	w.SchedulePeriodic(ctx) // a second round adds nothing

	if got := ticksOf(t, b, "once"); len(got) != 1 || !got[0].Equal(latest) {
		t.Errorf("MissedRunOnce enqueued %v, want [%v]", got, latest)
	}
	var every []time.Time
	for tk := hourAgo.Add(5 * time.Minute); !tk.After(latest); tk = tk.Add(5 * time.Minute) {
		every = append(every, tk)
	}
	if got := ticksOf(t, b, "all"); !slices.EqualFunc(got, every, time.Time.Equal) {
		t.Errorf("MissedRunAll enqueued %v, want %v", got, every)
	}
	var want []time.Time
	if now.Sub(latest) <= 30*time.Second {
		want = []time.Time{latest}
	}
	if got := ticksOf(t, b, "skip"); !slices.EqualFunc(got, want, time.Time.Equal) {
		t.Errorf("MissedSkip enqueued %v, want %v (the latest tick is %s late)", got, want, now.Sub(latest))
	}
}

func TestRegisterPeriodicRefusesBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t)
	w, stop := newWorkerWith(t, b.url, runtime.Config{}, func(*runtime.Worker) error { return nil })
	defer stop()
	waitFor(t, 10*time.Second, "the worker to run and lead", w.IsLeader)
	ok := enqueueTick("k")
	for _, c := range []struct {
		p    runtime.PeriodicJob
		want string
	}{
		{runtime.PeriodicJob{Name: "", Schedule: "@hourly", Enqueue: ok}, "the name is empty"},
		{runtime.PeriodicJob{Name: "x", Schedule: "61 * * * *", Enqueue: ok}, `schedule "61 * * * *"`},
		{runtime.PeriodicJob{Name: "x", Schedule: "@hourly"}, "Enqueue is nil"},
		{runtime.PeriodicJob{Name: "x", Schedule: "@hourly", Enqueue: ok, Missed: 7}, "unknown Missed policy"},
		{runtime.PeriodicJob{Name: "x", Schedule: "@hourly", Enqueue: ok}, "the worker is running already"},
	} {
		err := w.RegisterPeriodic(c.p)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("RegisterPeriodic(%+v): %v, want %q", c.p.Name, err, c.want)
		}
	}
}

// A tick no later than the latest taken is refused, even once the latest
// take forgot it: a scheduler that stalled with an old view cannot enqueue
// it again.
func TestPeriodicTickBehindTheLatestIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	take := func(tick, keepAfter time.Time) bool {
		t.Helper()
		taken, err := b.gen.TakePeriodicTick(ctx, gen.TakePeriodicTickParams{Name: "p", TickAt: tick, KeepAfter: keepAfter})
		if err != nil {
			t.Fatal(err)
		}
		return taken
	}
	if !take(t0, t0) || !take(t0.Add(time.Minute), t0) || !take(t0.Add(2*time.Minute), t0.Add(time.Minute)) {
		t.Fatal("ticks in order were refused")
	}
	if take(t0, t0) || take(t0.Add(time.Minute), t0) {
		t.Fatal("a tick behind the latest was taken again")
	}
}

// A periodic job whose Enqueue panics costs its tick, not the worker: the
// leader recovers, logs and counts the panic, skips the tick, and goes on
// enqueueing the other periodic jobs. The panic's value is not logged (it
// may hold anything); its type is.
func TestPeriodicEnqueuePanicSkipsTheTick(t *testing.T) {
	t.Parallel()
	b := setup(t)
	logs := &recordedLogs{}
	cfg := runtime.Config{Logger: slog.New(logs), Queues: map[string]runtime.QueueConfig{"elsewhere": {}}}
	w, stop := newWorkerWith(t, b.url, cfg, func(w *runtime.Worker) error {
		if err := w.RegisterPeriodic(runtime.PeriodicJob{Name: "boom", Schedule: "@every 1s",
			Enqueue: func(ctx context.Context, tx runtime.DB, tick time.Time) error {
				if _, err := runtime.Enqueue(ctx, tx, runtime.EnqueueRequest{Kind: "boom", Payload: []byte(`{}`)}); err != nil {
					return err
				}
				panic("token=hunter2")
			}}); err != nil {
			return err
		}
		return w.RegisterPeriodic(runtime.PeriodicJob{Name: "fine", Schedule: "@every 1s", Enqueue: enqueueTick("fine")})
	})
	defer stop()
	waitFor(t, 20*time.Second, "three ticks of the other periodic job", func() bool { return len(ticksOf(t, b, "fine")) >= 3 })
	if n := w.PeriodicPanics(); n < 2 {
		t.Errorf("PeriodicPanics() = %d, want at least 2", n)
	}
	if got := ticksOf(t, b, "boom"); len(got) != 0 {
		t.Errorf("the panicking Enqueue's writes were kept: %d jobs", len(got))
	}
	logs.mu.Lock()
	defer logs.mu.Unlock()
	var logged bool
	for _, r := range logs.records {
		var text strings.Builder
		text.WriteString(r.Message)
		r.Attrs(func(a slog.Attr) bool {
			text.WriteString(" " + a.String())
			return true
		})
		if strings.Contains(text.String(), "hunter2") {
			t.Errorf("the panic's value was logged: %s", text.String())
		}
		if strings.Contains(r.Message, "panicked") && strings.Contains(text.String(), "periodic=boom") {
			logged = true
		}
	}
	if !logged {
		t.Error("the panic was not logged")
	}
}
