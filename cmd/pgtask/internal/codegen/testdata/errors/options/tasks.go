package options

import "github.com/pgtask/pgtask/runtime"

type UnknownOption struct {
	runtime.Task `task:"a,retries=3"`
}

type BadDuration struct {
	runtime.Task `task:"b,timeout=soon"`
}

type NegativeTimeout struct {
	runtime.Task `task:"c,timeout=-1s"`
}

type ZeroAttempts struct {
	runtime.Task `task:"d,max_attempts=0"`
}

type BigPriority struct {
	runtime.Task `task:"e,priority=40000"`
}

type BadPolicy struct {
	runtime.Task `task:"f,on_fail=retry"`
}

type BackwardsBackoff struct {
	runtime.Task `task:"g,backoff=1h..1s"`
}

type Twice struct {
	runtime.Task `task:"h,queue=a,queue=b"`
}

type NoValue struct {
	runtime.Task `task:"i,queue"`
}

type BadKind struct {
	runtime.Task `task:"send email"`
}

type LongKind struct {
	runtime.Task `task:"kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"`
}

type LongQueue struct {
	runtime.Task `task:"j,queue=qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq"`
}

type BadMode struct {
	runtime.Task `task:"k,mode=async"`
}

type BadUnique struct {
	runtime.Task `task:"bad_unique,unique=fields"`
}

type WindowAlone struct {
	runtime.Task `task:"window_alone,unique_window=5m"`
}

type UnfinishedStatus struct {
	runtime.Task `task:"unfinished_status,unique=payload,unique_statuses=succeeded+queued"`
}

type ZeroSnoozes struct {
	runtime.Task `task:"snooze0,max_snoozes=0"`
}

type BadAging struct {
	runtime.Task `task:"aging0,priority=3,aging=1us"`
}
