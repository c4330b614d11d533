package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pgtask/pgtask/gen"
)

const (
	// ProgressInterval is the least time between two writes of one job's
	// progress: a handler may report as often as it likes, and the reports
	// that come within the interval of the last write wait, only the
	// latest of them being written once the interval has passed (or when
	// the attempt ends, whichever comes first). The interval grows with the
	// attempt's age: ProgressInterval for its first minute, 1 s until its
	// tenth, 5 s after that (see progressReporter.interval). A report the
	// same as the last one written is not written again.
	ProgressInterval = 250 * time.Millisecond
	// MaxProgressMessageBytes bounds a progress report's message, in bytes
	// of UTF-8; the schema refuses longer ones too.
	MaxProgressMessageBytes = 1024
	// MaxProgressBytes bounds the JSON of a progress report's value
	// (Job.ReportProgressValue). Progress is rewritten often: keep it small.
	MaxProgressBytes = 4096
)

// progressWriteTimeout bounds a write of progress that no handler waits
// for: one due after its interval, or the last one when the attempt ends.
const progressWriteTimeout = 5 * time.Second

// ErrAttemptNotCurrent is returned by Job.ReportProgress and
// ReportProgressValue when the attempt is no longer the job's current one
// (it was taken over, or it has ended), so its progress is not recorded.
var ErrAttemptNotCurrent = errors.New("pgtask: the attempt is no longer the job's current one")

// JobProgress is the progress a job's attempt last recorded
// (Job.ReportProgress). It stays when the attempt ends, so a finished job
// shows where it got; Attempt says which attempt reported it.
type JobProgress struct {
	JobID   JobID
	Attempt int
	// Percent is how far the attempt had got, from 0 to 100.
	Percent float64
	Message string
	// Value is the JSON value reported with it (ReportProgressValue); nil
	// for none.
	Value     json.RawMessage
	UpdatedAt time.Time
}

// GetJobProgress reads the progress a job's attempts last recorded, or nil
// when none did (or the job does not exist). Reading it takes the worker's
// or the admin role (see docs/roles.md): the producer role has no access to
// progress.
func GetJobProgress(ctx context.Context, db DB, id JobID) (*JobProgress, error) {
	p, err := gen.New(db).GetJobProgress(ctx, int64(id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get progress of job %d: %w", id, err)
	}
	return &JobProgress{
		JobID: JobID(p.JobID), Attempt: int(p.Attempt), Percent: p.Percent, Message: p.Message,
		Value: p.Value, UpdatedAt: p.UpdatedAt,
	}, nil
}

// ReportProgress records how far the attempt has got: percent, from 0 to
// 100, and a message of at most MaxProgressMessageBytes. Other sessions see
// it at once (GetJobProgress, `pgtask jobs show`, the dashboard): it is
// written from a connection of the worker's pool, not in the job's
// transaction, and so stays when the attempt fails. Each report replaces
// the last.
//
// Writes are throttled to one per ProgressInterval per job: a report that
// comes sooner is kept, and only the latest kept is written when the
// interval has passed, or when the handler returns. So it may be called in
// a tight loop. The error is nil for a report kept for later; a report
// written at once returns the write's error, ErrAttemptNotCurrent when the
// attempt was taken over. Bad input (a percent out of range or NaN, a
// message too long or not UTF-8) is refused with an error and changes
// nothing.
func (j *Job) ReportProgress(ctx context.Context, percent float64, message string) error {
	return j.reportProgress(ctx, percent, message, nil)
}

// ReportProgressValue is ReportProgress with a value beside the percent and
// the message, stored as JSON (read back as JobProgress.Value): the rows
// done so far, the step running. It refuses a value whose JSON is longer
// than MaxProgressBytes or that jsonb cannot store, as SetResult does.
func (j *Job) ReportProgressValue(ctx context.Context, percent float64, message string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("job %d: encode progress value: %w", j.ID, err)
	}
	if err := jsonbRefusal(b); err != nil {
		return fmt.Errorf("job %d: progress value %w", j.ID, err)
	}
	if len(b) > MaxProgressBytes {
		return fmt.Errorf("job %d: progress value is %d bytes of JSON, more than the %d allowed", j.ID, len(b), MaxProgressBytes)
	}
	return j.reportProgress(ctx, percent, message, b)
}

func (j *Job) reportProgress(ctx context.Context, percent float64, message string, value json.RawMessage) error {
	if err := checkProgress(percent, message); err != nil {
		return fmt.Errorf("job %d: %w", j.ID, err)
	}
	if j.progress == nil {
		// A Job no worker runs (built by hand): nowhere to write.
		return nil
	}
	return j.progress.report(ctx, gen.ReportProgressParams{
		Percent: percent, Message: message, Value: value,
	})
}

// checkProgress returns why a report's percent or message is refused, or
// nil.
func checkProgress(percent float64, message string) error {
	switch {
	case math.IsNaN(percent) || math.IsInf(percent, 0):
		return fmt.Errorf("progress percent is %v, not a number from 0 to 100", percent)
	case percent < 0 || percent > 100:
		return fmt.Errorf("progress percent is %v, outside 0 to 100", percent)
	case len(message) > MaxProgressMessageBytes:
		return fmt.Errorf("progress message is %d bytes, more than the %d allowed", len(message), MaxProgressMessageBytes)
	case !utf8.ValidString(message):
		return errors.New("progress message is not valid UTF-8")
	case strings.ContainsRune(message, 0):
		return errors.New("progress message holds a NUL character, which PostgreSQL's text cannot store")
	}
	return nil
}

// progressReporter writes one attempt's progress, at most once per
// ProgressInterval, fenced by the attempt and its claim's token.
type progressReporter struct {
	w       *Worker
	base    context.Context // for writes no handler waits for
	jobID   int64
	attempt int32
	token   pgtype.Int8 // the claim's, NULL for a claim without one

	// start is when the attempt began: the interval grows with its age.
	start time.Time

	mu sync.Mutex
	// last is when the last write began, and written what it wrote;
	// pending is the latest report kept since, which timer writes when the
	// interval has passed.
	last    time.Time
	written *gen.ReportProgressParams
	pending *gen.ReportProgressParams
	timer   *time.Timer
	// ended: the attempt is over and reports are refused; refused: a write
	// found the attempt no longer current.
	ended, refused bool
}

func (w *Worker) newProgressReporter(base context.Context, job *Job) *progressReporter {
	p := &progressReporter{w: w, base: base, jobID: int64(job.ID), attempt: int32(job.Attempt), start: time.Now()}
	switch {
	case job.lease != nil:
		p.token = pgtype.Int8{Int64: job.lease.token, Valid: true}
	case job.claimToken != 0:
		// An attempt of a lost session that goes on may share its number
		// with the current one after an operator's retry; its claim's
		// token does not.
		p.token = pgtype.Int8{Int64: job.claimToken, Valid: true}
	}
	return p
}

func (p *progressReporter) report(ctx context.Context, params gen.ReportProgressParams) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended || p.refused {
		return fmt.Errorf("job %d attempt %d: progress not recorded: %w", p.jobID, p.attempt, ErrAttemptNotCurrent)
	}
	if p.written != nil && sameProgress(*p.written, params) {
		// Nothing new: a write would only leave one more version of the
		// row behind (see interval).
		p.pending = nil
		return nil
	}
	if wait := p.interval() - time.Since(p.last); wait > 0 {
		p.pending = &params
		if p.timer == nil {
			p.timer = time.AfterFunc(wait, p.tick)
		}
		return nil
	}
	p.pending = nil
	return p.write(ctx, params)
}

// interval is the least time between two writes now. Each write leaves a
// version of the progress row behind, and while some session keeps a
// transaction open (a held-mode batch's, for one) vacuum removes none of
// them, so every later write and read of the row steps over them all: an
// attempt that runs long writes less often, which bounds them to about 700
// an hour.
func (p *progressReporter) interval() time.Duration {
	switch age := time.Since(p.start); {
	case age < time.Minute:
		return ProgressInterval
	case age < 10*time.Minute:
		return time.Second
	default:
		return 5 * time.Second
	}
}

// sameProgress reports whether two reports say the same.
func sameProgress(a, b gen.ReportProgressParams) bool {
	return a.Percent == b.Percent && a.Message == b.Message && bytes.Equal(a.Value, b.Value)
}

// tick writes the report kept since the last write, once the interval has
// passed.
func (p *progressReporter) tick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.timer = nil
	if p.ended || p.refused || p.pending == nil {
		return
	}
	// A report may have written since this tick was set (one that came
	// when the interval had passed, before the tick got the lock).
	if wait := p.interval() - time.Since(p.last); wait > 0 {
		p.timer = time.AfterFunc(wait, p.tick)
		return
	}
	p.flush()
}

// finish ends the attempt's reporting: it writes the report still kept, so
// the last one always lands, and refuses those that come after. The
// worker calls it when the handler returns, before the outcome is
// recorded, while the attempt is still the job's current one.
func (p *progressReporter) finish() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return
	}
	p.ended = true
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	if p.pending != nil && !p.refused {
		p.flush()
	}
}

// flush writes the kept report on the worker's behalf, logging a failure:
// no handler waits for it. Called with mu held.
func (p *progressReporter) flush() {
	params := *p.pending
	p.pending = nil
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.base), progressWriteTimeout)
	defer cancel()
	if err := p.write(ctx, params); err != nil && !errors.Is(err, ErrAttemptNotCurrent) {
		p.w.log.Warn("pgtask: recording a job's progress failed", "job_id", p.jobID, "attempt", p.attempt, "error", err)
	}
}

// write records params, fenced by the attempt. Called with mu held, so
// one job's writes go one at a time, in the order they were reported.
func (p *progressReporter) write(ctx context.Context, params gen.ReportProgressParams) error {
	p.last = time.Now()
	params.JobID, params.Attempt, params.ClaimToken = p.jobID, p.attempt, p.token
	n, err := gen.New(p.w.pool).ReportProgress(ctx, params)
	if err != nil {
		return fmt.Errorf("job %d: record progress: %w", p.jobID, err)
	}
	p.w.progressWrites.Add(1)
	p.written = &params
	if n == 0 {
		p.refused = true
		return fmt.Errorf("job %d attempt %d: progress not recorded: %w", p.jobID, p.attempt, ErrAttemptNotCurrent)
	}
	return nil
}
