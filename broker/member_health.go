package broker

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/onceq/onceq/internal/ops"
)

// The phases of a component's Run, for MemberHealth.
const (
	phaseNotStarted int32 = iota
	phaseRunning
	phaseStopped
)

// MemberHealth is the health of a component that runs a Member (a
// worker, a delay service), behind its Healthy and Ready: where its Run
// is (not started, running, stopped) and, while it runs, whether its
// member reaches the brokers and belongs to its group. Make one with the
// component, give it to each Member it makes (MemberConfig.Health), and
// call Start and Stop around Run. It is safe for concurrent use.
type MemberHealth struct {
	pkg    string // prefixes the reports: "consumer", "delay"
	group  string
	client *ops.BrokerHealth
	phase  atomic.Int32
	cause  atomic.Pointer[error] // why Run stopped, if it said
}

// NewMemberHealth returns the health of a component of package pkg (the
// prefix of its reports) in group: a member that heard from no broker for
// window (its session timeout) is unhealthy.
func NewMemberHealth(pkg, group string, window time.Duration) *MemberHealth {
	return &MemberHealth{pkg: pkg, group: group, client: ops.NewBrokerHealth(window)}
}

// Start records that Run started; the window of silence starts over. It
// reports false if Run had started before: a component runs once.
func (h *MemberHealth) Start() bool {
	if !h.phase.CompareAndSwap(phaseNotStarted, phaseRunning) {
		return false
	}
	h.client.Start()
	return true
}

// Stop records that Run returned, with cause (nil: none to report).
func (h *MemberHealth) Stop(cause error) {
	if cause != nil {
		h.cause.Store(&cause)
	}
	h.phase.Store(phaseStopped)
}

// Healthy returns nil while the component works: before Run, and while
// Run reaches the brokers and is a member of its group. It reports a
// member that heard from no broker for its window, whose group session
// broke and was not joined again, or whose Run returned: what a liveness
// probe (/healthz) asks.
func (h *MemberHealth) Healthy() error {
	switch h.phase.Load() {
	case phaseNotStarted:
		return nil
	case phaseStopped:
		if cause := h.cause.Load(); cause != nil {
			return fmt.Errorf("%s: stopped: %w", h.pkg, *cause)
		}
		return errors.New(h.pkg + ": stopped")
	}
	if err := h.client.Healthy(); err != nil {
		return fmt.Errorf("%s: %w", h.pkg, err)
	}
	return nil
}

// Ready returns nil from the time Run joined the group until it returns.
// joined says whether the component counts itself joined, when it takes
// over an assignment after the join (the delay service loads its
// partitions' cursors); nil: once the member was first assigned its
// partitions (HasJoined). A component that restores more before it works
// checks that after Ready.
func (h *MemberHealth) Ready(joined func() bool) error {
	switch h.phase.Load() {
	case phaseNotStarted:
		return errors.New(h.pkg + ": not started")
	case phaseStopped:
		return errors.New(h.pkg + ": stopped")
	}
	if joined == nil {
		joined = h.HasJoined
	}
	if !joined() {
		return errors.New(h.pkg + ": joining the group " + h.group)
	}
	return nil
}

// HasJoined reports whether a member of this component was assigned its
// partitions at least once.
func (h *MemberHealth) HasJoined() bool { return h.client.HasJoined() }
