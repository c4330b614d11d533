package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pgtask/pgtask/runtime"
)

// rates runs pgtask rates: list, set or clear rate limits.
func rates(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && (args[0] == "set" || args[0] == "clear") {
		return changeRate(ctx, args[0], args[1:], stdout, stderr)
	}
	c := newCommand("rates", ratesUsage+"\n"+
		"Lists the rate limit keys (of -queue, or every queue): each one's rate in force (jobs that may\n"+
		"start per period, and at once) and the one its tasks declare, whether an operator's rate\n"+
		"overrides it, its tokens now, its waiting jobs, and when its next token is due.", stderr)
	queue := c.fs.String("queue", "", "only the rates of this queue")
	if err := c.parse(args, 0, stderr); err != nil {
		return err
	}
	if *queue != "" {
		if msg := badQueueName(*queue); msg != "" {
			fmt.Fprintf(stderr, "pgtask rates: -queue: %s\n", msg)
			return errUsage
		}
	}
	conn, err := connect(ctx, *c.url, true)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	keys, err := runtime.Rates(ctx, conn, *queue, maxLimitKeys)
	if err != nil {
		return err
	}
	if len(keys) == maxLimitKeys {
		fmt.Fprintf(stderr, "pgtask rates: listing the first %d keys only, by queue and key\n", maxLimitKeys)
	}
	if *c.asJSON {
		type key struct {
			Queue         string     `json:"queue"`
			Key           string     `json:"key"`
			Rate          int        `json:"rate"`
			PeriodSeconds float64    `json:"period_seconds"`
			Burst         int        `json:"burst"`
			Overridden    bool       `json:"overridden"`
			Declared      string     `json:"declared"`
			Tokens        float64    `json:"tokens"`
			Waiting       int64      `json:"waiting"`
			NextToken     *time.Time `json:"next_token,omitempty"`
		}
		out := []key{}
		for _, k := range keys {
			r := key{Queue: k.Queue, Key: k.Key, Rate: k.Rate, PeriodSeconds: k.Per.Seconds(), Burst: k.Burst,
				Overridden: k.Overridden, Declared: rateText(k.Declared), Tokens: k.Tokens, Waiting: k.Waiting}
			if !k.ReadyAt.IsZero() {
				r.NextToken = &k.ReadyAt
			}
			out = append(out, r)
		}
		return printJSON(stdout, out)
	}
	if len(keys) == 0 {
		fmt.Fprintln(stdout, "no rate keys: no job with a rate limit was enqueued"+inQueue(*queue))
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "queue\tkey\trate\tdeclared\toverridden\ttokens\twaiting\tnext token")
	now := time.Now()
	for _, k := range keys {
		next := "-"
		if !k.ReadyAt.IsZero() {
			next = "in " + max(k.ReadyAt.Sub(now), 0).Round(time.Millisecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\t%.1f\t%d\t%s\n", k.Queue, keyName(k.Key),
			rateText(runtime.Rate{N: k.Rate, Per: k.Per, Burst: k.Burst}), rateText(k.Declared), k.Overridden, k.Tokens, k.Waiting, next)
	}
	return tw.Flush()
}

// rateText shows a rate as the task tag declares it: "100/1m0s burst 10".
func rateText(r runtime.Rate) string {
	return fmt.Sprintf("%d/%s burst %d", r.N, r.Per, r.Burst)
}

const ratesUsage = `usage: pgtask rates [-queue Q] [-json]
       pgtask rates set -queue Q [-key K] [-burst B] N/PERIOD
       pgtask rates clear -queue Q [-key K]
`

// changeRate runs pgtask rates set and pgtask rates clear.
func changeRate(ctx context.Context, verb string, args []string, stdout, stderr io.Writer) error {
	name := "rates " + verb
	var usage string
	if verb == "set" {
		usage = "usage: pgtask rates set -queue Q [-key K] [-burst B] [-json] N/PERIOD\n\n" +
			"Sets an operator's rate for key K of queue Q (without -key, the queue's own rate): at most N jobs\n" +
			"start per PERIOD (such as 100/1m), across every worker, and at most B at once (default: a tenth\n" +
			"of N, at least 1). It wins over the rate the tasks declare, at once and for later jobs too, until\n" +
			"it is cleared. The key keeps the tokens it has, up to the new burst. A task without a rate key\n" +
			"field has its kind's rate: its key is the kind."
	} else {
		usage = "usage: pgtask rates clear -queue Q [-key K] [-json]\n\n" +
			"Clears an operator's rate (see pgtask rates set): the key goes back to the rate its tasks declare."
	}
	c := newCommand(name, usage, stderr)
	queue := c.fs.String("queue", "", "the queue (required)")
	key := c.fs.String("key", "", "the rate key; without it, the queue's own rate")
	burst := c.fs.Int("burst", 0, "how many may start at once (default: a tenth of the rate, at least 1)")
	nargs := 0
	if verb == "set" {
		nargs = 1
	}
	if err := c.parse(args, nargs, stderr); err != nil {
		return err
	}
	keySet, burstSet := false, false
	c.fs.Visit(func(f *flag.Flag) {
		keySet = keySet || f.Name == "key"
		burstSet = burstSet || f.Name == "burst"
	})
	switch {
	case *queue == "":
		fmt.Fprintf(stderr, "pgtask %s: name the queue with -queue (tasks without a queue option are in queue %s)\n", name, runtime.DefaultQueue)
		return errUsage
	case badQueueName(*queue) != "":
		fmt.Fprintf(stderr, "pgtask %s: -queue: %s\n", name, badQueueName(*queue))
		return errUsage
	case keySet && *key == "":
		fmt.Fprintf(stderr, "pgtask %s: -key is empty: leave it out for the queue's own rate\n", name)
		return errUsage
	case burstSet && (verb != "set" || *burst < 1 || *burst > math.MaxInt32):
		fmt.Fprintf(stderr, "pgtask %s: -burst: want a whole number of jobs from 1 to %d, with set\n", name, math.MaxInt32)
		return errUsage
	}
	var n int
	var per time.Duration
	if verb == "set" {
		count, period, ok := strings.Cut(c.args[0], "/")
		v, err := strconv.ParseInt(count, 10, 64)
		d, derr := time.ParseDuration(period)
		if !ok || err != nil || v < 1 || v > math.MaxInt32 || derr != nil || d < time.Millisecond {
			fmt.Fprintf(stderr, "pgtask %s: %q is not a rate: want N/PERIOD, N jobs from 1 to %d per a period of at least 1ms, such as 100/1m (pgtask rates clear removes one)\n",
				name, c.args[0], math.MaxInt32)
			return errUsage
		}
		n, per = int(v), d
	}
	conn, err := connect(ctx, *c.url, true)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	changed, err := runtime.SetRate(ctx, conn, *queue, *key, n, per, *burst)
	if err != nil {
		return err
	}
	if *c.asJSON {
		return printJSON(stdout, struct {
			Queue         string  `json:"queue"`
			Key           string  `json:"key"`
			Rate          int     `json:"rate"` // 0: cleared
			PeriodSeconds float64 `json:"period_seconds"`
			Burst         int     `json:"burst"` // 0: the default
			Changed       int     `json:"changed"`
		}{*queue, *key, n, per.Seconds(), *burst, changed})
	}
	what := fmt.Sprintf("the rate of key %s of queue %s", *key, *queue)
	if *key == "" {
		what = "the rate of queue " + *queue + " as a whole"
	}
	if verb == "set" {
		fmt.Fprintf(stdout, "set %s to %d/%s", what, n, per)
		if *burst > 0 {
			fmt.Fprintf(stdout, " burst %d", *burst)
		}
	} else {
		fmt.Fprintf(stdout, "cleared %s", what)
	}
	fmt.Fprintf(stdout, ": %d %s changed now\n", changed, plural(changed, "key", "keys"))
	return nil
}
