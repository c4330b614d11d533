package codegen

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/pgtask/pgtask/runtime"
)

// settings are a task's declared options, from the tag on its embedded
// runtime.Task field.
type settings struct {
	Kind            string
	Queue           string
	MaxAttempts     int
	MaxSnoozes      int // 0: runtime.DefaultMaxSnoozes
	Priority        int16
	Aging           time.Duration // 0: runtime.DefaultPriorityAging; runtime.StrictPriority: off
	Timeout         time.Duration
	BackoffMin      time.Duration
	BackoffMax      time.Duration
	FailBlocksGroup bool
	Mode            string // "held", "lease", or empty for either
	// Limit caps the jobs of a limit key that run at once across every
	// worker (runtime.EnqueueOptions.Limit); 0: no limit.
	Limit int
	// LimitStrategy is what becomes of a job that finds its key at its
	// limit (runtime.EnqueueOptions.LimitStrategy); empty: it waits.
	LimitStrategy string
	// Rate lets Rate jobs of a rate key start per RatePer across every
	// worker, in bursts of at most RateBurst (0: the default)
	// (runtime.EnqueueOptions.Rate); 0: no rate.
	Rate      int
	RatePer   time.Duration
	RateBurst int
	// Unique jobs: by the whole payload, within a window, holding the key
	// in these finished statuses too.
	Unique         bool
	UniqueWindow   time.Duration
	UniqueStatuses []runtime.Status
	// Fair makes the task's queue fair: its tenants take turns
	// (runtime.EnqueueOptions.Fair).
	Fair bool
}

var validKind = regexp.MustCompile(`^[a-zA-Z0-9_.:/-]+$`)

// parseTaskTag parses `task:"kind,option=value,..."`. The kind comes first
// and may be omitted (",queue=x" or "queue=x"); it defaults to typeName in
// snake_case. It returns every problem of the tag, in the tag's order.
func parseTaskTag(tag, typeName string) (settings, []error) {
	s := settings{Kind: snakeCase(typeName)}
	if tag == "" {
		return s, nil
	}
	var errs []error
	parts := strings.Split(tag, ",")
	if first := strings.TrimSpace(parts[0]); !strings.Contains(first, "=") {
		if first != "" {
			s.Kind = first
		}
		parts = parts[1:]
	}
	if !validKind.MatchString(s.Kind) {
		errs = append(errs, fmt.Errorf("kind %q: use letters, digits and _ . : / -", s.Kind))
	} else if len(s.Kind) > runtime.MaxKindBytes {
		errs = append(errs, fmt.Errorf("kind %q is %d bytes, more than the %d allowed", s.Kind, len(s.Kind), runtime.MaxKindBytes))
	}
	seen := map[string]bool{}
	for _, part := range parts {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		key, value, ok := strings.Cut(part, "=")
		key, value = strings.TrimSpace(key), strings.TrimSpace(value)
		if !ok {
			errs = append(errs, fmt.Errorf("option %q has no value; write %s=...", part, part))
			continue
		}
		if seen[key] {
			errs = append(errs, fmt.Errorf("option %s is given twice", key))
			continue
		}
		seen[key] = true
		if err := s.set(key, value); err != nil {
			errs = append(errs, fmt.Errorf("option %s=%s: %w", key, value, err))
		}
	}
	return s, errs
}

// options lists the tag's options for the "unknown option" message.
const options = "queue, max_attempts, max_snoozes, priority, aging, timeout, backoff, on_fail, mode, limit, on_limit, rate, burst, unique, unique_window, unique_statuses, fair"

func (s *settings) set(key, value string) error {
	switch key {
	case "queue":
		if value == "" {
			return fmt.Errorf("queue name is empty")
		}
		if len(value) > runtime.MaxQueueBytes {
			return fmt.Errorf("queue name is %d bytes, more than the %d allowed", len(value), runtime.MaxQueueBytes)
		}
		s.Queue = value
	case "max_attempts":
		n, err := strconv.Atoi(value)
		if err != nil || n < 1 || n > math.MaxInt32 {
			return fmt.Errorf("want a whole number from 1 to %d", math.MaxInt32)
		}
		s.MaxAttempts = n
	case "max_snoozes":
		n, err := strconv.Atoi(value)
		if err != nil || n < 1 || n > math.MaxInt32 {
			return fmt.Errorf("want a whole number from 1 to %d (without the option: %d)", math.MaxInt32, runtime.DefaultMaxSnoozes)
		}
		s.MaxSnoozes = n
	case "priority":
		n, err := strconv.ParseInt(value, 10, 16)
		if err != nil {
			return fmt.Errorf("want a whole number from %d to %d", math.MinInt16, math.MaxInt16)
		}
		s.Priority = int16(n)
	case "aging":
		if value == "off" {
			s.Aging = runtime.StrictPriority
			break
		}
		d, err := positiveDuration(value)
		if err != nil || d < time.Millisecond || d > math.MaxInt32*time.Millisecond {
			return fmt.Errorf("want off (the priority stays) or how long a job waits for each level its priority rises, from 1ms to %s (without the option: %s)",
				math.MaxInt32*time.Millisecond, runtime.DefaultPriorityAging)
		}
		s.Aging = d
	case "timeout":
		d, err := positiveDuration(value)
		if err != nil {
			return err
		}
		s.Timeout = d
	case "backoff":
		// backoff=MIN or backoff=MIN..MAX
		lo, hi, ranged := strings.Cut(value, "..")
		min, err := positiveDuration(lo)
		if err != nil {
			return err
		}
		s.BackoffMin = min
		if ranged {
			max, err := positiveDuration(hi)
			if err != nil {
				return err
			}
			if max < min {
				return fmt.Errorf("the maximum %s is below the minimum %s", max, min)
			}
			s.BackoffMax = max
		}
	case "on_fail":
		switch value {
		case "skip":
			s.FailBlocksGroup = false
		case "block":
			s.FailBlocksGroup = true
		default:
			return fmt.Errorf("want skip (the group moves on) or block (the group waits for an operator)")
		}
	case "mode":
		switch runtime.Mode(value) {
		case runtime.ModeHeld, runtime.ModeLease:
			s.Mode = value
		default:
			return fmt.Errorf("want held (each job in a transaction that holds its lock) or lease (handlers without a connection, under a lease)")
		}
	case "limit":
		n, err := strconv.Atoi(value)
		if err != nil || n < 1 || n > math.MaxInt32 {
			return fmt.Errorf("want how many jobs of a limit key may run at once, a whole number from 1 to %d", math.MaxInt32)
		}
		s.Limit = n
	case "rate":
		// rate=N/PERIOD: N jobs per PERIOD, such as 100/1m.
		count, per, ok := strings.Cut(value, "/")
		n, err := strconv.Atoi(strings.TrimSpace(count))
		d, derr := positiveDuration(strings.TrimSpace(per))
		if !ok || err != nil || n < 1 || n > math.MaxInt32 || derr != nil || d < time.Millisecond {
			return fmt.Errorf("want how many jobs of a rate key may start per period, as N/PERIOD with N from 1 to %d and a period of at least 1ms, such as 100/1m", math.MaxInt32)
		}
		s.Rate, s.RatePer = n, d
	case "burst":
		n, err := strconv.Atoi(value)
		if err != nil || n < 1 || n > math.MaxInt32 {
			return fmt.Errorf("want how many jobs of a rate key may start at once, a whole number from 1 to %d (without the option: a tenth of the rate, at least 1)", math.MaxInt32)
		}
		s.RateBurst = n
	case "on_limit":
		switch runtime.LimitStrategy(value) {
		case runtime.LimitQueue, runtime.LimitCancelNewest, runtime.LimitKeepOldest, runtime.LimitKeepNewest:
			s.LimitStrategy = value
		default:
			return fmt.Errorf("want queue (wait for a slot), cancel_newest (cancel a job that finds none), keep_oldest or keep_newest (keep one job waiting per key: the oldest, or the newest as a debounce)")
		}
	case "fair":
		if value != "on" {
			return fmt.Errorf(`want on (the queue's tenants take turns; a field tagged task:"tenant" names the job's tenant)`)
		}
		s.Fair = true
	case "unique":
		if value != "payload" {
			return fmt.Errorf(`want payload (a job is unique by its whole payload); to make it unique by some fields, tag them task:"unique"`)
		}
		s.Unique = true
	case "unique_window":
		d, err := positiveDuration(value)
		if err != nil {
			return err
		}
		s.UniqueWindow = d
	case "unique_statuses":
		for _, v := range strings.Split(value, "+") {
			switch st := runtime.Status(v); st {
			case runtime.StatusSucceeded, runtime.StatusFailed, runtime.StatusCancelled:
				s.UniqueStatuses = append(s.UniqueStatuses, st)
			default:
				return fmt.Errorf("want finished statuses joined by +, such as succeeded+failed (unfinished jobs always hold their key)")
			}
		}
	default:
		return fmt.Errorf("unknown option (known: %s)", options)
	}
	return nil
}

func positiveDuration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("want a duration such as 30s or 5m")
	}
	if d <= 0 {
		return 0, fmt.Errorf("want a positive duration")
	}
	return d, nil
}

// snakeCase turns a Go type name into a kind: SendEmail -> send_email,
// HTTPRequest -> http_request, ResizeV2 -> resize_v2.
func snakeCase(name string) string {
	runes := []rune(name)
	var b strings.Builder
	for i, r := range runes {
		if unicode.IsUpper(r) {
			prevLower := i > 0 && (unicode.IsLower(runes[i-1]) || unicode.IsDigit(runes[i-1]))
			nextLower := i > 0 && i+1 < len(runes) && unicode.IsLower(runes[i+1]) && unicode.IsUpper(runes[i-1])
			if prevLower || nextLower {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(r))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
