package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// The example's scrape shows each of pgtask's metrics with the counts its
// jobs make: 5 reports and 6 emails succeed, 3 emails are retried once,
// 1 bounces, 3 jobs wait in a queue no worker serves.
func TestScrapeShowsPgtaskMetrics(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out, pgtasktest.NewDatabase(t)); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	emails := `{messaging_destination_name="emails",pgtask_job_kind="send_email"}`
	reports := `{messaging_destination_name="reports",pgtask_job_kind="render_report"}`
	for _, want := range []string{
		`pgtask_jobs_enqueued_total` + emails + ` 7`,
		`pgtask_jobs_enqueued_total` + reports + ` 5`,
		`pgtask_jobs_started_total` + emails + ` 10`,
		`pgtask_jobs_succeeded_total` + emails + ` 6`,
		`pgtask_jobs_succeeded_total` + reports + ` 5`,
		`pgtask_jobs_retried_total` + emails + ` 3`,
		`pgtask_jobs_failed_total` + emails + ` 1`,
		`pgtask_attempt_duration_seconds_count{messaging_destination_name="reports",pgtask_job_kind="render_report",pgtask_job_outcome="succeeded"} 5`,
		`pgtask_queue_wait_seconds_count` + reports + ` 5`,
		`pgtask_queue_depth{messaging_destination_name="archive",pgtask_job_status="queued"} 3`,
		`pgtask_queue_oldest_age_seconds{messaging_destination_name="archive"} `,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no line %s in the output:\n%s", want, out.String())
		}
	}
}
