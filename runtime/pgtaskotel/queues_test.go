package pgtaskotel_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/pgtaskotel"
)

// The queue gauges report each queue's unfinished jobs by status, its
// queued jobs by what they wait for (a worker, their group's head, a slot
// of their concurrency limit), and its oldest runnable job's wait; they
// leave finished jobs out, keep reporting a queue that emptied, and stop
// when unregistered.
func TestQueueGauges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tel := newTelemetry(t)
	pool, url := newPool(t)
	reg, err := pgtaskotel.ObserveQueues(pool, tel.opts...)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := find(tel.collect(t), "pgtask.queue.depth"); ok {
		t.Error("a queue depth reported before any job was enqueued")
	}

	// A running job, in a queue a worker serves.
	release := make(chan struct{})
	w := newWorker(t, url, runtime.Config{Queues: map[string]runtime.QueueConfig{"busy": {}}},
		runtime.Registration{Kind: "block", Handler: func(ctx context.Context, _ *runtime.Job) error {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}})
	run(t, w)
	running := enqueue(t, ctx, pool, "block", runtime.WithQueue("busy"))

	// In queue "waiting", which no worker serves: three runnable jobs, a
	// group's head and the job behind it, three jobs of a key limited to
	// one (one admitted, two waiting on the limit), a scheduled job; in
	// "gone", a cancelled one.
	first := time.Now()
	inWaiting := runtime.WithQueue("waiting")
	for range 3 {
		enqueue(t, ctx, pool, "k", inWaiting)
	}
	enqueue(t, ctx, pool, "k", inWaiting, runtime.WithGroup("g"))
	enqueue(t, ctx, pool, "k", inWaiting, runtime.WithGroup("g"))
	for range 3 {
		enqueue(t, ctx, pool, "k", inWaiting, runtime.WithLimit("acct", 1))
	}
	enqueue(t, ctx, pool, "k", inWaiting, runtime.WithDelay(time.Hour))
	if ok, err := runtime.CancelJob(ctx, pool, enqueue(t, ctx, pool, "k", runtime.WithQueue("gone"))); !ok || err != nil {
		t.Fatalf("cancel: %t, %v", ok, err)
	}
	waitStatus(t, pool, running, runtime.StatusStarted)
	const pause = 200 * time.Millisecond
	time.Sleep(pause)
	upper := time.Since(first)

	rm := tel.collect(t)
	status := func(queue, s string) []attribute.KeyValue {
		return []attribute.KeyValue{pgtaskotel.AttrQueue.String(queue), pgtaskotel.AttrStatus.String(s)}
	}
	for _, c := range []struct {
		queue, status string
		want          int64
	}{
		{"waiting", "queued", 8}, {"waiting", "scheduled", 1}, {"waiting", "started", 0},
		{"busy", "queued", 0}, {"busy", "scheduled", 0}, {"busy", "started", 1},
	} {
		if got, ok := gauge[int64](t, rm, "pgtask.queue.depth", status(c.queue, c.status)...); !ok || got != c.want {
			t.Errorf("depth of %s, %s: %d (reported: %t), want %d", c.queue, c.status, got, ok, c.want)
		}
	}
	waitingFor := func(queue, w string) []attribute.KeyValue {
		return []attribute.KeyValue{pgtaskotel.AttrQueue.String(queue), pgtaskotel.AttrWaitingFor.String(w)}
	}
	for _, c := range []struct {
		queue, waitingFor string
		want              int64
	}{
		{"waiting", pgtaskotel.WaitingForWorker, 5}, {"waiting", pgtaskotel.WaitingForGroup, 1}, {"waiting", pgtaskotel.WaitingForLimit, 2},
		{"busy", pgtaskotel.WaitingForWorker, 0}, {"busy", pgtaskotel.WaitingForGroup, 0}, {"busy", pgtaskotel.WaitingForLimit, 0},
	} {
		if got, ok := gauge[int64](t, rm, "pgtask.queue.waiting", waitingFor(c.queue, c.waitingFor)...); !ok || got != c.want {
			t.Errorf("jobs of %s waiting for %s: %d (reported: %t), want %d", c.queue, c.waitingFor, got, ok, c.want)
		}
	}
	if _, ok := gauge[int64](t, rm, "pgtask.queue.depth", status("gone", "queued")...); ok {
		t.Error("a queue with only finished jobs is reported")
	}
	age, ok := gauge[float64](t, rm, "pgtask.queue.oldest_age", pgtaskotel.AttrQueue.String("waiting"))
	if !ok || age < pause.Seconds() || age > upper.Seconds()+1 {
		t.Errorf("oldest age of waiting: %.3f s (reported: %t), want between %.3f and %.3f", age, ok, pause.Seconds(), upper.Seconds()+1)
	}
	if age, ok := gauge[float64](t, rm, "pgtask.queue.oldest_age", pgtaskotel.AttrQueue.String("busy")); !ok || age != 0 {
		t.Errorf("oldest age of busy, whose only job runs: %.3f s (reported: %t), want 0", age, ok)
	}

	// Emptied queues are still reported, with zeros.
	if _, err := runtime.CancelJobs(ctx, pool, runtime.JobFilter{Queue: "waiting"}, nil); err != nil {
		t.Fatal(err)
	}
	close(release)
	waitFinished(t, pool, running)
	rm = tel.collect(t)
	for _, queue := range []string{"waiting", "busy"} {
		for _, s := range []string{"scheduled", "queued", "started"} {
			if got, ok := gauge[int64](t, rm, "pgtask.queue.depth", status(queue, s)...); !ok || got != 0 {
				t.Errorf("depth of emptied %s, %s: %d (reported: %t), want 0", queue, s, got, ok)
			}
		}
		for _, w := range []string{pgtaskotel.WaitingForWorker, pgtaskotel.WaitingForGroup, pgtaskotel.WaitingForLimit} {
			if got, ok := gauge[int64](t, rm, "pgtask.queue.waiting", waitingFor(queue, w)...); !ok || got != 0 {
				t.Errorf("jobs of emptied %s waiting for %s: %d (reported: %t), want 0", queue, w, got, ok)
			}
		}
		if age, ok := gauge[float64](t, rm, "pgtask.queue.oldest_age", pgtaskotel.AttrQueue.String(queue)); !ok || age != 0 {
			t.Errorf("oldest age of emptied %s: %.3f (reported: %t), want 0", queue, age, ok)
		}
	}

	if err := reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	if _, ok := gauge[int64](t, tel.collect(t), "pgtask.queue.depth", status("waiting", "queued")...); ok {
		t.Error("the gauges are still reported after Unregister")
	}
}
