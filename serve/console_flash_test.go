package serve_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestConsoleFlashIsTheServers: a console page shows as its message
// only what the server said of an action: a flash= or error= in a link
// shows nothing, on any page; an action's message comes back once, in
// the cookie the server set, and not with another session's token; a
// refused login says why without putting it in a URL.
func TestConsoleFlashIsTheServers(t *testing.T) {
	a := start(t)
	tok, other := a.token("shop", false), a.token("shop", false)
	const evil = "Your session expired: call +1 555 0100"
	for _, path := range []string{"/console/", "/console/q/shop.jobs", "/console/q/shop.jobs/deadletters", "/console/delay", "/console/periodic", "/console/groups"} {
		code, _, body := a.page("GET", path+"?flash="+url.QueryEscape(evil), tok, nil)
		if code != http.StatusOK || strings.Contains(body, evil) || strings.Contains(body, `id="flash"`) {
			t.Errorf("%s?flash=...: %d, the link's text shown:\n%s", path, code, body)
		}
	}
	if code, _, body := a.page("GET", "/console/login?error="+url.QueryEscape(evil), "", nil); code != http.StatusOK || strings.Contains(body, evil) {
		t.Errorf("/console/login?error=...: %d, the link's text shown:\n%s", code, body)
	}

	// An action's message, once.
	code, loc, _, cookies := a.pageWith("POST", "/console/q/shop.jobs/pause", tok, url.Values{}, nil)
	if code != http.StatusSeeOther || loc != "/console/q/shop.jobs" || strings.Contains(loc, "paused") || len(cookies) != 1 {
		t.Fatalf("pause: %d to %q, cookies %v", code, loc, cookies)
	}
	if c := cookies[0]; !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/console" || c.MaxAge <= 0 {
		t.Fatalf("the flash cookie: %+v", c)
	}
	if _, _, body, _ := a.pageWith("GET", loc, other, nil, cookies); strings.Contains(body, `id="flash"`) {
		t.Errorf("the flash of one session shown to another's token:\n%s", body)
	}
	_, _, body, cleared := a.pageWith("GET", loc, tok, nil, cookies)
	if m := flashRe.FindStringSubmatch(body); m == nil || m[1] != "shop.jobs paused" {
		t.Fatalf("the page after the pause: no flash \"shop.jobs paused\" in\n%s", body)
	}
	if len(cleared) != 1 || cleared[0].MaxAge >= 0 {
		t.Fatalf("the flash, once shown, is not cleared: %v", cleared)
	}
	// A cookie of the flash's shape, signed with nothing the server
	// knows, shows nothing.
	forged := []*http.Cookie{{Name: cookies[0].Name, Value: "WW91ciBzZXNzaW9uIGV4cGlyZWQ.AAAA"}}
	if _, _, body, _ := a.pageWith("GET", loc, tok, nil, forged); strings.Contains(body, `id="flash"`) {
		t.Errorf("a forged flash cookie shown:\n%s", body)
	}

	// A refused login says why on its page, 401, and no URL carries it.
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).
		PostForm(a.url+"/console/login", url.Values{"token": {"oq_nope"}, "next": {"/console/"}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Location") != "" || !strings.Contains(string(b), `id="error"`) {
		t.Fatalf("a refused login: %d to %q; want 401 with the login page saying why:\n%s", resp.StatusCode, resp.Header.Get("Location"), b)
	}
}
