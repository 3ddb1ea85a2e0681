package broker

import (
	"errors"
	"testing"
	"time"
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
	if DelayTopic(time.Minute*2) != "onceq-delay-2m" || DLQTopic("q") != "onceq-dlq-q" || ChangelogTopic("g", "q") != "onceq-changelog-g-q" {
		t.Fatal("topic names")
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
