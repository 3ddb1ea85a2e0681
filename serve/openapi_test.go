package serve

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestOpenAPIMatchesRoutes: the OpenAPI document names every route the
// server serves under /api, with its method and its query parameters,
// and nothing else.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	var doc struct {
		OpenAPI string `json:"openapi"`
		Paths   map[string]map[string]struct {
			Parameters []struct{ Name, In string }
		}
	}
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi %q: want 3.x", doc.OpenAPI)
	}
	s := &Server{}
	served := map[string]bool{}
	for _, rt := range s.apiRoutes() {
		key := strings.ToLower(rt.method) + " " + rt.path
		served[key] = true
		op, ok := doc.Paths[rt.path][strings.ToLower(rt.method)]
		if !ok {
			t.Errorf("%s %s is served but not in openapi.json", rt.method, rt.path)
			continue
		}
		var query, path []string
		for _, p := range op.Parameters {
			switch p.In {
			case "query":
				query = append(query, p.Name)
			case "path":
				path = append(path, p.Name)
			}
		}
		want := slices.Clone(rt.params)
		slices.Sort(want)
		slices.Sort(query)
		if !slices.Equal(query, want) {
			t.Errorf("%s %s: openapi.json has query parameters %v; the route takes %v", rt.method, rt.path, query, want)
		}
		for _, seg := range strings.Split(rt.path, "/") {
			if name, ok := strings.CutPrefix(seg, "{"); ok && !slices.Contains(path, strings.TrimSuffix(name, "}")) {
				t.Errorf("%s %s: openapi.json lacks the path parameter %s", rt.method, rt.path, seg)
			}
		}
	}
	for path, ops := range doc.Paths {
		for method := range ops {
			if !served[method+" "+path] {
				t.Errorf("openapi.json has %s %s, which the server does not serve", method, path)
			}
		}
	}
}
