package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/pgtask/pgtask/runtime"
)

// workflows runs pgtask workflows show.
func workflows(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "show" {
		fmt.Fprintln(stderr, "usage: pgtask workflows show [flags] ID")
		return errUsage
	}
	c := newCommand("workflows show", "usage: pgtask workflows show [-json] [-after JOB] [-limit N] ID\n\n"+
		"Shows a workflow: its state, its steps' counts by status, and a page of its steps in id order,\n"+
		"each with its status and its parents.", stderr)
	after := c.fs.Int64("after", 0, "show the steps after this job id")
	limit := c.fs.Int("limit", 100, "show at most this many steps (at most 1000)")
	if err := c.parse(args[1:], 1, stderr); err != nil {
		return err
	}
	id, err := strconv.ParseInt(c.args[0], 10, 64)
	if err != nil {
		fmt.Fprintf(stderr, "pgtask workflows show: %q is not a workflow id\n", c.args[0])
		return errUsage
	}
	conn, err := connect(ctx, *c.url, true)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	w, err := runtime.GetWorkflow(ctx, conn, runtime.WorkflowID(id))
	if err != nil {
		return err
	}
	steps, err := runtime.WorkflowSteps(ctx, conn, w.ID, runtime.JobID(*after), *limit)
	if err != nil {
		return err
	}
	if *c.asJSON {
		type stepJSON struct {
			JobID      int64          `json:"job_id"`
			Kind       string         `json:"kind"`
			Queue      string         `json:"queue"`
			Status     runtime.Status `json:"status"`
			Waiting    bool           `json:"waiting"`
			WaitingFor int            `json:"waiting_for"`
			Parents    []int64        `json:"parents"`
			Attempts   int            `json:"attempts"`
		}
		out := struct {
			ID          int64                  `json:"id"`
			Name        string                 `json:"name"`
			Status      runtime.WorkflowStatus `json:"status"`
			Steps       int                    `json:"steps"`
			Edges       int                    `json:"edges"`
			Waiting     int                    `json:"waiting"`
			Queued      int                    `json:"queued"`
			Started     int                    `json:"started"`
			Succeeded   int                    `json:"succeeded"`
			Failed      int                    `json:"failed"`
			Cancelled   int                    `json:"cancelled"`
			Deleted     int                    `json:"deleted"`
			CreatedAt   time.Time              `json:"created_at"`
			CancelledAt *time.Time             `json:"cancelled_at,omitempty"`
			FinishedAt  *time.Time             `json:"finished_at,omitempty"`
			Page        []stepJSON             `json:"page"`
		}{int64(w.ID), w.Name, w.Status, w.Steps, w.Edges, w.Waiting, w.Queued, w.Started, w.Succeeded, w.Failed, w.Cancelled,
			w.Deleted, w.CreatedAt, w.CancelledAt, w.FinishedAt, []stepJSON{}}
		for _, s := range steps {
			ps := make([]int64, len(s.Parents))
			for i, p := range s.Parents {
				ps[i] = int64(p)
			}
			out.Page = append(out.Page, stepJSON{int64(s.JobID), s.Kind, s.Queue, s.Status, s.Waiting, s.WaitingFor, ps, s.Attempts})
		}
		return printJSON(stdout, out)
	}
	fmt.Fprintf(stdout, "workflow %d %q: %s\n%d steps, %d dependencies: %d waiting, %d queued, %d started, %d succeeded, %d failed, %d cancelled, %d deleted\ncreated %s\n",
		w.ID, w.Name, w.Status, w.Steps, w.Edges, w.Waiting, w.Queued, w.Started, w.Succeeded, w.Failed, w.Cancelled, w.Deleted,
		w.CreatedAt.UTC().Format(time.RFC3339Nano))
	if w.CancelledAt != nil {
		fmt.Fprintf(stdout, "cancelled %s\n", w.CancelledAt.UTC().Format(time.RFC3339Nano))
	}
	if w.FinishedAt != nil {
		fmt.Fprintf(stdout, "finished %s\n", w.FinishedAt.UTC().Format(time.RFC3339Nano))
	}
	for _, s := range steps {
		status := string(s.Status)
		if s.Waiting {
			status = fmt.Sprintf("waiting for %d parent(s)", s.WaitingFor)
		}
		line := fmt.Sprintf("  job %d %s (%s): %s", s.JobID, s.Kind, s.Queue, status)
		if len(s.Parents) > 0 {
			ps := make([]string, len(s.Parents))
			for i, p := range s.Parents {
				ps[i] = strconv.FormatInt(int64(p), 10)
			}
			line += ", after " + strings.Join(ps, ", ")
			if s.ParentCount > len(s.Parents) {
				line += fmt.Sprintf(" and %d more", s.ParentCount-len(s.Parents))
			}
		}
		fmt.Fprintln(stdout, line)
	}
	if len(steps) == min(max(*limit, 1), 1000) {
		fmt.Fprintf(stdout, "more: pgtask workflows show -after %d %d\n", steps[len(steps)-1].JobID, w.ID)
	}
	return nil
}
