package onceq

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestValidateQueue(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind error
	}{
		{"emails", nil},
		{"a.b_c-D9", nil},
		{strings.Repeat("q", MaxQueueLen), nil},
		{"", ErrInvalidQueue},
		{".", ErrInvalidQueue},
		{"..", ErrInvalidQueue},
		{"a b", ErrInvalidQueue},
		{"é", ErrInvalidQueue},
		{"a/b", ErrInvalidQueue},
		{strings.Repeat("q", MaxQueueLen+1), ErrInvalidQueue},
		{"onceq-delay-1s", ErrReservedQueue},
		{"__consumer_offsets", ErrReservedQueue},
	} {
		err := ValidateQueue(tc.name)
		if !errors.Is(err, tc.kind) || (tc.kind == nil) != (err == nil) {
			t.Errorf("ValidateQueue(%q) = %v, want kind %v", tc.name, err, tc.kind)
		}
	}
}

func TestValidateID(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"x", true},
		{"order-42/attempt:1", true},
		{strings.Repeat("i", MaxIDLen), true},
		{"", false},
		{strings.Repeat("i", MaxIDLen+1), false},
		{"has space", false},
		{"tab\t", false},
		{"nul\x00", false},
		{"del\x7f", false},
		{"ü", false},
	} {
		err := ValidateID(tc.id)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalidID)) {
			t.Errorf("ValidateID(%q) = %v, want ok=%v", tc.id, err, tc.ok)
		}
	}
}

func TestTaskValidate(t *testing.T) {
	now := time.Now()
	valid := func() Task { return Task{Queue: "q", ID: "id-1", Payload: []byte("p")} }
	for _, tc := range []struct {
		name   string
		mutate func(*Task)
		kind   error
		field  string
	}{
		{"valid", func(*Task) {}, nil, ""},
		{"no id is fine", func(t *Task) { t.ID = "" }, nil, ""},
		{"bad queue", func(t *Task) { t.Queue = "a b" }, ErrInvalidQueue, "queue"},
		{"reserved queue", func(t *Task) { t.Queue = "onceq-dlq-x" }, ErrReservedQueue, "queue"},
		{"bad id", func(t *Task) { t.ID = "a b" }, ErrInvalidID, "id"},
		{"long id", func(t *Task) { t.ID = strings.Repeat("x", 257) }, ErrInvalidID, "id"},
		{"negative delay", func(t *Task) { t.Delay = -time.Second }, ErrNegativeDelay, "delay"},
		{"due and delay", func(t *Task) { t.Delay = time.Second; t.Due = now }, ErrInvalidTask, "delay"},
		{"expires before due", func(t *Task) { t.Due = now.Add(time.Hour); t.Expires = now }, ErrExpiryBeforeDue, "expires"},
		{"expires before delay", func(t *Task) { t.Delay = time.Hour; t.Expires = now.Add(time.Minute) }, ErrExpiryBeforeDue, "expires"},
		{"expires after due", func(t *Task) { t.Due = now; t.Expires = now.Add(time.Hour) }, nil, ""},
		{"negative max attempts", func(t *Task) { t.MaxAttempts = -1 }, ErrInvalidTask, "max_attempts"},
		{"negative timeout", func(t *Task) { t.Timeout = -1 }, ErrInvalidTask, "timeout"},
		{"onceq header", func(t *Task) { t.Headers = []Header{{Key: "onceq-due", Value: []byte("1")}} }, ErrMalformedHeader, "header"},
		{"too large", func(t *Task) { t.Payload = make([]byte, DefaultMaxMessageBytes) }, ErrTooLarge, "payload"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task := valid()
			tc.mutate(&task)
			err := task.Validate(0)
			if tc.kind == nil {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if !errors.Is(err, tc.kind) {
				t.Fatalf("got %v, want kind %v", err, tc.kind)
			}
			var e *Error
			if !errors.As(err, &e) || e.Field != tc.field || e.Hint == "" {
				t.Fatalf("error %v: want field %q and a hint", err, tc.field)
			}
		})
	}
}

// TestValidateSharesTheDecodersLimits pins issue 17, bug 6: the producer
// acknowledged tasks with headers its own worker refuses (max attempts
// 2^31, a due time before 1970) and the worker dead-lettered them as
// malformed. Each task here is refused by Validate, naming the field and
// the limit, and its record is refused by FromRecord: one set of limits.
func TestValidateSharesTheDecodersLimits(t *testing.T) {
	before1970 := time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC)
	after9999 := time.UnixMilli(MaxUnixMilli + 1)
	for _, tc := range []struct {
		name   string
		mutate func(*Task)
		field  string
		limit  string
	}{
		{"max attempts 2^31", func(t *Task) { t.MaxAttempts = 1 << 31 }, "max_attempts", "2147483647"},
		{"attempt 2^31", func(t *Task) { t.Attempt = 1 << 31 }, "attempt", "2147483647"},
		{"due before 1970", func(t *Task) { t.Due = before1970 }, "due", "1970-01-01T00:00:00Z"},
		{"due after 9999", func(t *Task) { t.Due = after9999 }, "due", "9999-12-31T23:59:59.999Z"},
		{"expires before 1970", func(t *Task) { t.Expires = before1970 }, "expires", "1970-01-01T00:00:00Z"},
		{"enqueued before 1970", func(t *Task) { t.Enqueued = before1970 }, "enqueued", "1970-01-01T00:00:00Z"},
		{"failed after 9999", func(t *Task) { t.Failed = after9999 }, "failed", "253402300799999"},
		{"timeout under 1ms", func(t *Task) { t.Timeout = 500 * time.Microsecond }, "timeout", "1ms"},
		{"requeued with a space", func(t *Task) { t.Requeued = "0 1" }, "requeued", "<partition>/<offset>"},
		{"priority past the highest", func(t *Task) { t.Priority = MaxPriority + 1 }, "priority", "to 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task := Task{Queue: "q", ID: "id-1"}
			tc.mutate(&task)
			err := task.Validate(0)
			var e *Error
			if !errors.As(err, &e) || e.Field != tc.field || !strings.Contains(err.Error(), tc.limit) {
				t.Fatalf("Validate: got %v, want an error for field %q naming the limit %s", err, tc.field, tc.limit)
			}
			if tc.field == "timeout" {
				return // written as no timeout at all: decodes, but as the worker's default
			}
			if _, err := FromRecord(task.Record("q")); !errors.Is(err, ErrMalformedHeader) {
				t.Fatalf("FromRecord of the same task: got %v, want it refused too", err)
			}
		})
	}
	// The limits themselves are accepted by both.
	task := Task{Queue: "q", ID: "id-1", MaxAttempts: MaxAttemptCount, Attempt: MaxAttemptCount,
		Due: time.UnixMilli(MaxUnixMilli), Expires: time.UnixMilli(MaxUnixMilli), Enqueued: time.UnixMilli(0), Timeout: time.Millisecond, Priority: MaxPriority}
	if err := task.Validate(0); err != nil {
		t.Fatal(err)
	}
	if _, err := FromRecord(task.Record("q")); err != nil {
		t.Fatal(err)
	}
}

func TestValidateMaxMessageBytes(t *testing.T) {
	task := Task{Queue: "q", Payload: make([]byte, 2000)}
	if err := task.Validate(1000); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("payload of 2000 bytes under a 1000-byte limit: got %v", err)
	}
	if err := task.Validate(4000); err != nil {
		t.Fatalf("payload of 2000 bytes under a 4000-byte limit: %v", err)
	}
}

func TestErrorMessage(t *testing.T) {
	err := ValidateQueue(strings.Repeat("é", 100))
	msg := err.Error()
	if !strings.HasPrefix(msg, "onceq: queue ") || !strings.Contains(msg, "bytes)") {
		t.Fatalf("long values are cut and sized: %s", msg)
	}
}

// TestApplyOptions: each option is applied in order; a nil one is refused
// by name, and the others still apply.
func TestApplyOptions(t *testing.T) {
	errs := OptionErrors{Pkg: "x", Kind: errors.New("invalid x option")}
	var got []string
	ApplyOptions(&errs, []fmt.Stringer{time.Second, nil, time.Minute}, func(o fmt.Stringer) { got = append(got, o.String()) })
	var oe *OptionError
	if fmt.Sprint(got) != "[1s 1m0s]" || !errors.As(errs.Err(), &oe) || oe.Option != "Opt" || !errors.Is(errs.Err(), errs.Kind) {
		t.Fatalf("applied %v, error %v", got, errs.Err())
	}
}

// TestPriorityRangeSaysMaxPriority: the range every refusal of a
// priority names is MaxPriority's.
func TestPriorityRangeSaysMaxPriority(t *testing.T) {
	if want := fmt.Sprintf("0 (the default, the lowest) to %d (the highest)", MaxPriority); PriorityRange != want {
		t.Fatalf("PriorityRange %q, want %q", PriorityRange, want)
	}
	if err := ValidatePriority(MaxPriority + 1); err == nil || !strings.Contains(err.Error(), PriorityRange) {
		t.Fatalf("ValidatePriority(%d) = %v, want an error naming %q", MaxPriority+1, err, PriorityRange)
	}
}
