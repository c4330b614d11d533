package runtime

import (
	"context"
	"log/slog"
	"time"

	"github.com/pgtask/pgtask/gen"
)

// maintainBatch bounds the rows one maintenance statement touches.
const maintainBatch = 1000

// A maintService is one duty of the maintenance loop that every worker
// does each round (promotion, rescue, cancel requests). Its step does one
// round of it; an error ends the round, and the loop tries again the next.
type maintService interface {
	step(ctx context.Context) error
}

// leaderStatus tells the leader-only services (retention, periodic jobs)
// whether this worker leads now: the leader service does.
type leaderStatus interface {
	isLeader() bool
}

// maintenance is the worker's maintenance services and the loop (run) that
// runs them, one after another, each interval on the connection budget's
// maintenance share: a worker uses one connection beside its running jobs.
//
// Every worker ends the batches whose jobs have finished, promotes due jobs,
// admits limited jobs into the slots it finds free, marks ready the rate
// keys that jobs came to wait on unseen, moves fair queues' clocks on,
// raises the priority of jobs that waited long enough (priority aging), rescues orphaned ones and carries out
// cancel requests each round (SKIP LOCKED keeps workers from getting in
// each other's way), and records its kinds now and then. Between rounds it
// stands for leader; while it leads, it schedules the periodic jobs and
// deletes what retention says.
type maintenance struct {
	log      *slog.Logger
	interval time.Duration

	batches *batchFinisher
	promote *dueMover
	age     *dueMover
	limits  *limitChecker
	flows   *workflowKeeper
	rates   *rateChecker
	fair    *fairClock
	rescue  *rescuer
	cancel  *canceller
	// The rescues, paced (see paced): rescued runs rescue's step, ownRescued
	// its rescueOwn.
	rescued, ownRescued *paced

	leader   *leader
	periodic *periodicScheduler
	kinds    *kindsRecorder
	retain   *retainer
}

// newMaintenance makes the maintenance services of w, whose pool is set.
func newMaintenance(w *Worker) *maintenance {
	q := gen.New(w.pool)
	lead := &leader{q: q, log: w.log.With("maint", "leader"), workerID: w.id, term: w.term(), every: electEveryTicks}
	m := &maintenance{
		log:      w.log,
		interval: w.cfg.MaintenanceInterval,
		batches:  &batchFinisher{q: q, batch: maintainBatch},
		promote:  newPromoter(q, w.log.With("maint", "promote"), maintainBatch),
		age:      newAger(q, w.log.With("maint", "aging"), maintainBatch),
		limits:   &limitChecker{q: q, batch: maintainBatch},
		flows:    &workflowKeeper{q: q, log: w.log.With("maint", "workflows"), batch: maintainBatch, kick: make(chan struct{}, 1)},
		rates:    &rateChecker{q: q, batch: maintainBatch, queues: w.queues, names: w.queueNames()},
		fair:     &fairClock{q: q},
		rescue: &rescuer{pool: w.pool, q: q, log: w.log.With("maint", "rescue"), batch: maintainBatch,
			workerID: w.id, claims: &w.claims},
		cancel: &canceller{q: q, log: w.log.With("maint", "cancel"), batch: maintainBatch, running: &w.running},
		leader: lead,
		periodic: &periodicScheduler{pool: w.pool, log: w.log.With("maint", "periodic"), leader: lead, every: electEveryTicks,
			jobs: func() []*periodic {
				w.mu.RLock()
				defer w.mu.RUnlock()
				return w.periodic
			}},
		kinds:  &kindsRecorder{record: func(ctx context.Context) { w.recordKinds(ctx, q) }, every: recordKindsEvery},
		retain: &retainer{q: q, log: w.log.With("maint", "retention"), cfg: w.cfg.Retention, batch: retentionBatch, leader: lead},
	}
	m.rescued = &paced{s: m.rescue, share: rescueShare}
	m.ownRescued = &paced{s: ownRescue{m.rescue}, share: rescueShare}
	return m
}

// rescueShare paces the rescues (see paced): a rescue that took d waits
// rescueShare times d from its start before it runs again, so that rescues
// take at most about 1/rescueShare of a worker's maintenance connection.
// They look at every started job's index entry, and while another session
// keeps a transaction open, the entries of every job started since stay, dead:
// each round's look costs more with every job the workers run. Paced, a
// rescue that takes 1 ms still runs every round; one that takes 50 ms, once
// a second.
const rescueShare = 20

// paced runs its service's step at most once a round, and after a step
// that took d, not again until share times d has passed since it began.
type paced struct {
	s     maintService
	share int
	next  time.Time
}

func (p *paced) step(ctx context.Context) error {
	start := time.Now()
	if start.Before(p.next) {
		return nil
	}
	err := p.s.step(ctx)
	p.next = start.Add(time.Since(start) * time.Duration(p.share))
	return err
}

// run runs the maintenance services every interval until ctx is done, and
// then resigns the leadership, if it has it.
func (m *maintenance) run(ctx context.Context) {
	t := time.NewTicker(m.interval)
	defer t.Stop()
	defer m.leader.resign(ctx)
	failing := false
	for {
		err := m.round(ctx)
		m.leader.step(ctx)
		m.periodic.step(ctx)
		m.kinds.step(ctx)
		m.retain.step(ctx)
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			m.log.Warn("pgtask: maintenance failed; will retry", "error", err)
			failing = true
		case err == nil && failing:
			m.log.Info("pgtask: maintenance recovered")
			failing = false
		}
	wait:
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.flows.kick:
			// Notes a finisher left behind a locked workflow step: applied
			// now, on maintenance's connection, not at the next round.
			m.flows.applyNotified(ctx)
			goto wait
		}
	}
}

// round runs, in order, the services every worker runs each round. The
// first error ends the round.
func (m *maintenance) round(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, bookkeeping)
	defer cancel()
	// Cancel requests come before this worker's own rescue, so that a
	// failing rescue of its own orphans does not hold them up.
	// Batches come before promotion: a callback a batch releases is queued
	// in the same round; and promotion before the limits, which admit the
	// limited jobs it queued; aging before the rate checks, which apply
	// those its rate-limited jobs leave.
	// Workflow notes come before promotion too: a step they release is
	// queued at once, and a limited one admitted in the same round.
	for _, s := range []maintService{m.batches, m.flows, m.promote, m.limits, m.fair, m.age, m.rates, m.rescued, m.cancel, m.ownRescued} {
		if err := s.step(ctx); err != nil {
			return err
		}
	}
	return nil
}
