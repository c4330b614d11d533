package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	pgtaskdb "github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
)

// workflows runs pgtask workflows list and pgtask workflows show.
func workflows(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "show" && args[0] != "list") {
		fmt.Fprintln(stderr, "usage: pgtask workflows list [flags] | pgtask workflows show [flags] ID")
		return errUsage
	}
	if args[0] == "list" {
		return listWorkflows(ctx, args[1:], stdout, stderr)
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

// listWorkflows runs pgtask workflows list: the workflows newest first, a
// page at a time, from their own rows (a workflow's state takes a look at
// each of its steps: workflows show reads it, for one).
func listWorkflows(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("workflows list", "usage: pgtask workflows list [-before ID] [-limit N] [-json]\n\n"+
		"Lists workflows newest first, a page at a time: pass the last id shown as -before for the next page.\n"+
		"pgtask workflows show ID shows one's state and steps.", stderr)
	before := c.fs.Int64("before", 0, "only workflows with a lower id")
	limit := c.fs.Int("limit", 50, "at most this many workflows (at most 1000)")
	if err := c.parse(args, 0, stderr); err != nil {
		return err
	}
	if *limit < 1 || *limit > 1000 {
		fmt.Fprintf(stderr, "pgtask workflows list: -limit %d: want 1 to 1000\n", *limit)
		return errUsage
	}
	if *before < 0 {
		fmt.Fprintf(stderr, "pgtask workflows list: -before %d: want a workflow id\n", *before)
		return errUsage
	}
	conn, err := connect(ctx, *c.url, true)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := pgtaskdb.New(conn).ListWorkflows(ctx, pgtaskdb.ListWorkflowsParams{BeforeID: *before, Max: int32(*limit)})
	if err != nil {
		return fmt.Errorf("list workflows: %w", err)
	}
	if *c.asJSON {
		type workflowJSON struct {
			ID          int64      `json:"id"`
			Name        string     `json:"name"`
			Steps       int        `json:"steps"`
			CreatedAt   time.Time  `json:"created_at"`
			CancelledAt *time.Time `json:"cancelled_at,omitempty"`
		}
		out := make([]workflowJSON, 0, len(rows))
		for _, r := range rows {
			out = append(out, workflowJSON{r.ID, r.Name, int(r.Steps), r.CreatedAt, r.CancelledAt})
		}
		return printJSON(stdout, out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "id\tname\tsteps\tcreated\tcancelled")
	for _, r := range rows {
		cancelled := ""
		if r.CancelledAt != nil {
			cancelled = r.CancelledAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\n", r.ID, r.Name, r.Steps, r.CreatedAt.UTC().Format(time.RFC3339), cancelled)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rows) == *limit {
		fmt.Fprintf(stdout, "more: pgtask workflows list -before %d\n", rows[len(rows)-1].ID)
	}
	return nil
}
