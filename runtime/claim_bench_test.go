package runtime_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/gen"
	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
	"github.com/pgtask/pgtask/runtime/pgtasktest"
)

// BenchmarkClaim measures one claim of 10 jobs against backlogs of growing
// size, spread over up to 10,000 groups. Each claim is rolled back, so every
// iteration sees the same backlog. The cost should not grow with the backlog:
//
//	go test -run '^$' -bench Claim -benchtime 2000x ./runtime
func BenchmarkClaim(b *testing.B) {
	for _, backlog := range []int{1_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("backlog=%d", backlog), func(b *testing.B) {
			ctx := context.Background()
			pool, err := pgxpool.New(ctx, pgtasktest.NewDatabase(b))
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			groups := min(10_000, backlog/10)
			const batch = 10_000
			reqs := make([]runtime.EnqueueRequest, 0, batch)
			for n := 0; n < backlog; n++ {
				r := runtime.EnqueueRequest{Kind: "k", Payload: []byte(`{"n":1}`)}
				r.Group = fmt.Sprint(n % groups)
				reqs = append(reqs, r)
				if len(reqs) == batch || n == backlog-1 {
					if _, err := runtime.EnqueueMany(ctx, pool, reqs); err != nil {
						b.Fatal(err)
					}
					reqs = reqs[:0]
				}
			}
			if err := testdb.New(pool).AnalyzeJobs(ctx); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				tx, err := pool.Begin(ctx)
				if err != nil {
					b.Fatal(err)
				}
				rows, err := gen.New(tx).ClaimJobs(ctx, gen.ClaimJobsParams{Queue: runtime.DefaultQueue, Max: 10})
				if err != nil || len(rows) != 10 {
					b.Fatalf("claimed %d: %v", len(rows), err)
				}
				if err := tx.Rollback(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
