package runtime

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/gen"
)

// A runner is one slot of a queue's concurrency in the held-transaction
// mode. It runs claimed jobs on one connection, inside a transaction that
// holds their row locks, and keeps that connection while there is work:
//
//   - fetch: a claim, committed before any handler runs, so a job's attempt
//     is counted even if its worker dies in the handler;
//   - execute: each job's handler (Worker.attempt) behind a savepoint of
//     its own, returning an outcome value;
//   - settle: the outcomes recorded (queueSettle), the groups moved on and
//     the next batch claimed, all in the job transaction, then its commit,
//     the next transaction's begin and its lock: one round trip per batch;
//     then Worker.recorded.
//
// When the connection cannot be trusted any more (a lost session, an
// abandoned handler), settleLost records the same outcomes from another
// connection; either way they reach Worker.recorded.
type runner struct {
	w *Worker
	q *queue
	// ctx ends when the runner is to stop claiming (shutdown begins); hard
	// when running handlers are to be cancelled too. A runner serves one
	// call of Worker.Run (or Drain, WorkOne), whose two lifetimes these are.
	ctx, hard context.Context
	// one: claim a single job, and nothing after it (Worker.WorkOne);
	// ran then gets the ids of the jobs whose attempts ran.
	one bool
	ran []int64
	// asked is how many jobs the last claim asked for.
	asked int
}

// batchSize is how many jobs the next claim takes: as many as the queue's
// jobs so far say will run within the commit budget, up to BatchSize (see
// pace).
func (r *runner) batchSize() int32 {
	r.asked = 1
	if !r.one {
		r.asked = r.q.pace.claimSize(r.q.cfg.CommitBudget, r.q.cfg.BatchSize)
	}
	return int32(r.asked)
}

func (r *runner) loop() {
	ctx := r.ctx
	var delay retryDelay
	for ctx.Err() == nil {
		n, err := r.work()
		switch {
		case err != nil && ctx.Err() == nil:
			wait := delay.next()
			r.w.log.Warn("pgtask: claim or run failed; retrying", "queue", r.q.name, "error", err, "retry_in", wait)
			sleep(ctx, wait)
			continue
		case n > 0:
			delay.reset()
			continue
		}
		wait, woke := r.q.idleWait(jitter(r.w.cfg.PollInterval))
		poll := time.NewTimer(wait)
		busy := r.q.waitIdle()
		select {
		case <-ctx.Done():
		case <-r.q.wake:
		case <-poll.C:
		}
		busy()
		woke()
		poll.Stop()
	}
}

// session is a runner's connection while it has work.
type session struct {
	r    *runner
	conn *pgxpool.Conn
	pid  uint32
	// tx is the handle pgx returned for the first transaction of this use of
	// the connection.
	// A pgx transaction handle is the connection and a savepoint counter,
	// nothing more, so it serves each transaction the pipelines begin in
	// turn; the runner never commits or rolls back through it.
	tx pgx.Tx
	// open: a transaction begun by the runner is open on the connection.
	open bool
	// tokens are the session's claims the worker marks as held (see
	// claimTokens), the newest last.
	tokens []int64
}

// newToken marks a claim about to be sent as held by this runner.
func (s *session) newToken() pgtype.Int8 {
	t := rand.Int64()
	s.r.w.claims.add(t)
	s.tokens = append(s.tokens, t)
	return pgtype.Int8{Int64: t, Valid: true}
}

// forget unmarks the session's claims but the newest keep: the runner is
// done with their jobs.
func (s *session) forget(keep int) {
	n := max(len(s.tokens)-keep, 0)
	s.r.w.claims.drop(s.tokens[:n]...)
	s.tokens = slices.Delete(s.tokens, 0, n)
}

// work acquires a connection and runs batches on it until the queue has
// none for it, or runners of another queue wait for the connection. It
// returns how many jobs it ran. When it errs after claiming, the connection
// could not be trusted: it is closed, and what its session claimed is
// settled from another (see settleLost).
func (r *runner) work() (int, error) {
	ctx := r.ctx
	if err := r.w.slots.acquire(ctx, r.q.name); err != nil {
		return 0, fmt.Errorf("wait for a connection: %w", err)
	}
	defer r.w.slots.release()
	conn, err := r.w.pool.Acquire(ctx)
	if err != nil {
		return 0, fmt.Errorf("acquire connection: %w", err)
	}
	s := &session{r: r, conn: conn, pid: conn.Conn().PgConn().PID()}
	// Every way out of here has recorded or handed back what the session's
	// claims took, or given up on it (settleLost).
	defer s.forget(0)
	c, err := s.start()
	total := 0
	var ended []heldOutcome
	for err == nil && len(c.next) > 0 {
		if len(c.next) >= r.asked && !continuesGroups(c.next, ended) {
			// A full batch: there is probably more; let an idle runner help.
			r.q.signal()
		}
		b := newHeldBatch(c.next)
		ab, err := s.run(b)
		total += b.started
		if ab != nil {
			s.abandon(b, ab)
			return total, ab
		}
		ended = b.outcomes
		if r.one {
			for _, o := range b.outcomes {
				r.ran = append(r.ran, o.row.ID)
			}
		}
		if err == nil {
			c, err = s.settle(b)
		}
		if err != nil {
			discard(conn)
			var rr *refusedRecords
			if errors.As(err, &rr) {
				// The transaction could not keep what the server refused
				// apart from the rest: record what does not need it, as it
				// is (a success that wrote nothing is still one).
				r.recordLost(s.pid, rr.outs, false)
				if n := len(b.outcomes) - len(rr.outs); n > 0 {
					r.w.log.Warn("pgtask: jobs whose writes were rolled back with an outcome the database refused run again",
						"queue", r.q.name, "jobs", n)
				}
				return total, nil
			}
			r.settleLost(s.pid, b.outcomes, err, false)
			return total, err
		}
		r.w.recorded(ctx, r.q.name, outcomesOf(b.outcomes), c.res)
	}
	if err != nil {
		// The claim may have committed with its reply lost: hand back
		// whatever that session holds, since no rescuer will while this
		// process lives.
		discard(conn)
		r.settleLost(s.pid, nil, err, false)
		return total, err
	}
	if !s.open {
		conn.Release()
		return total, nil
	}
	// The pipeline began a transaction that found nothing to run.
	bctx, cancel := bookCtx(ctx)
	defer cancel()
	if err := s.tx.Commit(bctx); err != nil {
		discard(conn)
		return total, fmt.Errorf("end job transaction: %w", err)
	}
	conn.Release()
	return total, nil
}

// start claims in a transaction of its own, committed at once (one round
// trip: a runner woken for work that another took costs no more). With jobs
// claimed, it begins the job transaction and locks them.
func (s *session) start() (cycled, error) {
	r := s.r
	bctx, cancel := bookCtx(r.ctx)
	defer cancel()
	var next []gen.ClaimJobsRow
	b := &pgx.Batch{}
	b.Queue(gen.BeginJobTransaction)
	r.queueClaim(b, &next, s.newToken())
	b.Queue(gen.CommitJobTransaction)
	if err := s.conn.SendBatch(bctx, b).Close(); err != nil || len(next) == 0 {
		return cycled{}, err
	}
	// The job transaction's begin and its lock, in one round trip.
	var held []int64
	b = &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	b.Queue(gen.HoldJobs, ids(next), r.w.idleTimeout.Milliseconds()).Query(collectHeld(&held))
	br := s.conn.SendBatch(bctx, b)
	s.tx = br.Tx()
	s.open = true
	if err := br.Close(); err != nil {
		return cycled{}, fmt.Errorf("begin job transaction: %w", err)
	}
	return cycled{next: r.keepHeld(next, held)}, nil
}

// queueClaim adds the queue's claim to b, its rows to go to next; token,
// when valid, marks the claimed jobs for hold_claimed_jobs.
func (r *runner) queueClaim(b *pgx.Batch, next *[]gen.ClaimJobsRow, token pgtype.Int8) {
	max := r.batchSize()
	from := r.q.cursor.get(max)
	b.Queue(gen.ClaimJobs, r.q.name, max, r.w.id, from.priority, from.id, from.floorID, from.behindFirst, token,
		r.w.claimKinds).Query(r.q.collectClaim(from, next))
	r.q.queueRateWait(b)
}

// continuesGroups reports whether every job of a claimed batch is the next
// job of a group whose previous one ended in the batch before: the settle
// that moved those groups on leaves their new heads to the claim that
// follows it. Such a claim says nothing about work for anyone else (a single
// busy group claims one job at a time, for ever), so it wakes no idle
// runner, which would only claim nothing. Heads for others get a wake-up
// from the database (see pgtask.pick_heads).
func continuesGroups(next []gen.ClaimJobsRow, ended []heldOutcome) bool {
	if len(ended) == 0 {
		return false
	}
	for _, row := range next {
		if row.GroupKey == "" || !slices.ContainsFunc(ended, func(o heldOutcome) bool { return o.row.GroupKey == row.GroupKey }) {
			return false
		}
	}
	return true
}

// keepHeld drops from a claimed batch what the job transaction could not
// lock: only an operator's hand can get here; run what is still ours.
func (r *runner) keepHeld(next []gen.ClaimJobsRow, held []int64) []gen.ClaimJobsRow {
	if len(held) == len(next) {
		return next
	}
	r.w.log.Warn("pgtask: some claimed jobs changed before they could be locked", "claimed", ids(next), "held", held)
	return slices.DeleteFunc(next, func(row gen.ClaimJobsRow) bool { return !slices.Contains(held, row.ID) })
}

// heldOutcome is an attempt's outcome as its batch knows it.
type heldOutcome struct {
	outcome
	// wrote: a success whose writes are in the job transaction (its
	// savepoint released), so they cannot be rolled back alone.
	wrote bool
	// lost: the job's database session was gone when the handler returned,
	// so whatever it did there was rolled back.
	lost bool
}

func outcomesOf(hs []heldOutcome) []outcome {
	outs := make([]outcome, len(hs))
	for i, h := range hs {
		outs[i] = h.outcome
	}
	return outs
}

// heldBatch is a claim's jobs as the job transaction runs them: pending, the
// jobs claimed and locked but not started yet, in the order they run; the
// outcomes of those that ran; and the jobs handed back unstarted. The jobs
// still pending stay claimed and locked until the transaction ends, so a
// step that commits what has run so far could go on with them in the next
// transaction, without a new claim.
type heldBatch struct {
	pending  []gen.ClaimJobsRow
	outcomes []heldOutcome
	handBack []int64
	// started counts the jobs whose handlers the batch started.
	started int
	// stopped: groups whose job will be retried or blocks them, so the
	// jobs behind it in the batch must not start.
	stopped map[string]bool
}

// newHeldBatch orders a claimed batch by id: a group's run (its head, then the
// jobs behind it) runs in group order; the batch was already chosen by
// priority.
func newHeldBatch(rows []gen.ClaimJobsRow) *heldBatch {
	slices.SortFunc(rows, byID)
	return &heldBatch{pending: rows, stopped: map[string]bool{}}
}

// next takes the next job that may start, handing back on the way those
// whose group cannot go on in this batch.
func (b *heldBatch) next() (gen.ClaimJobsRow, bool) {
	for len(b.pending) > 0 {
		row := b.pending[0]
		b.pending = b.pending[1:]
		if row.GroupKey != "" && b.stopped[row.GroupKey] {
			b.handBack = append(b.handBack, row.ID)
			continue
		}
		return row, true
	}
	return gen.ClaimJobsRow{}, false
}

// ran adds a job's outcome.
func (b *heldBatch) ran(o heldOutcome) {
	b.outcomes = append(b.outcomes, o)
	if o.stopsGroup() {
		b.stopped[o.row.GroupKey] = true
	}
}

// unget puts a job taken by next back in front of the jobs to run.
func (b *heldBatch) unget(row gen.ClaimJobsRow) {
	b.pending = slices.Insert(b.pending, 0, row)
}

// handBackPending hands back every job not started.
func (b *heldBatch) handBackPending() {
	for _, row := range b.pending {
		b.handBack = append(b.handBack, row.ID)
	}
	b.pending = nil
}

// cycled is what a settle pipeline returns: the next batch, locked in the
// transaction it began, and the reply of the statement that recorded the
// outcomes (what it recorded, and the groups an enqueue kept from moving
// on).
type cycled struct {
	next []gen.ClaimJobsRow
	res  gen.SettleJobsRow
}

// settle sends, in one round trip: the hand-back of unstarted jobs, the
// outcomes, the next claim (marked with a token of its own) and the commit,
// then the next transaction's begin and its lock on what that claim took.
// Shutting down, or when runners of another queue wait for its connection,
// it claims nothing and begins nothing.
func (s *session) settle(end *heldBatch) (cycled, error) {
	r := s.r
	var c cycled
	b := &pgx.Batch{}
	claiming := r.ctx.Err() == nil && !r.one && !r.w.slots.contended(r.q.name)
	var res gen.SettleJobsRow
	p := s.queueRecord(b, end, claiming, &res)
	var token pgtype.Int8
	if claiming {
		token = s.newToken()
		r.queueClaim(b, &c.next, token)
	}
	b.Queue(gen.CommitJobTransaction)
	var held []int64
	if claiming {
		b.Queue(gen.BeginJobTransaction)
		b.Queue(gen.HoldClaimedJobs, token.Int64, r.w.idleTimeout.Milliseconds()).Query(collectHeld(&held))
	}
	bctx, cancel := bookCtx(r.ctx)
	defer cancel()
	if err := s.conn.SendBatch(bctx, b).Close(); err != nil {
		if recordRefused(err) {
			c, err := s.isolate(bctx, end, err)
			if err == nil {
				// The batch is done and nothing is claimed after it.
				s.forget(0)
			}
			return c, err
		}
		return c, err
	}
	s.open = claiming
	if claiming {
		s.forget(1)
	} else {
		s.forget(0)
	}
	r.checkRecorded(p, res)
	c.res = res
	c.next = r.keepHeld(c.next, held)
	return c, nil
}

// queueRecord adds to b what records a batch's end in its job transaction:
// the hand-back of the jobs it did not start, and its outcomes (see
// queueSettle, which claiming is passed to), their reply to go to res.
func (s *session) queueRecord(b *pgx.Batch, end *heldBatch, claiming bool, res *gen.SettleJobsRow) gen.SettleJobsParams {
	if len(end.handBack) > 0 {
		b.Queue(gen.HandBack, end.handBack, int32(s.pid), s.r.w.id, nil, nil)
	}
	if len(end.outcomes) > 1 {
		// Should the server refuse to record an outcome, the others are
		// recorded after all, from here (see isolate).
		b.Queue(gen.SavepointJob)
	}
	if len(end.outcomes) == 0 {
		return gen.SettleJobsParams{}
	}
	return queueSettle(b, s.r.q.name, outcomesOf(end.outcomes), claiming, res)
}

// checkRecorded logs outcomes sent (p) that the reply (res) says were not
// recorded. The jobs were locked all along: only an operator's hand on the
// table gets here.
func (r *runner) checkRecorded(p gen.SettleJobsParams, res gen.SettleJobsRow) {
	if int(res.Recorded) != len(p.Ids) {
		r.w.log.Error("pgtask: some outcomes were not recorded: their jobs changed under the worker",
			"queue", r.q.name, "jobs", p.Ids, "recorded", res.Recorded)
	}
}

// refusedRecords is a batch whose job transaction cannot commit because
// the server refused to record an outcome: outs is what is to be recorded,
// as it is, from another connection: the refused outcomes as failures, and
// the others that need nothing of the transaction (they did not write, and
// no job of their group before them runs again). The jobs left out run
// again: their writes are rolled back with the transaction, and the
// session's hand-back (pgtask.hand_back) returns their attempts, which
// ran but are not counted, since they did nothing wrong; counting them
// could fail an innocent job for good. That cannot go on for ever: each
// time, the refused jobs spend attempts of their own, so they fail for good
// within their max_attempts and stop taking others' work down with them.
type refusedRecords struct {
	outs  []outcome
	cause error
}

func (e *refusedRecords) Error() string {
	return "the database refused to record an outcome: " + e.cause.Error()
}

// isolate finds, after the server refused to record a batch's outcomes
// (cause), the ones it refuses, and makes each the failure that its refusal
// makes it (in end.outcomes, which the caller hands to Worker.recorded with
// the reply it returns). With more than one outcome, the settle took a
// savepoint: the others are recorded alone, and the transaction commits
// with their writes. It cannot when a refused success's writes are in it,
// or a job ran after one of its group that now waits for a retry or blocks
// the group: then it returns a *refusedRecords.
func (s *session) isolate(ctx context.Context, end *heldBatch, cause error) (cycled, error) {
	r := s.r
	causes := make([]error, len(end.outcomes))
	// res sums up the replies of the statements that record the outcomes.
	var res gen.SettleJobsRow
	if len(end.outcomes) == 1 {
		causes[0] = cause
	} else {
		if err := gen.New(s.tx).RollbackJobSavepoint(ctx); err != nil {
			return cycled{}, err
		}
		for i, o := range end.outcomes {
			var one gen.SettleJobsRow
			b := &pgx.Batch{}
			b.Queue(gen.SavepointJob)
			queueSettle(b, r.q.name, []outcome{o.outcome}, false, &one)
			b.Queue(gen.ReleaseJobSavepoint)
			err := s.conn.SendBatch(ctx, b).Close()
			if err == nil {
				res.Recorded += one.Recorded
				res.Busy = append(res.Busy, one.Busy...)
				continue
			}
			if !recordRefused(err) {
				return cycled{}, err
			}
			causes[i] = err
			// One at a time: the aborted transaction takes nothing else,
			// not even the preparing of a statement.
			q := gen.New(s.tx)
			if err := q.RollbackJobSavepoint(ctx); err != nil {
				return cycled{}, err
			}
			if err := q.ReleaseJobSavepoint(ctx); err != nil {
				return cycled{}, err
			}
		}
	}
	inPlace := len(end.outcomes) > 1
	// stopped: groups whose refused job now waits for a retry or blocks
	// them. again: groups with a job that runs again if the transaction is
	// lost (its writes go with it).
	stopped, again := map[string]bool{}, map[string]bool{}
	var refused, outs []outcome
	for i, o := range end.outcomes {
		group := o.row.GroupKey
		switch {
		case causes[i] != nil:
			// Recorded in any case: the refused job spends an attempt of
			// its own (see refusedRecords).
			inPlace = inPlace && !o.wrote
			o.outcome = o.refusedBy(serverRefusal(causes[i]))
			o.wrote = false
			end.outcomes[i] = o
			if o.stopsGroup() {
				stopped[group] = true
			}
			refused = append(refused, o.outcome)
			outs = append(outs, o.outcome)
		case group != "" && stopped[group]:
			// Ran after its group's job that now waits: it runs again.
			inPlace = false
		case group != "" && again[group]:
			// Ran after its group's job that runs again: so does it.
		case o.wrote:
			if group != "" {
				again[group] = true
			}
		default:
			outs = append(outs, o.outcome)
		}
	}
	if inPlace {
		var last gen.SettleJobsRow
		b := &pgx.Batch{}
		if len(refused) > 0 {
			queueSettle(b, r.q.name, refused, false, &last)
		}
		b.Queue(gen.CommitJobTransaction)
		err := s.conn.SendBatch(ctx, b).Close()
		if err == nil {
			s.open = false
			res.Recorded += last.Recorded
			res.Busy = append(res.Busy, last.Busy...)
			return cycled{res: res}, nil
		}
		if !recordRefused(err) {
			return cycled{}, err
		}
	}
	return cycled{}, &refusedRecords{outs: outs, cause: cause}
}

// run executes a batch in the job transaction, in id order (see
// newHeldBatch). A job whose group cannot go on in this batch (an earlier
// one failed and waits for its retry, or blocks the group) is handed back,
// as is everything not started when shutdown begins. Before a job expected
// to take the outcomes waiting for their commit past the commit budget, it
// commits them (commitSoFar) and goes on in the next transaction. It stops
// at an abandoned handler, and at a commit that fails, with the batch's
// outcomes still to be recorded as settle's caller would have them.
func (s *session) run(b *heldBatch) (*abandonment, error) {
	r := s.r
	var pending time.Time // when the oldest outcome of b ended
	for r.ctx.Err() == nil {
		row, ok := b.next()
		if !ok {
			return nil, nil
		}
		budget := r.q.cfg.CommitBudget
		switch {
		case len(b.pending) > 0 && r.q.pace.slow(row.Kind, budget):
			// A job expected to take longer than the budget on its own
			// would keep those behind it waiting that long: they go back
			// to the queue, for idle runners, before it starts.
			b.unget(row)
			if err := s.commitSoFar(b, true); err != nil {
				return nil, err
			}
			r.q.signal()
			continue
		case len(b.outcomes) > 0 && r.q.pace.commitFirst(row.Kind, pending, budget):
			b.unget(row)
			if err := s.commitSoFar(b, false); err != nil {
				return nil, err
			}
			continue
		}
		b.started++
		o, ab := s.execute(row)
		if ab != nil {
			b.handBackPending()
			return ab, nil
		}
		if len(b.outcomes) == 0 {
			pending = time.Now()
		}
		b.ran(o)
		if o.lost {
			// The session is gone, and the jobs still to run with it: they
			// are handed back, their attempts returned.
			b.handBackPending()
			return nil, nil
		}
	}
	b.handBackPending()
	return nil, nil
}

// commitSoFar commits, in one round trip, the outcomes of the batch's jobs
// that have run, with its hand-backs, and begins the next job transaction,
// locking in it the batch's jobs still to run: claimed and counted already,
// they go on without a new claim. With handBackRest, only the next of them
// goes on; the others are handed back with the commit, their attempts
// returned. Should the server refuse an outcome, it isolates it as settle
// does, then locks the rest in a new transaction. When it fails, the
// outcomes it was to commit are left in b, unless they were recorded.
func (s *session) commitSoFar(b *heldBatch, handBackRest bool) error {
	r := s.r
	rest := b.pending
	if handBackRest && len(rest) > 1 {
		b.handBack = append(b.handBack, ids(rest[1:])...)
		rest = rest[:1]
	}
	batch := &pgx.Batch{}
	var res gen.SettleJobsRow
	p := s.queueRecord(batch, b, false, &res)
	committed := false
	batch.Queue(gen.CommitJobTransaction).Exec(func(ct pgconn.CommandTag) error {
		committed = ct.String() == "COMMIT"
		return nil
	})
	var held []int64
	lockRest := func(batch *pgx.Batch) {
		batch.Queue(gen.BeginJobTransaction)
		batch.Queue(gen.HoldJobs, ids(rest), r.w.idleTimeout.Milliseconds()).Query(collectHeld(&held))
	}
	lockRest(batch)
	bctx, cancel := bookCtx(r.ctx)
	defer cancel()
	err := s.conn.SendBatch(bctx, batch).Close()
	switch {
	case err != nil && recordRefused(err):
		// Nothing of the round trip after the refused statement ran.
		c, err := s.isolate(bctx, b, err)
		if err != nil {
			return err
		}
		// isolate committed the hand-backs too: they came before its
		// savepoint.
		r.w.recorded(r.ctx, r.q.name, outcomesOf(b.outcomes), c.res)
		b.outcomes, b.handBack = nil, nil
		batch = &pgx.Batch{}
		lockRest(batch)
		if err := s.conn.SendBatch(bctx, batch).Close(); err != nil {
			return fmt.Errorf("lock the rest of the batch: %w", err)
		}
		s.open = true
		b.pending = r.keepHeld(rest, held)
		return nil
	case err != nil && committed:
		// The outcomes are recorded; the next transaction did not begin.
		// The jobs still claimed are handed back with the session.
		r.w.recorded(r.ctx, r.q.name, outcomesOf(b.outcomes), res)
		b.outcomes, b.handBack = nil, nil
		return fmt.Errorf("lock the rest of the batch: %w", err)
	case err != nil:
		return err
	}
	r.checkRecorded(p, res)
	r.w.recorded(r.ctx, r.q.name, outcomesOf(b.outcomes), res)
	b.outcomes, b.handBack = nil, nil
	b.pending = r.keepHeld(rest, held)
	return nil
}

// execute runs one claimed job of the session's transaction and returns how
// it ended. A failed job's writes are rolled back to its savepoint here, so
// the batch's other jobs commit; recording the outcome is settle's. It
// returns an abandonment instead when the handler ignored its context past
// AbandonGrace: the transaction can no longer be used.
func (s *session) execute(row gen.ClaimJobsRow) (heldOutcome, *abandonment) {
	hard := s.r.hard
	jtx := &jobTx{Tx: s.tx, savepoint: gen.New(s.tx).SavepointJob}
	end := s.r.q.pace.begin(row.Kind)
	var token int64
	n := len(s.tokens)
	if n > 0 {
		// The batch's jobs are those of the session's newest claim.
		token = s.tokens[n-1]
	}
	out, done := s.r.w.attempt(hard, row, func(job *Job) { job.tx, job.claimToken = jtx, token })
	end()
	if n > 0 {
		out.claimToken = token
	}
	o := heldOutcome{outcome: out}
	if o.reg == nil {
		return o, nil
	}
	s.r.q.pace.observe(row.Kind, time.Since(o.start))
	o.retryNow = hard.Err() != nil
	if done != nil {
		return o, &abandonment{outcome: o.outcome, done: done}
	}
	s.closeAttempt(jtx, &o.outcome)
	o.wrote = o.err == nil && jtx.taken
	if s.conn.Conn().IsClosed() {
		// Whatever the handler returned, its writes are gone with the
		// session; settling fails next, and settleLost records the attempt.
		o.lost = true
	}
	return o, nil
}

// closeAttempt keeps a successful attempt's writes (releasing its savepoint)
// or rolls a failed one's back to it.
func (s *session) closeAttempt(jtx *jobTx, o *outcome) {
	if !jtx.taken {
		return
	}
	q := gen.New(s.tx)
	ctx, cancel := bookCtx(s.r.hard)
	defer cancel()
	if o.err == nil {
		err := q.ReleaseJobSavepoint(ctx)
		if err == nil {
			return
		}
		// Typically a statement the handler ran failed and it ignored the
		// error: the transaction is aborted.
		o.result = nil
		o.err = fmt.Errorf("the handler returned success but its transaction failed: %w", err)
	}
	if err := q.RollbackJobSavepoint(ctx); err != nil {
		// The transaction is unusable; settling it will fail, and
		// settleLost records this outcome.
		o.err = fmt.Errorf("%w (and rolling back its writes failed: %v)", o.err, err)
	}
}

// abandon gives up the connection of a batch whose handler ignored its
// context: the handler may still use it, so it leaves the pool and is closed
// once the handler lets go. Its session is ended from another connection,
// which rolls back the batch's transaction. The abandoned attempt is
// recorded as failed; of the others, what the transaction's end does not
// undo is recorded as it is (see outlive), and the rest run again, their
// attempts not counted: they did nothing wrong.
func (s *session) abandon(end *heldBatch, ab *abandonment) {
	pc := s.conn.Hijack()
	go func() {
		<-ab.done
		pc.Close(context.Background()) //nolint:errcheck // the session is gone
	}()
	outs := append(outlive(end.outcomes), ab.outcome)
	if n := len(end.outcomes) + 1 - len(outs); n > 0 {
		s.r.w.log.Warn("pgtask: jobs whose writes were rolled back with an abandoned handler's transaction run again",
			"queue", s.r.q.name, "job_id", ab.outcome.row.ID, "jobs", n)
	}
	s.r.recordLost(s.pid, outs, true)
}

// outlive picks, of the outcomes of a job transaction that is rolled back,
// those that can be recorded as they are from another connection: failures
// (their writes were rolled back already) and successes that wrote nothing,
// unless a job before them in their group runs again. The others' jobs are
// handed back, to run again after it.
func outlive(ran []heldOutcome) []outcome {
	again := map[string]bool{}
	var keep []outcome
	for _, o := range ran {
		group := o.row.GroupKey
		switch {
		case group != "" && again[group]:
		case o.err == nil && o.wrote:
			if group != "" {
				again[group] = true
			}
		default:
			keep = append(keep, o.outcome)
		}
	}
	return keep
}

// settleLost records, from another connection, what a lost job transaction
// could not. With terminate, the session is still open (an abandoned
// handler may be using it) and is ended first. Then every attempt that ran
// is recorded as failed (a success among them is retried, since its writes
// were rolled back), and the jobs the session claimed without running them
// are handed back with their attempt returned. A rescuer leaves all of these
// alone while this process holds its worker lock, so this must happen here;
// it keeps trying while the database is away, until the hard shutdown.
func (r *runner) settleLost(pid uint32, ran []heldOutcome, cause error, terminate bool) {
	// A statement the server refused may be refused again: those attempts
	// wait their backoff. A session that went away is no one's fault.
	refused := refusal(cause)
	outs := make([]outcome, len(ran))
	for i, o := range ran {
		switch {
		case o.lost || (o.err == nil && !refused):
			o.err = fmt.Errorf("worker lost its database session during the attempt, so its writes were rolled back: %w", cause)
			o.retryNow = true
		case o.err == nil:
			o.err = fmt.Errorf("recording the attempt failed, so its writes were rolled back: %w", cause)
		}
		outs[i] = o.outcome
	}
	r.recordLost(pid, outs, terminate)
}

// recordLost records outs as they are, from another connection, for a job
// transaction that is gone or cannot commit, and hands back the jobs its
// session claimed that are not among them (see settleLost).
func (r *runner) recordLost(pid uint32, outs []outcome, terminate bool) {
	hard := r.hard
	var delay retryDelay
	// busy: the groups that the tries which recorded outs left to move on,
	// for recorded to hand over even if a try failed after recording.
	var busy []string
	for try := 1; ; try++ {
		res, err := r.settleLostOnce(pid, outs, terminate)
		busy = append(busy, res.Busy...)
		if err == nil {
			// Should some be refused (a commit whose reply was lost went
			// through, or the jobs moved on), recorded says what the
			// database shows.
			res.Busy = busy
			r.w.recorded(hard, r.q.name, outs, res)
			return
		}
		if hard.Err() != nil || (refusal(err) && try >= 3) {
			r.w.log.Error("pgtask: could not record the attempts of a lost job transaction; rescuers will once this process is gone",
				"queue", r.q.name, "pid", pid, "jobs", len(outs), "error", err)
			r.w.recorded(hard, r.q.name, nil, gen.SettleJobsRow{Busy: busy})
			return
		}
		wait := delay.next()
		r.w.log.Warn("pgtask: recording the attempts of a lost job transaction failed; retrying",
			"queue", r.q.name, "pid", pid, "error", err, "retry_in", wait)
		sleep(hard, wait)
	}
}

// settleLostOnce records outs and hands back the session's other jobs. Its
// reply is that of the statement that recorded outs, when it went through,
// even if the hand-back then failed.
func (r *runner) settleLostOnce(pid uint32, outs []outcome, terminate bool) (gen.SettleJobsRow, error) {
	var res gen.SettleJobsRow
	ctx, cancel := bookCtx(r.hard)
	defer cancel()
	conn, err := r.w.pool.Acquire(ctx)
	if err != nil {
		return res, err
	}
	defer conn.Release()
	q := gen.New(conn)
	if terminate {
		// Rolls back the job transaction and releases its locks; false
		// means the session is gone already.
		if _, err := q.TerminateBackend(ctx, int32(pid)); err != nil {
			return res, fmt.Errorf("end session %d: %w", pid, err)
		}
	}
	if len(outs) > 0 {
		// Waits for the ended session's row locks, then records.
		if res, err = settleNow(ctx, conn, r.q.name, outs); err != nil {
			return gen.SettleJobsRow{}, fmt.Errorf("record attempts: %w", err)
		}
	}
	if _, err := q.HandBack(ctx, gen.HandBackParams{
		OwnerPid: pgtype.Int4{Int32: int32(pid), Valid: true}, WorkerID: pgtype.Int4{Int32: r.w.id, Valid: true},
	}); err != nil {
		return res, fmt.Errorf("hand back unstarted jobs: %w", err)
	}
	return res, nil
}

// collectHeld reads the ids a job transaction's lock statement locked.
func collectHeld(ids *[]int64) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		var err error
		if *ids, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
			return fmt.Errorf("lock claimed jobs: %w", err)
		}
		return nil
	}
}
