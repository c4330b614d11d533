package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// limitsDB is a database with limited jobs and no worker: in queue emails,
// five jobs of key acct-1 limited to 2 (two admitted, three waiting); in
// queue reports, one job under the queue's own limit of 3.
func limitsDB(t *testing.T) (url string, pool *pgxpool.Pool, ids []runtime.JobID) {
	t.Helper()
	url = pgtasktest.NewDatabase(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var reqs []runtime.EnqueueRequest
	for range 5 {
		reqs = append(reqs, runtime.EnqueueRequest{Kind: "mail", Payload: []byte(`{}`),
			EnqueueOptions: runtime.EnqueueOptions{Queue: "emails", Limit: 2, LimitKey: "acct-1"}})
	}
	reqs = append(reqs, runtime.EnqueueRequest{Kind: "report", Payload: []byte(`{}`),
		EnqueueOptions: runtime.EnqueueOptions{Queue: "reports", Limit: 3}})
	ids, err = runtime.EnqueueMany(ctx, pool, reqs)
	if err != nil {
		t.Fatal(err)
	}
	return url, pool, ids
}

// limitsArgs puts -database-url url after the command and its subcommand.
func limitsArgs(url string, args ...string) []string {
	n := 1
	if len(args) > 1 && (args[1] == "set" || args[1] == "clear" || args[0] == "jobs") {
		n = 2
	}
	return append(append(append([]string(nil), args[:n]...), "-database-url", url), args[n:]...)
}

// limitOf reads the state of one key.
func limitOf(t *testing.T, pool *pgxpool.Pool, queue, key string) runtime.LimitInfo {
	t.Helper()
	infos, err := runtime.Limits(context.Background(), pool, queue, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range infos {
		if l.Key == key {
			return l
		}
	}
	t.Fatalf("no limit key %q in queue %s: %+v", key, queue, infos)
	return runtime.LimitInfo{}
}

// pgtask limits lists the keys and the operators' limits; set and clear
// change the limits in force at once, key by key or for every key.
func TestLimitsCommand(t *testing.T) {
	t.Parallel()
	url, pool, ids := limitsDB(t)
	db := func(args ...string) []string { return limitsArgs(url, args...) }

	code, out, errOut := run(t, db("limits")...)
	if code != 0 || !regexp.MustCompile(`(?m)^queue +key +limit +declared +overridden +running +waiting +free$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^emails +acct-1 +2 +2 +false +0 +3 +0$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^reports +\(queue\) +3 +3 +false +0 +0 +2$`).MatchString(out) ||
		strings.Contains(out, "operators' limits") {
		t.Fatalf("limits: code %d, stdout:\n%s\nstderr %q", code, out, errOut)
	}

	// stats splits the queued jobs: runnable, and waiting on a limit.
	code, out, errOut = run(t, db("stats")...)
	if code != 0 || !regexp.MustCompile(`(?m)^ +queue +scheduled +queued +runnable +on a limit +on a rate +started `).MatchString(out) ||
		!regexp.MustCompile(`(?m)^ +emails +0 +5 +2 +3 +0 `).MatchString(out) || !regexp.MustCompile(`(?m)^ +reports +0 +1 +1 +0 +0 `).MatchString(out) {
		t.Errorf("stats: code %d, stdout:\n%s\nstderr %q", code, out, errOut)
	}
	code, out, _ = run(t, db("stats", "-json")...)
	var st []struct {
		Queue            string           `json:"queue"`
		Counts           map[string]int64 `json:"counts"`
		WaitingForWorker int64            `json:"waiting_for_worker"`
		WaitingOnLimit   int64            `json:"waiting_on_limit"`
	}
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || len(st) != 2 || st[0].Queue != "emails" ||
		st[0].Counts["queued"] != 5 || st[0].WaitingForWorker != 2 || st[0].WaitingOnLimit != 3 || st[1].WaitingForWorker != 1 {
		t.Errorf("stats -json: code %d, stdout %s (%v)", code, out, err)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{db("limits", "set", "-queue", "emails", "-key", "acct-1", "4"), "set the limit of key acct-1 of queue emails to 4: 1 key changed now\n"},
		{db("limits", "set", "4", "-queue", "emails", "-key", "acct-1"), "set the limit of key acct-1 of queue emails to 4: 0 keys changed now\n"},
		{db("limits", "set", "-queue", "emails", "-every-key", "1"), "set the limit of every key of queue emails to 1: 0 keys changed now\n"},
		{db("limits", "set", "-queue", "reports", "5"), "set the limit of queue reports as a whole to 5: 1 key changed now\n"},
	} {
		if code, out, errOut := run(t, c.args...); code != 0 || out != c.want {
			t.Fatalf("pgtask %q: code %d, stdout %q, stderr %q; want %q", c.args, code, out, errOut, c.want)
		}
	}
	// The key's own limit wins over the every-key one; two more slots are
	// free, for maintenance to fill.
	if l := limitOf(t, pool, "emails", "acct-1"); l.Limit != 4 || l.Declared != 2 || !l.Overridden || l.Free != 2 || l.Waiting != 3 {
		t.Errorf("acct-1 after set 4: %+v", l)
	}
	if l := limitOf(t, pool, "reports", ""); l.Limit != 5 || !l.Overridden || l.Free != 4 {
		t.Errorf("reports' own limit after set 5: %+v", l)
	}
	code, out, _ = run(t, db("limits", "-queue", "emails")...)
	if code != 0 || !regexp.MustCompile(`(?m)^emails +acct-1 +4 +2 +true +0 +3 +2$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^emails +\(every key\) +1 +20\d\d-`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^emails +acct-1 +4 +20\d\d-`).MatchString(out) || strings.Contains(out, "reports") {
		t.Errorf("limits -queue emails after the sets:\n%s", out)
	}

	// Cleared, the key falls back on the every-key limit, then on the
	// declared one.
	if code, out, errOut := run(t, db("limits", "clear", "-queue", "emails", "-key", "acct-1")...); code != 0 ||
		out != "cleared the limit of key acct-1 of queue emails: 1 key changed now\n" {
		t.Fatalf("clear acct-1: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	if l := limitOf(t, pool, "emails", "acct-1"); l.Limit != 1 || !l.Overridden || l.Free != -1 {
		t.Errorf("acct-1 under the every-key limit of 1, with 2 jobs admitted: %+v", l)
	}
	code, out, errOut = run(t, db("limits", "clear", "-queue", "emails", "-every-key", "-json")...)
	var cleared struct {
		Queue    string `json:"queue"`
		EveryKey bool   `json:"every_key"`
		Limit    int    `json:"limit"`
		Changed  int    `json:"changed"`
	}
	if err := json.Unmarshal([]byte(out), &cleared); code != 0 || err != nil || cleared.Queue != "emails" || !cleared.EveryKey ||
		cleared.Limit != 0 || cleared.Changed != 1 {
		t.Fatalf("clear -every-key -json: code %d, stdout %q, stderr %q (%v)", code, out, errOut, err)
	}
	if l := limitOf(t, pool, "emails", "acct-1"); l.Limit != 2 || l.Overridden || l.Free != 0 {
		t.Errorf("acct-1 back on its declared limit: %+v", l)
	}

	code, out, errOut = run(t, db("limits", "-json")...)
	var listed struct {
		Keys []struct {
			Queue      string `json:"queue"`
			Key        string `json:"key"`
			Limit      int    `json:"limit"`
			Overridden bool   `json:"overridden"`
			Waiting    int64  `json:"waiting"`
		} `json:"keys"`
		Overrides []struct {
			Queue    string `json:"queue"`
			Key      string `json:"key"`
			EveryKey bool   `json:"every_key"`
			Limit    int    `json:"limit"`
		} `json:"overrides"`
	}
	if err := json.Unmarshal([]byte(out), &listed); code != 0 || err != nil || len(listed.Keys) != 2 || listed.Keys[0].Key != "acct-1" ||
		listed.Keys[0].Waiting != 3 || listed.Keys[1].Queue != "reports" || listed.Keys[1].Key != "" || !listed.Keys[1].Overridden ||
		len(listed.Overrides) != 1 || listed.Overrides[0].Queue != "reports" || listed.Overrides[0].EveryKey || listed.Overrides[0].Limit != 5 {
		t.Fatalf("limits -json: code %d, stdout %s, stderr %q (%v)", code, out, errOut, err)
	}

	// jobs show says where a job stands with its limit.
	for _, c := range []struct {
		id   runtime.JobID
		want string
	}{
		{ids[0], "limit key acct-1, limit 2: admitted: it holds a slot\n"},
		{ids[4], "limit key acct-1, limit 2: waiting for a free slot\n"},
		{ids[5], "limit key (queue), limit 5: admitted: it holds a slot\n"},
	} {
		if code, out, errOut := run(t, db("jobs", "show", fmt.Sprint(c.id))...); code != 0 || !strings.Contains(out, c.want) {
			t.Errorf("jobs show %d: code %d, stdout %q, stderr %q; want %q", c.id, code, out, errOut, c.want)
		}
	}
	code, out, _ = run(t, db("jobs", "show", "-json", fmt.Sprint(ids[4]))...)
	var shown struct {
		Limit *struct {
			Key      string `json:"key"`
			Limit    int    `json:"limit"`
			Admitted bool   `json:"admitted"`
			Waiting  bool   `json:"waiting"`
		} `json:"limit"`
	}
	if err := json.Unmarshal([]byte(out), &shown); code != 0 || err != nil || shown.Limit == nil || shown.Limit.Key != "acct-1" ||
		shown.Limit.Limit != 2 || shown.Limit.Admitted || !shown.Limit.Waiting {
		t.Errorf("jobs show -json of a waiting job: code %d, stdout %s (%v)", code, out, err)
	}
}

// Bad input to limits set and clear is refused with what is wrong (exit
// status 2), before the database is touched.
func TestLimitsCommandErrors(t *testing.T) {
	t.Parallel()
	url, pool, _ := limitsDB(t)
	db := func(args ...string) []string { return limitsArgs(url, args...) }
	for _, c := range []struct {
		args []string
		want string
	}{
		{db("limits", "set", "-queue", "emails", "0"), `"0" is not a limit: want a whole number of jobs from 1 to 2147483647`},
		{db("limits", "set", "-queue", "emails", "-3"), "flag provided but not defined: -3"},
		{db("limits", "set", "-queue", "emails", "--", "-3"), `"-3" is not a limit`},
		{db("limits", "set", "-queue", "emails", "two"), `"two" is not a limit`},
		{db("limits", "set", "-queue", "emails", "2.5"), `"2.5" is not a limit`},
		{db("limits", "set", "-queue", "emails", "2147483648"), `"2147483648" is not a limit`},
		{db("limits", "set", "-queue", "emails"), "want 1 argument(s), got 0"},
		{db("limits", "set", "-queue", "emails", "1", "2"), "want 1 argument(s), got 2"},
		{db("limits", "set", "3"), "name the queue with -queue (tasks without a queue option are in queue default)"},
		{db("limits", "clear", "-key", "acct-1"), "name the queue with -queue"},
		{db("limits", "set", "-queue", "emails", "-key", "acct-1", "-every-key", "3"), "give -key or -every-key, not both"},
		{db("limits", "clear", "-queue", "emails", "-key", "acct-1", "-every-key"), "give -key or -every-key, not both"},
		{db("limits", "clear", "-queue", "emails", "-key", ""), "-key is empty: leave it out for the queue's own limit"},
		{db("limits", "clear", "-queue", "emails", "3"), "want 0 argument(s), got 1"},
		{db("limits", "set", "-queue", strings.Repeat("q", 200), "3"), "more than the 128 allowed"},
		{db("limits", "-queue", "bad\x00name"), "contains a NUL byte"},
		{db("limits", "extra"), "want 0 argument(s), got 1"},
	} {
		if code, out, errOut := run(t, c.args...); code != 2 || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("pgtask %q: code %d, stdout %q, stderr %q; want 2 and %q", c.args, code, out, errOut, c.want)
		}
	}
	if l := limitOf(t, pool, "emails", "acct-1"); l.Limit != 2 || l.Overridden {
		t.Errorf("a refused command changed a limit: %+v", l)
	}
	if overrides, err := runtime.LimitOverrides(context.Background(), pool, ""); err != nil || len(overrides) != 0 {
		t.Errorf("a refused command left overrides %+v (%v)", overrides, err)
	}
	// A key too long is the runtime's to refuse: the command fails (1).
	if code, _, errOut := run(t, db("limits", "set", "-queue", "emails", "-key", strings.Repeat("k", 2000), "3")...); code != 1 ||
		!strings.Contains(errOut, "limit key") {
		t.Errorf("a key too long: code %d, stderr %q", code, errOut)
	}
	for _, args := range [][]string{{"limits", "-h"}, {"limits", "set", "-h"}, {"limits", "clear", "-h"}} {
		code, _, errOut := run(t, args...)
		if code != 0 || !strings.Contains(errOut, "usage: pgtask limits") || !strings.Contains(errOut, "-queue") {
			t.Errorf("pgtask %q: code %d, stderr %q", args, code, errOut)
		}
	}
}
