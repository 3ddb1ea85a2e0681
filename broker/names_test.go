package broker

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq"
)

func TestBucketNames(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{time.Second, "1s"}, {5 * time.Second, "5s"}, {30 * time.Second, "30s"}, {2 * time.Minute, "2m"},
		{10 * time.Minute, "10m"}, {time.Hour, "1h"}, {6 * time.Hour, "6h"}, {24 * time.Hour, "1d"},
		{100 * time.Millisecond, "100ms"}, {1500 * time.Millisecond, "1500ms"}, {90 * time.Minute, "90m"},
	} {
		if got := FormatBucket(tc.d); got != tc.want {
			t.Errorf("FormatBucket(%v) = %s, want %s", tc.d, got, tc.want)
		}
		back, err := ParseBucket(tc.want)
		if err != nil || back != tc.d {
			t.Errorf("ParseBucket(%s) = %v, %v", tc.want, back, err)
		}
	}
	for _, bad := range []string{"", "0s", "-1s", "1.5ms", "x", "0d", "1us"} {
		if _, err := ParseBucket(bad); err == nil {
			t.Errorf("ParseBucket(%q) accepted", bad)
		}
	}
	if DelayTopic(time.Minute*2) != "onceq-delay-2m" || DLQTopic("q") != "onceq-dlq-q" || ChangelogTopic("g", "q") != "onceq-checkpoint-1-g-q" {
		t.Fatal("topic names")
	}
}

// TestChangelogNamesInjective pins bug 1 of issue 17: the changelog names
// onceq-changelog-<group>-<queue> gave group "a-b" with queue "c" and group
// "a" with queue "b-c" one topic, and the second group restored the first
// one's processed IDs and skipped its own tasks.
func TestChangelogNamesInjective(t *testing.T) {
	pairs := []GroupQueue{
		{"a-b", "c"}, {"a", "b-c"}, {"a", "b"}, {"a-", "b"}, {"a", "-b"}, {"1", "1-a-b"}, {"1-a", "b"},
		{"10", "x"}, {"1", "0-x"}, {"mailer", "emails"}, {"g.x_y", "q.z"}, {strings.Repeat("g", 120), strings.Repeat("q", 100)},
	}
	seen := map[string]GroupQueue{}
	for _, p := range pairs {
		name := ChangelogTopic(p.Group, p.Queue)
		if prev, dup := seen[name]; dup {
			t.Errorf("%+v and %+v share the changelog %s", prev, p, name)
		}
		seen[name] = p
		g, q, ok := ParseChangelogTopic(name)
		if !ok || g != p.Group || q != p.Queue {
			t.Errorf("ParseChangelogTopic(%s) = %q, %q, %v; want %q, %q", name, g, q, ok, p.Group, p.Queue)
		}
		if strings.HasPrefix(name, LegacyChangelogPrefix) {
			t.Errorf("%s could be an old name", name)
		}
	}
	if ChangelogTopic("mailer", "emails") != "onceq-checkpoint-6-mailer-emails" {
		t.Errorf("ChangelogTopic(mailer, emails) = %s", ChangelogTopic("mailer", "emails"))
	}
	for _, bad := range []string{"onceq-checkpoint-", "onceq-checkpoint-0--q", "onceq-checkpoint-01-a-q", "onceq-checkpoint-2-a-q",
		"onceq-checkpoint-1-a", "onceq-checkpoint-1-a-", "onceq-checkpoint-x-a-q", "onceq-changelog-a-b", "emails"} {
		if g, q, ok := ParseChangelogTopic(bad); ok {
			t.Errorf("ParseChangelogTopic(%s) = %q, %q", bad, g, q)
		}
	}
	owners := LegacyChangelogOwners(LegacyChangelogTopic("a", "b-c"))
	if len(owners) != 2 || owners[0] != (GroupQueue{"a", "b-c"}) || owners[1] != (GroupQueue{"a-b", "c"}) {
		t.Errorf("owners of onceq-changelog-a-b-c: %+v", owners)
	}
}

// TestValidateChangelogLength pins bug 2 of issue 17: a 200-byte group with
// a 100-byte queue named a 317-byte changelog, which the worker could never
// create. The limit is Kafka's 249 bytes, and the error says so.
func TestValidateChangelogLength(t *testing.T) {
	err := ValidateChangelog(strings.Repeat("g", 200), "ok", strings.Repeat("q", 100))
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "over Kafka's limit of 249") || !strings.Contains(err.Error(), "(100 bytes)") {
		t.Fatalf("200-byte group, 100-byte queue: %v", err)
	}
	if strings.Contains(err.Error(), "connection") {
		t.Errorf("a topic name error speaks of connections: %v", err)
	}
	// The longest names that fit, for groups of one and three digits of
	// length.
	for _, g := range []string{"g", strings.Repeat("g", 100)} {
		room := MaxTopicLen - len(ChangelogTopic(g, ""))
		if err := ValidateChangelog(g, strings.Repeat("q", room)); err != nil {
			t.Errorf("group of %d bytes with a queue of %d: %v", len(g), room, err)
		}
		if err := ValidateChangelog(g, strings.Repeat("q", room+1)); err == nil {
			t.Errorf("group of %d bytes with a queue of %d accepted", len(g), room+1)
		}
	}
	if len(DLQTopic(strings.Repeat("q", onceq.MaxQueueLen))) != MaxTopicLen {
		t.Errorf("the dead-letter topic of the longest queue does not fill Kafka's limit exactly")
	}
}

func TestConnValidate(t *testing.T) {
	for _, c := range []Conn{
		{Brokers: []string{"nohost"}},
		{TLS: TLS{CertFile: "/x"}},
		{TLS: TLS{CAFile: "/does/not/exist"}},
		{SASL: SASL{Mechanism: "GSSAPI", User: "u"}},
		{SASL: SASL{Mechanism: "PLAIN"}},
		{SASL: SASL{User: "u"}},
	} {
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: got %v, want ErrConfig", c, err)
		}
	}
	ok := Conn{Brokers: []string{"127.0.0.1:9092"}, SASL: SASL{Mechanism: "SCRAM-SHA-512", User: "u", Password: "p"}}
	if _, err := ok.Opts(); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseBrokers(" a:1 , b:2 "); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseBrokers(","); err == nil {
		t.Fatal("empty broker list accepted")
	}
}

// TestLaneQueueTopics: a lane queue's dead letters, task records and
// changelog are its lane's, as for every other queue of the lane; a
// queue of its own topic keeps its own.
func TestLaneQueueTopics(t *testing.T) {
	for _, c := range []struct{ queue, dlq, rec, changelog string }{
		{"fn/resize", "onceq-dlq-fn", "onceq-rec-fn", "onceq-checkpoint-1-g-fn"},
		{"fn/mail", "onceq-dlq-fn", "onceq-rec-fn", "onceq-checkpoint-1-g-fn"},
		{"emails", "onceq-dlq-emails", "onceq-rec-emails", "onceq-checkpoint-1-g-emails"},
	} {
		if got := DLQTopic(c.queue); got != c.dlq {
			t.Errorf("DLQTopic(%q) = %q, want %q", c.queue, got, c.dlq)
		}
		if got := RecordsTopic(c.queue); got != c.rec {
			t.Errorf("RecordsTopic(%q) = %q, want %q", c.queue, got, c.rec)
		}
		if got := ChangelogTopic("g", c.queue); got != c.changelog {
			t.Errorf("ChangelogTopic(g, %q) = %q, want %q", c.queue, got, c.changelog)
		}
		if err := ValidateChangelog("g", c.queue); err != nil {
			t.Errorf("ValidateChangelog(g, %q): %v", c.queue, err)
		}
	}
}
