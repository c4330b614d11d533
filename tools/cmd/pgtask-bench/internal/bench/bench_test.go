package bench

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// The whole program on small sizes: every measurement runs against a real
// server and lands in the table with a figure.
func TestSmallRunPrintsEveryMeasure(t *testing.T) {
	// The program finds its server as the examples do; point it at the test
	// server.
	t.Setenv("DATABASE_URL", pgtasktest.NewDatabase(t))
	var out, errOut bytes.Buffer
	code := Main(context.Background(), []string{
		"-enqueue-single", "300", "-enqueue-many", "3000", "-many-batch", "500",
		"-ungrouped", "2000", "-grouped", "2000", "-groups", "50", "-hot", "300",
		"-wake-samples", "10", "-claim-backlogs", "100,2000", "-memory-jobs", "3000",
		"-floor-duration", "500ms", "-batch", "50", "-defaults-jobs", "500", "-dashboard-jobs", "3000",
		"-limit-keys", "50", "-waiting-keys", "500", "-fair-flood", "3000", "-fair-newcomer", "20", "-fair-tenants", "10",
		"-rate-duration", "2s", "-workflow-fan", "200", "-workflow-chain", "50",
		"-retained", "3000", "-expired", "3000", "-steady-duration", "4s", "-steady-rate", "100", "-steady-concurrency", "4", "-hot-pinned", "300",
	}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	table := out.String()
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`floor: single-row UPDATE transactions, 4 clients +500ms +\d+ tx/s`),
		regexp.MustCompile(`EnqueueNoop, 4 goroutines +300 jobs +\d+ jobs/s +\d+\.\d+x +>= 0\.80x floor (met|MISSED)`),
		regexp.MustCompile(`EnqueueGroupedNoopMany, batches of 500, 1 goroutines +3000 jobs +\d+ jobs/s +\d+\.\d+x +>= 10\.00x floor (met|MISSED)`),
		regexp.MustCompile(`EnqueueGroupedNoopMany, batches of 500, 4 goroutines +3000 jobs +\d+ jobs/s +\d+\.\d+x +>= 10\.00x floor (met|MISSED)`),
		regexp.MustCompile(`defaults: drain ungrouped +500 jobs +\d+ jobs/s +\d+\.\d+x +>= 3\.00x floor (met|MISSED)`),
		regexp.MustCompile(`defaults: drain 50 groups \(FIFO\) +500 jobs +\d+ jobs/s +\d+\.\d+x +>= 1\.50x floor (met|MISSED)`),
		regexp.MustCompile(`defaults: drain 1 hot group \(serial\) +50 jobs +\d+ jobs/s +\d+\.\d+x +>= 1\.00x floor (met|MISSED)`),
		regexp.MustCompile(`lease defaults: drain ungrouped +500 jobs +\d+ jobs/s +\d+\.\d+x +>= 3\.00x floor (met|MISSED)`),
		regexp.MustCompile(`lease defaults: drain 50 groups \(FIFO\) +500 jobs +\d+ jobs/s +\d+\.\d+x +>= 1\.50x floor (met|MISSED)`),
		regexp.MustCompile(`lease defaults: drain 1 hot group \(serial\) +50 jobs +\d+ jobs/s +\d+\.\d+x +>= 0\.50x floor (met|MISSED)`),
		regexp.MustCompile(`held, BatchSize 1: drain ungrouped +500 jobs +\d+ jobs/s +\d+\.\d+x +none \(a setting, not the default\)`),
		regexp.MustCompile(`held, BatchSize 1: drain 50 groups \(FIFO\) +500 jobs +\d+ jobs/s +\d+\.\d+x +none \(a setting, not the default\)`),
		regexp.MustCompile(`held, BatchSize 1: drain 1 hot group \(serial\) +50 jobs +\d+ jobs/s +\d+\.\d+x +none \(a setting, not the default\)`),
		regexp.MustCompile(`lease: 20ms handlers, Concurrency 500 +500 jobs +\d+ jobs/s on \d+ conns +\d+\.\d+x +>= \d+ jobs/s \(0\.8x lease no-op\) on <= 10 conns (met|MISSED)`),
		regexp.MustCompile(`defaults, transaction held open: drain ungrouped +500 jobs +\d+ jobs/s +\d+\.\d+x +>= \d+ jobs/s \(0\.8x the same without\) (met|MISSED)`),
		regexp.MustCompile(`defaults, transaction held open: wake-up after it +3 samples +p50 [\d.]+ms, p99 [\d.]+ms +p99 < 100ms (met|MISSED)`),
		regexp.MustCompile(`lease, transaction held open: drain ungrouped +500 jobs +\d+ jobs/s +\d+\.\d+x +>= \d+ jobs/s \(0\.8x the same without\) (met|MISSED)`),
		regexp.MustCompile(`lease, transaction held open: wake-up after it +3 samples +p50 [\d.]+ms, p99 [\d.]+ms +p99 < 100ms (met|MISSED)`),
		regexp.MustCompile(`defaults, transaction held open: drain 50 groups \(FIFO\) +500 jobs +\d+ jobs/s +\d+\.\d+x +>= \d+ jobs/s \(0\.8x the same without\) (met|MISSED)`),
		regexp.MustCompile(`lease, transaction held open: drain 50 groups \(FIFO\) +500 jobs +\d+ jobs/s +\d+\.\d+x +>= \d+ jobs/s \(0\.8x the same without\) (met|MISSED)`),
		regexp.MustCompile(`defaults, transaction held open: drain 1 hot group \(serial\) +50 jobs +\d+ jobs/s +\d+\.\d+x +>= \d+ jobs/s \(0\.8x the same without\) (met|MISSED)`),
		regexp.MustCompile(`lease, transaction held open: drain 1 hot group \(serial\) +50 jobs +\d+ jobs/s +\d+\.\d+x +>= \d+ jobs/s \(0\.8x the same without\) (met|MISSED)`),
		regexp.MustCompile(`defaults: hot group, transaction held open: last 10s vs first 10s +300 jobs \(\d+s: windows overlap\) +[\d.]+x \(\d+ jobs/s then \d+ jobs/s; \d+ jobs/s overall\) +>= 0\.80x (met|MISSED)`),
		regexp.MustCompile(`lease: hot group, transaction held open: last 10s vs first 10s +300 jobs \(\d+s: windows overlap\) +[\d.]+x \(\d+ jobs/s then \d+ jobs/s; \d+ jobs/s overall\) +>= 0\.80x (met|MISSED)`),
		regexp.MustCompile(`drain ungrouped +2000 jobs +\d+ jobs/s`),
		regexp.MustCompile(`drain 50 groups \(FIFO\) +2000 jobs +\d+ jobs/s`),
		regexp.MustCompile(`drain 1 hot group \(serial\) +300 jobs +\d+ jobs/s`),
		regexp.MustCompile(`wake-up, held: enqueue to handler start +10 samples +p50 [\d.]+ms, p95 [\d.]+ms, p99 [\d.]+ms +p50 <= 5ms, p99 <= 10ms (met|MISSED)`),
		regexp.MustCompile(`wake-up, lease: enqueue to handler start +10 samples +p50 [\d.]+ms, p95 [\d.]+ms, p99 [\d.]+ms +p50 <= 5ms, p99 <= 10ms (met|MISSED)`),
		regexp.MustCompile(`held, idle worker: enqueue committed to success visible +10 samples +p50 [\d.]+ms, p99 [\d.]+ms +p50 <= 5ms, p99 <= 15ms (met|MISSED)`),
		regexp.MustCompile(`lease, idle worker: enqueue committed to success visible +10 samples +p50 [\d.]+ms, p99 [\d.]+ms +p50 <= 5ms, p99 <= 15ms (met|MISSED)`),
		regexp.MustCompile(`held, 1ms handlers and 1 in 10 of 100ms: success to its commit visible +2000 jobs +p50 [\d.]+ms, p99 [\d.]+ms +p99 <= 15\.00ms \(commit budget \+ 5ms\) (met|MISSED)`),
		regexp.MustCompile(`held, BatchSize 1, 1ms handlers and 1 in 10 of 100ms: success to its commit visible +2000 jobs +p50 [\d.]+ms, p99 [\d.]+ms +none`),
		regexp.MustCompile(`claim 10 jobs \(begin, claim, rollback\) +backlog 100 +\d+µs`),
		regexp.MustCompile(`claim 10 jobs \(begin, claim, rollback\) +backlog 2000 +\d+µs`),
		regexp.MustCompile(`defaults: drain ungrouped, queue's limit 10 \(= Concurrency\) +500 jobs +\d+ jobs/s \([\d.]+x the same without a limit: \d+ jobs/s\) +\d+\.\d+x +>= 0\.90x the same without a limit (met|MISSED)`),
		regexp.MustCompile(`defaults: drain 50 keys, limit 2 each +500 jobs +\d+ jobs/s \([\d.]+x the 50-group drain: \d+ jobs/s\) +\d+\.\d+x +>= 0\.80x the 50-group drain (met|MISSED)`),
		regexp.MustCompile(`lease defaults: drain ungrouped, queue's limit 100 \(= Concurrency\) +500 jobs +\d+ jobs/s \([\d.]+x the same without a limit: \d+ jobs/s\) +\d+\.\d+x +>= 0\.90x the same without a limit (met|MISSED)`),
		regexp.MustCompile(`lease defaults: drain 50 keys, limit 2 each +500 jobs +\d+ jobs/s \([\d.]+x the 50-group drain: \d+ jobs/s\) +\d+\.\d+x +>= 0\.80x the 50-group drain (met|MISSED)`),
		regexp.MustCompile(`rate limit 100/s, burst 10, 4 workers \(held\) +210 jobs, 2 s +[\d.]+ starts/s after the first burst; most in any 1 s: \d+ +100/s ±5%, <= 110 in any 1 s (met|MISSED)`),
		regexp.MustCompile(`rate limit 100/s, burst 10, 4 workers \(lease\) +210 jobs, 2 s +[\d.]+ starts/s after the first burst; most in any 1 s: \d+ +100/s ±5%, <= 110 in any 1 s (met|MISSED)`),
		regexp.MustCompile(`defaults: drain ungrouped, one key of rate 1000000/s \(not binding\) +500 jobs +\d+ jobs/s \([\d.]+x the same without a rate: \d+ jobs/s\) +\d+\.\d+x +>= 0\.80x the same without a rate (met|MISSED)`),
		regexp.MustCompile(`claim 10 jobs of a queue without rates, beside 50 ready rate keys +10000 runnable +p50 \d+µs, p99 \d+µs \([\d.]+x no rate keys: p50 \d+µs, p99 \d+µs\) +p50 <= 1\.20x no rate keys (met|MISSED)`),
		regexp.MustCompile(`defaults: fair: tenant b's 20 jobs behind tenant a's 3000 +3000 \+ 20 jobs +\d+ of a's jobs started after b's enqueue before b's last +< 1000 (met|MISSED)`),
		regexp.MustCompile(`defaults: fair: tenant b's 20 jobs, one per transaction, behind tenant a's 3000 +3000 \+ 20 jobs +\d+ of a's jobs started after b's last enqueue before b's last +< 1000 (met|MISSED)`),
		regexp.MustCompile(`defaults: drain ungrouped, fair over 10 tenants +500 jobs +\d+ jobs/s \([\d.]+x the same, not fair: \d+ jobs/s\) +\d+\.\d+x +>= 0\.80x the same, not fair (met|MISSED)`),
		regexp.MustCompile(`defaults: drain ungrouped, fair over 10 tenants, transaction held open +500 jobs +\d+ jobs/s \([\d.]+x the same without it: \d+ jobs/s\) +\d+\.\d+x +>= 0\.80x the same without it (met|MISSED)`),
		regexp.MustCompile(`lease defaults: fair: tenant b's 20 jobs behind tenant a's 3000 +3000 \+ 20 jobs +\d+ of a's jobs started after b's enqueue before b's last +< 1000 (met|MISSED)`),
		regexp.MustCompile(`lease defaults: fair: tenant b's 20 jobs, one per transaction, behind tenant a's 3000 +3000 \+ 20 jobs +\d+ of a's jobs started after b's last enqueue before b's last +< 1000 (met|MISSED)`),
		regexp.MustCompile(`lease defaults: drain ungrouped, fair over 10 tenants +500 jobs +\d+ jobs/s \([\d.]+x the same, not fair: \d+ jobs/s\) +\d+\.\d+x +>= 0\.80x the same, not fair (met|MISSED)`),
		regexp.MustCompile(`lease defaults: drain ungrouped, fair over 10 tenants, transaction held open +500 jobs +\d+ jobs/s \([\d.]+x the same without it: \d+ jobs/s\) +\d+\.\d+x +>= 0\.80x the same without it (met|MISSED)`),
		regexp.MustCompile(`workflows: enqueue of a fan-out of 200 steps +200 jobs +\d+ jobs/s \([\d.]+x EnqueueMany of as many jobs: \d+ jobs/s\) +\d+\.\d+x +>= 0\.50x EnqueueMany of as many jobs (met|MISSED)`),
		regexp.MustCompile(`workflows: cancel of a fan-out's root, 200 steps +200 jobs +\d+ jobs/s \([\d.]+x EnqueueMany of as many jobs: \d+ jobs/s\) +\d+\.\d+x +>= 0\.50x EnqueueMany of as many jobs (met|MISSED)`),
		regexp.MustCompile(`workflows \(held\): fan-out of 200 steps, one fan-in step +201 jobs +\d+ jobs/s \([\d.]+x a plain drain of as many jobs: \d+ jobs/s\) +\d+\.\d+x +>= 0\.50x a plain drain of as many jobs (met|MISSED)`),
		regexp.MustCompile(`workflows \(held\): chain, parent's success to the next step's start +50 steps +p50 [\d.]+ms, p99 [\d.]+ms +p50 <= 5ms (met|MISSED)`),
		regexp.MustCompile(`workflows \(lease\): fan-out of 200 steps, one fan-in step +201 jobs +\d+ jobs/s \([\d.]+x a plain drain of as many jobs: \d+ jobs/s\) +\d+\.\d+x +>= 0\.50x a plain drain of as many jobs (met|MISSED)`),
		regexp.MustCompile(`workflows \(lease\): chain, parent's success to the next step's start +50 steps +p50 [\d.]+ms, p99 [\d.]+ms +p50 <= 5ms (met|MISSED)`),
		regexp.MustCompile(`claim 10 jobs with 500 limit keys at their limit, jobs waiting +10000 runnable +p50 \d+µs, p99 \d+µs \([\d.]+x none waiting: p50 \d+µs, p99 \d+µs\) +p50 <= 1\.20x none waiting (met|MISSED)`),
		regexp.MustCompile(`worker RSS over a drain .* +3000 jobs +[\d.]+ MiB at 10%, [\d.]+ MiB peak, [\d.]+ MiB at end`),
		regexp.MustCompile(`dashboard: queues \(GET /\) +3000 jobs +p50 [\d.]+ms, max [\d.]+ms +p50 <= 100\.00ms (met|MISSED)`),
		regexp.MustCompile(`dashboard: jobs, failed \(GET /jobs\?status=failed\) +3000 jobs +p50 [\d.]+ms, max [\d.]+ms`),
		regexp.MustCompile(`dashboard: a job \(GET /jobs/\d+\) +3000 jobs +p50 [\d.]+ms`),
		regexp.MustCompile(`dashboard: groups, all \(GET /groups\?show=all\) +3000 jobs +p50 [\d.]+ms`),
		regexp.MustCompile(`runtime.Stats \(pgtask stats\), for comparison +3000 jobs +[\d.]+ms`),
	} {
		if !want.MatchString(table) {
			t.Errorf("table lacks %s:\n%s", want, table)
		}
	}
	if strings.Count(table, "\n") != 81 {
		t.Errorf("table has %d lines, want a header and 80 rows:\n%s", strings.Count(table, "\n"), table)
	}
}

// The steady run, on a cluster of its own, prints the first and the last
// window's claims with a verdict, and pickup, with and without a
// transaction held open.
func TestSteadyRunPrintsItsRows(t *testing.T) {
	t.Setenv("DATABASE_URL", pgtasktest.NewDatabase(t))
	var out, errOut bytes.Buffer
	code := Main(context.Background(), []string{
		"-only", "steady", "-steady-duration", "4s", "-steady-rate", "100", "-steady-concurrency", "4", "-steady-concurrency", "4",
	}, &out, &errOut)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
	}
	table := out.String()
	for _, held := range []string{"", `, transaction held open`} {
		for _, want := range []*regexp.Regexp{
			regexp.MustCompile(`steady held, 100 jobs/s offered` + held + `: claim, first 1s +4s, 4 runners +p50 [\d.]+ms, p99 [\d.]+ms \(\d+ claims`),
			regexp.MustCompile(`steady held, 100 jobs/s offered` + held + `: claim, last 1s +4s, 4 runners +p50 [\d.]+ms, p99 [\d.]+ms \(\d+ claims.* +last p99 <= 1\.5x first (met|MISSED)`),
			regexp.MustCompile(`steady held, 100 jobs/s offered` + held + `: pickup \(enqueue to start\) +4s, 4 runners +all p50 [\d.]+ms, p99 [\d.]+ms; last 1s p50`),
		} {
			if !want.MatchString(table) {
				t.Errorf("table lacks %s:\n%s", want, table)
			}
		}
	}
}

// The server's URL heads the output: no password of it shows.
func TestRedactHidesEveryPassword(t *testing.T) {
	for _, dsn := range []string{
		"postgres://bench:pa@ss-w0rd@db.example.com/bench",
		"postgres://db.example.com/bench?password=pa-ss-w0rd",
		"host=db.example.com password=pa-ss-w0rd dbname=bench",
	} {
		got := redact(dsn)
		if strings.Contains(got, "w0rd") || !strings.Contains(got, "db.example.com") {
			t.Errorf("redact(%q) = %q; want the host and no password", dsn, got)
		}
	}
}
