package ops

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// BrokerHealth tells whether a franz-go client reaches its brokers and is
// a member of its consumer group, for a component's Checker. Give it to
// the client as kgo.WithHooks(h); call Joined from the group's
// OnPartitionsAssigned (franz-go calls it after every join, with nothing
// new assigned too), and make the group's OnPartitionsLost with OnLost.
//
// It is unhealthy when no response came from any broker for longer than
// its window (since Start, before the first), or when the group session
// broke (a group management error, lost partitions) and was not joined
// again since. A group member hears from its coordinator at every
// heartbeat (3 seconds by default), so a window of the session timeout or
// more never flags a working client.
type BrokerHealth struct {
	window time.Duration
	now    func() time.Time

	mu        sync.Mutex
	since     time.Time // Start, or the last response from a broker
	lastErr   error     // the last connection or read error
	joined    bool      // joined at least once
	groupErr  error     // why the session broke; nil while a member
	responded bool
}

var (
	_ kgo.HookBrokerRead       = (*BrokerHealth)(nil)
	_ kgo.HookBrokerConnect    = (*BrokerHealth)(nil)
	_ kgo.HookGroupManageError = (*BrokerHealth)(nil)
)

// NewBrokerHealth returns a tracker that flags a client that heard from no
// broker for window.
func NewBrokerHealth(window time.Duration) *BrokerHealth {
	h := &BrokerHealth{window: window, now: time.Now}
	h.since = h.now()
	return h
}

// Start restarts the window: call it when the client is created.
func (h *BrokerHealth) Start() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.since = h.now()
}

// OnBrokerRead implements kgo.HookBrokerRead: a response read without
// error is a sign of life.
func (h *BrokerHealth) OnBrokerRead(_ kgo.BrokerMetadata, _ int16, _ int, _, _ time.Duration, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err != nil {
		h.lastErr = err
		return
	}
	h.since, h.responded = h.now(), true
}

// OnBrokerConnect implements kgo.HookBrokerConnect: it keeps the last
// dial error to explain an unhealthy state.
func (h *BrokerHealth) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastErr = fmt.Errorf("connecting to %s:%d: %w", meta.Host, meta.Port, err)
}

// OnGroupManageError implements kgo.HookGroupManageError: the group
// session broke; the client rejoins by itself.
func (h *BrokerHealth) OnGroupManageError(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.groupErr = err
}

// Joined records that the client joined its group.
func (h *BrokerHealth) Joined() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.joined, h.groupErr = true, nil
}

// Lost records that the client lost its partitions (its session
// expired): unhealthy until it joins again.
func (h *BrokerHealth) Lost() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.groupErr == nil {
		h.groupErr = errors.New("partitions lost: the group session expired")
	}
}

// OnLost returns a group's OnPartitionsLost callback: it records Lost,
// then passes the lost partitions to revoked, the group's
// OnPartitionsRevoked, which gives them up as it gives up revoked ones.
func (h *BrokerHealth) OnLost(revoked func(context.Context, *kgo.Client, map[string][]int32)) func(context.Context, *kgo.Client, map[string][]int32) {
	return func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
		h.Lost()
		revoked(ctx, cl, m)
	}
}

// Healthy reports why the client is not healthy; nil if it is.
func (h *BrokerHealth) Healthy() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if silent := h.now().Sub(h.since); silent > h.window {
		what := "no response from the brokers for " + silent.Round(time.Second).String()
		if !h.responded {
			what = "no response from the brokers since the start, " + silent.Round(time.Second).String() + " ago"
		}
		if h.lastErr != nil {
			return fmt.Errorf("%s: %w", what, h.lastErr)
		}
		return errors.New(what)
	}
	if h.groupErr != nil {
		return fmt.Errorf("not a member of the group: %w", h.groupErr)
	}
	return nil
}

// HasJoined reports whether the client joined its group at least once.
func (h *BrokerHealth) HasJoined() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.joined
}
