package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/gen"
)

// WorkflowID identifies a workflow (see Workflow).
type WorkflowID int64

// The bounds of one workflow, checked before anything is sent: it is
// enqueued in one statement.
const (
	MaxWorkflowSteps = 100_000
	MaxWorkflowEdges = 1_000_000
	// MaxWorkflowNameBytes bounds a workflow's name.
	MaxWorkflowNameBytes = 128
)

// FailurePolicy says what a parent's failure for good (or its cancel, or
// its delete before it finished) does to a step that depends on it.
type FailurePolicy uint8

const (
	// CancelDependent cancels the dependent step, and so in turn the steps
	// that depend on it under this policy. The default.
	CancelDependent FailurePolicy = iota
	// RunAnyway lets the dependent run once its other parents allow it: a
	// clean-up step. Reading the failed parent's result returns an error
	// that wraps ErrParentFailed.
	RunAnyway
	// CancelWorkflow cancels the whole workflow: its steps not started are
	// cancelled, its running ones asked to stop, and none is started any
	// more.
	CancelWorkflow
)

func (p FailurePolicy) code() string {
	switch p {
	case RunAnyway:
		return "a"
	case CancelWorkflow:
		return "w"
	}
	return "c"
}

func (p FailurePolicy) String() string {
	switch p {
	case CancelDependent:
		return "cancel"
	case RunAnyway:
		return "anyway"
	case CancelWorkflow:
		return "cancel-workflow"
	}
	return fmt.Sprintf("FailurePolicy(%d)", uint8(p))
}

// ErrParentFailed is wrapped by the error of Input.Get when the parent
// failed for good, was cancelled or deleted, and the step ran anyway
// (RunAnyway).
var ErrParentFailed = errors.New("pgtask: the parent step did not succeed")

// ErrParentGone is wrapped by the error of Input.Get when the parent's
// job is gone (retention deleted it, or a delete by hand), so its result
// can no longer be read.
var ErrParentGone = errors.New("pgtask: the parent step's job is gone")

// ErrParentNotFinished is wrapped by the error of Input.Get when the
// parent has not finished: a step that runs anyway after a parent which an
// operator retried meanwhile. The step's attempt fails and is retried.
var ErrParentNotFinished = errors.New("pgtask: the parent step has not finished")

// ErrWorkflowNotFound is returned by GetWorkflow for an id with no workflow.
var ErrWorkflowNotFound = errors.New("pgtask: workflow not found")

// Workflow is a set of jobs with dependencies between them, built step by
// step and enqueued in one statement (Enqueue). A step starts only when all
// its parents have succeeded; what a parent's failure does is the
// dependency's FailurePolicy. Steps are added with the generated
// Add<Task> functions (typed: a step's Input fields make it depend on the
// steps they are set from) or with Add (untyped). A step's parents are
// steps added before it, so a workflow has no cycle.
//
// A Workflow is not safe for concurrent use. Errors found while building
// (an Input not set, a step of another workflow) are kept and returned by
// Enqueue.
type Workflow struct {
	name  string
	reqs  []EnqueueRequest
	edges []workflowEdge
	ids   []JobID
	id    WorkflowID
	err   error
}

type workflowEdge struct {
	parent, child int
	policy        FailurePolicy
}

// NewWorkflow starts a workflow named name (at most MaxWorkflowNameBytes;
// shown by GetWorkflow, the CLI and the dashboard).
func NewWorkflow(name string) *Workflow { return &Workflow{name: name} }

// Step is a step of a workflow, as Add returns it: pass it to After (or
// AfterAnyway, AfterOrCancelWorkflow) to make another step depend on it.
type Step struct {
	wf    *Workflow
	index int
}

// JobID is the step's job once its workflow was enqueued, 0 before.
func (s Step) JobID() JobID {
	if s.wf == nil || s.index >= len(s.wf.ids) {
		return 0
	}
	return s.wf.ids[s.index]
}

// Index is the step's place in its workflow, from 0, in the order added.
func (s Step) Index() int { return s.index }

func (s Step) workflowStep() Step { return s }

// StepWithResult is a step of a task with a result of type R (see
// TaskWithResult): its Output is an Input[R] for the steps that read it.
type StepWithResult[R any] struct{ Step }

// Output makes a dependency on this step that carries its result: set a
// step's Input[R] field to it. A parent's failure cancels the dependent
// step (see Input.Anyway and Input.OrCancelWorkflow for the others).
func (s StepWithResult[R]) Output() Input[R] {
	return Input[R]{wf: s.wf, step: s.index, set: s.wf != nil}
}

// Stepper is a step of a workflow: Step or StepWithResult.
type Stepper interface{ workflowStep() Step }

// StepOption is an option of a step: an EnqueueOption, or a dependency
// without data (After, AfterAnyway, AfterOrCancelWorkflow).
type StepOption interface{ applyStep(*stepOptions) }

type stepOptions struct {
	opts []EnqueueOption
	deps []Dep
}

func (o EnqueueOption) applyStep(s *stepOptions) { s.opts = append(s.opts, o) }

// Dep is a dependency of a step on a parent, with its failure policy.
type Dep struct {
	wf     *Workflow
	step   int
	policy FailurePolicy
	set    bool
	// field names the Input the dependency came from, for errors.
	field string
}

func (d Dep) applyStep(s *stepOptions) { s.deps = append(s.deps, d) }

// After makes a step depend on s without reading its result: it starts
// only after s succeeded, and is cancelled if s fails for good.
func After(s Stepper) Dep { return depOn(s, CancelDependent) }

// AfterAnyway makes a step depend on s, running once s has finished
// whatever its outcome: a clean-up step.
func AfterAnyway(s Stepper) Dep { return depOn(s, RunAnyway) }

// AfterOrCancelWorkflow makes a step depend on s; a failure of s for good
// cancels the whole workflow.
func AfterOrCancelWorkflow(s Stepper) Dep { return depOn(s, CancelWorkflow) }

func depOn(s Stepper, p FailurePolicy) Dep {
	st := s.workflowStep()
	return Dep{wf: st.wf, step: st.index, policy: p, set: st.wf != nil}
}

// SplitStepOptions separates a step's options into enqueue options and
// dependencies (for generated code).
func SplitStepOptions(opts []StepOption) ([]EnqueueOption, []Dep) {
	var s stepOptions
	for _, o := range opts {
		if o != nil {
			o.applyStep(&s)
		}
	}
	return s.opts, s.deps
}

// Add adds a step to the workflow: req, with the dependencies and enqueue
// options opts (an EnqueueOption applies to req's options). It returns the
// step, to make later steps depend on. A request error is kept and
// returned by Enqueue.
func (wf *Workflow) Add(req EnqueueRequest, opts ...StepOption) Step {
	eo, deps := SplitStepOptions(opts)
	req.Apply(eo...)
	return wf.AddStep(req, nil, deps...)
}

// AddStep adds req as a step depending on deps, or, when reqErr is not
// nil, records it as the workflow's error (for generated code, whose
// request may fail validation).
func (wf *Workflow) AddStep(req EnqueueRequest, reqErr error, deps ...Dep) Step {
	s := Step{wf: wf, index: len(wf.reqs)}
	if wf.err == nil && reqErr != nil {
		wf.err = &EnqueueError{Index: s.index, Kind: req.Kind, Err: reqErr, Batch: true}
	}
	wf.reqs = append(wf.reqs, req)
	seen := map[int]int{}
	for _, d := range deps {
		if wf.err != nil {
			break
		}
		where := "a dependency"
		if d.field != "" {
			where = "input " + d.field
		}
		switch {
		case !d.set:
			wf.err = fmt.Errorf("workflow %q: step %d (%s): %s is not set from a step of this workflow", wf.name, s.index, req.Kind, where)
		case d.wf != wf:
			wf.err = fmt.Errorf("workflow %q: step %d (%s): %s names a step of another workflow", wf.name, s.index, req.Kind, where)
		case d.step >= s.index:
			wf.err = fmt.Errorf("workflow %q: step %d (%s): %s names a step not added before it", wf.name, s.index, req.Kind, where)
		}
		if wf.err != nil {
			break
		}
		if i, ok := seen[d.step]; ok {
			// One edge per parent: the strictest policy wins (cancelling
			// the workflow over cancelling the step over running anyway).
			if rank(d.policy) > rank(wf.edges[i].policy) {
				wf.edges[i].policy = d.policy
			}
			continue
		}
		seen[d.step] = len(wf.edges)
		wf.edges = append(wf.edges, workflowEdge{parent: d.step, child: s.index, policy: d.policy})
	}
	return s
}

func rank(p FailurePolicy) int {
	switch p {
	case RunAnyway:
		return 0
	case CancelDependent:
		return 1
	}
	return 2
}

// Enqueue validates the workflow and inserts all its steps and their
// dependencies in one statement: either all of it exists or none (db may
// be a pool, a connection or a pgx.Tx, as for Enqueue). Steps without
// parents are due at once (or at their RunAt); the others wait, parked,
// until their parents allow them. It refuses, before sending anything, an
// empty workflow, more than MaxWorkflowSteps steps or MaxWorkflowEdges
// dependencies, a step whose request fails the checks of EnqueueMany (an
// *EnqueueError with its index), a unique step, a step with parents and
// RunAt or Delay, and an Input not set from a step of this workflow.
//
// Enqueue leaves the builder as it was, but for the ids it reports (ID,
// JobIDs, Step.JobID): those of the last Enqueue that returned no error.
// So a builder can be enqueued again after a transaction it was enqueued
// in rolled back (a retried transaction); each Enqueue makes a new
// workflow.
func (wf *Workflow) Enqueue(ctx context.Context, db DB) (WorkflowID, error) {
	if err := wf.check(); err != nil {
		return 0, err
	}
	hasParents := make([]bool, len(wf.reqs))
	for _, e := range wf.edges {
		hasParents[e.child] = true
	}
	all := make([]EnqueueRequest, len(wf.reqs))
	for i := range wf.reqs {
		r := wf.reqs[i]
		if err := runEnqueueHooks(ctx, &r); err != nil {
			return 0, &EnqueueError{Index: i, Kind: r.Kind, Err: err, Batch: true}
		}
		if err := r.check(); err != nil {
			return 0, &EnqueueError{Index: i, Kind: r.Kind, Err: err, Batch: true}
		}
		switch {
		case r.UniqueKey != "":
			return 0, &EnqueueError{Index: i, Kind: r.Kind, Err: errors.New("a workflow's steps cannot be unique (their key could name another's job)"), Batch: true}
		case hasParents[i] && (!r.RunAt.IsZero() || r.Delay != 0):
			return 0, &EnqueueError{Index: i, Kind: r.Kind, Err: errors.New("a step with parents cannot have RunAt or Delay: it runs when its parents allow it"), Batch: true}
		}
		r.parked = hasParents[i]
		all[i] = r
	}
	b := newBatch(len(all))
	for i := range all {
		b.add(&all[i])
	}
	parents := make([]int32, len(wf.edges))
	children := make([]int32, len(wf.edges))
	policies := make([]string, len(wf.edges))
	for i, e := range wf.edges {
		parents[i], children[i], policies[i] = int32(e.parent+1), int32(e.child+1), e.policy.code()
	}
	p := b.p
	row, err := gen.New(db).InsertWorkflow(ctx, gen.InsertWorkflowParams{
		Name: wf.name, EdgeParents: parents, EdgeChildren: children, EdgePolicies: policies,
		Payloads: p.Payloads, Settings: p.Settings, Groups: p.Groups, Kinds: p.Kinds, Queues: p.Queues,
		Priorities: p.Priorities, AgingMs: p.AgingMs, MaxAttempts: p.MaxAttempts, FailBlocksGroup: p.FailBlocksGroup,
		RunAt: p.RunAt, DelayUs: p.DelayUs, GroupQueues: p.GroupQueues, GroupKeys: p.GroupKeys,
		UniqueKeys: p.UniqueKeys, UniqueWindowsUs: p.UniqueWindowsUs, UniqueStatuses: p.UniqueStatuses, Metadata: p.Metadata,
		Limits: p.Limits, LimitQueues: p.LimitQueues, LimitKeys: p.LimitKeys, LimitMax: p.LimitMax, LimitStrategies: p.LimitStrategies,
		Rates: p.Rates, RateQueues: p.RateQueues, RateKeys: p.RateKeys, RateN: p.RateN, RatePeriodUs: p.RatePeriodUs,
		RateBurst: p.RateBurst,
		Fair:      p.Fair, FairQueues: p.FairQueues, FairTenants: p.FairTenants,
	})
	if err != nil {
		return 0, fmt.Errorf("enqueue workflow %q of %d step(s): %w", wf.name, len(all), err)
	}
	if len(row.Ids) != len(all) {
		return 0, fmt.Errorf("enqueue workflow %q: %d ids for %d steps", wf.name, len(row.Ids), len(all))
	}
	wf.ids = make([]JobID, len(row.Ids))
	for i, id := range row.Ids {
		wf.ids[i] = JobID(id)
	}
	wf.id = WorkflowID(row.WorkflowID)
	return wf.id, nil
}

// check refuses what Enqueue refuses of the workflow as a whole.
func (wf *Workflow) check() error {
	switch {
	case wf.err != nil:
		return wf.err
	case wf.name == "":
		return errors.New("workflow: the name is empty")
	case len(wf.name) > MaxWorkflowNameBytes:
		return fmt.Errorf("workflow %q: the name is %d bytes, more than the %d allowed", wf.name[:32]+"...", len(wf.name), MaxWorkflowNameBytes)
	case len(wf.reqs) == 0:
		return fmt.Errorf("workflow %q: a workflow needs at least one step", wf.name)
	case len(wf.reqs) > MaxWorkflowSteps:
		return fmt.Errorf("workflow %q: %d steps, more than the %d allowed", wf.name, len(wf.reqs), MaxWorkflowSteps)
	case len(wf.edges) > MaxWorkflowEdges:
		return fmt.Errorf("workflow %q: %d dependencies, more than the %d allowed", wf.name, len(wf.edges), MaxWorkflowEdges)
	}
	for _, e := range wf.edges {
		if e.parent >= e.child || e.parent < 0 {
			// The builder cannot make one; a cycle needs a parent after
			// its child.
			return fmt.Errorf("workflow %q: step %d depends on step %d, not added before it: a cycle", wf.name, e.child, e.parent)
		}
	}
	return nil
}

// ID is the workflow's id once enqueued, 0 before.
func (wf *Workflow) ID() WorkflowID { return wf.id }

// JobIDs are the steps' jobs in the order added, once enqueued.
func (wf *Workflow) JobIDs() []JobID { return wf.ids }

// Input is a step's input read from a parent's result of type R: a field
// of a task, set from the parent's StepWithResult.Output(). Setting it
// makes that step a parent of the step the task is added as (the
// generated Add<Task> reads the task's Input fields). In the handler, Get
// reads the parent's result. A parent whose result is of another type
// than R does not compile.
type Input[R any] struct {
	wf     *Workflow
	step   int
	policy FailurePolicy
	set    bool
}

// Anyway makes the input's step run even if the parent fails for good (or
// is cancelled or deleted): Get then returns an error wrapping
// ErrParentFailed.
func (in Input[R]) Anyway() Input[R] { in.policy = RunAnyway; return in }

// OrCancelWorkflow makes a failure of the parent for good cancel the
// whole workflow.
func (in Input[R]) OrCancelWorkflow() Input[R] { in.policy = CancelWorkflow; return in }

// Dep is the dependency the input makes, field naming it in errors (for
// generated code).
func (in Input[R]) Dep(field string) Dep {
	return Dep{wf: in.wf, step: in.step, policy: in.policy, set: in.set, field: field}
}

// Step is the parent's place in its workflow.
func (in Input[R]) Step() int { return in.step }

type inputJSON struct {
	Step int `json:"pgtask_step"`
}

// MarshalJSON stores the parent's place in the workflow.
func (in Input[R]) MarshalJSON() ([]byte, error) {
	if !in.set {
		return []byte("null"), nil
	}
	return json.Marshal(inputJSON{Step: in.step})
}

// UnmarshalJSON reads the parent's place in the workflow.
func (in *Input[R]) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*in = Input[R]{}
		return nil
	}
	var v inputJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("pgtask: a workflow input: %w", err)
	}
	*in = Input[R]{step: v.Step, set: true}
	return nil
}

// Get reads the parent's result (held mode: in the job's transaction; lease
// mode: through the pool, holding no connection). A parent that
// did not succeed (the step runs anyway) returns an error wrapping
// ErrParentFailed, with the parent's status; a parent retried since
// (unfinished again) one wrapping ErrParentNotFinished; a parent whose job
// is gone (retention) one wrapping ErrParentGone. An input that is not set
// returns a final error saying the job was not enqueued as a workflow step
// with its inputs set (it was enqueued with runtime.Enqueue, say).
func (in Input[R]) Get(ctx context.Context, job *Job) (R, error) {
	var zero R
	if !in.set {
		// A workflow refuses a typed step whose Input is unset, so the job
		// was enqueued some other way (Enqueue, a batch, an untyped step),
		// and no attempt can give it a parent.
		return zero, NoRetry(fmt.Errorf("job %d: the workflow input is not set: the job was not enqueued as a workflow step with its inputs set "+
			"(a task with runtime.Input fields is added to a workflow with its generated Add function)", job.ID))
	}
	raw, err := stepInput(ctx, job, in.step)
	if err != nil {
		return zero, err
	}
	var v R
	if err := json.Unmarshal(raw, &v); err != nil {
		return zero, NoRetry(fmt.Errorf("job %d: decode the result of its parent (step %d): %w", job.ID, in.step, err))
	}
	return v, nil
}

// stepInput reads the result of the parent at step of job's workflow: in
// held mode in the job's transaction, in lease mode through the pool (a
// parent's result is committed before its child starts), so that a lease
// handler holds no connection for it.
func stepInput(ctx context.Context, job *Job, step int) (json.RawMessage, error) {
	var db gen.DBTX = job.tx
	if job.lease != nil {
		db = job.lease.w.pool
	}
	if db == nil {
		return nil, fmt.Errorf("job %d: no transaction to read its parent's result in", job.ID)
	}
	r, err := gen.New(db).StepInput(ctx, gen.StepInputParams{ID: int64(job.ID), Step: int32(step)})
	if errors.Is(err, pgx.ErrNoRows) {
		// A running job's row is there while it runs; gone, it was
		// deleted under its attempt.
		return nil, fmt.Errorf("job %d: read its parent's result: the job is gone", job.ID)
	}
	if err != nil {
		return nil, fmt.Errorf("job %d: read its parent's result: %w", job.ID, err)
	}
	switch {
	case !r.WorkflowID.Valid:
		// Its payload names a step, but no workflow enqueued it: it was
		// copied from a step's, say.
		return nil, NoRetry(fmt.Errorf("job %d: its input names step %d of its workflow, but the job was not enqueued as a workflow step", job.ID, step))
	case !r.Parent.Valid:
		return nil, NoRetry(fmt.Errorf("job %d: step %d of its workflow is not its parent", job.ID, step))
	}
	parent := r.Parent.Int64
	switch {
	case !r.Status.Valid:
		return nil, NoRetry(fmt.Errorf("job %d: parent job %d (step %d) is gone, and its result with it: %w", job.ID, parent, step, ErrParentGone))
	case r.Status.PgtaskJobStatus == gen.PgtaskJobStatusSucceeded:
	case r.Status.PgtaskJobStatus == gen.PgtaskJobStatusFailed || r.Status.PgtaskJobStatus == gen.PgtaskJobStatusCancelled:
		return nil, NoRetry(fmt.Errorf("job %d: parent job %d (step %d) is %s: %w", job.ID, parent, step, r.Status.PgtaskJobStatus, ErrParentFailed))
	default:
		return nil, fmt.Errorf("job %d: parent job %d (step %d) is %s: %w", job.ID, parent, step, r.Status.PgtaskJobStatus, ErrParentNotFinished)
	}
	if len(r.Result) == 0 {
		return json.RawMessage("null"), nil
	}
	return r.Result, nil
}

// WorkflowStatus is where a workflow is.
type WorkflowStatus string

const (
	// WorkflowRunning: some step has not finished.
	WorkflowRunning WorkflowStatus = "running"
	// WorkflowSucceeded: every step succeeded.
	WorkflowSucceeded WorkflowStatus = "succeeded"
	// WorkflowFailed: every step finished, and some failed for good.
	WorkflowFailed WorkflowStatus = "failed"
	// WorkflowCancelled: it was cancelled as a whole (CancelWorkflow, or an
	// operator) and none of its steps is left running or to cancel, or
	// every step finished and some were cancelled, none failed.
	WorkflowCancelled WorkflowStatus = "cancelled"
	// WorkflowCancelling: it was cancelled as a whole, and some of its
	// steps still run (they were asked to stop) or are still to be
	// cancelled (maintenance cancels them).
	WorkflowCancelling WorkflowStatus = "cancelling"
)

// WorkflowState is a workflow's state as one query reads it (GetWorkflow).
type WorkflowState struct {
	ID          WorkflowID
	Name        string
	Status      WorkflowStatus
	Steps       int // as enqueued
	Edges       int
	CreatedAt   time.Time
	CancelledAt *time.Time
	// The steps by status now. Waiting are parked for their parents;
	// Queued are due or scheduled (a retry's backoff); Deleted are gone
	// (retention or a delete by hand).
	Waiting, Queued, Started, Succeeded, Failed, Cancelled, Deleted int
	// FinishedAt is when its last step finished, once none is left to
	// run; nil while running.
	FinishedAt *time.Time
}

// GetWorkflow reads a workflow's state and its steps' counts in one query.
// Its steps, page by page, are in WorkflowSteps.
func GetWorkflow(ctx context.Context, db DB, id WorkflowID) (*WorkflowState, error) {
	r, err := gen.New(db).GetWorkflow(ctx, int64(id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("workflow %d: %w", id, ErrWorkflowNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get workflow %d: %w", id, err)
	}
	s := &WorkflowState{ID: WorkflowID(r.ID), Name: r.Name, Steps: int(r.Steps), Edges: int(r.Edges),
		CreatedAt: r.CreatedAt, CancelledAt: r.CancelledAt,
		Waiting: int(r.Waiting), Queued: int(r.Queued), Started: int(r.Started), Succeeded: int(r.Succeeded),
		Failed: int(r.Failed), Cancelled: int(r.Cancelled), Deleted: int(r.Steps - r.Present)}
	pending := s.Waiting + s.Queued + s.Started
	switch {
	case s.CancelledAt != nil && pending > 0:
		s.Status = WorkflowCancelling
	case s.CancelledAt != nil:
		s.Status = WorkflowCancelled
	case pending > 0:
		s.Status = WorkflowRunning
	case s.Failed > 0:
		s.Status = WorkflowFailed
	case s.Cancelled > 0 || s.Deleted > 0:
		s.Status = WorkflowCancelled
	default:
		s.Status = WorkflowSucceeded
	}
	if pending == 0 {
		t := r.LastFinishedAt
		s.FinishedAt = &t
	}
	return s, nil
}

// WorkflowStep is one step of a workflow (WorkflowSteps).
type WorkflowStep struct {
	JobID  JobID
	Kind   string
	Queue  string
	Status Status
	// Waiting is true while the step is parked for its parents; WaitingFor
	// is how many of them it still waits for.
	Waiting    bool
	WaitingFor int
	// Parents are the step's first 20 parents, in step order;
	// ParentCount how many it has.
	Parents     []JobID
	ParentCount int
	Attempts    int
	CreatedAt   time.Time
	StartedAt   *time.Time
	FinishedAt  *time.Time
}

// WorkflowSteps reads a page of a workflow's steps: up to limit (at most
// 1,000) in id order, after job afterID (0: from the first).
func WorkflowSteps(ctx context.Context, db DB, id WorkflowID, afterID JobID, limit int) ([]WorkflowStep, error) {
	limit = min(max(limit, 1), 1000)
	rows, err := gen.New(db).ListWorkflowSteps(ctx, gen.ListWorkflowStepsParams{WorkflowID: int64(id), AfterID: int64(afterID), Max: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("workflow %d: list steps: %w", id, err)
	}
	out := make([]WorkflowStep, len(rows))
	for i, r := range rows {
		ps := make([]JobID, len(r.Parents))
		for k, p := range r.Parents {
			ps[k] = JobID(p)
		}
		out[i] = WorkflowStep{JobID: JobID(r.ID), Kind: r.Kind, Queue: r.Queue, Status: Status(r.Status),
			Waiting: r.Parked, WaitingFor: int(r.WaitingFor), Parents: ps, ParentCount: int(r.ParentCount), Attempts: int(r.Attempts),
			CreatedAt: r.CreatedAt, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt}
	}
	return out, nil
}

// CancelWorkflowByID cancels a workflow as a whole: no step of it is started
// any more, its steps not started are cancelled and its running ones asked
// to stop (see CancelJob). It reports false for a workflow cancelled
// already or not found.
func CancelWorkflowByID(ctx context.Context, db DB, id WorkflowID) (bool, error) {
	ok, err := gen.New(db).CancelWorkflow(ctx, int64(id))
	if err != nil {
		return false, fmt.Errorf("cancel workflow %d: %w", id, err)
	}
	return ok, nil
}

// Parent is a workflow step's parent as JobParents reads it.
type Parent struct {
	JobID JobID
	// Step is the parent's place in the workflow.
	Step   int
	Policy FailurePolicy
	// Outcome is what the step was told of the parent: "" nothing yet,
	// "succeeded", or "failed" (failed for good, cancelled or deleted).
	Outcome string
}

// JobParents reads the parents of workflow step id, in step order; none
// for a step without parents or a job of no workflow.
func JobParents(ctx context.Context, db DB, id JobID) ([]Parent, error) {
	rows, err := gen.New(db).JobParents(ctx, int64(id))
	if err != nil {
		return nil, fmt.Errorf("job %d: read its parents: %w", id, err)
	}
	out := make([]Parent, len(rows))
	for i, r := range rows {
		p := Parent{JobID: JobID(r.Parent), Step: int(r.Step)}
		switch r.Policy {
		case "a":
			p.Policy = RunAnyway
		case "w":
			p.Policy = CancelWorkflow
		}
		switch r.Outcome {
		case "s":
			p.Outcome = "succeeded"
		case "f":
			p.Outcome = "failed"
		}
		out[i] = p
	}
	return out, nil
}
