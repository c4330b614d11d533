package cli_test

import (
	"context"
	"encoding/json"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// pgtask rates lists the rate keys; stats counts their waiting jobs apart;
// set and clear change the rate in force at once.
func TestRatesCommand(t *testing.T) {
	t.Parallel()
	url := pgtasktest.NewDatabase(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var reqs []runtime.EnqueueRequest
	for range 5 {
		reqs = append(reqs, runtime.EnqueueRequest{Kind: "call", Payload: []byte(`{}`),
			EnqueueOptions: runtime.EnqueueOptions{Queue: "api", Rate: 2, RatePer: time.Second, RateBurst: 1, RateKey: "acme"}})
	}
	if _, err := runtime.EnqueueMany(ctx, pool, reqs); err != nil {
		t.Fatal(err)
	}
	db := func(args ...string) []string { return limitsArgs(url, args...) }

	code, out, errOut := run(t, db("rates")...)
	if code != 0 || !regexp.MustCompile(`(?m)^queue +key +rate +declared +overridden +tokens +waiting +next token$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^api +acme +2/1s burst 1 +2/1s burst 1 +false +1\.0 +5 +in \S+$`).MatchString(out) {
		t.Fatalf("rates: code %d, stdout:\n%s\nstderr %q", code, out, errOut)
	}
	code, out, errOut = run(t, db("stats")...)
	if code != 0 || !regexp.MustCompile(`(?m)^ +api +0 +5 +0 +0 +5 +0 `).MatchString(out) {
		t.Errorf("stats: code %d, stdout:\n%s\nstderr %q", code, out, errOut)
	}
	code, out, _ = run(t, db("stats", "-json")...)
	var st []struct {
		WaitingOnRate int64 `json:"waiting_on_rate"`
	}
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || len(st) != 1 || st[0].WaitingOnRate != 5 {
		t.Errorf("stats -json: code %d, stdout %s (%v)", code, out, err)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{db("rates", "set", "-queue", "api", "-key", "acme", "-burst", "3", "60/1m"), "set the rate of key acme of queue api to 60/1m0s burst 3: 1 key changed now\n"},
		{db("rates", "set", "-queue", "api", "-key", "other", "60/1m"), "set the rate of key other of queue api to 60/1m0s: 0 keys changed now\n"},
	} {
		if code, out, errOut := run(t, c.args...); code != 0 || out != c.want {
			t.Fatalf("pgtask %q: code %d, stdout %q, stderr %q; want %q", c.args, code, out, errOut, c.want)
		}
	}
	code, out, _ = run(t, db("rates", "-queue", "api", "-json")...)
	var keys []struct {
		Key        string  `json:"key"`
		Rate       int     `json:"rate"`
		Period     float64 `json:"period_seconds"`
		Burst      int     `json:"burst"`
		Overridden bool    `json:"overridden"`
		Declared   string  `json:"declared"`
		Waiting    int64   `json:"waiting"`
	}
	if err := json.Unmarshal([]byte(out), &keys); code != 0 || err != nil || len(keys) != 1 || keys[0].Rate != 60 || keys[0].Period != 60 ||
		keys[0].Burst != 3 || !keys[0].Overridden || keys[0].Declared != "2/1s burst 1" || keys[0].Waiting != 5 {
		t.Errorf("rates -json after set: code %d, stdout %s (%v)", code, out, err)
	}
	if code, out, errOut := run(t, db("rates", "clear", "-queue", "api", "-key", "acme")...); code != 0 ||
		out != "cleared the rate of key acme of queue api: 1 key changed now\n" {
		t.Fatalf("rates clear: code %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, bad := range [][]string{
		db("rates", "set", "-queue", "api", "100"),
		db("rates", "set", "-queue", "api", "0/1s"),
		db("rates", "set", "-queue", "api", "5/1us"),
		db("rates", "set", "-key", "acme", "5/1s"),
		db("rates", "clear", "-queue", "api", "-burst", "2"),
	} {
		if code, _, errOut := run(t, bad...); code != 2 || errOut == "" {
			t.Errorf("pgtask %q: code %d, stderr %q; want a usage error", bad, code, errOut)
		}
	}
}
