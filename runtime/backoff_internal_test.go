package runtime

import (
	"context"
	"testing"
	"time"
)

func TestRetryDelayDoublesToItsCapAndResets(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	want := []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 3200 * ms, 5 * time.Second, 5 * time.Second}
	var d retryDelay
	for i, w := range want {
		if got := d.next(); got != w {
			t.Fatalf("wait %d: %s, want %s", i, got, w)
		}
	}
	d.reset()
	if got := d.next(); got != retryFirst {
		t.Fatalf("after reset: %s, want %s", got, retryFirst)
	}
}

func TestSleepEndsWithItsContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	sleep(ctx, time.Hour)
	if took := time.Since(start); took > time.Second {
		t.Fatalf("sleep on a cancelled context took %s", took)
	}
}
