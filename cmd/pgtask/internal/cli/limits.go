package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/pgtask/pgtask/runtime"
)

// limits runs pgtask limits: list, set or clear concurrency limits.
func limits(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && (args[0] == "set" || args[0] == "clear") {
		return changeLimit(ctx, args[0], args[1:], stdout, stderr)
	}
	c := newCommand("limits", limitsUsage+"\n"+
		"Lists the concurrency limit keys (of -queue, or every queue): each one's limit in force and the one\n"+
		"its tasks declare, whether an operator's limit overrides it, its running and waiting jobs and its\n"+
		"free slots; then the operators' limits.", stderr)
	queue := c.fs.String("queue", "", "only the limits of this queue")
	if err := c.parse(args, 0, stderr); err != nil {
		return err
	}
	if *queue != "" {
		if msg := badQueueName(*queue); msg != "" {
			fmt.Fprintf(stderr, "pgtask limits: -queue: %s\n", msg)
			return errUsage
		}
	}
	conn, err := connect(ctx, *c.url, true)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	keys, err := runtime.Limits(ctx, conn, *queue, maxLimitKeys)
	if err != nil {
		return err
	}
	if len(keys) == maxLimitKeys {
		fmt.Fprintf(stderr, "pgtask limits: listing the first %d keys only, by queue and key\n", maxLimitKeys)
	}
	overrides, err := runtime.LimitOverrides(ctx, conn, *queue)
	if err != nil {
		return err
	}
	if *c.asJSON {
		type key struct {
			Queue      string `json:"queue"`
			Key        string `json:"key"`
			Limit      int    `json:"limit"`
			Declared   int    `json:"declared"`
			Overridden bool   `json:"overridden"`
			Running    int64  `json:"running"`
			Waiting    int64  `json:"waiting"`
			Free       int    `json:"free"`
		}
		type override struct {
			Queue    string    `json:"queue"`
			Key      string    `json:"key"`
			EveryKey bool      `json:"every_key"`
			Limit    int       `json:"limit"`
			SetAt    time.Time `json:"set_at"`
		}
		out := struct {
			Keys      []key      `json:"keys"`
			Overrides []override `json:"overrides"`
		}{Keys: []key{}, Overrides: []override{}}
		for _, k := range keys {
			out.Keys = append(out.Keys, key{k.Queue, k.Key, k.Limit, k.Declared, k.Overridden, k.Running, k.Waiting, k.Free})
		}
		for _, o := range overrides {
			out.Overrides = append(out.Overrides, override{o.Queue, o.Key, o.EveryKey, o.Limit, o.SetAt})
		}
		return printJSON(stdout, out)
	}
	if len(keys) == 0 {
		fmt.Fprintln(stdout, "no limit keys: no job with a concurrency limit was enqueued"+inQueue(*queue))
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "queue\tkey\tlimit\tdeclared\toverridden\trunning\twaiting\tfree")
		for _, k := range keys {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%t\t%d\t%d\t%d\n", k.Queue, keyName(k.Key), k.Limit, k.Declared, k.Overridden,
				k.Running, k.Waiting, k.Free)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(overrides) == 0 {
		return nil
	}
	fmt.Fprintln(stdout, "\noperators' limits (pgtask limits set; they win over the declared ones):")
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "queue\tkey\tlimit\tset at")
	for _, o := range overrides {
		key := keyName(o.Key)
		if o.EveryKey {
			key = "(every key)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", o.Queue, key, o.Limit, o.SetAt.UTC().Format(time.RFC3339))
	}
	return tw.Flush()
}

// maxLimitKeys is how many keys pgtask limits lists at most.
const maxLimitKeys = 1000

const limitsUsage = `usage: pgtask limits [-queue Q] [-json]
       pgtask limits set -queue Q [-key K | -every-key] N
       pgtask limits clear -queue Q [-key K | -every-key]
`

// keyName is how the commands show a limit key: "(queue)" for the queue's
// own limit.
func keyName(key string) string {
	if key == "" {
		return "(queue)"
	}
	return key
}

func inQueue(queue string) string {
	if queue == "" {
		return ""
	}
	return " in queue " + queue
}

// changeLimit runs pgtask limits set and pgtask limits clear.
func changeLimit(ctx context.Context, verb string, args []string, stdout, stderr io.Writer) error {
	name := "limits " + verb
	var usage string
	if verb == "set" {
		usage = "usage: pgtask limits set -queue Q [-key K | -every-key] [-json] N\n\n" +
			"Sets an operator's concurrency limit of N jobs running at once, across every worker, for key K of\n" +
			"queue Q, or for every key of it (but the queue's own limit, and keys with a limit of their own),\n" +
			"or, with neither flag, for the queue's own limit. It wins over the limit the tasks declare, at\n" +
			"once and for later jobs too, until it is cleared. A raised limit admits waiting jobs within a\n" +
			"maintenance round; a lowered one stops no running job."
	} else {
		usage = "usage: pgtask limits clear -queue Q [-key K | -every-key] [-json]\n\n" +
			"Clears an operator's limit (see pgtask limits set): the key, every key, or (with neither flag)\n" +
			"the queue's own limit goes back to the limit its tasks declare."
	}
	c := newCommand(name, usage, stderr)
	queue := c.fs.String("queue", "", "the queue (required)")
	key := c.fs.String("key", "", "the limit key; without it (and without -every-key), the queue's own limit")
	everyKey := c.fs.Bool("every-key", false, "every key of the queue but the queue's own limit")
	nargs := 0
	if verb == "set" {
		nargs = 1
	}
	if err := c.parse(args, nargs, stderr); err != nil {
		return err
	}
	keySet := false
	c.fs.Visit(func(f *flag.Flag) {
		if f.Name == "key" {
			keySet = true
		}
	})
	switch {
	case *queue == "":
		fmt.Fprintf(stderr, "pgtask %s: name the queue with -queue (tasks without a queue option are in queue %s)\n", name, runtime.DefaultQueue)
		return errUsage
	case badQueueName(*queue) != "":
		fmt.Fprintf(stderr, "pgtask %s: -queue: %s\n", name, badQueueName(*queue))
		return errUsage
	case keySet && *everyKey:
		fmt.Fprintf(stderr, "pgtask %s: give -key or -every-key, not both\n", name)
		return errUsage
	case keySet && *key == "":
		fmt.Fprintf(stderr, "pgtask %s: -key is empty: leave it out for the queue's own limit\n", name)
		return errUsage
	}
	n := 0
	if verb == "set" {
		v, err := strconv.ParseInt(c.args[0], 10, 64)
		if err != nil || v < 1 || v > math.MaxInt32 {
			fmt.Fprintf(stderr, "pgtask %s: %q is not a limit: want a whole number of jobs from 1 to %d (pgtask limits clear removes one)\n",
				name, c.args[0], math.MaxInt32)
			return errUsage
		}
		n = int(v)
	}
	conn, err := connect(ctx, *c.url, true)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var changed int
	if *everyKey {
		changed, err = runtime.SetEveryKeyLimit(ctx, conn, *queue, n)
	} else {
		changed, err = runtime.SetLimit(ctx, conn, *queue, *key, n)
	}
	if err != nil {
		return err
	}
	if *c.asJSON {
		return printJSON(stdout, struct {
			Queue    string `json:"queue"`
			Key      string `json:"key"`
			EveryKey bool   `json:"every_key"`
			Limit    int    `json:"limit"` // 0: cleared
			Changed  int    `json:"changed"`
		}{*queue, *key, *everyKey, n, changed})
	}
	what := fmt.Sprintf("the limit of key %s of queue %s", *key, *queue)
	switch {
	case *everyKey:
		what = "the limit of every key of queue " + *queue
	case *key == "":
		what = "the limit of queue " + *queue + " as a whole"
	}
	if verb == "set" {
		fmt.Fprintf(stdout, "set %s to %d", what, n)
	} else {
		fmt.Fprintf(stdout, "cleared %s", what)
	}
	fmt.Fprintf(stdout, ": %d %s changed now\n", changed, plural(changed, "key", "keys"))
	return nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
