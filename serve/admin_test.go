package serve_test

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestAdmin: the admin API creates, lists and revokes tokens for an
// operator's token only; a token it creates opens its namespace's API.
func TestAdmin(t *testing.T) {
	a := start(t)
	op, shop, roOp := a.token("*", false), a.token("shop", false), a.token("*", true)
	admin := httptest.NewServer(a.srv.AdminHandler())
	defer admin.Close()
	api := &api{t: t, url: admin.URL, conn: a.conn, srv: a.srv}
	for _, tok := range []string{"", shop, roOp} {
		want := map[bool]int{true: 401, false: 403}[tok == ""]
		if code, body := api.do("POST", "/token/sales", tok, ""); code != want {
			t.Errorf("create with token %q: %d %v; want %d", tok, code, body, want)
		}
	}
	code, body := api.do("POST", "/token/sales?description=reports&read_only=true", op, "")
	newTok, _ := body["token"].(string)
	if code != 201 || !strings.HasPrefix(newTok, "oq_") || body["read_only"] != true {
		t.Fatalf("create: %d %v", code, body)
	}
	if code, body := a.do("GET", "/api/sales", newTok, ""); code != 200 {
		t.Fatalf("the created token on its namespace's API: %d %v", code, body)
	}
	code, body = api.do("GET", "/token/sales", op, "")
	if toks, _ := body["tokens"].([]any); code != 200 || len(toks) != 1 || strings.Contains(fmt.Sprint(body), newTok[20:]) {
		t.Fatalf("list: %d %v", code, body)
	}
	for _, bad := range []struct{ method, path, field string }{
		{"POST", "/token/sa.les", "namespace"}, {"POST", "/token/sales?read_only=maybe", "read_only"},
		{"POST", "/token/sales?owner=me", "owner"}, {"DELETE", "/token/sales/xyz", "id"},
	} {
		if code, body := api.do(bad.method, bad.path, op, ""); code != 400 || body["field"] != bad.field {
			t.Errorf("%s %s: %d %v; want 400 naming %s", bad.method, bad.path, code, body, bad.field)
		}
	}
	id := newTok[3:19]
	if code, body := api.do("DELETE", "/token/shop/"+id, op, ""); code != 404 {
		t.Fatalf("revoke through another namespace: %d %v", code, body)
	}
	if code, body := api.do("DELETE", "/token/sales/"+id, op, ""); code != 204 {
		t.Fatalf("revoke: %d %v", code, body)
	}
	if code, _ := a.do("GET", "/api/sales", newTok, ""); code != 401 {
		t.Fatalf("a revoked token: %d; want 401", code)
	}
}
