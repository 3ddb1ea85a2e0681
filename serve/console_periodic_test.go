package serve_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/onceq/onceq/internal/testutil"
	"github.com/onceq/onceq/serve"
)

// startSchedules starts a server without a scheduler and adds schedules
// over the API: shop's beat (every 30s, to shop.pings) and morning (a
// cron spec in Europe/Paris, to shop.reports), other's beat.
func startSchedules(t *testing.T) *api {
	t.Helper()
	a := start(t, serve.Scheduler(false))
	for _, q := range []string{"shop.pings", "shop.reports", "other.pings"} {
		testutil.CreateTopic(t, a.conn, q, 1)
	}
	for ns, paths := range map[string][]string{
		"shop":  {"beat?queue=pings&every=30", "morning?queue=reports&cron=0+9+*+*+1-5&tz=Europe/Paris&missed=skip"},
		"other": {"beat?queue=pings&every=60"},
	} {
		tok := a.token(ns, false)
		for _, p := range paths {
			if code, body := a.do("PUT", "/periodic/"+ns+"/"+p, tok, ""); code != 201 {
				t.Fatalf("add %s's %s: %d %v", ns, p, code, body)
			}
		}
	}
	return a
}

// TestConsolePeriodic: the periodic page lists the schedules the token
// sees (a namespace's, or every one to an operator's token) with their
// timing and ticks, with a remove button a read-only token does not get;
// removing takes a read-write token of the schedule's namespace.
func TestConsolePeriodic(t *testing.T) {
	a := startSchedules(t)
	tok, ro, other, ops := a.token("shop", false), a.token("shop", true), a.token("other", false), a.token("*", true)

	code, _, body := a.page("GET", "/console/periodic", tok, nil)
	if code != 200 || !strings.Contains(body, `href="/console/periodic">Periodic</a>`) || !strings.Contains(body, `data-name="shop.beat"`) ||
		!strings.Contains(body, "every 30s") || !strings.Contains(body, "cron 0 9 * * 1-5 Europe/Paris") || !strings.Contains(body, ">skip<") ||
		!strings.Contains(body, `href="/console/q/shop.pings"`) || strings.Contains(body, "other.beat") || strings.Count(body, `class="remove"`) != 2 {
		t.Fatalf("the periodic page for shop's token: %d\n%s", code, body)
	}
	code, _, body = a.page("GET", "/console/periodic", ro, nil)
	if code != 200 || !strings.Contains(body, `data-name="shop.morning"`) || strings.Contains(body, `class="remove"`) {
		t.Fatalf("the periodic page for shop's read-only token: %d\n%s", code, body)
	}
	code, _, body = a.page("GET", "/console/periodic", ops, nil)
	if code != 200 || !strings.Contains(body, `data-name="shop.beat"`) || !strings.Contains(body, `data-name="other.beat"`) {
		t.Fatalf("the periodic page for an operator's token: %d\n%s", code, body)
	}
	if code, loc, _ := a.page("GET", "/console/periodic", "", nil); code != 303 || !strings.HasPrefix(loc, "/console/login") {
		t.Fatalf("the periodic page without a token: %d to %q", code, loc)
	}

	form := url.Values{"name": {"shop.beat"}}
	for _, tc := range []struct {
		token string
		code  int
	}{{ro, 403}, {other, 403}, {ops, 403}, {"", 401}} {
		if code, _, body := a.page("POST", "/console/periodic/remove", tc.token, form); code != tc.code {
			t.Errorf("remove: %d, want %d:\n%s", code, tc.code, body)
		}
	}
	if code, _, body := a.page("POST", "/console/periodic/remove", other, url.Values{"name": {"shop.gone"}}); code != 403 {
		t.Errorf("remove of an unknown schedule of another namespace: %d\n%s", code, body)
	}
	if code, _, body := a.page("POST", "/console/periodic/remove", tok, url.Values{"name": {"a b"}}); code != 400 {
		t.Errorf("remove of a malformed name: %d\n%s", code, body)
	}
	code, loc, flash := a.act("/console/periodic/remove", tok, form)
	if code != 303 || loc != "/console/periodic" || flash != "removed shop.beat: its ticks already submitted still run" {
		t.Fatalf("remove: %d to %q, flash %q", code, loc, flash)
	}
	if code, body := a.do("GET", "/periodic/shop/beat", tok, ""); code != 404 {
		t.Fatalf("shop.beat after its removal: %d %v", code, body)
	}
	if _, _, flash := a.act("/console/periodic/remove", tok, form); !strings.Contains(flash, "no schedule shop.beat") {
		t.Fatalf("remove again: flash %q", flash)
	}
	if code, _, body := a.page("GET", "/console/periodic", ops, nil); code != 200 || strings.Contains(body, `data-name="shop.beat"`) || !strings.Contains(body, `data-name="other.beat"`) {
		t.Fatalf("the periodic page after the removal: %d\n%s", code, body)
	}
}

// TestConsolePeriodicBrowser drives the periodic page in headless
// Chromium: from the header's link to the table, then a schedule removed
// with its button.
func TestConsolePeriodicBrowser(t *testing.T) {
	chromium := testutil.Tool(t, "chromium", "chromium")
	a := startSchedules(t)
	b := newBrowser(t, chromium)
	b.login(a.url, a.token("shop", false))
	b.run("periodic page", chromedp.Click(chromedp.CSS(`header a[href="/console/periodic"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#schedules tr[data-name="shop.morning"]`)), b.shot("periodic"))
	if row := strings.Join(strings.Fields(b.text(`#schedules tr[data-name="shop.morning"]`)), " "); !strings.Contains(row, "shop.morning reports cron 0 9 * * 1-5 Europe/Paris skip none yet") {
		t.Fatalf("the morning row: %q", row)
	}
	if tbl := b.text("#schedules"); strings.Contains(tbl, "other.beat") {
		t.Fatalf("shop's page shows other's schedule: %q", tbl)
	}
	b.fits()
	b.run("remove", chromedp.Click(chromedp.CSS(`#schedules tr[data-name="shop.beat"] .remove`)), chromedp.WaitVisible(chromedp.CSS("#flash")), b.shot("periodic-removed"))
	if flash := b.text("#flash"); !strings.HasPrefix(flash, "removed shop.beat") {
		t.Fatalf("after remove: %q", flash)
	}
	if tbl := b.text("#schedules"); strings.Contains(tbl, "shop.beat") || !strings.Contains(tbl, "shop.morning") {
		t.Fatalf("the table after remove: %q", tbl)
	}
}
