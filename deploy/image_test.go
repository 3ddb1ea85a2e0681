package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestImage builds the image of the Dockerfile with podman and runs it:
// "onceq version" prints the VERSION it was built with, and "onceq demo"
// passes every check inside the container, as the image's user.
//
// The machine reaches no registry, so the builder stage (FROM golang) is
// replaced by a build context holding what it makes: the binary, built
// here with the stage's own go build line and the test's VERSION, and the
// files the image copies from the builder's system. The image stage
// itself is built as written.
//
// podman runs the container with runc, cgroupfs and the machine's own
// file and process limits: where the kernel mounts cgroups v1 and v2 side
// by side crun refuses to start, and without CAP_SYS_RESOURCE podman's
// default limits (above the machine's) cannot be set. None of this
// changes what runs inside.
func TestImage(t *testing.T) {
	if _, err := exec.LookPath("podman"); err != nil {
		t.Skip("podman is not installed (.ci/run installs it, with runc)")
	}
	stages := loadDockerfile(t)
	build, final := stages[0], stages[len(stages)-1]
	if build.name == "" {
		t.Fatalf("the builder stage %s has no name to replace", build.image)
	}

	// The builder's output, at the paths the image copies it from.
	const version = "v0.0.0-imagetest"
	env, goBuild := builderGoBuild(t, build, version)
	bin := runGoBuild(t, env, goBuild)
	ctx := t.TempDir()
	for _, c := range final.all("COPY") {
		f := strings.Fields(c)
		if len(f) != 3 || f[0] != "--from="+build.name {
			continue
		}
		src := bin
		if f[1] != goBuild[slices.Index(goBuild, "-o")+1] {
			src = f[1] // a file of the builder's Debian, which this machine runs too
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatalf("the image copies %s from the builder: %v", f[1], err)
		}
		dst := filepath.Join(ctx, f[1])
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	image := fmt.Sprintf("localhost/onceq-imagetest:%d", time.Now().UnixNano())
	podman(t, 5*time.Minute, "build", "--build-context", build.name+"="+ctx, "-f", "Dockerfile", "-t", image, t.TempDir())
	t.Cleanup(func() { _, _ = exec.Command("podman", "rmi", "-f", image).CombinedOutput() })

	var cfg []struct {
		Size   int64
		Config struct {
			User       string
			Entrypoint []string
		}
	}
	if err := json.Unmarshal([]byte(podman(t, time.Minute, "image", "inspect", image)), &cfg); err != nil || len(cfg) != 1 {
		t.Fatalf("podman image inspect: %v (%d images)", err, len(cfg))
	}
	if c := cfg[0].Config; c.User != "65532:65532" || len(c.Entrypoint) != 1 || c.Entrypoint[0] != "/usr/local/bin/onceq" {
		t.Errorf("image config: user %q, entrypoint %q: want 65532:65532 and /usr/local/bin/onceq", c.User, c.Entrypoint)
	}
	if size := cfg[0].Size; size > 80<<20 {
		t.Errorf("image of %d MB: want a small one, the binary and the CAs", size>>20)
	}

	run := []string{"--cgroup-manager=cgroupfs", "run", "--rm", "--runtime", "runc", "--network", "host",
		"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}
	if out := podman(t, time.Minute, append(run, image, "version")...); !strings.HasPrefix(out, "onceq "+version+" ") {
		t.Errorf("onceq version in the image: %q, want onceq %s", out, version)
	}
	// The image has no /tmp: the demo's data goes to a tmpfs there.
	out := podman(t, 3*time.Minute, append(run, "--tmpfs", "/tmp", image, "demo", "--immediate", "200", "--delayed", "20",
		"--duplicates", "20", "--flaky", "10", "--doomed", "5", "--max-delay", "2s", "--chords", "2", "--chains", "2")...)
	if strings.Count(out, "  ok   ") != 5 || strings.Contains(out, "FAIL") || !strings.Contains(out, "executed once: 262 distinct task IDs") {
		t.Errorf("onceq demo in the image:\n%s", out)
	}
}

// podman runs podman with args and returns its output, failing the test
// if it fails or takes longer than limit.
func podman(t *testing.T, limit time.Duration, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	b, err := exec.CommandContext(ctx, "podman", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return string(b)
}
