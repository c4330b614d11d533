package runtime

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/gen"
)

// ErrLeaseLost is returned by Job.Extend when the job's attempt is no
// longer this worker's: its lease ran out and another worker took it over,
// or it was settled. The handler should stop; its outcome will be refused.
var ErrLeaseLost = errors.New("pgtask: the job's lease was lost to a takeover")

// ErrNotLeased is returned by Job.Extend for a job run in held mode, which
// has no lease: its transaction holds the job's lock for the whole attempt.
// A handler that serves queues of both modes can ignore it with errors.Is.
var ErrNotLeased = errors.New("pgtask: the job runs in held mode and has no lease to extend")

// maxLeaseClaim bounds how many jobs one lease-mode claim takes.
const maxLeaseClaim = 1000

// maxLeaseRun bounds how many jobs a lease-mode claim takes behind one
// grouped head. A busy group then drains about this many jobs per commit,
// while it holds no more than this many more of Concurrency's slots than
// its running job, and its waiting jobs are exposed to what befalls their
// worker: a crash or a lost lease counts a failed attempt against each, as
// against a held-mode batch's.
const maxLeaseRun = 10

// A leaser serves one queue in lease mode. One loop claims jobs with a lease
// into free handler slots and records finished attempts, both in one round
// trip per turn: the outcomes gathered while the previous turn was in
// flight, the next claim, and their commit. Each run the claim took (a job,
// or a group's head and the jobs right behind it) runs on a goroutine of its
// own, one job after the other, holding no connection, so Concurrency (the
// jobs claimed and not yet recorded) is not bounded by the pool; a
// heartbeat extends the leases of the jobs that run or wait in their run.
type leaser struct {
	w *Worker
	q *queue
	// ctx ends when the leaser is to stop claiming (shutdown begins); hard
	// when running handlers are to be cancelled too: the two lifetimes of
	// the call of Worker.Run the leaser serves.
	ctx, hard context.Context
	// done receives each finished attempt, and each job of a run handed
	// back unstarted.
	done chan leaseOutcome

	mu      sync.Mutex
	running map[int64]*leasedJob
}

// leasedJob is a claimed attempt, running or waiting in its run. The
// heartbeat extends its lease and, once the lease is lost, cancels its
// handler or, while it waits, marks it lost so that it never starts.
type leasedJob struct {
	attempt int32
	// token is the claim's: with the attempt, it fences the extensions.
	token int64
	// until is a time the lease lasts at least to: the lease from when the
	// claim or the last extension was sent, by this process's clock.
	until time.Time
	lost  bool
	// cancel is set when the handler starts.
	cancel context.CancelFunc
}

// leaseOutcome is what a run hands the loop for one of its jobs: the
// outcome of its attempt, or its hand-back.
type leaseOutcome struct {
	outcome
	// unstarted: the hand-back of a job of a run whose handler never
	// started (or whose run was stopped, see stopRun): its attempt is
	// returned, nothing recorded.
	unstarted bool
	// token is the claim's that took the job, which fences its hand-back.
	token int64
	// settled: recorded already, in the handler's own transaction, with
	// its writes.
	settled bool
	// run: the run the attempt ran in; recorded, when the outcome is the
	// turn's to record, is told once it is.
	run      *leaseRun
	recorded *signal
}

func newLeaser(ctx, hard context.Context, w *Worker, q *queue) *leaser {
	return &leaser{w: w, q: q, ctx: ctx, hard: hard, done: make(chan leaseOutcome, q.cfg.Concurrency), running: map[int64]*leasedJob{}}
}

func (l *leaser) loop() {
	ctx, hard := l.ctx, l.hard
	var heartbeat sync.WaitGroup
	beat, stopBeat := context.WithCancel(context.WithoutCancel(ctx))
	heartbeat.Go(func() { l.heartbeat(beat) })
	defer func() { stopBeat(); heartbeat.Wait() }()

	var (
		pending  []leaseOutcome
		inFlight int
		// more: the last claim was full, or a wake-up came; claim again.
		more  = true
		delay retryDelay
	)
	take := func(o leaseOutcome) {
		inFlight--
		pending = append(pending, l.unlessStopped(o))
	}
	for {
		claiming := ctx.Err() == nil
		if ctx.Err() != nil && inFlight == 0 && len(pending) == 0 {
			return
		}
		free := min(l.q.cfg.Concurrency-inFlight, maxLeaseClaim)
		if len(pending) > 0 || (claiming && more && free > 0) {
			want := 0
			if claiming {
				want = free
			}
			token := rand.Int64()
			sent := time.Now()
			next, err := l.turn(pending, want, token)
			if err != nil && want > 0 {
				// The claim may have committed with its reply lost: hand
				// back what it took, or it would wait out its leases.
				l.releaseClaim(token)
			}
			if err != nil && recordRefused(err) {
				// One outcome the server cannot record would spoil every
				// turn it went in: record them one by one.
				if pending, err = l.isolate(pending); err == nil {
					delay.reset()
					l.collect(take)
					continue
				}
			}
			if err != nil && hard.Err() != nil && inFlight == 0 {
				l.w.log.Error("pgtask: could not record outcomes before shutting down; their jobs are taken over when their leases run out",
					"queue", l.q.name, "outcomes", len(pending), "error", err)
				return
			}
			if err != nil {
				wait := delay.next()
				l.w.log.Warn("pgtask: recording outcomes or claiming failed; retrying", "queue", l.q.name, "error", err, "retry_in", wait)
				// Handlers go on meanwhile; their outcomes wait here.
				l.gather(wait, take)
				continue
			}
			delay.reset()
			pending = pending[:0]
			more = want > 0 && len(next) == want
			if more {
				l.q.signal()
			}
			for _, run := range runsOf(next) {
				inFlight += len(run)
				l.start(run, token, sent.Add(l.q.cfg.Lease))
			}
			// Outcomes that came in during the round trip go in the next.
			l.collect(take)
			if len(pending) > 0 || more {
				continue
			}
		}
		// Nothing to record and nothing to claim: wait for a handler, a
		// wake-up, the poll, or shutdown. Once shutdown has begun, only for
		// the handlers still running (a closed Done would not wait).
		var stopping <-chan struct{}
		if claiming {
			stopping = ctx.Done()
		}
		wait, woke := jitter(l.w.cfg.PollInterval), func() {}
		if claiming && free > 0 {
			// Or until its queue's next token is due.
			wait, woke = l.q.idleWait(wait)
		}
		poll := time.NewTimer(wait)
		// With room for a job, the leaser waits idle: only a wake-up
		// would have it claim before a handler ends.
		busy := func() {}
		if claiming && free > 0 {
			busy = l.q.waitIdle()
		}
		select {
		case o := <-l.done:
			take(o)
			l.collect(take)
		case <-l.q.wake:
			more = true
		case <-poll.C:
			more = true
		case <-stopping:
		}
		busy()
		woke()
		poll.Stop()
	}
}

// collect takes the outcomes that are ready, without waiting.
func (l *leaser) collect(take func(leaseOutcome)) {
	for {
		select {
		case o := <-l.done:
			take(o)
		default:
			return
		}
	}
}

// gather takes outcomes for d (a backoff after a failed turn).
func (l *leaser) gather(d time.Duration, take func(leaseOutcome)) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case o := <-l.done:
			take(o)
		case <-t.C:
			return
		case <-l.hard.Done():
			return
		}
	}
}

// turn records outcomes and claims up to want jobs with a lease, in one
// transaction sent in one round trip.
func (l *leaser) turn(outs []leaseOutcome, want int, token int64) ([]gen.ClaimJobsRow, error) {
	var next []gen.ClaimJobsRow
	b := &pgx.Batch{}
	b.Queue(gen.BeginJobTransaction)
	var unsettled []outcome
	var recorded []*signal
	var back gen.HandBackParams
	for _, o := range outs {
		switch {
		case o.unstarted:
			back.Ids = append(back.Ids, o.row.ID)
			back.Attempts = append(back.Attempts, o.row.Attempts)
			back.Tokens = append(back.Tokens, o.token)
		case !o.settled:
			unsettled = append(unsettled, o.outcome)
			recorded = append(recorded, o.recorded)
		}
	}
	if len(back.Ids) > 0 {
		b.Queue(gen.HandBack, back.Ids, nil, nil, back.Attempts, back.Tokens)
	}
	var res gen.SettleJobsRow
	if len(unsettled) > 0 {
		queueSettle(b, l.q.name, unsettled, want > 0, &res)
	}
	if want > 0 {
		from := l.q.cursor.get(int32(want))
		b.Queue(gen.ClaimLeasedJobs, l.q.name, int32(want), l.w.id, l.q.cfg.Lease.Milliseconds(), from.priority, from.id,
			from.floorID, from.behindFirst, token, int32(maxLeaseRun), l.w.claimKinds).Query(l.q.collectClaim(from, &next))
		l.q.queueRateWait(b)
	}
	b.Queue(gen.CommitJobTransaction)
	bctx, cancel := bookCtx(l.ctx)
	defer cancel()
	if err := l.w.pool.SendBatch(bctx, b).Close(); err != nil {
		return nil, err
	}
	for _, r := range recorded {
		r.close()
	}
	// Some may be fenced off: attempts taken over, or a turn sent again
	// after its commit's reply was lost. recorded says which.
	l.w.recorded(l.ctx, l.q.name, unsettled, res)
	return next, nil
}

// isolate records outs one at a time, after the server refused to record
// them together: an outcome it refuses is recorded as the failure that
// makes it, saying what the server refused. When that failure keeps its
// group from moving on, the jobs of its run behind it are handed back
// instead of recorded, whether they ran or not (see leaseRun). It returns
// the outcomes left to record when another error stops it (the database is
// away).
func (l *leaser) isolate(outs []leaseOutcome) ([]leaseOutcome, error) {
	for i, o := range outs {
		o = l.unlessStopped(o)
		outs[i] = o
		_, err := l.turn([]leaseOutcome{o}, 0, 0)
		if err != nil && recordRefused(err) {
			o.outcome = o.refusedBy(serverRefusal(err))
			o.settled = false
			outs[i] = o
			if o.stopsGroup() {
				l.stopRun(o, outs[i+1:])
			}
			_, err = l.turn([]leaseOutcome{o}, 0, 0)
			if err != nil && recordRefused(err) {
				// Not even as a failure: the job is taken over once its
				// lease runs out. Its group waits for it meanwhile.
				l.w.log.Error("pgtask: the database refused to record a job's attempt, even as a failure",
					"job_id", o.row.ID, "kind", o.row.Kind, "queue", l.q.name, "attempt", o.row.Attempts, "error", err)
				l.stopRun(o, outs[i+1:])
				continue
			}
		}
		if err != nil {
			return outs[i:], err
		}
	}
	return outs[:0], nil
}

// leaseRun is one run of a claim (a group's jobs, run one after the other)
// as its jobs' outcomes see it. Whether a job lets its group move on is
// decided when it ends, before its outcome is recorded; should the server
// refuse to record it, and its failure then keep the group waiting, the
// jobs behind it in the run may have run already: stopped then keeps them
// from being recorded before it (see leaser.isolate).
type leaseRun struct {
	stopped atomic.Bool
	stop    chan struct{} // closed when stopped
}

// signal is closed once, by whichever of its callers comes first.
type signal struct {
	once sync.Once
	ch   chan struct{}
}

func newSignal() *signal { return &signal{ch: make(chan struct{})} }

func (s *signal) close() {
	if s != nil {
		s.once.Do(func() { close(s.ch) })
	}
}

// waitAhead waits until the outcome of the run's job ahead of a job that
// wrote through Job.Tx is recorded (ahead) or the run is stopped, and
// reports whether the job's success may be recorded with its writes: only
// once the job ahead of it in its group is, lest it commit first and the
// job ahead then be refused (see stopRun). The job's transaction holds a
// connection meanwhile, which the turn recording the job ahead may need:
// it gives up waiting after patience (a pool that runs out of connections
// then keeps turning, at the cost of the order should the job ahead be
// refused), or when ctx ends.
func (r *leaseRun) waitAhead(ctx context.Context, ahead *signal, patience time.Duration) bool {
	if ahead != nil {
		t := time.NewTimer(patience)
		defer t.Stop()
		select {
		case <-ahead.ch:
		case <-r.stop:
		case <-ctx.Done():
		case <-t.C:
		}
	}
	return !r.stopped.Load()
}

// stopRun stops the run of o, whose refused outcome keeps its group from
// moving on: the jobs of the run behind it do not start, and those that
// ran are handed back instead of recorded (in outs, the outcomes after o
// waiting to be recorded, and as they come in), so that they run again
// after it. Their attempts are returned, and their writes through Job.Tx,
// which commit with their outcome, are never committed; but a job whose
// success was recorded in its own transaction already stays recorded.
func (l *leaser) stopRun(o leaseOutcome, outs []leaseOutcome) {
	if o.run == nil || o.run.stopped.Swap(true) {
		return
	}
	close(o.run.stop)
	for i := range outs {
		outs[i] = l.unlessStopped(outs[i])
	}
}

// unlessStopped is o, or, for a job of a stopped run (see stopRun) whose
// outcome is not recorded yet, its hand-back.
func (l *leaser) unlessStopped(o leaseOutcome) leaseOutcome {
	if o.run == nil || !o.run.stopped.Load() || o.unstarted {
		return o
	}
	if o.settled {
		l.w.log.Warn("pgtask: a job's success was recorded with its writes before the job ahead of it in its group was refused",
			"job_id", o.row.ID, "kind", o.row.Kind, "queue", l.q.name, "attempt", o.row.Attempts)
		return o
	}
	l.w.log.Warn("pgtask: a job ran behind one of its group whose outcome the database refused; it runs again after it",
		"job_id", o.row.ID, "kind", o.row.Kind, "queue", l.q.name, "attempt", o.row.Attempts)
	return leaseOutcome{outcome: outcome{row: o.row}, unstarted: true, token: o.token, run: o.run}
}

// releaseClaim hands back what the claim marked token took, if it
// committed; it keeps trying while the database is away, until the hard
// shutdown.
func (l *leaser) releaseClaim(token int64) {
	hard := l.hard
	var delay retryDelay
	for {
		ctx, cancel := bookCtx(hard)
		_, err := gen.New(l.w.pool).HandBack(ctx, gen.HandBackParams{Tokens: []int64{token}})
		cancel()
		if err == nil {
			return
		}
		if hard.Err() != nil {
			l.w.log.Error("pgtask: could not hand back a claim whose reply was lost; its jobs wait for their leases to run out",
				"queue", l.q.name, "error", err)
			return
		}
		wait := delay.next()
		l.w.log.Warn("pgtask: handing back a claim whose reply was lost failed; retrying", "queue", l.q.name, "error", err, "retry_in", wait)
		sleep(hard, wait)
	}
}

// runsOf splits a claim into runs: each ungrouped job alone, and each
// group's jobs together in id order (its head, then the jobs the claim took
// behind it), in the order of the claim's rows.
func runsOf(rows []gen.ClaimJobsRow) [][]gen.ClaimJobsRow {
	var runs [][]gen.ClaimJobsRow
	at := map[string]int{}
	for _, row := range rows {
		if i, ok := at[row.GroupKey]; ok {
			runs[i] = append(runs[i], row)
			continue
		}
		if row.GroupKey != "" {
			at[row.GroupKey] = len(runs)
		}
		runs = append(runs, []gen.ClaimJobsRow{row})
	}
	for _, run := range runs {
		slices.SortFunc(run, byID)
	}
	return runs
}

// start runs a run that the claim marked token took on a goroutine of its
// own, one job after the other; until is when the claim's leases run out at
// the earliest. The run stops at a job that does not let its group move on,
// as in the held-transaction mode, and at shutdown or a lease that may be
// lost: the jobs left are handed back unstarted.
func (l *leaser) start(run []gen.ClaimJobsRow, token int64, until time.Time) {
	hard := l.hard
	jobs := make([]*leasedJob, len(run))
	l.mu.Lock()
	for i, row := range run {
		jobs[i] = &leasedJob{attempt: row.Attempts, token: token, until: until}
		l.running[row.ID] = jobs[i]
	}
	l.mu.Unlock()
	lr := &leaseRun{stop: make(chan struct{})}
	l.w.spare.do(func() {
		// ahead: the signal of the outcome of the job before, while the
		// turn is to record it.
		var ahead *signal
		for i, row := range run {
			jctx, cancel := context.WithCancel(hard)
			if lr.stopped.Load() || !l.begin(jobs[i], cancel) {
				cancel()
				l.handBack(run[i:], token)
				return
			}
			o := l.execute(jctx, row, token, lr, ahead)
			cancel()
			l.forget(row.ID)
			o.run, o.token = lr, token
			ahead = nil
			if !o.settled && !o.unstarted {
				o.recorded = newSignal()
				ahead = o.recorded
			}
			o.retryNow = o.retryNow || hard.Err() != nil
			l.done <- o
			if o.stopsGroup() {
				l.handBack(run[i+1:], token)
				return
			}
		}
	})
}

// begin reports whether a job of a run may start: not after shutdown began,
// and only while its lease is sure to last another third of a lease (the
// heartbeat's period). Its handler then gets cancel for the heartbeat.
func (l *leaser) begin(j *leasedJob, cancel context.CancelFunc) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx.Err() != nil || j.lost || time.Until(j.until) < l.q.cfg.Lease/3 {
		return false
	}
	j.cancel = cancel
	return true
}

// handBack gives back the jobs of a run that will not start here: the next
// turn returns their attempts.
func (l *leaser) handBack(rows []gen.ClaimJobsRow, token int64) {
	for _, row := range rows {
		l.forget(row.ID)
		l.done <- leaseOutcome{outcome: outcome{row: row}, unstarted: true, token: token}
	}
}

func (l *leaser) forget(id int64) {
	l.mu.Lock()
	delete(l.running, id)
	l.mu.Unlock()
}

// execute runs one leased job, which the claim marked token took, in the
// run lr, after the job whose outcome's signal is ahead (nil when there is
// none, or it is recorded already). When the handler used the job's
// transaction, a success is recorded in it, fenced by attempt, and commits
// with the handler's writes (or, refused, is rolled back with them), once
// the job ahead is recorded; should its run be stopped meanwhile, the job
// is handed back, its writes rolled back.
func (l *leaser) execute(ctx context.Context, row gen.ClaimJobsRow, token int64, lr *leaseRun, ahead *signal) leaseOutcome {
	w := l.w
	ltx := &lazyTx{w: w}
	out, abandoned := w.attempt(ctx, row, func(job *Job) {
		job.lease = &jobLease{w: w, id: row.ID, attempt: row.Attempts, token: token}
		job.tx = ltx
	})
	out.claimToken = token
	o := leaseOutcome{outcome: out}
	if abandoned != nil {
		// The handler may still use its transaction: it is never committed,
		// and is rolled back when the handler returns, if ever.
		go func() {
			<-abandoned
			ltx.end(context.Background(), false) //nolint:errcheck // nothing is kept
		}()
		return o
	}
	if !ltx.begun() {
		return o
	}
	bctx, cancel := bookCtx(ctx)
	defer cancel()
	if o.err != nil {
		if err := ltx.end(bctx, false); err != nil {
			w.log.Warn("pgtask: rolling back a failed job's transaction failed", "job_id", row.ID, "error", err)
		}
		return o
	}
	if !lr.waitAhead(ctx, ahead, l.q.cfg.Lease/3) {
		if err := ltx.end(bctx, false); err != nil {
			w.log.Warn("pgtask: rolling back the transaction of a job handed back failed", "job_id", row.ID, "error", err)
		}
		w.log.Warn("pgtask: a job ran behind one of its group whose outcome the database refused; it runs again after it",
			"job_id", row.ID, "kind", row.Kind, "queue", l.q.name, "attempt", row.Attempts)
		return leaseOutcome{outcome: outcome{row: row}, unstarted: true, token: token}
	}
	recorded, err := ltx.settle(bctx, l.q.name, []outcome{o.outcome})
	switch {
	case err != nil:
		o.result = nil
		o.err = fmt.Errorf("recording the success with the job's writes failed, so they were rolled back: %w", err)
		o.retryNow = !refusal(err)
	case !recorded:
		// Refused: the attempt was taken over. The batch records nothing
		// for it either, and counts the refusal.
	default:
		o.settled = true
	}
	return o
}

// heartbeat extends the leases of the claimed jobs every third of the
// lease, and cancels those whose lease was lost (or, waiting in their run,
// keeps them from starting).
func (l *leaser) heartbeat(ctx context.Context) {
	t := time.NewTicker(l.q.cfg.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l.mu.Lock()
		var p gen.ExtendLeasesParams
		var asked []*leasedJob
		for id, j := range l.running {
			p.Ids = append(p.Ids, id)
			p.Attempts = append(p.Attempts, j.attempt)
			p.Tokens = append(p.Tokens, j.token)
			asked = append(asked, j)
		}
		l.mu.Unlock()
		if len(p.Ids) == 0 {
			continue
		}
		sent := time.Now()
		p.LeaseMs = l.q.cfg.Lease.Milliseconds()
		bctx, cancel := bookCtx(ctx)
		kept, err := gen.New(l.w.pool).ExtendLeases(bctx, p)
		cancel()
		if err != nil {
			l.w.log.Warn("pgtask: extending leases failed; will retry", "queue", l.q.name, "jobs", len(p.Ids), "error", err)
			continue
		}
		keep := make(map[int64]bool, len(kept))
		for _, id := range kept {
			keep[id] = true
		}
		l.mu.Lock()
		for i, id := range p.Ids {
			// A job handed back meanwhile, and maybe claimed again with the
			// same attempt number, is another claim: this answer is not its.
			j := asked[i]
			switch {
			case l.running[id] != j:
			case keep[id]:
				j.until = sent.Add(l.q.cfg.Lease)
			case j.cancel != nil:
				l.w.log.Warn("pgtask: a job's lease was lost to a takeover; cancelling its handler", "job_id", id, "attempt", j.attempt)
				j.cancel()
			default:
				l.w.log.Warn("pgtask: a job's lease was lost while it waited in its run; it will not start here", "job_id", id, "attempt", j.attempt)
				j.lost = true
			}
		}
		l.mu.Unlock()
	}
}

// jobLease is what Job.Extend needs of a leased attempt.
type jobLease struct {
	w       *Worker
	id      int64
	attempt int32
	token   int64
}

// Extend asks for the job's lease to run at least d from now. It returns
// ErrLeaseLost when the attempt was taken over, and ErrNotLeased in held
// mode, where there is no lease to extend (the job's transaction holds its
// lock until the attempt ends, and its Registration.Timeout bounds it).
func (j *Job) Extend(ctx context.Context, d time.Duration) error {
	if j.lease == nil {
		return fmt.Errorf("job %d: %w", j.ID, ErrNotLeased)
	}
	kept, err := gen.New(j.lease.w.pool).ExtendLeases(ctx, gen.ExtendLeasesParams{
		Ids: []int64{j.lease.id}, Attempts: []int32{j.lease.attempt}, Tokens: []int64{j.lease.token}, LeaseMs: d.Milliseconds(),
	})
	if err != nil {
		return fmt.Errorf("job %d: extend lease: %w", j.ID, err)
	}
	if len(kept) == 0 {
		return fmt.Errorf("job %d attempt %d: %w", j.ID, j.lease.attempt, ErrLeaseLost)
	}
	return nil
}
