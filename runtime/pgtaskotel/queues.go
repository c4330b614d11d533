package pgtaskotel

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
)

// queryTimeout bounds the query of one collection, so that a database that
// does not answer cannot hold up every other metric's export.
const queryTimeout = 5 * time.Second

// depthStatuses are the statuses pgtask.queue.depth reports for every
// queue it has seen, and waitingFor what pgtask.queue.waiting reports.
var (
	depthStatuses = []string{string(runtime.StatusScheduled), string(runtime.StatusQueued), string(runtime.StatusStarted)}
	waitingFor    = []string{WaitingForWorker, WaitingForGroup, WaitingForLimit, WaitingForRate}
)

// ObserveQueues registers three gauges read from db each time metrics are
// collected, in one query:
//
//   - pgtask.queue.depth: the queue's unfinished jobs, by pgtask.job.status:
//     scheduled (waiting for their time or their retry), queued (runnable,
//     waiting behind their group's head, or waiting on a concurrency or
//     rate limit)
//     and started (running);
//   - pgtask.queue.waiting: the queue's queued jobs by what they wait for,
//     pgtask.job.waiting_for: a worker (WaitingForWorker: runnable), their
//     group's head (WaitingForGroup), a slot of their concurrency limit
//     (WaitingForLimit) or a token of their rate limit (WaitingForRate);
//     they add up to the queued depth;
//   - pgtask.queue.oldest_age: how long the queue's oldest runnable job has
//     waited to start, in seconds (0 with none), as `pgtask stats` shows.
//
// Each queue that had unfinished jobs at a collection is reported at every
// later one, with zeros once it is empty. The query reads only indexes of
// unfinished jobs: its cost follows the jobs waiting and running, not the
// finished jobs kept. The numbers are the database's, the same whichever
// process reads them: call ObserveQueues in one process (or aggregate the
// processes' series with max, not sum). Unregister the returned
// registration to stop.
func ObserveQueues(db runtime.DB, opts ...Option) (metric.Registration, error) {
	m := newConfig(opts).meter()
	depth, err1 := m.Int64ObservableGauge("pgtask.queue.depth", metric.WithUnit("{job}"),
		metric.WithDescription("Unfinished jobs of the queue, by status."))
	waiting, err2 := m.Int64ObservableGauge("pgtask.queue.waiting", metric.WithUnit("{job}"),
		metric.WithDescription("Queued jobs of the queue, by what they wait for: a worker, their group's head, or a slot of their concurrency limit."))
	age, err3 := m.Float64ObservableGauge("pgtask.queue.oldest_age", metric.WithUnit("s"),
		metric.WithDescription("How long the queue's oldest runnable job has waited to start."))
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, fmt.Errorf("pgtaskotel: create the queue gauges: %w", err)
	}
	o := &queueObserver{q: gen.New(db), depth: depth, waiting: waiting, age: age, seen: map[string]bool{}}
	reg, err := m.RegisterCallback(o.observe, depth, waiting, age)
	if err != nil {
		return nil, fmt.Errorf("pgtaskotel: register the queue gauges: %w", err)
	}
	return reg, nil
}

type queueObserver struct {
	q       *gen.Queries
	depth   metric.Int64ObservableGauge
	waiting metric.Int64ObservableGauge
	age     metric.Float64ObservableGauge

	mu   sync.Mutex
	seen map[string]bool // queues reported before
}

// queueStatus is a queue and a status of its jobs.
type queueStatus struct{ queue, status string }

func (o *queueObserver) observe(ctx context.Context, obs metric.Observer) error {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	rows, err := o.q.QueueDepths(ctx)
	if err != nil {
		return fmt.Errorf("pgtaskotel: read the queues' depths (is the pgtask schema migrated?): %w", err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	depths := map[queueStatus]int64{}
	waits := map[queueStatus]int64{} // by what the queued jobs wait for
	ages := map[string]float64{}
	for _, r := range rows {
		o.seen[r.Queue] = true
		depths[queueStatus{r.Queue, r.Status}] += r.Jobs
		if r.WaitingFor != "" {
			waits[queueStatus{r.Queue, r.WaitingFor}] += r.Jobs
		}
		ages[r.Queue] = max(ages[r.Queue], r.OldestWaitSeconds)
	}
	for _, queue := range slices.Sorted(maps.Keys(o.seen)) {
		q := AttrQueue.String(queue)
		for _, status := range depthStatuses {
			obs.ObserveInt64(o.depth, depths[queueStatus{queue, status}],
				metric.WithAttributeSet(attribute.NewSet(q, AttrStatus.String(status))))
		}
		for _, w := range waitingFor {
			obs.ObserveInt64(o.waiting, waits[queueStatus{queue, w}],
				metric.WithAttributeSet(attribute.NewSet(q, AttrWaitingFor.String(w))))
		}
		obs.ObserveFloat64(o.age, ages[queue], metric.WithAttributeSet(attribute.NewSet(q)))
	}
	return nil
}
