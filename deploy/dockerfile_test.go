package deploy_test

import (
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction, its continuation lines
// joined.
type instruction struct {
	op, args string
}

// stage is a Dockerfile build stage: FROM image [AS name] and what
// follows.
type stage struct {
	image, name string
	ins         []instruction
}

func (s stage) all(op string) []string {
	var out []string
	for _, in := range s.ins {
		if in.op == op {
			out = append(out, in.args)
		}
	}
	return out
}

func loadDockerfile(t *testing.T) []stage {
	t.Helper()
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var stages []stage
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		op, args, _ := strings.Cut(line, " ")
		in := instruction{strings.ToUpper(op), strings.TrimSpace(args)}
		if in.op == "FROM" {
			f := strings.Fields(in.args)
			s := stage{image: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			t.Fatalf("Dockerfile: %s before FROM", in.op)
		}
		stages[len(stages)-1].ins = append(stages[len(stages)-1].ins, in)
	}
	if len(stages) < 2 {
		t.Fatalf("Dockerfile: %d stages, want a builder and the image", len(stages))
	}
	return stages
}

var (
	goImageRe = regexp.MustCompile(`^golang:(\d+)\.(\d+)`)
	goModRe   = regexp.MustCompile(`(?m)^go (\d+)\.(\d+)`)
)

// TestDockerfile checks the image the Dockerfile describes without a
// container runtime (TestImage builds and runs it where podman is): its
// builder's Go is the one go.mod asks for, its go mod download has
// go.work and every module's go.mod and go.sum, its
// go build is static (CGO_ENABLED=0), -trimpath and of cmd/onceq; the
// image is an empty (or distroless static) base with that binary as its
// entrypoint, run as a user that is not root, and exposes the ports the
// Kubernetes manifests use. Then it runs the Dockerfile's go build itself
// and checks that the binary needs no dynamic loader or library (what an
// empty base lacks) and runs: onceq version.
func TestDockerfile(t *testing.T) {
	stages := loadDockerfile(t)
	build, final := stages[0], stages[len(stages)-1]

	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	goLine := goModRe.FindSubmatch(mod)
	if goLine == nil {
		t.Fatal("go.mod has no go line")
	}
	m := goImageRe.FindStringSubmatch(build.image)
	if m == nil {
		t.Fatalf("builder image %q: want golang:<major>.<minor>", build.image)
	}
	if want := string(goLine[1]) + "." + string(goLine[2]); m[1]+"."+m[2] != want {
		t.Errorf("builder image %s, go.mod asks for go %s: want golang:%s", build.image, want, want)
	}

	// The download layer: go.work and every module's go.mod and go.sum
	// in place before go mod download, which fetches what the workspace's
	// modules require.
	if missing := downloadLayerLacks(t, build); len(missing) > 0 {
		t.Errorf("the builder's go mod download runs without %q copied to their places: it would not fetch every module the build needs", missing)
	}

	// The build: its environment, flags, package and output.
	env, goBuild := builderGoBuild(t, build, "")
	if !slices.Contains(env, "CGO_ENABLED=0") {
		t.Errorf("go build without CGO_ENABLED=0 (env %q): the binary would need the builder's libc", env)
	}
	if !slices.Contains(goBuild, "-trimpath") {
		t.Errorf("go build without -trimpath: %q", goBuild)
	}
	out := ""
	if i := slices.Index(goBuild, "-o"); i >= 0 && i+1 < len(goBuild) {
		out = goBuild[i+1]
	} else {
		t.Fatalf("go build names no output (-o PATH): %q", goBuild)
	}
	pkg := goBuild[len(goBuild)-1]
	if pkg != "./cmd/onceq" {
		t.Errorf("go build of %s, want ./cmd/onceq", pkg)
	}
	if main, err := os.ReadFile(filepath.Join("..", pkg, "main.go")); err != nil || !strings.Contains(string(main), "package main") {
		t.Errorf("go build of %s: no main package there (%v)", pkg, err)
	}

	// The image.
	if final.image != "scratch" && !strings.HasPrefix(final.image, "gcr.io/distroless/static") {
		t.Errorf("image based on %s, want scratch or gcr.io/distroless/static", final.image)
	}
	dest := ""
	for _, c := range final.all("COPY") {
		f := strings.Fields(c)
		if len(f) == 3 && f[0] == "--from="+build.name && f[1] == out {
			dest = f[2]
		}
	}
	if dest == "" {
		t.Errorf("the image copies no %s from stage %s", out, build.name)
	}
	var entry []string
	if e := final.all("ENTRYPOINT"); len(e) != 1 || json.Unmarshal([]byte(e[0]), &entry) != nil || len(entry) != 1 || entry[0] != dest {
		t.Errorf("ENTRYPOINT %q, want the exec form [%q]", e, dest)
	}
	users := final.all("USER")
	if len(users) == 0 {
		t.Error("no USER: the image runs as root")
	} else {
		uid, _, _ := strings.Cut(users[len(users)-1], ":")
		if n, err := strconv.Atoi(uid); err != nil || n == 0 {
			t.Errorf("USER %s: want a numeric user other than 0 (Kubernetes' runAsNonRoot checks a number)", users[len(users)-1])
		}
	}
	exposed := strings.Fields(strings.Join(final.all("EXPOSE"), " "))
	for _, o := range loadManifests(t) {
		if o.Spec.Template == nil {
			continue
		}
		for _, c := range o.Spec.Template.Spec.Containers {
			for _, p := range c.Ports {
				if !slices.Contains(exposed, strconv.Itoa(p.ContainerPort)) {
					t.Errorf("%s: %s/%s uses port %d, which the image does not EXPOSE (%v)", o.File, o.Kind, o.Metadata.Name, p.ContainerPort, exposed)
				}
			}
		}
	}

	// The build, run here as the Dockerfile runs it.
	bin := runGoBuild(t, env, goBuild)
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary names a dynamic loader: it would not start on an empty base")
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("the binary needs libraries %q (%v): it would not start on an empty base", libs, err)
	}
	if b, err := exec.Command(bin, "version").CombinedOutput(); err != nil || !strings.HasPrefix(string(b), "onceq dev ") {
		t.Errorf("onceq version: %v: %q, want the VERSION argument's default, dev", err, b)
	}
}

// downloadLayerLacks returns the files of the workspace's modules
// (go.work, go.work.sum, and each used module's go.mod and go.sum) that the
// builder stage does not COPY to the same path before its go mod download.
func downloadLayerLacks(t *testing.T, build stage) []string {
	t.Helper()
	out, err := exec.Command("go", "work", "edit", "-json", filepath.Join("..", "go.work")).CombinedOutput()
	if err != nil {
		t.Fatalf("go work edit -json: %v\n%s", err, out)
	}
	var work struct{ Use []struct{ DiskPath string } }
	if err := json.Unmarshal(out, &work); err != nil {
		t.Fatalf("go.work: %v\n%s", err, out)
	}
	want := []string{"go.work", "go.work.sum"}
	for _, u := range work.Use {
		want = append(want, path.Join(u.DiskPath, "go.mod"), path.Join(u.DiskPath, "go.sum"))
	}
	copied := map[string]bool{}
	download := false
	for _, in := range build.ins {
		if in.op == "RUN" && strings.Contains(in.args, "go mod download") {
			download = true
			break
		}
		f := strings.Fields(in.args)
		if in.op != "COPY" || len(f) < 2 || strings.HasPrefix(f[0], "--") {
			continue
		}
		dest := f[len(f)-1]
		for _, src := range f[:len(f)-1] {
			placed := dest
			if strings.HasSuffix(dest, "/") {
				placed = path.Join(dest, path.Base(src))
			}
			if path.Clean(placed) == path.Clean(src) {
				copied[path.Clean(src)] = true
			}
		}
	}
	if !download {
		t.Fatal("Dockerfile: the builder has no RUN go mod download")
	}
	var missing []string
	for _, w := range want {
		if !copied[w] {
			missing = append(missing, w)
		}
	}
	return missing
}

// builderGoBuild returns the environment and the words of the builder
// stage's go build, its ARGs replaced by their defaults or, for VERSION,
// by version when not "".
func builderGoBuild(t *testing.T, build stage, version string) (env, goBuild []string) {
	t.Helper()
	args := map[string]string{}
	for _, a := range build.all("ARG") {
		name, def, _ := strings.Cut(a, "=")
		args[name] = def
	}
	if version != "" {
		args["VERSION"] = version
	}
	for _, run := range build.all("RUN") {
		if strings.Contains(run, "go build") {
			goBuild = shellWords(os.Expand(run, func(k string) string { return args[k] }))
		}
	}
	if goBuild == nil {
		t.Fatal("Dockerfile: the builder has no RUN ... go build")
	}
	for len(goBuild) > 0 && strings.Contains(goBuild[0], "=") && !strings.HasPrefix(goBuild[0], "-") {
		env, goBuild = append(env, goBuild[0]), goBuild[1:]
	}
	return env, goBuild
}

// shellWords splits a RUN line into words as sh does for the quoting the
// Dockerfile uses: double quotes group, and are removed.
func shellWords(s string) []string {
	var words []string
	var w strings.Builder
	in, inWord := false, false
	for _, r := range s {
		switch {
		case r == '"':
			in, inWord = !in, true
		case r == ' ' && !in:
			if inWord {
				words = append(words, w.String())
				w.Reset()
			}
			inWord = false
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}

// runGoBuild runs the builder's go build here, from the repository's
// root, and returns the binary's path.
func runGoBuild(t *testing.T, env, goBuild []string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "onceq")
	args := slices.Clone(goBuild[1:]) // after "go"
	args[slices.Index(args, "-o")+1] = bin
	cmd := exec.Command("go", args...)
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	return bin
}
