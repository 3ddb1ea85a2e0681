package onceq_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLibraryDependencies checks that the library's packages link none of
// what only the CLI, the tests and the demo need: the embedded broker
// (kfake), the CLI's cobra, the console tests' chromedp, the bench
// reports' go-echarts, and OpenTelemetry's SDK: the library traces through
// OpenTelemetry's API alone, and a program that traces brings its SDK.
func TestLibraryDependencies(t *testing.T) {
	library := []string{".", "./broker", "./producer", "./consumer", "./delay", "./workflow", "./inspect", "./serve",
		"./dlq", "./periodic", "./auth", "./checkpoint", "./handlers"}
	out, err := exec.Command("go", append([]string{"list", "-deps"}, library...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < len(library) {
		t.Fatalf("go list -deps named %d packages, fewer than the %d asked about:\n%s", len(deps), len(library), out)
	}
	forbidden := []string{"github.com/twmb/franz-go/pkg/kfake", "github.com/spf13/cobra", "github.com/chromedp/", "github.com/go-echarts/",
		"github.com/onceq/onceq/broker/embedded", "github.com/onceq/onceq/internal/testutil", "github.com/onceq/onceq/internal/kafkatest",
		"go.opentelemetry.io/otel/sdk"}
	for _, d := range deps {
		for _, f := range forbidden {
			if strings.HasPrefix(d, f) {
				t.Errorf("the library links %s: it is for the CLI, tests and demos only", d)
			}
		}
	}
}
