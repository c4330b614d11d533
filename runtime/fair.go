package runtime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgtask/pgtask/gen"
)

// MaxTenantWeight is the highest weight a tenant of a fair queue can have
// (see SetTenantWeight).
const MaxTenantWeight = 1000

// SetFairQueue makes queue fair (fair true) or not, at once and for every
// worker. In a fair queue tenants take turns (see EnqueueOptions.Fair and
// docs/fairness.md); a job enqueued into it that names no tenant is
// tenant "". Enqueueing a job that names a tenant makes its queue fair
// too, so this is for a queue none of whose tasks declares fairness, or
// to stop it: a queue no longer fair is claimed by (priority, id) again.
func SetFairQueue(ctx context.Context, db DB, queue string, fair bool) error {
	if err := checkName("queue", queue, MaxQueueBytes); err != nil || queue == "" {
		return fmt.Errorf("set fair queue: %w", cmp.Or(err, errors.New("queue name is empty")))
	}
	if _, err := gen.New(db).SetFairQueue(ctx, gen.SetFairQueueParams{Queue: queue, Fair: fair}); err != nil {
		return fmt.Errorf("set fair queue %s: %w", queue, err)
	}
	return nil
}

// SetTenantWeight sets the weight of tenant in the fair queue queue: a
// tenant of weight w gets w turns for a tenant of weight 1's one, while
// both have jobs queued. weight 0 or 1 sets it back to the default, 1; at
// most MaxTenantWeight. It applies to the tenant's jobs enqueued from then
// on. It returns the weight the tenant had.
func SetTenantWeight(ctx context.Context, db DB, queue, tenant string, weight int) (int, error) {
	if err := checkName("queue", queue, MaxQueueBytes); err != nil || queue == "" {
		return 0, fmt.Errorf("set tenant weight: %w", cmp.Or(err, errors.New("queue name is empty")))
	}
	if err := checkName("tenant", tenant, MaxTenantBytes); err != nil {
		return 0, fmt.Errorf("set tenant weight: %w", err)
	}
	if weight < 0 || weight > MaxTenantWeight {
		return 0, fmt.Errorf("set weight of tenant %q in queue %s: %d is out of range [1, %d] (0 sets the default, 1)",
			tenant, queue, weight, MaxTenantWeight)
	}
	old, err := gen.New(db).SetTenantWeight(ctx, gen.SetTenantWeightParams{Queue: queue, Tenant: tenant, Weight: int32(weight)})
	if err != nil {
		return 0, fmt.Errorf("set weight of tenant %q in queue %s: %w", tenant, queue, err)
	}
	return int(old), nil
}

// FairQueue is a queue whose tenants take turns (see SetFairQueue).
type FairQueue struct {
	Queue      string
	DeclaredAt time.Time
}

// FairQueues lists the fair queues, by name.
func FairQueues(ctx context.Context, db DB) ([]FairQueue, error) {
	rows, err := gen.New(db).ListFairQueues(ctx)
	if err != nil {
		return nil, fmt.Errorf("list fair queues: %w", err)
	}
	out := make([]FairQueue, len(rows))
	for i, r := range rows {
		out[i] = FairQueue{Queue: r.Queue, DeclaredAt: r.DeclaredAt}
	}
	return out, nil
}

// TenantInfo is one tenant of a fair queue: its weight and its jobs
// queued now.
type TenantInfo struct {
	Queue  string
	Tenant string
	Weight int
	Queued int64 // queued jobs: runnable, and grouped ones behind their heads
}

// FairTenants lists the tenants of the fair queue queue (every fair queue
// for ""): of each queue, the top tenants by queued jobs (0: 100), and
// tenants with a weight set even when they have nothing queued. It counts
// each tenant's queued jobs, so it costs as much as their number.
func FairTenants(ctx context.Context, db DB, queue string, top int) ([]TenantInfo, error) {
	if top <= 0 {
		top = 100
	}
	rows, err := gen.New(db).ListFairTenants(ctx, gen.ListFairTenantsParams{Queue: queue, Top: int32(min(top, math.MaxInt32))})
	if err != nil {
		return nil, fmt.Errorf("list fair tenants: %w", err)
	}
	out := make([]TenantInfo, len(rows))
	for i, r := range rows {
		out[i] = TenantInfo{Queue: r.Queue, Tenant: r.Tenant, Weight: int(r.Weight), Queued: r.Queued}
	}
	return out, nil
}

// JobTenant reads the tenant of job id: ok false for a job of a queue that
// was not fair when it was enqueued, or no such job.
func JobTenant(ctx context.Context, db DB, id JobID) (tenant string, ok bool, err error) {
	r, err := gen.New(db).GetJobTenant(ctx, int64(id))
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("get the tenant of job %d: %w", id, err)
	}
	if r.Tenant == nil {
		return "", false, nil
	}
	return *r.Tenant, true, nil
}
