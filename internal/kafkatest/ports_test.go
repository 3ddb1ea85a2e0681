package kafkatest

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePorts: the ports are distinct, bindable, and below the kernel's
// ephemeral range where it is known, so that no outgoing connection takes
// one while its process restarts.
func TestFreePorts(t *testing.T) {
	ports, err := FreePorts(5)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	low := ephemeralLow()
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d twice in %v", p, ports)
		}
		seen[p] = true
		if low > 10000 && (p < 10000 || p >= low) {
			t.Errorf("port %d outside [10000, %d), the ports below the ephemeral range", p, low)
		}
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d is not free: %v", p, err)
		}
		ln.Close()
	}
}
