package onceq_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"slices"
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

// cliOnly are the modules of the CLI (cmd/onceq, a module of its own) that
// the library's module must not require: a program that imports the
// library gets none of them.
var cliOnly = []string{"github.com/spf13/cobra", "github.com/spf13/pflag", "github.com/go-echarts/"}

// TestLibraryModuleLacksTheCLI checks the library's go.mod: it requires
// none of the CLI's modules, and its module builds on its own, without
// go.work (which joins the CLI's module and its requirements), with none
// of its packages, their tests included, linking them.
func TestLibraryModuleLacksTheCLI(t *testing.T) {
	mod := goModJSON(t, "go.mod")
	if mod.Module.Path != "github.com/onceq/onceq" {
		t.Fatalf("go.mod: module %s", mod.Module.Path)
	}
	for _, r := range mod.Require {
		for _, f := range cliOnly {
			if strings.HasPrefix(r.Path, f) {
				t.Errorf("go.mod requires %s %s: it is the CLI's (cmd/onceq/go.mod)", r.Path, r.Version)
			}
		}
	}
	if testing.Short() {
		return
	}
	cmd := exec.Command("go", "list", "-deps", "-test", "./...")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("GOWORK=off go list -deps -test ./...: %v\n%s", err, out)
	}
	for _, d := range strings.Fields(string(out)) {
		for _, f := range cliOnly {
			if strings.HasPrefix(d, f) {
				t.Errorf("a package of the library's module links %s: it is the CLI's", d)
			}
		}
	}
}

// TestCLIModule checks the CLI's module and the go.work that joins it to
// the library's in a checkout: go install github.com/onceq/onceq/cmd/onceq@v...
// refuses a module whose go.mod replaces or excludes a module, so
// cmd/onceq/go.mod requires a version of the library and go.work, which
// go install never reads, replaces that version with the checkout.
func TestCLIModule(t *testing.T) {
	lib, cli := goModJSON(t, "go.mod"), goModJSON(t, "cmd/onceq/go.mod")
	if cli.Module.Path != "github.com/onceq/onceq/cmd/onceq" {
		t.Errorf("cmd/onceq/go.mod: module %s, want github.com/onceq/onceq/cmd/onceq", cli.Module.Path)
	}
	if cli.Go != lib.Go {
		t.Errorf("cmd/onceq/go.mod: go %s, the library's go.mod go %s: want the same", cli.Go, lib.Go)
	}
	for _, r := range cli.Replace {
		t.Errorf("cmd/onceq/go.mod replaces %s with %s: go install ...@version would refuse the module (go.work points at the checkout)", r.Old.Path, r.New.Path)
	}
	for _, e := range cli.Exclude {
		t.Errorf("cmd/onceq/go.mod excludes %s %s: go install ...@version would refuse the module", e.Path, e.Version)
	}
	version := ""
	for _, r := range cli.Require {
		if r.Path == "github.com/onceq/onceq" {
			version = r.Version
		}
	}
	if version == "" {
		t.Fatal("cmd/onceq/go.mod does not require github.com/onceq/onceq")
	}

	out, err := exec.Command("go", "work", "edit", "-json", "go.work").CombinedOutput()
	if err != nil {
		t.Fatalf("go work edit -json go.work: %v\n%s", err, out)
	}
	var work struct {
		Go      string
		Use     []struct{ DiskPath string }
		Replace []struct {
			Old, New struct{ Path, Version string }
		}
	}
	if err := json.Unmarshal(out, &work); err != nil {
		t.Fatalf("go.work: %v\n%s", err, out)
	}
	var use []string
	for _, u := range work.Use {
		use = append(use, u.DiskPath)
	}
	slices.Sort(use)
	if !slices.Equal(use, []string{".", "./cmd/onceq"}) {
		t.Errorf("go.work uses %q, want . and ./cmd/onceq", use)
	}
	if work.Go != lib.Go {
		t.Errorf("go.work: go %s, the library's go.mod go %s: want the same", work.Go, lib.Go)
	}
	replaced := false
	for _, r := range work.Replace {
		if r.Old.Path == "github.com/onceq/onceq" && r.Old.Version == version && strings.TrimSuffix(r.New.Path, "/") == "." {
			replaced = true
		}
	}
	if !replaced {
		t.Errorf("go.work does not replace github.com/onceq/onceq %s, the library cmd/onceq/go.mod requires, with the checkout (./): the workspace would read it from the network", version)
	}
}

// goMod is what go mod edit -json prints of a go.mod.
type goMod struct {
	Module  struct{ Path string }
	Go      string
	Require []struct {
		Path, Version string
		Indirect      bool
	}
	Replace []struct {
		Old, New struct{ Path, Version string }
	}
	Exclude []struct{ Path, Version string }
}

func goModJSON(t *testing.T, file string) goMod {
	t.Helper()
	out, err := exec.Command("go", "mod", "edit", "-json", file).CombinedOutput()
	if err != nil {
		t.Fatalf("go mod edit -json %s: %v\n%s", file, err, out)
	}
	var m goMod
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("%s: %v\n%s", file, err, out)
	}
	return m
}
