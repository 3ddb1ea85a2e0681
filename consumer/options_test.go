package consumer_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq"
	"github.com/onceq/onceq/consumer"
)

// TestNewRefusesBadOptions: New reports every refused option at once,
// each naming the option and what it wants, matching ErrConfig.
func TestNewRefusesBadOptions(t *testing.T) {
	_, err := consumer.New(consumer.Queues("q"), consumer.CheckpointDir(t.TempDir()), consumer.WithHandler(consumer.HandlerFunc(nil)),
		consumer.ResultRetention(time.Second), consumer.MaxResultBytes(onceq.DefaultMaxMessageBytes), consumer.Jitter(2))
	if !errors.Is(err, consumer.ErrConfig) {
		t.Fatalf("err %v, want ErrConfig", err)
	}
	var names []string
	for _, oe := range onceq.Options(err) {
		names = append(names, oe.Option)
	}
	for _, want := range []string{"ResultRetention", "MaxResultBytes", "Jitter"} {
		if !slices.Contains(names, want) {
			t.Errorf("refused %v, want %s among them (%v)", names, want, err)
		}
	}
	for _, want := range []string{"want 0 (states only) or 1m or more", "want 1 to 783360"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	for _, ok := range [][]consumer.Opt{
		{consumer.ResultRetention(0)},
		{consumer.ResultRetention(time.Minute), consumer.MaxResultBytes(783360)},
		{consumer.TaskRecords(false)},
	} {
		opts := append([]consumer.Opt{consumer.Queues("q"), consumer.CheckpointDir(t.TempDir()), consumer.WithHandler(consumer.HandlerFunc(nil))}, ok...)
		if _, err := consumer.New(opts...); err != nil {
			t.Errorf("refused valid options: %v", err)
		}
	}
}
