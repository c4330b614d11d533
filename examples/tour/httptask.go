package tour

import (
	"context"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgtask/pgtask/runtime"
	"github.com/pgtask/pgtask/runtime/httptask"
)

// The code of docs/http-tasks.md.

// key signs the calls (Config.SigningKey) and checks them (hook).
var key = []byte("at least sixteen bytes of secret")

func callHook(ctx context.Context, tx pgx.Tx, pool *pgxpool.Pool, cfg *pgxpool.Config, resolve httptask.SecretResolver, order any) error {
	req, err := httptask.Request{
		Method:        "POST",
		URL:           "https://hooks.example.com/orders",
		SecretHeaders: map[string]string{"Authorization": "orders-token"}, // a secret's name, not its value
	}.WithJSON(order)
	id, err := httptask.EnqueueRequest(ctx, tx, req, runtime.WithGroup("hooks.example.com"))
	if err != nil {
		return err
	}

	w, err := runtime.NewWorker(ctx, cfg, runtime.Config{
		Queues: map[string]runtime.QueueConfig{"http": {Mode: runtime.ModeLease, Concurrency: 200}},
	})
	err = httptask.Handle(w, httptask.Config{Secrets: resolve, SigningKey: key})

	resp, status, err := httptask.GetRequestResult(ctx, pool, id) // resp.Status, URL, Headers, Body
	_, _ = resp, status
	return err
}

func hook(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 1<<20) // before anything is known of the sender
	if err := httptask.Verify(r, key, 5*time.Minute); err != nil {
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	// r.Body reads the body; r.Header.Get("Idempotency-Key") names the call across retries.
}
