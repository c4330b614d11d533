package runtime_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/internal/testdb"
)

// sealed is how the test's enqueue hook stores a payload: wrapped, as an
// encrypting hook would.
type sealed struct {
	Sealed string `json:"sealed"`
}

var addSealHook = sync.OnceFunc(func() {
	runtime.AddEnqueueHook(func(_ context.Context, req *runtime.EnqueueRequest) error {
		switch {
		case req.Kind == "hooks.refused":
			return errors.New("refused by a hook")
		case strings.HasPrefix(req.Kind, "hooks.sealed"):
			b, err := json.Marshal(sealed{base64.StdEncoding.EncodeToString(req.Payload)})
			req.Payload = b
			return err
		}
		return nil
	})
})

// An enqueue hook changes what is stored (here it seals the payload) or
// refuses a request; middleware runs around every attempt in both modes,
// outermost first, can change the job the handler sees (here it unseals
// the payload), can end an attempt itself, and has its panics recovered.
func TestHooksAroundEnqueueAndEachAttempt(t *testing.T) {
	t.Parallel()
	addSealHook()
	for _, mode := range []runtime.Mode{runtime.ModeHeld, runtime.ModeLease} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			var mu sync.Mutex
			var trace []string
			note := func(s string) {
				mu.Lock()
				defer mu.Unlock()
				trace = append(trace, s)
			}
			outer := func(ctx context.Context, job *runtime.Job, next runtime.Handler) error {
				note("outer " + job.Kind)
				err := next(ctx, job)
				note(fmt.Sprintf("outer saw %v", err))
				return err
			}
			unseal := func(ctx context.Context, job *runtime.Job, next runtime.Handler) error {
				switch job.Kind {
				case "hooks.stop":
					return runtime.NoRetry(errors.New("stopped by middleware"))
				case "hooks.panic":
					panic("middleware panicked")
				}
				var s sealed
				if err := json.Unmarshal(job.Payload, &s); err != nil || s.Sealed == "" {
					return next(ctx, job)
				}
				plain, err := base64.StdEncoding.DecodeString(s.Sealed)
				if err != nil {
					return err
				}
				job.Payload = plain
				return next(ctx, job)
			}
			handler := func(_ context.Context, job *runtime.Job) error {
				note("handler " + string(job.Payload))
				return nil
			}
			regs := []runtime.Registration{}
			for _, k := range []string{"hooks.sealed", "hooks.stop", "hooks.panic"} {
				regs = append(regs, runtime.Registration{Kind: k, Handler: handler})
			}
			startWorker(t, b.url, runtime.Config{Queues: map[string]runtime.QueueConfig{runtime.DefaultQueue: {Mode: mode}}, Middleware: []runtime.Middleware{outer, unseal}}, regs...)

			id := enqueue(t, b.pool, "hooks.sealed", map[string]int{"n": 7})
			j := b.waitStatus(t, id, 10*time.Second, testdb.PgtaskJobStatusSucceeded)
			var stored sealed
			if err := json.Unmarshal(j.Payload, &stored); err != nil || stored.Sealed == "" {
				t.Fatalf("stored payload %s, want it sealed by the hook", j.Payload)
			}
			mu.Lock()
			got := slices.Clone(trace)
			mu.Unlock()
			if want := []string{"outer hooks.sealed", `handler {"n":7}`, "outer saw <nil>"}; !slices.Equal(got, want) {
				t.Fatalf("trace %q, want %q", got, want)
			}

			stop := enqueue(t, b.pool, "hooks.stop", map[string]int{})
			if j := b.waitStatus(t, stop, 10*time.Second, testdb.PgtaskJobStatusFailed); !strings.Contains(string(j.Errors), "stopped by middleware") {
				t.Errorf("stopped attempt's errors: %s", j.Errors)
			}
			boom := enqueue(t, b.pool, "hooks.panic", map[string]int{}, runtime.WithMaxAttempts(1))
			if j := b.waitStatus(t, boom, 10*time.Second, testdb.PgtaskJobStatusFailed); !strings.Contains(string(j.Errors), "middleware panicked") {
				t.Errorf("panicked attempt's errors: %s", j.Errors)
			}

			_, err := runtime.EnqueueMany(ctx, b.pool, []runtime.EnqueueRequest{
				{Kind: "hooks.sealed", Payload: json.RawMessage(`{}`)},
				{Kind: "hooks.refused", Payload: json.RawMessage(`{}`)},
			})
			var ee *runtime.EnqueueError
			if !errors.As(err, &ee) || ee.Index != 1 || !strings.Contains(err.Error(), "refused by a hook") {
				t.Fatalf("a refused request: %v", err)
			}
			if n := b.countJobs(t); n != 3 {
				t.Fatalf("%d jobs, want the 3 enqueued before the refused batch", n)
			}
		})
	}
}
