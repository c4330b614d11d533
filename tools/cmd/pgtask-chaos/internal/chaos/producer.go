package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/tools/cmd/pgtask-chaos/internal/chaosdb"
)

// producerCount is how many goroutines enqueue; each owns a share of the
// groups, so every group is enqueued by one goroutine, in order.
const producerCount = 4

// production is what the producers share.
type production struct {
	pool  *pgxpool.Pool
	total int           // jobs to commit
	over  time.Duration // pace
	begin time.Time

	committed atomic.Int64 // jobs committed
	handedOut atomic.Int64 // ids handed out (jobs' and batches' callbacks'), committed or not
	callbacks atomic.Int64 // batches' callbacks committed
	anomalies chan string  // a commit that took only part of its jobs
	// cancels receives the committed workflows an operator is to cancel
	// (see canceller); nil for none.
	cancels chan<- plannedCancel
}

// producer enqueues one share of the jobs. Each transaction enqueues its
// jobs and records them in pgtask_chaos.enqueued, so a job exists if and
// only if its record does; that settles a commit whose outcome was lost
// with the connection. Some transactions roll back, wholly or to a
// savepoint; their ids are recorded afterwards as not committed.
type producer struct {
	*production
	rng    *rand.Rand
	items  []item
	groups []string
	// With marks, the producer enqueues its items one at a time, the k-th
	// once share() (the finished share of the run's jobs) reaches marks[k],
	// and rolls nothing back: it enqueues the long jobs.
	marks []float64
	share func() float64
	// limited: the producer enqueues the limited jobs, its ghosts are
	// limited too, and it keeps to a pace of its own, so that its jobs
	// spread over the whole run (they are far fewer than the others).
	limited bool
	own     struct{ total, committed int }
	// flows and batches count the workflows and batches planned so far,
	// from the producer's index on: every third workflow is cancelled by an
	// operator, every other batch has a job that fails for good.
	flows, batches int
	// flowsPlanned counts this producer's own workflows.
	flowsPlanned int

	pending []notCommitted // not yet recorded
}

type notCommitted struct {
	ids    []int64
	groups []string
	reason string
}

func (p *producer) run(ctx context.Context) error {
	if p.marks != nil {
		return p.runMarked(ctx)
	}
	for len(p.items) > 0 {
		if err := p.pace(ctx); err != nil {
			return err
		}
		var err error
		switch r := p.rng.Float64(); {
		case r < 0.42:
			err = p.commit(ctx, plainUnit(p.take(1+p.rng.IntN(40)), howEnqueueMany), false)
		case r < 0.45 && !p.limited:
			err = p.commit(ctx, p.planBatch(p.take(2+p.rng.IntN(19))), false)
		case r < 0.45:
			err = p.commit(ctx, plainUnit(p.take(1+p.rng.IntN(40)), howEnqueueMany), false)
		case r < 0.80:
			err = p.commit(ctx, plainUnit(p.take(1+p.rng.IntN(4)), howEnqueue), false)
		case r < 0.85:
			err = p.commit(ctx, plainUnit(p.take(1+p.rng.IntN(20)), howEnqueueMany), true)
		case r < 0.90 && !p.limited:
			items := p.take(2 + p.rng.IntN(30))
			if slices.ContainsFunc(items, func(it item) bool { return it.behavior == behavePoison }) {
				// A poison job stays in its group, where check 5 holds it
				// to its attempts: as a step, a failed parent could cancel it.
				err = p.commit(ctx, plainUnit(items, howEnqueueMany), false)
				break
			}
			err = p.commit(ctx, p.planWorkflow(items), false)
		default:
			err = p.rollback(ctx)
		}
		if err != nil {
			return err
		}
		p.flush(ctx, false)
	}
	p.flush(ctx, true)
	if len(p.pending) > 0 {
		return fmt.Errorf("producer: could not record %d transactions that did not commit", len(p.pending))
	}
	return ctx.Err()
}

// runMarked enqueues each item once the run has finished its mark's share
// of the jobs.
func (p *producer) runMarked(ctx context.Context) error {
	for k := 0; len(p.items) > 0; k++ {
		for ctx.Err() == nil && p.share() < p.marks[k] {
			sleep(ctx, 50*time.Millisecond)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		how := howEnqueue
		if p.rng.IntN(2) == 0 {
			how = howEnqueueMany
		}
		if err := p.commit(ctx, plainUnit(p.take(1), how), false); err != nil {
			return err
		}
		p.flush(ctx, false)
	}
	p.flush(ctx, true)
	if len(p.pending) > 0 {
		return fmt.Errorf("producer: could not record %d transactions that did not commit", len(p.pending))
	}
	return ctx.Err()
}

// pace keeps the producers on schedule to finish after p.over.
func (p *producer) pace(ctx context.Context) error {
	if p.over <= 0 {
		return ctx.Err()
	}
	done := float64(p.committed.Load()) / float64(p.total)
	if p.limited {
		done = float64(p.own.committed) / float64(p.own.total)
	}
	due := p.begin.Add(time.Duration(float64(p.over) * done))
	if wait := time.Until(due); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
	return ctx.Err()
}

func (p *producer) take(n int) []item {
	n = min(n, len(p.items))
	out := p.items[:n]
	p.items = p.items[n:]
	return out
}

func request(it item) (runtime.EnqueueRequest, error) {
	limited := it.limit != nil || it.rate != nil
	body, err := json.Marshal(payload{Group: it.group, Seq: it.seq, Behavior: it.behavior, Limited: limited})
	if err != nil {
		return runtime.EnqueueRequest{}, err
	}
	req := runtime.EnqueueRequest{Kind: kindOf(it.behavior, limited), Payload: body}
	req.Apply(runtime.WithQueue(queueName), runtime.WithGroup(it.group), runtime.WithMaxAttempts(maxAttemptsOf(it.behavior)))
	if it.limit != nil {
		req.Apply(runtime.WithLimit(it.limit.key, it.limit.max))
	}
	if it.rate != nil {
		req.Apply(runtime.WithRate(it.rate.key, it.rate.n, time.Second), runtime.WithRateBurst(it.rate.burst))
	}
	if it.tenant != "" {
		req.Apply(runtime.WithTenant(it.tenant))
	}
	return req, nil
}

// requests are the enqueue requests of items.
func requests(items []item) ([]runtime.EnqueueRequest, error) {
	reqs := make([]runtime.EnqueueRequest, len(items))
	for i, it := range items {
		req, err := request(it)
		if err != nil {
			return nil, err
		}
		reqs[i] = req
	}
	return reqs, nil
}

// enqueue inserts items in tx, in one EnqueueMany or one Enqueue each. It
// returns the ids it got, also when it fails part way.
func enqueue(ctx context.Context, tx pgx.Tx, items []item, how string) ([]int64, error) {
	reqs, err := requests(items)
	if err != nil {
		return nil, err
	}
	var ids []int64
	if how == howEnqueueMany {
		got, err := runtime.EnqueueMany(ctx, tx, reqs)
		if err != nil {
			return nil, err
		}
		for _, id := range got {
			ids = append(ids, int64(id))
		}
		return ids, nil
	}
	for _, req := range reqs {
		id, err := runtime.Enqueue(ctx, tx, req)
		if err != nil {
			return ids, err
		}
		ids = append(ids, int64(id))
	}
	return ids, nil
}

// unit is what one producer transaction commits: its jobs, how they are
// enqueued, how each must end, and for a workflow or a batch its shape.
type unit struct {
	items   []item
	how     string // one of the how values below
	expects []string
	flow    *flowPlan
	batch   *batchPlan
}

// How a unit's jobs are enqueued, as recorded in pgtask_chaos.enqueued.how.
const (
	howEnqueueMany  = "enqueue_many"  // runtime.EnqueueMany
	howEnqueue      = "enqueue"       // runtime.Enqueue, one call a job
	howWorkflow     = "workflow"      // Workflow.Enqueue
	howEnqueueBatch = "enqueue_batch" // runtime.EnqueueBatch, with both callbacks
)

// plainUnit is items enqueued with EnqueueMany or Enqueue: each ends as its
// behavior says.
func plainUnit(items []item, how string) unit {
	u := unit{items: items, how: how, expects: make([]string, len(items))}
	for i, it := range items {
		u.expects[i] = expectOf(it.behavior)
	}
	return u
}

// flowPlan is a workflow's shape: each step's parents, and whether the
// workflow must end cancelled as a whole.
type flowPlan struct {
	deps [][]flowDep
	// cancelExpected: a parent whose edge says OrCancelWorkflow does not
	// succeed, so the workflow must be cancelled as a whole.
	cancelExpected bool
	// operatorCancel: an operator cancels it (CancelWorkflowByID) soon
	// after its commit, while its steps run.
	operatorCancel bool
}

type flowDep struct {
	parent int
	policy runtime.FailurePolicy
}

// policyRank orders the failure policies as Workflow.Add does when a step
// names one parent twice: the strictest wins.
func policyRank(p runtime.FailurePolicy) int {
	switch p {
	case runtime.RunAnyway:
		return 0
	case runtime.CancelDependent:
		return 1
	}
	return 2
}

// drawPolicy draws an edge's failure policy: mostly the default (After),
// a quarter Anyway, some OrCancelWorkflow.
func drawPolicy(rng *rand.Rand) runtime.FailurePolicy {
	switch r := rng.Float64(); {
	case r < 0.6:
		return runtime.CancelDependent
	case r < 0.85:
		return runtime.RunAnyway
	}
	return runtime.CancelWorkflow
}

// Shares of the workflows with steps that fail for good, and of the
// callbacks that fail their first attempt.
const (
	flowFailShare     = 0.7
	callbackFailShare = 0.2
)

// planWorkflow makes items, taken out of their groups, a workflow: each
// step after the first depends on an earlier one and the last also on all
// the others (a chain, forks and a fan-in), each edge with a failure policy
// drawn by drawPolicy, except the fan-in's: its edges from the steps other
// than its tree parent are all After or all Anyway, and its edge from its
// tree parent takes the stricter of that and its own draw. Most
// workflows get one or two steps that fail for good (NoRetry, or every
// attempt until their last), not the last one. From the policies it works
// out how each step must end: a step after a parent that does not succeed,
// under After or OrCancelWorkflow, is cancelled and never runs; under
// Anyway it runs. A workflow with such a parent under OrCancelWorkflow, or
// one an operator cancels (every third), may end any
// unfinished step cancelled.
//
// A producer's first three workflows are drawn so that even a short run,
// with a workflow or two per producer, sees each outcome the checks must
// judge (producers start their turns at their index): on the turn an
// operator cancels, as above; on the next, the step before the last fails
// for good, no other does, and the last runs after it under Anyway; on the
// one after, that step's failure cancels the workflow (OrCancelWorkflow).
func (p *producer) planWorkflow(items []item) unit {
	items = ungrouped(items)
	n := len(items)
	shape := flowDrawn
	if p.flowsPlanned < 3 && n > 1 {
		shape = []flowShape{flowDrawn, flowAnywayRuns, flowFailureCancels}[p.flows%3]
	}
	switch {
	case shape != flowDrawn:
		for k := range items {
			if failsForGood(items[k].behavior) {
				items[k].behavior = behaveOK
			}
		}
		items[n-2].behavior = behaveNoRetry
	case n > 1 && p.rng.Float64() < flowFailShare:
		for range 1 + p.rng.IntN(2) {
			k := p.rng.IntN(n - 1)
			items[k].behavior = []string{behaveNoRetry, behaveExhaust}[p.rng.IntN(2)]
		}
	}
	fanIn := runtime.CancelDependent
	if p.rng.IntN(2) == 0 {
		fanIn = runtime.RunAnyway
	}
	deps := flowDeps(n, func() runtime.FailurePolicy { return drawPolicy(p.rng) }, fanIn)
	if shape != flowDrawn {
		// The last step's edge from the failing step: the only edge a
		// failure crosses, as the failing step has no other dependent.
		for i, d := range deps[n-1] {
			if d.parent == n-2 {
				deps[n-1][i].policy = map[flowShape]runtime.FailurePolicy{
					flowAnywayRuns: runtime.RunAnyway, flowFailureCancels: runtime.CancelWorkflow,
				}[shape]
			}
		}
	}
	fp := &flowPlan{deps: deps, operatorCancel: p.flows%3 == 0}
	p.flows++
	p.flowsPlanned++
	u := unit{items: items, how: howWorkflow, flow: fp}
	u.expects, fp.cancelExpected = flowEnds(items, fp.deps)
	return u
}

// flowShape is how planWorkflow draws a workflow's failures and policies.
type flowShape int

const (
	flowDrawn          flowShape = iota // failures and policies drawn at random
	flowAnywayRuns                      // one failure, crossed under Anyway
	flowFailureCancels                  // one failure, crossed under OrCancelWorkflow
)

// flowDeps are the parents of a workflow of n steps: each step after the
// first depends on its tree parent ((i-1)/2) under a policy draw gives, and
// the last (the fan-in) also on all the others under fanIn; its edge from
// its tree parent takes the stricter of its draw and fanIn.
func flowDeps(n int, draw func() runtime.FailurePolicy, fanIn runtime.FailurePolicy) [][]flowDep {
	deps := make([][]flowDep, n)
	for i := 1; i < n; i++ {
		tree := (i - 1) / 2
		deps[i] = []flowDep{{tree, draw()}}
		if i < n-1 {
			continue
		}
		for k := range i {
			if k != tree {
				deps[i] = append(deps[i], flowDep{k, fanIn})
			} else if policyRank(fanIn) > policyRank(deps[i][0].policy) {
				deps[i][0].policy = fanIn
			}
		}
	}
	return deps
}

// flowEnds works out how each step of a workflow of items with parents
// deps must end, and whether the workflow must end cancelled as a whole: a
// step after a parent that does not succeed, under After or
// OrCancelWorkflow, is cancelled; under Anyway it ends as its behavior
// says; a parent under OrCancelWorkflow that does not succeed cancels the
// workflow.
func flowEnds(items []item, deps [][]flowDep) (expects []string, cancelExpected bool) {
	expects = make([]string, len(items))
	for i := range items {
		expects[i] = expectOf(items[i].behavior)
		for _, d := range deps[i] {
			if expects[d.parent] == endSucceeded {
				continue
			}
			if d.policy != runtime.RunAnyway {
				expects[i] = endCancelled
			}
			if d.policy == runtime.CancelWorkflow {
				cancelExpected = true
			}
		}
	}
	return expects, cancelExpected
}

// batchPlan is a batch's callbacks: what their handlers do, and whether
// the OnFailure one must run.
type batchPlan struct {
	finish, failure string // behaviors of the OnFinish and OnFailure callbacks
	expectFailure   bool
}

// planBatch makes items a batch (runtime.EnqueueBatch) with both callbacks.
// Every other batch gets a job that fails for good
// (NoRetry, or every attempt until its last); a callback fails its first
// attempt now and then.
func (p *producer) planBatch(items []item) unit {
	items = slices.Clone(items)
	if k := p.rng.IntN(len(items)); p.batches%2 == 0 && items[k].behavior != behavePoison {
		items[k].behavior = []string{behaveNoRetry, behaveExhaust}[p.rng.IntN(2)]
	}
	p.batches++
	callback := func() string {
		if p.rng.Float64() < callbackFailShare {
			return behaveFail
		}
		return behaveOK
	}
	u := plainUnit(items, howEnqueueBatch)
	u.batch = &batchPlan{finish: callback(), failure: callback(), expectFailure: slices.Contains(u.expects, endFailed)}
	return u
}

// callbackRequest is a batch's callback: which is "finish" or "failure".
func callbackRequest(which, behavior string) (*runtime.EnqueueRequest, error) {
	body, err := json.Marshal(payload{Behavior: behavior, Callback: which})
	if err != nil {
		return nil, err
	}
	req := runtime.EnqueueRequest{Kind: kindCallback, Payload: body}
	req.Apply(runtime.WithQueue(queueName), runtime.WithMaxAttempts(maxAttemptsOf(behavior)))
	return &req, nil
}

// ungrouped takes items out of their groups: a workflow's steps here are
// ungrouped, so that a step waiting for its parents holds up no group (a
// parked step at a group's head stops the group until its parents
// succeed, and steps spread over many groups would chain them all).
func ungrouped(items []item) []item {
	out := make([]item, len(items))
	for i, it := range items {
		it.group = ""
		out[i] = it
	}
	return out
}

// enqueueWorkflow inserts u's items in tx as one workflow, with the
// dependencies of u.flow, and returns their ids and the workflow's.
func enqueueWorkflow(ctx context.Context, tx pgx.Tx, u unit) ([]int64, runtime.WorkflowID, error) {
	reqs, err := requests(u.items)
	if err != nil {
		return nil, 0, err
	}
	wf := runtime.NewWorkflow("chaos")
	steps := make([]runtime.Step, len(reqs))
	for i := range reqs {
		var deps []runtime.StepOption
		for _, d := range u.flow.deps[i] {
			switch d.policy {
			case runtime.RunAnyway:
				deps = append(deps, runtime.AfterAnyway(steps[d.parent]))
			case runtime.CancelWorkflow:
				deps = append(deps, runtime.AfterOrCancelWorkflow(steps[d.parent]))
			default:
				deps = append(deps, runtime.After(steps[d.parent]))
			}
		}
		steps[i] = wf.Add(reqs[i], deps...)
	}
	id, err := wf.Enqueue(ctx, tx)
	if err != nil {
		return nil, 0, err
	}
	ids := make([]int64, len(reqs))
	for i, jid := range wf.JobIDs() {
		ids[i] = int64(jid)
	}
	return ids, id, nil
}

// enqueueBatched inserts u's items in tx as one batch with both callbacks
// and returns their ids, the callbacks' (read back from the batch, so that
// a transaction that does not commit records them as not committed too)
// and the batch's.
func enqueueBatched(ctx context.Context, tx pgx.Tx, u unit) (ids, callbacks []int64, _ runtime.BatchID, _ error) {
	reqs, err := requests(u.items)
	if err != nil {
		return nil, nil, 0, err
	}
	onFinish, err := callbackRequest("finish", u.batch.finish)
	if err != nil {
		return nil, nil, 0, err
	}
	onFailure, err := callbackRequest("failure", u.batch.failure)
	if err != nil {
		return nil, nil, 0, err
	}
	id, got, err := runtime.EnqueueBatch(ctx, tx, reqs, runtime.BatchOptions{OnFinish: onFinish, OnFailure: onFailure})
	if err != nil {
		return nil, nil, 0, err
	}
	ids = make([]int64, len(got))
	for i, jid := range got {
		ids[i] = int64(jid)
	}
	b, err := runtime.GetBatch(ctx, tx, id)
	if err != nil {
		return ids, nil, id, err
	}
	return ids, []int64{int64(b.OnFinish), int64(b.OnFailure)}, id, nil
}

// ghosts are jobs enqueued only to be rolled back, into this producer's
// groups or ungrouped; the limited producer's with a limit: their enqueue
// takes slots of their key, which the rollback gives back.
func (p *producer) ghosts(n int) []item {
	out := make([]item, n)
	for i := range out {
		out[i] = item{seq: -1, behavior: behaveOK}
		if p.limited {
			out[i].limit = &limitKeys[p.rng.IntN(len(limitKeys))]
		}
		if len(p.groups) > 0 && p.rng.Float64() < 0.8 {
			out[i].group = p.groups[p.rng.IntN(len(p.groups))]
		}
	}
	return out
}

func groupsOf(items []item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.group
	}
	return out
}

// handedGroups are the groups of the first n ids a unit of items was
// handed: its items' in order, then none for its batch's callbacks.
func handedGroups(items []item, n int) []string {
	out := groupsOf(items[:min(n, len(items))])
	for len(out) < n {
		out = append(out, "")
	}
	return out
}

// commit enqueues u in one transaction and commits it, trying again
// after a failure until it is committed (the same items, so each group's
// order stays). With ghostsFirst the transaction first enqueues some
// ghosts in a savepoint and rolls back to it. A committed workflow an
// operator is to cancel goes to the canceller.
func (p *producer) commit(ctx context.Context, u unit, ghostsFirst bool) error {
	backoff := 50 * time.Millisecond
	for {
		ids, wf, pid, err := p.tryCommit(ctx, u, ghostsFirst)
		if ids != nil {
			p.handedOut.Add(int64(len(ids)))
		}
		if err == nil {
			p.committedUnit(ctx, u, wf)
			return nil
		}
		var unknown *commitUnknown
		if errors.As(err, &unknown) {
			committed, err := p.settle(ctx, ids, pid)
			if err != nil {
				return err
			}
			if committed {
				p.committedUnit(ctx, u, wf)
				return nil
			}
		}
		if len(ids) > 0 {
			p.pending = append(p.pending, notCommitted{ids: ids, groups: handedGroups(u.items, len(ids)), reason: "failed"})
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		sleep(ctx, backoff)
		backoff = min(2*backoff, time.Second)
	}
}

// committedUnit counts u's jobs as committed and hands a workflow an
// operator is to cancel to the canceller, due within cancelWithin.
func (p *producer) committedUnit(ctx context.Context, u unit, wf runtime.WorkflowID) {
	p.committedItems(len(u.items))
	if u.batch != nil {
		p.callbacks.Add(2)
	}
	if u.flow == nil || !u.flow.operatorCancel || p.cancels == nil {
		return
	}
	due := time.Now().Add(time.Duration(p.rng.Int64N(int64(cancelWithin))))
	select {
	case p.cancels <- plannedCancel{id: wf, due: due}:
	case <-ctx.Done():
	}
}

func (p *producer) committedItems(n int) {
	p.committed.Add(int64(n))
	p.own.committed += n
}

// commitUnknown is a failed COMMIT: the transaction may have committed.
type commitUnknown struct{ err error }

func (e *commitUnknown) Error() string { return "commit: " + e.err.Error() }

// tryCommit returns the ids it was handed (u's items' in order, then a
// batch's callbacks'), the workflow's id for a workflow, and the
// transaction's backend pid.
func (p *producer) tryCommit(ctx context.Context, u unit, ghostsFirst bool) ([]int64, runtime.WorkflowID, uint32, error) {
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return nil, 0, 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	pid := tx.Conn().PgConn().PID()
	if ghostsFirst {
		ghosts := p.ghosts(1 + p.rng.IntN(5))
		sp, err := tx.Begin(ctx)
		if err != nil {
			return nil, 0, pid, err
		}
		gids, gerr := enqueue(ctx, sp, ghosts, howEnqueueMany)
		if len(gids) > 0 {
			p.handedOut.Add(int64(len(gids)))
			p.pending = append(p.pending, notCommitted{ids: gids, groups: groupsOf(ghosts), reason: "savepoint"})
		}
		if err := sp.Rollback(ctx); err != nil {
			return nil, 0, pid, err
		}
		if gerr != nil {
			return nil, 0, pid, gerr
		}
	}
	var ids, callbacks []int64
	var wf runtime.WorkflowID
	var batch runtime.BatchID
	switch u.how {
	case howWorkflow:
		ids, wf, err = enqueueWorkflow(ctx, tx, u)
	case howEnqueueBatch:
		ids, callbacks, batch, err = enqueueBatched(ctx, tx, u)
	default:
		ids, err = enqueue(ctx, tx, u.items, u.how)
	}
	handed := append(slices.Clone(ids), callbacks...)
	if err != nil {
		return handed, 0, pid, err
	}
	seqs := make([]int32, len(u.items))
	behaviors := make([]string, len(u.items))
	limitKeys := make([]string, len(u.items))
	limitMaxes := make([]int32, len(u.items))
	for i, it := range u.items {
		seqs[i] = int32(it.seq)
		behaviors[i] = it.behavior
		if it.limit != nil {
			limitKeys[i], limitMaxes[i] = it.limit.key, int32(it.limit.max)
		}
	}
	q := chaosdb.New(tx)
	err = q.RecordEnqueued(ctx, chaosdb.RecordEnqueuedParams{
		JobIds: ids, GroupKeys: groupsOf(u.items), Seqs: seqs, Behaviors: behaviors, How: u.how,
		LimitKeys: limitKeys, LimitMaxes: limitMaxes, Expects: u.expects,
	})
	if err != nil {
		return handed, 0, pid, err
	}
	switch {
	case u.flow != nil:
		err = q.RecordWorkflow(ctx, chaosdb.RecordWorkflowParams{
			WorkflowID: int64(wf), Steps: int32(len(ids)),
			CancelExpected: u.flow.cancelExpected, OperatorCancel: u.flow.operatorCancel,
		})
	case u.batch != nil:
		err = q.RecordBatch(ctx, chaosdb.RecordBatchParams{
			BatchID: int64(batch), Jobs: int32(len(ids)), ExpectFailure: u.batch.expectFailure,
			FinishBehavior: u.batch.finish, FailureBehavior: u.batch.failure,
		})
	}
	if err != nil {
		return handed, 0, pid, err
	}
	if err := tx.Commit(ctx); err != nil {
		return handed, wf, pid, &commitUnknown{err}
	}
	return handed, wf, pid, nil
}

// settle finds out whether a transaction whose COMMIT failed committed:
// once its session is gone, its jobs' records exist if and only if it did.
func (p *producer) settle(ctx context.Context, ids []int64, pid uint32) (bool, error) {
	q := chaosdb.New(p.pool)
	since := time.Now()
	for {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		alive, err := q.BackendExists(ctx, int32(pid))
		// A live pid after a while belongs to another session by now.
		if err == nil && (!alive || time.Since(since) > 10*time.Second) {
			got, err := q.CommittedAmong(ctx, ids)
			if err == nil {
				switch len(got) {
				case len(ids):
					return true, nil
				case 0:
					return false, nil
				}
				p.anomaly(fmt.Sprintf("a transaction enqueueing jobs %v committed only %v", ids, got))
				return true, nil
			}
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

func (p *producer) anomaly(s string) {
	select {
	case p.anomalies <- s:
	default:
	}
}

// rollback enqueues ghosts in a transaction and rolls it back.
func (p *producer) rollback(ctx context.Context) error {
	ghosts := p.ghosts(1 + p.rng.IntN(10))
	how := howEnqueueMany
	if p.rng.IntN(2) == 0 {
		how = howEnqueue
	}
	tx, err := p.pool.Begin(ctx)
	if err != nil {
		return nil // the database is away; the next step tries again
	}
	ids, _ := enqueue(ctx, tx, ghosts, how)
	tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // the connection goes away if this fails, which rolls back too
	if len(ids) > 0 {
		p.handedOut.Add(int64(len(ids)))
		p.pending = append(p.pending, notCommitted{ids: ids, groups: groupsOf(ghosts[:len(ids)]), reason: "rollback"})
	}
	return nil
}

// flush records the ids that did not commit; with wait it keeps trying
// (the database may be restarting) for up to a minute.
func (p *producer) flush(ctx context.Context, wait bool) {
	q := chaosdb.New(p.pool)
	deadline := time.Now().Add(time.Minute)
	for len(p.pending) > 0 {
		n := p.pending[0]
		// Not bounded by ctx: these records are needed by the checks even
		// when the run is cut short.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err := q.RecordNotCommitted(rctx, chaosdb.RecordNotCommittedParams{JobIds: n.ids, GroupKeys: n.groups, Reason: n.reason})
		cancel()
		if err == nil {
			p.pending = p.pending[1:]
			continue
		}
		if !wait || time.Now().After(deadline) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// cancelWithin bounds how long after its commit an operator cancels a
// workflow planned for it: soon, while its steps run.
const cancelWithin = time.Second

// plannedCancel is a workflow an operator is to cancel, and when.
type plannedCancel struct {
	id  runtime.WorkflowID
	due time.Time
}

// canceller is the operator who cancels workflows as a whole
// (runtime.CancelWorkflowByID) while their steps run: each workflow the
// producers planned it for, once its due time has come. Each cancel runs in
// a transaction that also records it in pgtask_chaos.operator_cancels, so
// the record exists if and only if the cancel committed; a cancel that
// failed is tried again (a second cancel of a cancelled workflow marks
// nothing) until it is committed or the run ends. Its failures are counted
// and the last kept; a workflow whose cancel never committed is a problem
// of the run (see MissedOperatorCancels).
type canceller struct {
	pool *pgxpool.Pool
	in   chan plannedCancel

	failures atomic.Int64
	mu       sync.Mutex
	lastErr  error
}

// failed counts a failed try to cancel workflow id.
func (c *canceller) failed(id runtime.WorkflowID, err error) {
	c.failures.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastErr = fmt.Errorf("cancel workflow %d: %w", id, err)
}

// last is the last failure, nil for none.
func (c *canceller) last() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastErr
}

func (c *canceller) run(ctx context.Context) {
	for pc := range c.in {
		if ctx.Err() != nil {
			continue // the run is over: drain
		}
		sleep(ctx, time.Until(pc.due))
		backoff := 50 * time.Millisecond
		for ctx.Err() == nil {
			err := c.cancel(ctx, pc.id)
			if err == nil {
				break
			}
			if ctx.Err() == nil {
				c.failed(pc.id, err)
			}
			sleep(ctx, backoff)
			backoff = min(2*backoff, time.Second)
		}
	}
}

func (c *canceller) cancel(ctx context.Context, id runtime.WorkflowID) error {
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	marked, err := runtime.CancelWorkflowByID(ctx, tx, id)
	if err != nil {
		return err
	}
	if err := chaosdb.New(tx).RecordOperatorCancel(ctx, chaosdb.RecordOperatorCancelParams{WorkflowID: int64(id), Marked: marked}); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
