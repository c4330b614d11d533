package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgtask/pgtask/runtime"
)

// filterFlags are the flags that select jobs.
type filterFlags struct {
	queue, kind, group, statuses, after, before string
	all, allowNone                              bool
}

func (f *filterFlags) add(fs *flag.FlagSet, bulk bool) {
	fs.StringVar(&f.queue, "queue", "", "only jobs of this queue")
	fs.StringVar(&f.kind, "kind", "", "only jobs of this kind")
	fs.StringVar(&f.group, "group", "", "only jobs of this group")
	fs.StringVar(&f.statuses, "status", "", "only jobs in these statuses, comma-separated (scheduled,queued,started,succeeded,failed,cancelled)")
	fs.StringVar(&f.after, "created-after", "", "only jobs enqueued at or after this time (RFC 3339)")
	fs.StringVar(&f.before, "created-before", "", "only jobs enqueued before this time (RFC 3339)")
	if bulk {
		fs.BoolVar(&f.all, "all", false, "act on every job the other flags match, even with none set")
		fs.BoolVar(&f.allowNone, "allow-none", false,
			"succeed even when no job is changed, or not every job named (by default that exits with status 1)")
	}
}

func (f *filterFlags) filter() (runtime.JobFilter, error) {
	jf := runtime.JobFilter{Queue: f.queue, Kind: f.kind, Group: f.group}
	if f.statuses != "" {
		for _, s := range strings.Split(f.statuses, ",") {
			st := runtime.Status(strings.TrimSpace(s))
			if !slices.Contains(statuses, st) {
				return jf, fmt.Errorf("-status: %q is none of %v", st, statuses)
			}
			jf.Statuses = append(jf.Statuses, st)
		}
	}
	for _, t := range []struct {
		flag, value string
		to          *time.Time
	}{{"created-after", f.after, &jf.CreatedAfter}, {"created-before", f.before, &jf.CreatedBefore}} {
		if t.value == "" {
			continue
		}
		v, err := time.Parse(time.RFC3339, t.value)
		if err != nil {
			return jf, fmt.Errorf("-%s: %w", t.flag, err)
		}
		*t.to = v
	}
	return jf, nil
}

func (f *filterFlags) empty() bool {
	return f.queue == "" && f.kind == "" && f.group == "" && f.statuses == "" && f.after == "" && f.before == ""
}

// statuses are the statuses a job can be in.
var statuses = []runtime.Status{runtime.StatusScheduled, runtime.StatusQueued, runtime.StatusStarted,
	runtime.StatusSucceeded, runtime.StatusFailed, runtime.StatusCancelled}

// command is what the job commands share: flags, a database, -json.
type command struct {
	name   string
	fs     *flag.FlagSet
	url    *string
	asJSON *bool
	args   []string // the arguments, flags left out
}

func newCommand(name, usage string, stderr io.Writer) *command {
	fs := flag.NewFlagSet("pgtask "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &command{name: name, fs: fs, url: databaseFlag(fs)}
	c.asJSON = jsonFlag(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, usage)
		fs.PrintDefaults()
	}
	return c
}

// parse parses args and wants exactly nargs arguments (-1: any number).
func (c *command) parse(args []string, nargs int, stderr io.Writer) error {
	var err error
	if c.args, err = parseFlags(c.fs, args); err != nil {
		return err
	}
	if nargs >= 0 && len(c.args) != nargs {
		fmt.Fprintf(stderr, "pgtask %s: want %d argument(s), got %d\n", c.name, nargs, len(c.args))
		return errUsage
	}
	return nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func stats(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("stats", "usage: pgtask stats [-json] [-database-url URL]\n\n"+
		"Per queue: jobs by status, of the queued ones how many are runnable (waiting for a worker) and how many wait on a\n"+
		"concurrency limit (pgtask limits), how long the oldest runnable job has waited, groups a failure blocks, and whether\n"+
		"it is paused;\n"+
		"then the runnable jobs of kinds no live worker handles, by queue and kind (workers claim only the kinds they have handlers for);\n"+
		"then, for each fair queue, its top tenants by queued jobs, with their weights (pgtask tenants lists them all).", stderr)
	if err := c.parse(args, 0, stderr); err != nil {
		return err
	}
	conn, err := connect(ctx, *c.url, true)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	st, err := runtime.Stats(ctx, conn)
	if err != nil {
		return err
	}
	unhandled, err := runtime.UnhandledKinds(ctx, conn)
	if err != nil {
		return err
	}
	tenants, err := runtime.FairTenants(ctx, conn, "", statsTenants)
	if err != nil {
		return err
	}
	if *c.asJSON {
		type tenant struct {
			Tenant string `json:"tenant"`
			Weight int    `json:"weight"`
			Queued int64  `json:"queued"`
		}
		type kind struct {
			Kind              string  `json:"kind"`
			Jobs              int64   `json:"jobs"`
			OldestWaitSeconds float64 `json:"oldest_wait_seconds"`
		}
		type queue struct {
			Queue             string                   `json:"queue"`
			Counts            map[runtime.Status]int64 `json:"counts"`
			OldestWaitSeconds float64                  `json:"oldest_wait_seconds"`
			BlockedGroups     int64                    `json:"blocked_groups"`
			Paused            bool                     `json:"paused"`
			// Of the queued jobs: those waiting for a worker (runnable)
			// and those waiting for a slot of their concurrency limit or
			// a token of their rate limit.
			WaitingForWorker int64 `json:"waiting_for_worker"`
			WaitingOnLimit   int64 `json:"waiting_on_limit"`
			WaitingOnRate    int64 `json:"waiting_on_rate"`
			// Runnable jobs of kinds no live worker handles in the queue.
			UnhandledKinds []kind `json:"unhandled_kinds"`
			// A fair queue's top tenants by queued jobs.
			Tenants []tenant `json:"tenants,omitempty"`
		}
		out := make([]queue, len(st))
		for i, s := range st {
			out[i] = queue{s.Queue, s.Counts, s.OldestWait.Seconds(), s.BlockedGroups, s.Paused, s.Runnable, s.WaitingOnLimit, s.WaitingOnRate, []kind{}, nil}
			for _, u := range unhandled {
				if u.Queue == s.Queue {
					out[i].UnhandledKinds = append(out[i].UnhandledKinds, kind{u.Kind, u.Jobs, u.OldestWait.Seconds()})
				}
			}
			for _, t := range tenants {
				if t.Queue == s.Queue {
					out[i].Tenants = append(out[i].Tenants, tenant{t.Tenant, t.Weight, t.Queued})
				}
			}
		}
		return printJSON(stdout, out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "queue\tscheduled\tqueued\trunnable\ton a limit\ton a rate\tstarted\tsucceeded\tfailed\tcancelled\toldest wait\tblocked groups\tpaused\t")
	for _, s := range st {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%v\t\n", s.Queue,
			s.Counts[runtime.StatusScheduled], s.Counts[runtime.StatusQueued], s.Runnable, s.WaitingOnLimit, s.WaitingOnRate,
			s.Counts[runtime.StatusStarted],
			s.Counts[runtime.StatusSucceeded], s.Counts[runtime.StatusFailed], s.Counts[runtime.StatusCancelled],
			s.OldestWait.Round(time.Millisecond), s.BlockedGroups, s.Paused)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(unhandled) > 0 {
		fmt.Fprintln(stdout, "\nrunnable jobs of kinds no live worker handles (they wait for a worker with their handler):")
		tw = tabwriter.NewWriter(stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "queue\tkind\tjobs\toldest wait\t")
		for _, u := range unhandled {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t\n", u.Queue, u.Kind, u.Jobs, u.OldestWait.Round(time.Millisecond))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(tenants) == 0 {
		return nil
	}
	fmt.Fprintf(stdout, "\ntenants of fair queues, the top %d of each by queued jobs (they take turns; pgtask tenants):\n", statsTenants)
	return printTenants(stdout, tenants)
}

// statsTenants is how many tenants of each fair queue pgtask stats shows.
const statsTenants = 5

func jobs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "list" && args[0] != "show") {
		fmt.Fprintln(stderr, "usage: pgtask jobs list [flags] | pgtask jobs show [flags] ID")
		return errUsage
	}
	if args[0] == "show" {
		return showJob(ctx, args[1:], stdout, stderr)
	}
	c := newCommand("jobs list", "usage: pgtask jobs list [filter flags] [-after ID] [-limit N] [-json]\n\n"+
		"Lists jobs in id order, a page at a time: pass the last id shown as -after for the next page.", stderr)
	var f filterFlags
	f.add(c.fs, false)
	after := c.fs.Int64("after", 0, "only jobs with a higher id")
	limit := c.fs.Int("limit", 50, "at most this many jobs")
	if err := c.parse(args[1:], 0, stderr); err != nil {
		return err
	}
	if *limit < 1 {
		fmt.Fprintf(stderr, "pgtask jobs list: -limit %d: want 1 or more\n", *limit)
		return errUsage
	}
	jf, err := f.filter()
	if err != nil {
		fmt.Fprintf(stderr, "pgtask jobs list: %v\n", err)
		return errUsage
	}
	conn, err := connect(ctx, *c.url, true)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	list, err := runtime.ListJobs(ctx, conn, jf, runtime.JobID(*after), *limit)
	if err != nil {
		return err
	}
	if *c.asJSON {
		return printJSON(stdout, jsonJobs(list))
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "id\tqueue\tkind\tgroup\tstatus\tattempts\tcreated\tlast error")
	for _, j := range list {
		lastError := ""
		if len(j.Errors) > 0 {
			lastError = oneLine(j.Errors[len(j.Errors)-1].Error, lastErrorRunes)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", j.ID, j.Queue, j.Kind, j.Group, j.Status,
			j.Attempts, j.MaxAttempts, j.CreatedAt.UTC().Format(time.RFC3339), lastError)
	}
	return tw.Flush()
}

// lastErrorRunes is how much of a job's last error jobs list shows.
const lastErrorRunes = 48

// oneLine returns s on one line, its runs of white space made single
// spaces, cut to max runes and an ellipsis when longer.
func oneLine(s string, max int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > max {
		return strings.TrimRight(string(r[:max]), " ") + "…"
	}
	return s
}

// jobJSON is a job as the commands print it with -json.
type jobJSON struct {
	ID          int64                  `json:"id"`
	Queue       string                 `json:"queue"`
	Kind        string                 `json:"kind"`
	Group       string                 `json:"group,omitempty"`
	Status      runtime.Status         `json:"status"`
	Priority    int16                  `json:"priority"`
	AgingMs     int64                  `json:"aging_ms"` // 0: strict priority
	AgesAt      *time.Time             `json:"ages_at,omitempty"`
	Attempts    int                    `json:"attempts"`
	MaxAttempts int                    `json:"max_attempts"`
	Snoozes     int                    `json:"snoozes"`
	Payload     json.RawMessage        `json:"payload"`
	Result      json.RawMessage        `json:"result,omitempty"`
	Errors      []runtime.AttemptError `json:"errors"`
	RunAfter    time.Time              `json:"run_after"`
	CreatedAt   time.Time              `json:"created_at"`
	StartedAt   *time.Time             `json:"started_at,omitempty"`
	FinishedAt  *time.Time             `json:"finished_at,omitempty"`
	UniqueKey   string                 `json:"unique_key,omitempty"`
	Metadata    map[string]string      `json:"metadata,omitempty"`
	BatchID     int64                  `json:"batch_id,omitempty"`
	WorkflowID  int64                  `json:"workflow_id,omitempty"`
	Parents     []parentJSON           `json:"parents,omitempty"`
	// Progress is what the job's attempts last reported, and Limit the
	// concurrency limit it counts against; only jobs show reads them.
	Progress *progressJSON `json:"progress,omitempty"`
	Limit    *limitJSON    `json:"limit,omitempty"`
}

// limitJSON is a job's concurrency limit as jobs show prints it with -json.
type limitJSON struct {
	Key      string `json:"key"` // "" for the queue's own limit
	Limit    int    `json:"limit"`
	Admitted bool   `json:"admitted"` // it holds a slot: queued to run, or running
	Waiting  bool   `json:"waiting"`  // queued, waiting for a free slot
}

// parentJSON is a workflow step's parent as jobs show prints it with
// -json.
type parentJSON struct {
	JobID   int64  `json:"job_id"`
	Step    int    `json:"step"`
	Policy  string `json:"policy"`
	Outcome string `json:"outcome,omitempty"`
}

// progressJSON is a job's progress as jobs show prints it with -json.
type progressJSON struct {
	Attempt   int             `json:"attempt"`
	Percent   float64         `json:"percent"`
	Message   string          `json:"message"`
	Value     json.RawMessage `json:"value,omitempty"`
	UpdatedAt time.Time       `json:"updated_at"`
}

func jsonJob(j *runtime.JobInfo) jobJSON {
	errs := j.Errors
	if errs == nil {
		errs = []runtime.AttemptError{}
	}
	return jobJSON{int64(j.ID), j.Queue, j.Kind, j.Group, j.Status, j.Priority, max(j.Aging.Milliseconds(), 0), j.AgesAt, j.Attempts, j.MaxAttempts, j.Snoozes,
		j.Payload, j.Result, errs, j.RunAfter, j.CreatedAt, j.StartedAt, j.FinishedAt, j.UniqueKey, j.Metadata, int64(j.BatchID), int64(j.WorkflowID), nil, nil, nil}
}

func jsonJobs(list []*runtime.JobInfo) []jobJSON {
	out := make([]jobJSON, len(list))
	for i, j := range list {
		out[i] = jsonJob(j)
	}
	return out
}

// batches runs pgtask batches show.
func batches(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "show" {
		fmt.Fprintln(stderr, "usage: pgtask batches show [flags] ID")
		return errUsage
	}
	c := newCommand("batches show", "usage: pgtask batches show [-json] ID\n\n"+
		"Shows a batch: its jobs' counts (when it ended, or now while it is open) and its callbacks' job ids.", stderr)
	if err := c.parse(args[1:], 1, stderr); err != nil {
		return err
	}
	id, err := strconv.ParseInt(c.args[0], 10, 64)
	if err != nil {
		fmt.Fprintf(stderr, "pgtask batches show: %q is not a batch id\n", c.args[0])
		return errUsage
	}
	conn, err := connect(ctx, *c.url, true)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	b, err := runtime.GetBatch(ctx, conn, runtime.BatchID(id))
	if err != nil {
		return err
	}
	if *c.asJSON {
		return printJSON(stdout, struct {
			ID         int64      `json:"id"`
			Total      int        `json:"total"`
			Succeeded  int        `json:"succeeded"`
			Failed     int        `json:"failed"`
			Cancelled  int        `json:"cancelled"`
			Deleted    int        `json:"deleted"`
			OnFinish   int64      `json:"on_finish,omitempty"`
			OnFailure  int64      `json:"on_failure,omitempty"`
			CreatedAt  time.Time  `json:"created_at"`
			FailedAt   *time.Time `json:"failed_at,omitempty"`
			FinishedAt *time.Time `json:"finished_at,omitempty"`
		}{int64(b.ID), b.Total, b.Succeeded, b.Failed, b.Cancelled, b.Deleted, int64(b.OnFinish), int64(b.OnFailure),
			b.CreatedAt, b.FailedAt, b.FinishedAt})
	}
	state := "open"
	if b.FinishedAt != nil {
		state = "finished " + b.FinishedAt.UTC().Format(time.RFC3339Nano)
	}
	fmt.Fprintf(stdout, "batch %d: %s\n%d jobs: %d succeeded, %d failed, %d cancelled, %d deleted\ncreated %s\n",
		b.ID, state, b.Total, b.Succeeded, b.Failed, b.Cancelled, b.Deleted, b.CreatedAt.UTC().Format(time.RFC3339Nano))
	if b.FailedAt != nil {
		fmt.Fprintf(stdout, "first failure found %s\n", b.FailedAt.UTC().Format(time.RFC3339Nano))
	}
	if b.OnFinish != 0 {
		fmt.Fprintf(stdout, "on finish: job %d\n", b.OnFinish)
	}
	if b.OnFailure != 0 {
		fmt.Fprintf(stdout, "on failure: job %d\n", b.OnFailure)
	}
	return nil
}

func showJob(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("jobs show", "usage: pgtask jobs show [-json] ID\n\nShows a job: its settings, metadata, concurrency limit, payload, result and each failed attempt's error.", stderr)
	if err := c.parse(args, 1, stderr); err != nil {
		return err
	}
	id, err := strconv.ParseInt(c.args[0], 10, 64)
	if err != nil {
		fmt.Fprintf(stderr, "pgtask jobs show: %q is not a job id\n", c.args[0])
		return errUsage
	}
	conn, err := connect(ctx, *c.url, true)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	j, err := runtime.GetJob(ctx, conn, runtime.JobID(id))
	if err != nil {
		return err
	}
	p, err := runtime.GetJobProgress(ctx, conn, j.ID)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		// Insufficient privilege: the producer role reads jobs but not
		// their progress. Show the rest.
		p, err = nil, nil
	}
	if err != nil {
		return err
	}
	limit, err := runtime.GetJobLimit(ctx, conn, j.ID)
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		// The producer role does not read the limits either.
		limit, err = nil, nil
	}
	if err != nil {
		return err
	}
	var parents []runtime.Parent
	if j.WorkflowID != 0 {
		parents, err = runtime.JobParents(ctx, conn, j.ID)
		if errors.As(err, &pgErr) && pgErr.Code == "42501" {
			// The producer role does not read a workflow's dependencies.
			parents, err = nil, nil
		}
		if err != nil {
			return err
		}
	}
	if *c.asJSON {
		out := jsonJob(j)
		for _, pa := range parents {
			out.Parents = append(out.Parents, parentJSON{int64(pa.JobID), pa.Step, pa.Policy.String(), pa.Outcome})
		}
		if p != nil {
			out.Progress = &progressJSON{p.Attempt, p.Percent, p.Message, p.Value, p.UpdatedAt}
		}
		if limit != nil {
			out.Limit = &limitJSON{limit.Key, limit.Limit, limit.Admitted, limit.Waiting}
		}
		return printJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "job %d: %s, kind %s, queue %s", j.ID, j.Status, j.Kind, j.Queue)
	if j.Group != "" {
		fmt.Fprintf(stdout, ", group %s", j.Group)
	}
	fmt.Fprintf(stdout, "\nattempts %d of %d, snoozes %d, priority %d%s\ncreated %s, runs from %s\n", j.Attempts, j.MaxAttempts, j.Snoozes, j.Priority,
		aging(j), j.CreatedAt.UTC().Format(time.RFC3339Nano), j.RunAfter.UTC().Format(time.RFC3339Nano))
	if j.StartedAt != nil {
		fmt.Fprintf(stdout, "last started %s\n", j.StartedAt.UTC().Format(time.RFC3339Nano))
	}
	if j.FinishedAt != nil {
		fmt.Fprintf(stdout, "finished %s\n", j.FinishedAt.UTC().Format(time.RFC3339Nano))
	}
	if j.UniqueKey != "" {
		fmt.Fprintf(stdout, "unique key %s\n", j.UniqueKey)
	}
	if j.BatchID != 0 {
		fmt.Fprintf(stdout, "batch %d\n", j.BatchID)
	}
	if j.WorkflowID != 0 {
		fmt.Fprintf(stdout, "workflow %d\n", j.WorkflowID)
		for _, pa := range parents {
			told := pa.Outcome
			if told == "" {
				told = "not finished"
			}
			fmt.Fprintf(stdout, "  after job %d (step %d, on failure: %s): %s\n", pa.JobID, pa.Step, pa.Policy, told)
		}
	}
	if limit != nil {
		state := "holds no slot now"
		switch {
		case limit.Admitted:
			state = "admitted: it holds a slot"
		case limit.Waiting:
			state = "waiting for a free slot"
		}
		fmt.Fprintf(stdout, "limit key %s, limit %d: %s\n", keyName(limit.Key), limit.Limit, state)
	}
	for _, k := range slices.Sorted(maps.Keys(j.Metadata)) {
		fmt.Fprintf(stdout, "metadata %s=%s\n", k, j.Metadata[k])
	}
	fmt.Fprintf(stdout, "payload %s\n", j.Payload)
	if len(j.Result) > 0 {
		fmt.Fprintf(stdout, "result %s\n", j.Result)
	}
	if p != nil {
		fmt.Fprintf(stdout, "progress %s%% at attempt %d, reported %s", strconv.FormatFloat(p.Percent, 'f', -1, 64), p.Attempt,
			p.UpdatedAt.UTC().Format(time.RFC3339Nano))
		if p.Message != "" {
			fmt.Fprintf(stdout, ": %s", oneLine(p.Message, runtime.MaxProgressMessageBytes))
		}
		fmt.Fprintln(stdout)
		if len(p.Value) > 0 {
			fmt.Fprintf(stdout, "progress value %s\n", p.Value)
		}
	}
	for _, e := range j.Errors {
		fmt.Fprintf(stdout, "attempt %d failed %s: %s\n", e.Attempt, e.At.UTC().Format(time.RFC3339Nano), e.Error)
		if e.Stack != "" {
			fmt.Fprintf(stdout, "%s\n", e.Stack)
		}
	}
	return nil
}

// bulkCommand runs retry, cancel or purge.
func bulkCommand(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	what := map[string]struct {
		usage string
		do    func(context.Context, runtime.DB, runtime.JobFilter, runtime.Progress) (int, error)
		one   func(context.Context, runtime.DB, runtime.JobID) (bool, error) // nil: no job ids
		done  string
		only  string // which jobs it changes
	}{
		"retry": {"Retries the failed and cancelled jobs the flags match (or the jobs named), with a fresh set of attempts.",
			runtime.RetryJobs, runtime.RetryJob, "retried", "only failed and cancelled jobs are retried"},
		"cancel": {"Cancels the jobs the flags match (or the jobs named) that have not finished, and failures that\n" +
			"block their group. A running job's handler has its context cancelled wherever it runs; the job\n" +
			"ends cancelled unless the handler completes anyway. Add -status scheduled,queued to leave running\n" +
			"jobs alone.", runtime.CancelJobs, runtime.CancelJob, "cancelled",
			"only jobs that have not finished, and failures that block their group, are cancelled"},
		"purge": {"Deletes the finished jobs the flags match, but none still at the head of its group.", runtime.DeleteJobs, nil, "deleted", ""},
	}[name]
	usage := fmt.Sprintf("usage: pgtask %s [filter flags] [-all] [-json]\n", name)
	if what.one != nil {
		usage += fmt.Sprintf("       pgtask %s [-json] JOB_ID...\n", name)
	}
	c := newCommand(name, usage+fmt.Sprintf("\n%s\n"+
		"A progress line goes to standard error. With no filter flag and no job id, -all is needed.\n"+
		"Changing no job, or not every job named, fails (exit status 1) unless -allow-none.", what.usage), stderr)
	var f filterFlags
	f.add(c.fs, true)
	if err := c.parse(args, -1, stderr); err != nil {
		return err
	}
	if len(c.args) > 0 {
		switch {
		case what.one == nil:
			fmt.Fprintf(stderr, "pgtask %s: takes filter flags, not job ids\n", name)
			return errUsage
		case !f.empty() || f.all:
			fmt.Fprintf(stderr, "pgtask %s: give filter flags or job ids, not both\n", name)
			return errUsage
		}
		return byID(ctx, c, name, what.one, what.done, what.only, f.allowNone, stdout, stderr)
	}
	if f.empty() && !f.all {
		fmt.Fprintf(stderr, "pgtask %s: no filter given: name -queue, -kind, -group, -status or a time, or pass -all\n", name)
		return errUsage
	}
	jf, err := f.filter()
	if err != nil {
		fmt.Fprintf(stderr, "pgtask %s: %v\n", name, err)
		return errUsage
	}
	conn, err := connect(ctx, *c.url, true)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	progress := func(seen, changed int) {
		fmt.Fprintf(stderr, "\rpgtask %s: %d jobs looked at, %d %s", name, seen, changed, what.done)
	}
	n, err := what.do(ctx, conn, jf, progress)
	fmt.Fprintln(stderr)
	// Jobs whose unique keys other jobs hold now were left as they are, and
	// every other job was retried: name each, as byID does.
	var conflicts *runtime.RetryConflictsError
	if errors.As(err, &conflicts) {
		for _, k := range conflicts.Conflicts {
			fmt.Fprintf(stderr, "pgtask %s: job %d not retried: job %d holds its unique key now\n", name, k.Job, k.HeldBy)
		}
		if err := printCount(c, stdout, what.done, n); err != nil {
			return err
		}
		if f.allowNone {
			return nil
		}
		return fmt.Errorf("%d of the jobs matched not %s: other jobs hold their unique keys now", len(conflicts.Conflicts), what.done)
	}
	if err != nil {
		return err
	}
	if err := printCount(c, stdout, what.done, n); err != nil {
		return err
	}
	if n == 0 && !f.allowNone {
		return fmt.Errorf("no job was %s: the filter matched none it applies to (pass -allow-none if that is fine)", what.done)
	}
	return nil
}

// byID runs one (CancelJob or RetryJob) on each job id of the command's
// arguments. A job it did not change is named on standard error, with why
// (it does not exist, or its status); unless allowNone, that is a failure.
func byID(ctx context.Context, c *command, name string, one func(context.Context, runtime.DB, runtime.JobID) (bool, error),
	done, only string, allowNone bool, stdout, stderr io.Writer) error {
	var ids []runtime.JobID
	for _, a := range c.args {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id <= 0 {
			fmt.Fprintf(stderr, "pgtask %s: %q is not a job id\n", name, a)
			return errUsage
		}
		if !slices.Contains(ids, runtime.JobID(id)) {
			ids = append(ids, runtime.JobID(id))
		}
	}
	conn, err := connect(ctx, *c.url, true)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	n := 0
	for _, id := range ids {
		changed, err := one(ctx, conn, id)
		var conflict *runtime.RetryConflict
		if errors.As(err, &conflict) {
			fmt.Fprintf(stderr, "pgtask %s: job %d not retried: job %d holds its unique key now\n", name, id, conflict.HeldBy)
			continue
		}
		if err != nil {
			return err
		}
		if changed {
			n++
			continue
		}
		j, err := runtime.GetJob(ctx, conn, id)
		switch {
		case errors.Is(err, runtime.ErrJobNotFound):
			fmt.Fprintf(stderr, "pgtask %s: job %d does not exist\n", name, id)
		case err != nil:
			return err
		default:
			fmt.Fprintf(stderr, "pgtask %s: job %d is %s: %s\n", name, id, j.Status, only)
		}
	}
	if err := printCount(c, stdout, done, n); err != nil {
		return err
	}
	if n < len(ids) && !allowNone {
		return fmt.Errorf("%d of the %d jobs named not %s", len(ids)-n, len(ids), done)
	}
	return nil
}

// printCount prints how many jobs a bulk command changed, as JSON with
// -json.
func printCount(c *command, stdout io.Writer, done string, n int) error {
	if *c.asJSON {
		return printJSON(stdout, map[string]int{done: n})
	}
	fmt.Fprintf(stdout, "%s %d jobs\n", done, n)
	return nil
}

// aging says how a job's priority ages, for jobs show: nothing for one at
// priority 0 or better, which never ages.
func aging(j *runtime.JobInfo) string {
	switch {
	case j.Priority <= 0:
		return ""
	case j.Aging == runtime.StrictPriority:
		return " (strict: it does not age)"
	case j.AgesAt != nil:
		return fmt.Sprintf(" (a level better per %s waited; next at %s)", j.Aging, j.AgesAt.UTC().Format(time.RFC3339Nano))
	default:
		return fmt.Sprintf(" (a level better per %s waited)", j.Aging)
	}
}
