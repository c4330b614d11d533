// Package taskspec is what the code `pgtask gen` writes calls: each task's
// settings as a Spec, and the typed enqueue, handle and result functions the
// generated Enqueue<Task>, Enqueue<Task>Many, Enqueue<Task>Batch,
// Request<Task>, Handle<Task> and Get<Task>Result wrap.
//
// Users do not call it; generated code does. Call the generated functions,
// or package runtime directly (runtime.Enqueue, Worker.Register) for work
// without a declared task. Everything here is built on runtime's public API.
//
// A generated file holds, per task, a Spec and one-line wrappers:
//
//	var sendEmailSpec = &taskspec.Spec[SendEmail]{Kind: SendEmailKind, ...}
//
//	func EnqueueSendEmail(ctx context.Context, db runtime.DB, t SendEmail, opts ...runtime.EnqueueOption) (runtime.JobID, error) {
//		return taskspec.Enqueue(ctx, db, sendEmailSpec, t, opts...)
//	}
package taskspec
