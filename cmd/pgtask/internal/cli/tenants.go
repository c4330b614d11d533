package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/pgtask/pgtask/runtime"
)

const tenantsUsage = `usage: pgtask tenants [-queue Q] [-top N] [-json]
       pgtask tenants weight -queue Q -tenant T [-json] N
       pgtask tenants fair -queue Q [-json] on|off
`

// tenants runs pgtask tenants: list the fair queues' tenants, set a
// tenant's weight, or make a queue fair or not.
func tenants(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "weight" {
		return tenantWeight(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "fair" {
		return fairQueue(ctx, args[1:], stdout, stderr)
	}
	c := newCommand("tenants", tenantsUsage+"\n"+
		"Lists the fair queues (their tenants take turns; see docs/fairness.md) and, of each, the tenants with\n"+
		"the most queued jobs, with their weights; tenants with a weight set are listed even with nothing queued.", stderr)
	queue := c.fs.String("queue", "", "only the tenants of this queue")
	top := c.fs.Int("top", 20, "at most this many tenants of each queue")
	if err := c.parse(args, 0, stderr); err != nil {
		return err
	}
	if *queue != "" {
		if msg := badQueueName(*queue); msg != "" {
			fmt.Fprintf(stderr, "pgtask tenants: -queue: %s\n", msg)
			return errUsage
		}
	}
	if *top < 1 {
		fmt.Fprintf(stderr, "pgtask tenants: -top %d: want at least 1\n", *top)
		return errUsage
	}
	conn, err := connect(ctx, *c.url, true)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	queues, err := runtime.FairQueues(ctx, conn)
	if err != nil {
		return err
	}
	list, err := runtime.FairTenants(ctx, conn, *queue, *top)
	if err != nil {
		return err
	}
	if *c.asJSON {
		type tenant struct {
			Queue  string `json:"queue"`
			Tenant string `json:"tenant"`
			Weight int    `json:"weight"`
			Queued int64  `json:"queued"`
		}
		out := struct {
			FairQueues []string `json:"fair_queues"`
			Tenants    []tenant `json:"tenants"`
		}{FairQueues: []string{}, Tenants: []tenant{}}
		for _, q := range queues {
			if *queue == "" || q.Queue == *queue {
				out.FairQueues = append(out.FairQueues, q.Queue)
			}
		}
		for _, t := range list {
			out.Tenants = append(out.Tenants, tenant{t.Queue, t.Tenant, t.Weight, t.Queued})
		}
		return printJSON(stdout, out)
	}
	fair := 0
	for _, q := range queues {
		if *queue == "" || q.Queue == *queue {
			fair++
		}
	}
	if fair == 0 {
		fmt.Fprintln(stdout, "no fair queues"+inQueue(*queue)+": no job that names a tenant was enqueued, and none was made fair (pgtask tenants fair)")
		return nil
	}
	if len(list) == 0 {
		fmt.Fprintln(stdout, "no tenant has jobs queued"+inQueue(*queue))
		return nil
	}
	return printTenants(stdout, list)
}

// printTenants prints tenants as a table.
func printTenants(w io.Writer, list []runtime.TenantInfo) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "queue\ttenant\tweight\tqueued")
	for _, t := range list {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", t.Queue, tenantName(t.Tenant), t.Weight, t.Queued)
	}
	return tw.Flush()
}

// tenantName is how the commands show a tenant: `""` for the jobs that
// named none.
func tenantName(t string) string {
	if t == "" {
		return `""`
	}
	return t
}

// tenantWeight runs pgtask tenants weight.
func tenantWeight(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("tenants weight", "usage: pgtask tenants weight -queue Q -tenant T [-json] N\n\n"+
		"Sets the weight of tenant T in the fair queue Q: it gets N turns for a tenant of weight 1's one, for its\n"+
		"jobs enqueued from now on. N is from 1 to "+strconv.Itoa(runtime.MaxTenantWeight)+"; 1 (or 0) sets the default back.", stderr)
	queue := c.fs.String("queue", "", "the fair queue (required)")
	tenant := c.fs.String("tenant", "", `the tenant ("" for the jobs that name none)`)
	if err := c.parse(args, 1, stderr); err != nil {
		return err
	}
	switch {
	case *queue == "":
		fmt.Fprintln(stderr, "pgtask tenants weight: name the queue with -queue")
		return errUsage
	case badQueueName(*queue) != "":
		fmt.Fprintf(stderr, "pgtask tenants weight: -queue: %s\n", badQueueName(*queue))
		return errUsage
	}
	n, err := strconv.Atoi(c.args[0])
	if err != nil || n < 0 || n > runtime.MaxTenantWeight {
		fmt.Fprintf(stderr, "pgtask tenants weight: %q is not a weight: want a whole number from 1 to %d (0 or 1: the default)\n",
			c.args[0], runtime.MaxTenantWeight)
		return errUsage
	}
	conn, err := connect(ctx, *c.url, true)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	old, err := runtime.SetTenantWeight(ctx, conn, *queue, *tenant, n)
	if err != nil {
		return err
	}
	if *c.asJSON {
		return printJSON(stdout, struct {
			Queue    string `json:"queue"`
			Tenant   string `json:"tenant"`
			Weight   int    `json:"weight"`
			Previous int    `json:"previous"`
		}{*queue, *tenant, max(n, 1), old})
	}
	fmt.Fprintf(stdout, "set the weight of tenant %s of queue %s to %d (it was %d)\n", tenantName(*tenant), *queue, max(n, 1), old)
	return nil
}

// fairQueue runs pgtask tenants fair.
func fairQueue(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("tenants fair", "usage: pgtask tenants fair -queue Q [-json] on|off\n\n"+
		"Makes queue Q fair (on: its tenants take turns, and every job enqueued into it from now on gets a turn)\n"+
		"or not (off: it is claimed by priority, then enqueue order, again). Enqueueing a job that names a\n"+
		"tenant makes its queue fair too.", stderr)
	queue := c.fs.String("queue", "", "the queue (required)")
	if err := c.parse(args, 1, stderr); err != nil {
		return err
	}
	switch {
	case *queue == "":
		fmt.Fprintln(stderr, "pgtask tenants fair: name the queue with -queue")
		return errUsage
	case badQueueName(*queue) != "":
		fmt.Fprintf(stderr, "pgtask tenants fair: -queue: %s\n", badQueueName(*queue))
		return errUsage
	case c.args[0] != "on" && c.args[0] != "off":
		fmt.Fprintf(stderr, "pgtask tenants fair: %q: want on or off\n", c.args[0])
		return errUsage
	}
	conn, err := connect(ctx, *c.url, true)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	on := c.args[0] == "on"
	if err := runtime.SetFairQueue(ctx, conn, *queue, on); err != nil {
		return err
	}
	if *c.asJSON {
		return printJSON(stdout, struct {
			Queue string `json:"queue"`
			Fair  bool   `json:"fair"`
		}{*queue, on})
	}
	if on {
		fmt.Fprintf(stdout, "queue %s is fair: its tenants take turns\n", *queue)
	} else {
		fmt.Fprintf(stdout, "queue %s is not fair: it is claimed by priority, then enqueue order\n", *queue)
	}
	return nil
}
