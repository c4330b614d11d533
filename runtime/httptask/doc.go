// Package httptask makes HTTP calls as pgtask jobs: a built-in task,
// Request, enqueued like any other (EnqueueRequest validates it and inserts
// it, in the caller's transaction if given one), and a handler, registered
// with Handle, that makes the call and stores the response as the job's
// result (GetRequestResult reads it back).
//
// The handler retries what another attempt can fix (network errors,
// timeouts, 408, 425, 429 and 5xx, honouring Retry-After) and fails the job
// at once on other 4xx answers. Secrets are named in the payload, never
// stored in it, and resolved when the call is made; each call carries an
// Idempotency-Key header with the job's id, and optionally an HMAC-SHA256
// signature that receivers check with Verify.
//
//	id, err := httptask.EnqueueRequest(ctx, tx, httptask.Request{
//		Method:        "POST",
//		URL:           "https://hooks.example.com/orders",
//		Body:          `{"order":42}`,
//		Headers:       map[string]string{"Content-Type": "application/json"},
//		SecretHeaders: map[string]string{"Authorization": "orders-hook-token"},
//	})
//
//	err = httptask.Handle(worker, httptask.Config{Secrets: resolve, SigningKey: key})
package httptask
