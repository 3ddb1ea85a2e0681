package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testutil"
)

// The fields of the Kubernetes objects the tests look at.
type (
	object struct {
		File       string `yaml:"-"`
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   meta   `yaml:"metadata"`
		// ConfigMap, Secret.
		Data       map[string]string `yaml:"data"`
		StringData map[string]string `yaml:"stringData"`
		Spec       objectSpec        `yaml:"spec"`
	}
	meta struct {
		Name        string            `yaml:"name"`
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	}
	objectSpec struct {
		// Service: a map of labels; the others: matchLabels.
		Selector             map[string]any `yaml:"selector"`
		ServiceName          string         `yaml:"serviceName"`
		ClusterIP            string         `yaml:"clusterIP"`
		Ports                []servicePort  `yaml:"ports"`
		Template             *podTemplate   `yaml:"template"`
		VolumeClaimTemplates []struct {
			Metadata meta `yaml:"metadata"`
		} `yaml:"volumeClaimTemplates"`
		MinAvailable   any `yaml:"minAvailable"`
		MaxUnavailable any `yaml:"maxUnavailable"`
	}
	servicePort struct {
		Name       string `yaml:"name"`
		Port       int    `yaml:"port"`
		TargetPort any    `yaml:"targetPort"`
	}
	podTemplate struct {
		Metadata meta    `yaml:"metadata"`
		Spec     podSpec `yaml:"spec"`
	}
	podSpec struct {
		TerminationGracePeriodSeconds *int `yaml:"terminationGracePeriodSeconds"`
		SecurityContext               struct {
			RunAsNonRoot *bool `yaml:"runAsNonRoot"`
			RunAsUser    *int  `yaml:"runAsUser"`
		} `yaml:"securityContext"`
		Containers []container `yaml:"containers"`
		Volumes    []struct {
			Name string `yaml:"name"`
		} `yaml:"volumes"`
	}
	container struct {
		Name    string   `yaml:"name"`
		Image   string   `yaml:"image"`
		Command []string `yaml:"command"`
		Args    []string `yaml:"args"`
		Env     []struct {
			Name      string `yaml:"name"`
			Value     string `yaml:"value"`
			ValueFrom *struct {
				ConfigMapKeyRef *keyRef `yaml:"configMapKeyRef"`
				SecretKeyRef    *keyRef `yaml:"secretKeyRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
		Ports []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
		} `yaml:"ports"`
		LivenessProbe  *probe `yaml:"livenessProbe"`
		ReadinessProbe *probe `yaml:"readinessProbe"`
		Lifecycle      struct {
			PreStop *struct {
				Sleep *struct {
					Seconds int `yaml:"seconds"`
				} `yaml:"sleep"`
			} `yaml:"preStop"`
		} `yaml:"lifecycle"`
		Resources struct {
			Requests map[string]string `yaml:"requests"`
			Limits   map[string]string `yaml:"limits"`
		} `yaml:"resources"`
		SecurityContext *struct {
			AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
			ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
			RunAsUser                *int  `yaml:"runAsUser"`
			Capabilities             struct {
				Drop []string `yaml:"drop"`
			} `yaml:"capabilities"`
		} `yaml:"securityContext"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
		} `yaml:"volumeMounts"`
	}
	keyRef struct {
		Name string `yaml:"name"`
		Key  string `yaml:"key"`
	}
	probe struct {
		HTTPGet *struct {
			Path string `yaml:"path"`
			Port any    `yaml:"port"`
		} `yaml:"httpGet"`
	}
)

// labels returns the labels a selector matches: a Service's map, or
// another object's matchLabels.
func (s objectSpec) labels() map[string]string {
	m := s.Selector
	if ml, ok := m["matchLabels"].(map[string]any); ok {
		m = ml
	}
	out := map[string]string{}
	for k, v := range m {
		out[k] = fmt.Sprint(v)
	}
	return out
}

// matches says whether every label of sel is among labels.
func matches(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return len(sel) > 0
}

// loadManifests parses every document of every YAML file in
// kubernetes/.
func loadManifests(t *testing.T) []object {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in kubernetes/ (%v)", err)
	}
	var objs []object
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var o object
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
				t.Fatalf("%s: a document without apiVersion, kind or metadata.name: %+v", f, o)
			}
			o.File = f
			objs = append(objs, o)
		}
	}
	return objs
}

// workload is a container of onceq's in a StatefulSet or Deployment, with
// its command line.
type workload struct {
	obj *object
	c   *container
	cmd command
}

func (w workload) String() string {
	return w.obj.File + ": " + w.obj.Kind + "/" + w.obj.Metadata.Name + ": " + w.c.Name
}

// workloads returns the onceq containers of objs, failing the test for one
// whose command line cannot be read.
func workloads(t *testing.T, objs []object) []workload {
	t.Helper()
	var out []workload
	for i := range objs {
		o := &objs[i]
		if o.Spec.Template == nil {
			continue
		}
		for j := range o.Spec.Template.Spec.Containers {
			c := &o.Spec.Template.Spec.Containers[j]
			if !strings.Contains(c.Image, "onceq") {
				continue
			}
			w := workload{obj: o, c: c}
			if len(c.Command) > 0 {
				t.Errorf("%v: command %q replaces the image's entrypoint (onceq): give the command in args", w, c.Command)
			}
			cmd, err := parseCommand(c.Args)
			if err != nil {
				t.Fatalf("%v: %v", w, err)
			}
			w.cmd = cmd
			out = append(out, w)
		}
	}
	if len(out) == 0 {
		t.Fatal("no onceq container in the manifests")
	}
	return out
}

// containerPort resolves a probe's or Service's port, a number or a port
// name, to the container's port.
func (c *container) containerPort(port any) (int, bool) {
	switch p := port.(type) {
	case int:
		return p, slices.ContainsFunc(c.Ports, func(cp struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
		}) bool {
			return cp.ContainerPort == p
		})
	case string:
		for _, cp := range c.Ports {
			if cp.Name == p {
				return cp.ContainerPort, true
			}
		}
	}
	return 0, false
}

// probeFlag returns the address flag whose port is port: the listener a
// probe on port reaches.
func (cmd command) probeFlag(port int) (string, bool) {
	for _, name := range addrFlags {
		if v, ok := cmd.get(name); ok {
			if p, ok := addrPort(v); ok && p == strconv.Itoa(port) {
				return name, true
			}
		}
	}
	return "", false
}

var envRefRe = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// TestKubernetesManifests checks the manifests against the binary and each
// other: every onceq container's arguments are flags its command accepts,
// its probes reach /healthz and /readyz on the port of the listener that
// serves them, it runs as a user that is not root on a read-only root with
// its directories on volumes (the checkpoint on the StatefulSet's claim),
// its pod waits longer than its shutdown timeout, and the Services,
// disruption budgets and references find what they name.
func TestKubernetesManifests(t *testing.T) {
	objs := loadManifests(t)
	keys := map[string]bool{} // "ConfigMap/name/key", "Secret/name/key"
	for _, o := range objs {
		for k := range maps.Keys(o.Data) {
			keys[o.Kind+"/"+o.Metadata.Name+"/"+k] = true
		}
		for k := range maps.Keys(o.StringData) {
			keys[o.Kind+"/"+o.Metadata.Name+"/"+k] = true
		}
	}
	for _, w := range workloads(t, objs) {
		help := checkFlags(t, w.String(), w.cmd)
		checkContainer(t, w, help, keys)
	}
	checkReferences(t, objs)
}

func checkContainer(t *testing.T, w workload, help string, keys map[string]bool) {
	c, pod := w.c, &w.obj.Spec.Template.Spec
	// The environment and what it comes from.
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = true
		if f := e.ValueFrom; f != nil {
			for kind, ref := range map[string]*keyRef{"ConfigMap": f.ConfigMapKeyRef, "Secret": f.SecretKeyRef} {
				if ref != nil && !keys[kind+"/"+ref.Name+"/"+ref.Key] {
					t.Errorf("%v: env %s takes key %q of %s %q, which no manifest defines", w, e.Name, ref.Key, kind, ref.Name)
				}
			}
		}
	}
	for _, a := range c.Args {
		for _, m := range envRefRe.FindAllStringSubmatch(a, -1) {
			if !env[m[1]] {
				t.Errorf("%v: argument %q names $(%s), which the container's env does not set", w, a, m[1])
			}
		}
	}
	if !env["ONCEQ_BROKERS"] {
		if _, ok := w.cmd.get("brokers"); !ok {
			t.Errorf("%v: neither ONCEQ_BROKERS nor --brokers: it would look for 127.0.0.1:9092", w)
		}
	}

	// Probes: liveness on /healthz, readiness on /readyz, on the port of
	// the listener that serves them.
	for _, p := range []struct {
		what, path string
		probe      *probe
	}{{"livenessProbe", "/healthz", c.LivenessProbe}, {"readinessProbe", "/readyz", c.ReadinessProbe}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%v: no %s.httpGet", w, p.what)
			continue
		}
		if p.probe.HTTPGet.Path != p.path {
			t.Errorf("%v: %s on %q, want %s", w, p.what, p.probe.HTTPGet.Path, p.path)
		}
		port, ok := c.containerPort(p.probe.HTTPGet.Port)
		if !ok {
			t.Errorf("%v: %s's port %v is none of the container's ports", w, p.what, p.probe.HTTPGet.Port)
			continue
		}
		if _, ok := w.cmd.probeFlag(port); !ok {
			t.Errorf("%v: %s's port %d is the port of none of its listeners (%v)", w, p.what, port, addrFlags)
		}
	}
	if port, ok := w.obj.Spec.Template.Metadata.Annotations["prometheus.io/port"]; ok {
		n, _ := strconv.Atoi(port)
		if name, ok := w.cmd.probeFlag(n); !ok || name != "metrics-addr" {
			t.Errorf("%v: Prometheus scrapes port %s, which is not --metrics-addr's (onceq serve's /metrics needs a token)", w, port)
		}
	}

	// Not root, nothing to escalate to, a read-only root.
	if sc := pod.SecurityContext; sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Errorf("%v: the pod's securityContext wants runAsNonRoot: true and a runAsUser other than 0", w)
	}
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Errorf("%v: no securityContext", w)
	case sc.RunAsUser != nil && *sc.RunAsUser == 0:
		t.Errorf("%v: runs as root", w)
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Errorf("%v: allowPrivilegeEscalation is not false", w)
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Errorf("%v: readOnlyRootFilesystem is not true", w)
	case !slices.Contains(sc.Capabilities.Drop, "ALL"):
		t.Errorf("%v: capabilities do not drop ALL", w)
	}

	// Every directory the process writes is on a volume; a worker's
	// checkpoint on the StatefulSet's claim, one per pod.
	claims := map[string]bool{}
	for _, vc := range w.obj.Spec.VolumeClaimTemplates {
		claims[vc.Metadata.Name] = true
	}
	for _, name := range dirFlags {
		dir, ok := w.cmd.get(name)
		if !ok {
			continue
		}
		mount := ""
		for _, m := range c.VolumeMounts {
			if isUnder(dir, m.MountPath) && len(m.MountPath) > len(mount) {
				mount = m.MountPath
				if name == "checkpoint-dir" && !claims[m.Name] {
					t.Errorf("%v: --checkpoint-dir %s is on volume %q, not on a volumeClaimTemplate: each worker needs its own, kept across restarts", w, dir, m.Name)
				}
			}
		}
		if mount == "" {
			t.Errorf("%v: --%s %s is on no volume (the root is read-only)", w, name, dir)
		}
	}
	if w.cmd.name == "worker" {
		if w.obj.Kind != "StatefulSet" {
			t.Errorf("%v: a worker in a %s: its checkpoint and instance ID need a volume of their own per pod (StatefulSet)", w, w.obj.Kind)
		}
		if _, ok := w.cmd.get("checkpoint-dir"); !ok {
			t.Errorf("%v: no --checkpoint-dir: the default is relative to the working directory", w)
		}
	}

	// The pod waits for the drain.
	timeout, err := w.cmd.shutdownTimeout(help)
	if err != nil {
		t.Errorf("%v: --shutdown-timeout: %v", w, err)
	}
	stop := timeout
	if ps := c.Lifecycle.PreStop; ps != nil && ps.Sleep != nil {
		stop += time.Duration(ps.Sleep.Seconds) * time.Second
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil {
		t.Errorf("%v: no terminationGracePeriodSeconds: Kubernetes' 30s default is no more than --shutdown-timeout's", w)
	} else if time.Duration(*g)*time.Second <= stop {
		t.Errorf("%v: terminationGracePeriodSeconds %d, want above the preStop pause and --shutdown-timeout (%v)", w, *g, stop)
	}

	// Resources: asked for, and a worker's limit above Go's plus the
	// checkpoint's cache.
	for _, r := range []string{"cpu", "memory"} {
		if c.Resources.Requests[r] == "" {
			t.Errorf("%v: no %s request", w, r)
		}
	}
	if w.cmd.name == "worker" {
		goLimit := "192MiB"
		if v, ok := w.cmd.get("memory-limit"); ok {
			goLimit = v
		}
		g, err1 := parseBytes(goLimit)
		l, err2 := parseBytes(c.Resources.Limits["memory"])
		if err := errors.Join(err1, err2); err != nil {
			t.Errorf("%v: memory: %v", w, err)
		} else if l < g+96<<20 {
			t.Errorf("%v: memory limit %s below --memory-limit %s plus the checkpoint's cache (96 MiB)", w, c.Resources.Limits["memory"], goLimit)
		}
	}
}

// parseBytes reads a size as Kubernetes (Mi, Gi) or --memory-limit (MiB,
// GiB) write it.
func parseBytes(s string) (int64, error) {
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"Gi", 30}, {"Mi", 20}, {"Ki", 10}} {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			return v << u.shift, err
		}
	}
	return 0, fmt.Errorf("size %q: want a number of KiB, MiB or GiB (Ki, Mi, Gi)", s)
}

// checkReferences checks that Services, disruption budgets and
// StatefulSets find the pods and ports they name.
func checkReferences(t *testing.T, objs []object) {
	pods := map[string]*object{} // by name, the objects with pods
	for i := range objs {
		o := &objs[i]
		if o.Spec.Template == nil {
			continue
		}
		pods[o.Metadata.Name] = o
		if !matches(o.Spec.labels(), o.Spec.Template.Metadata.Labels) {
			t.Errorf("%s: %s/%s: its selector %v does not match its pods' labels %v", o.File, o.Kind, o.Metadata.Name, o.Spec.labels(), o.Spec.Template.Metadata.Labels)
		}
	}
	selected := func(o *object) []*object {
		var out []*object
		for _, p := range pods {
			if matches(o.Spec.labels(), p.Spec.Template.Metadata.Labels) {
				out = append(out, p)
			}
		}
		return out
	}
	services := map[string]*object{}
	for i := range objs {
		o := &objs[i]
		switch o.Kind {
		case "Service":
			services[o.Metadata.Name] = o
			sel := selected(o)
			if len(sel) == 0 {
				t.Errorf("%s: Service %s selects no pods", o.File, o.Metadata.Name)
			}
			for _, sp := range o.Spec.Ports {
				for _, p := range sel {
					found := slices.ContainsFunc(p.Spec.Template.Spec.Containers, func(c container) bool {
						_, ok := c.containerPort(sp.TargetPort)
						return ok
					})
					if !found {
						t.Errorf("%s: Service %s: port %s targets %v, which %s/%s's containers do not have", o.File, o.Metadata.Name, sp.Name, sp.TargetPort, p.Kind, p.Metadata.Name)
					}
				}
			}
		case "PodDisruptionBudget":
			if len(selected(o)) == 0 {
				t.Errorf("%s: PodDisruptionBudget %s selects no pods", o.File, o.Metadata.Name)
			}
			if o.Spec.MinAvailable == nil && o.Spec.MaxUnavailable == nil {
				t.Errorf("%s: PodDisruptionBudget %s: neither minAvailable nor maxUnavailable", o.File, o.Metadata.Name)
			}
		}
	}
	for _, o := range pods {
		if o.Kind != "StatefulSet" {
			continue
		}
		if s, ok := services[o.Spec.ServiceName]; !ok || s.Spec.ClusterIP != "None" {
			t.Errorf("%s: StatefulSet %s: serviceName %q is no headless Service of the manifests", o.File, o.Metadata.Name, o.Spec.ServiceName)
		}
		if budget := slices.ContainsFunc(objs, func(b object) bool {
			return b.Kind == "PodDisruptionBudget" && matches(b.Spec.labels(), o.Spec.Template.Metadata.Labels)
		}); !budget {
			t.Errorf("%s: StatefulSet %s has no PodDisruptionBudget", o.File, o.Metadata.Name)
		}
	}
}

// TestKubernetesProbesServed starts each onceq container's command line
// for real, on the embedded broker, and gets its probes: /readyz answers
// 200 once it is ready, /healthz 200, SIGTERM stops it with exit code 0
// within the pod's grace period, and it wrote to the directories its
// flags name (which the manifests put on volumes). The command line is the manifest's but
// for what must differ on this machine: the brokers (the embedded
// broker's, without TLS or SASL), the directories (temporary ones) and the
// listeners (free loopback ports).
func TestKubernetesProbesServed(t *testing.T) {
	objs := loadManifests(t)
	_, conn := testutil.StartBroker(t, "")
	for _, w := range workloads(t, objs) {
		t.Run(w.obj.Metadata.Name+"/"+w.c.Name, func(t *testing.T) {
			run := command{name: w.cmd.name}
			ports := map[string]string{} // the manifest's port -> the local one
			dirs := map[string]string{}  // flag -> the local directory
			for _, f := range w.cmd.flags {
				switch {
				case connFlag(f.name) || f.name == "brokers":
					continue
				case slices.Contains(dirFlags, f.name):
					f.value = filepath.Join(t.TempDir(), filepath.Base(f.value))
					dirs[f.name] = f.value
				case slices.Contains(addrFlags, f.name):
					local := testutil.FreeAddr(t)
					if p, ok := addrPort(f.value); ok {
						ports[p] = local
					}
					f.value = local
				case f.name == "queue" && w.cmd.name == "worker":
					for _, q := range strings.Split(f.value, ",") {
						if !consumer.IsPattern(q) {
							testutil.CreateTopic(t, conn, q, 2)
						}
					}
				}
				run.flags = append(run.flags, f)
			}
			run.flags = append(run.flags, flag{name: "brokers", value: conn.Brokers[0]})
			p := testutil.Start(t, run.args()...)

			probeURL := func(pr *probe) string {
				if pr == nil || pr.HTTPGet == nil {
					t.Fatal("no httpGet probe (TestKubernetesManifests says more)")
				}
				port, _ := w.c.containerPort(pr.HTTPGet.Port)
				addr, ok := ports[strconv.Itoa(port)]
				if !ok {
					t.Fatalf("probe port %v: no listener of the command line has it (TestKubernetesManifests says more)", pr.HTTPGet.Port)
				}
				return "http://" + addr + pr.HTTPGet.Path
			}
			ready, live := probeURL(w.c.ReadinessProbe), probeURL(w.c.LivenessProbe)
			waitStatus(t, p, ready, http.StatusOK, 2*time.Minute)
			waitStatus(t, p, live, http.StatusOK, 30*time.Second)

			grace := time.Duration(*w.obj.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
			p.Signal(syscall.SIGTERM)
			code, err := p.Wait(grace)
			if err != nil {
				t.Fatalf("SIGTERM: not stopped within the pod's grace period (%v): %v\n%s", grace, err, p.Output())
			}
			if code != 0 {
				t.Fatalf("SIGTERM: exit code %d, want 0\n%s", code, p.Output())
			}
			// What the volumes must keep is there.
			for name, dir := range dirs {
				if entries, err := os.ReadDir(dir); err != nil || len(entries) == 0 {
					t.Errorf("--%s %s: nothing written there (%v)", name, dir, err)
				}
			}
		})
	}
}

// waitStatus gets url until it answers want, failing the test if p exits
// first or timeout passes.
func waitStatus(t *testing.T, p *testutil.Process, url string, want int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := "no answer"
	for time.Now().Before(deadline) {
		if code, err := p.Wait(0); err == nil {
			t.Fatalf("GET %s: the process exited (code %d) before answering %d:\n%s", url, code, want, p.Output())
		}
		resp, err := http.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == want {
				return
			}
			if resp.StatusCode >= 400 && resp.StatusCode < 500 {
				// 404, or onceq serve's 401 for a path it does not
				// serve without a token: waiting mends neither.
				t.Fatalf("GET %s: %d %s: not a probe the process answers", url, resp.StatusCode, strings.TrimSpace(string(body)))
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("GET %s: no %d within %v (last: %s); output:\n%s", url, want, timeout, last, p.Output())
}
